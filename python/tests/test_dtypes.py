"""bf16 and f16 in the binding: the conversions against the C library's and
an independent rounding, half-precision tensors and graph values, and the
session's math choice as status shows it."""
import numpy as np
import pytest

import salus
from salus._native import lib


def bf16_reference(values):
    """Round to nearest, ties to even, written from the definition: keep
    the upper 16 bits, add one when the dropped half is above 0x8000 or is
    0x8000 with an odd kept part; NaN stays a quiet NaN."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    upper, lower = u >> 16, u & 0xFFFF
    up = (lower > 0x8000) | ((lower == 0x8000) & (upper & 1 == 1))
    out = (upper + up).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    out[nan] = (upper[nan] | 0x40).astype(np.uint16)
    return out


def some_floats():
    rng = np.random.default_rng(29)
    bits = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.4028235e38, 1e-45,
                        65504.0, 65520.0, 65519.99, 6e-8, 1.00390625, 1.01171875],
                       dtype=np.float32)
    # exact ties between two bf16 values, both parities
    ties = ((np.arange(0x3F00, 0x4100, dtype=np.uint32) << 16) | 0x8000).view(np.float32)
    return np.concatenate([bits.view(np.float32), special, ties])


def test_to_bf16_rounds_like_the_reference_and_the_c_helper():
    x = some_floats()
    got = salus.to_bf16(x)
    assert got.dtype == np.uint16 and got.shape == x.shape
    np.testing.assert_array_equal(got, bf16_reference(x))
    for v in x[-600:]:
        assert lib.salus_bf16_from_f32(float(v)) == salus.to_bf16(np.array([v]))[0]
    # shape kept, any float input rounded from its float32 value
    m = np.linspace(-3, 3, 12).reshape(3, 4)
    np.testing.assert_array_equal(salus.to_bf16(m), bf16_reference(m.astype(np.float32)))


def test_from_bf16_is_exact_for_every_pattern():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    back = salus.from_bf16(bits)
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(salus.to_bf16(back[~np.isnan(back)]), bits[~np.isnan(back)])
    with pytest.raises(ValueError):
        salus.from_bf16(np.zeros(3, np.float32))


def test_f16_data_rounds_as_the_c_helper_and_numpy(session):
    x = some_floats()[:5000]
    x = x[np.isfinite(x)]
    t = session.tensor(x, dtype="f16")
    assert t.dtype == np.float16
    got = t.read()
    want = np.array([lib.salus_f16_from_f32(float(v)) for v in x], dtype=np.uint16)
    np.testing.assert_array_equal(got.view(np.uint16), want)
    with np.errstate(over="ignore"):  # beyond f16's range: infinity, as wanted
        np.testing.assert_array_equal(got, x.astype(np.float16))


def test_half_tensors(session):
    f = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
    b = session.tensor(salus.to_bf16(f), dtype=salus.BF16)
    assert b.dtype == np.uint16 and b.shape == (4, 6)
    np.testing.assert_array_equal(b.read(), salus.to_bf16(f))
    # floats given for a bf16 tensor are rounded on the way
    b.write(f * 3)
    np.testing.assert_array_equal(salus.from_bf16(b.read()),
                                  salus.from_bf16(salus.to_bf16(f * 3)))
    h = session.tensor(f.astype(np.float16))  # float16 data: an f16 tensor
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h.read(), f.astype(np.float16))
    z = session.tensor(shape=(3,), dtype="bf16")
    np.testing.assert_array_equal(z.read(), np.zeros(3, np.uint16))
    with pytest.raises(ValueError, match="bf16"):
        session.tensor(np.zeros(3, np.uint16))  # bits of what?
    with pytest.raises(ValueError):
        session.tensor(np.array(["a"]), dtype="bf16")


def test_half_graph_values_and_refusals():
    g = salus.Graph()
    x = g.input((4, 8), dtype="bf16")
    y = g.input((4, 8), dtype=np.float16)
    assert x.dtype == np.uint16 and y.dtype == np.float16
    with pytest.raises(ValueError, match="bf16"):
        g.input((2,), dtype=np.uint16)
    # an op the registry runs in f32 only names itself, the input and the dtype
    with pytest.raises(salus.Error) as e:
        g.op("softmax", [x])
    assert e.value.code == salus.Code.EINVAL
    assert "softmax" in e.value.message and "bf16" in e.value.message, e.value.message


def test_session_math_is_shown_in_status(client):
    with client.session(name="mathdef") as a, \
            client.session(name="mathtf", math_matmul="tf32", math_conv="exact") as b:
        text = client.status()
        lines = text.splitlines()
        for s, want in ((a, "math: matmul exact, conv tf32"), (b, "math: matmul tf32, conv exact")):
            row = next(i for i, line in enumerate(lines) if line.strip().startswith(str(s.id)))
            assert want in lines[row + 1], text
    with pytest.raises(ValueError, match="math_conv"):
        client.session(math_conv="fast")

"""float16 and bfloat16 ONNX models, built with onnx.helper, imported and
run through a real salusd: initialisers in raw_data and in int32_data,
half inputs and outputs, Cast between the float types, ops without a
half kernel run in f32 between casts, and the refusals that name the op and
the dtype."""
import numpy as np
import pytest

import salus
from salus._native import ffi, lib

onnx = pytest.importorskip("onnx", reason="python3-onnx is not installed")
from onnx import TensorProto, helper  # noqa: E402

F16, BF16, FLOAT = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT
NUMPY = {F16: np.float16, BF16: np.uint16, FLOAT: np.float32}


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return m.SerializeToString()


def half_init(name, dtype, bits, raw):
    """An initialiser of 16-bit floats: raw bytes, or the bit patterns in
    int32_data as onnx.proto stores them."""
    if raw:
        return helper.make_tensor(name, dtype, bits.shape, bits.astype("<u2").tobytes(), raw=True)
    t = TensorProto(name=name, data_type=dtype, dims=bits.shape)
    t.int32_data.extend(int(b) for b in bits.ravel())
    return t


def check(data):
    why = ffi.new("char[]", 512)
    rc = lib.salus_onnx_check_buffer(data, len(data), ffi.NULL, why, 512)
    return rc, ffi.string(why).decode()


def widen(a):
    return salus.from_bf16(a) if a.dtype == np.uint16 else a.astype(np.float32)


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_half_matmul_model_matches_numpy(session, dtype, raw):
    rng = np.random.default_rng(3)
    w32 = rng.standard_normal((16, 8)).astype(np.float32)
    w = salus.to_bf16(w32) if dtype == BF16 else w32.astype(np.float16)
    wbits = w if dtype == BF16 else w.view(np.uint16)
    data = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", dtype, [4, 16])],
                 [("y", dtype, [4, 8])], [half_init("w", dtype, wbits, raw)])
    assert check(data) == (0, "")
    x32 = rng.standard_normal((4, 16)).astype(np.float32)
    x = salus.to_bf16(x32) if dtype == BF16 else x32.astype(np.float16)
    with session.load_onnx(data) as m:
        assert m.inputs == [("x", (4, 16), np.dtype(NUMPY[dtype]))]
        assert m.outputs == [("y", (4, 8), np.dtype(NUMPY[dtype]))]
        (y,) = m.run(x)
        # the weights stay in the model's dtype on the server: half the bytes
        text = session.client.status()
        assert f"persistent {'bf16' if dtype == BF16 else 'f16'} 256 B" in text, text
    assert y.dtype == NUMPY[dtype]
    want = widen(x) @ widen(w)  # f32 sums of the half values, then one rounding
    tol = 2 ** -7 if dtype == BF16 else 2 ** -10
    np.testing.assert_allclose(widen(y), want, rtol=tol, atol=tol)


def test_cast_model_between_float_types(session):
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=F16),
             helper.make_node("Cast", ["h"], ["b"], to=BF16),
             helper.make_node("Cast", ["b"], ["y"], to=FLOAT),
             helper.make_node("Cast", ["x"], ["same"], to=FLOAT)]
    data = model(nodes, [("x", FLOAT, [2, 5])],
                 [("h", F16, [2, 5]), ("b", BF16, [2, 5]), ("y", FLOAT, [2, 5]),
                  ("same", FLOAT, [2, 5])])
    x = np.array([[0.1, -2.5, 65504.0, 70000.0, 1e-8], [3.0, np.inf, -0.0, 1.00390625, 300.7]],
                 np.float32)
    with session.load_onnx(data) as m:
        h, b, y, same = m.run(x)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(h, x.astype(np.float16))
    np.testing.assert_array_equal(b, salus.to_bf16(h.astype(np.float32)))
    np.testing.assert_array_equal(y, salus.from_bf16(b))
    np.testing.assert_array_equal(same, x)


def test_cast_of_constants_folds_in_the_target_type(session):
    """A Cast of an initialiser is folded on the host: to float16 it rounds
    (rather than truncating to an integer) and the result stays float16."""
    c = helper.make_tensor("c", FLOAT, [3], [0.1, 2.7, -1.5])
    nodes = [helper.make_node("Cast", ["c"], ["ch"], to=F16),
             helper.make_node("Add", ["x", "ch"], ["y"])]
    data = model(nodes, [("x", F16, [3])], [("y", F16, [3])], [c])
    with session.load_onnx(data) as m:
        (y,) = m.run(np.zeros(3, np.float16))
    np.testing.assert_array_equal(y, np.array([0.1, 2.7, -1.5], np.float32).astype(np.float16))


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_f32_only_op_runs_in_f32_between_casts(session, dtype):
    """Softmax has no half kernel: given a half input it computes in f32
    and rounds once, to the output's declared dtype (PyTorch autocast)."""
    sm = model([helper.make_node("Softmax", ["x"], ["y"])], [("x", dtype, [2, 3])],
               [("y", dtype, [2, 3])])
    x32 = np.array([[0.5, -1.0, 2.0], [3.0, 0.25, -0.5]], np.float32)
    x = salus.to_bf16(x32) if dtype == BF16 else x32.astype(np.float16)
    with session.load_onnx(sm) as m:
        (y,) = m.run(x)
    assert y.dtype == NUMPY[dtype]
    e = np.exp(widen(x).astype(np.float64))
    want = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    exact = salus.to_bf16(want) if dtype == BF16 else want.astype(np.float16)
    # f32 softmax then one rounding: the correctly rounded result, or its
    # neighbour when f32's own error straddles a rounding boundary
    np.testing.assert_allclose(widen(y), widen(exact), rtol=2 ** -7 if dtype == BF16 else 2 ** -10)


def test_refusals_name_the_op_and_the_dtype():
    to_double = model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE)],
                      [("x", FLOAT, [2])], [("y", TensorProto.DOUBLE, [2])])
    rc, why = check(to_double)
    assert rc == salus.Code.EUNSUPPORTED and "Cast" in why and "data type 11" in why, why
    from_int = model([helper.make_node("Cast", ["i"], ["y"], to=F16)],
                     [("i", TensorProto.INT32, [2])], [("y", F16, [2])])
    rc, why = check(from_int)
    assert rc == salus.Code.EUNSUPPORTED and "Cast" in why and "i32" in why, why
    u8 = model([helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.UINT8, [2])],
               [("y", TensorProto.UINT8, [2])])
    rc, why = check(u8)
    assert rc == salus.Code.EUNSUPPORTED and "element type 2" in why, why

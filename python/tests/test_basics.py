"""The binding against a real salusd: sessions, tensors, graphs, runs, errors."""
import numpy as np
import pytest

import salus


def test_connect_and_status(server, client):
    assert "cpu" in client.device
    with client.session(name="visible") as s:
        text = client.status()
        assert "visible" in text
        assert s.id > 0


def test_connect_failure_is_an_error_with_a_code(tmp_path):
    with pytest.raises(salus.Error) as e:
        salus.connect(f"ipc://{tmp_path}/nobody.sock")
    assert e.value.code == salus.Code.ECONN


def test_tensor_round_trip_keeps_values_and_dtypes(session):
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    t = session.tensor(a)
    assert t.shape == (3, 4) and t.dtype == np.float32
    np.testing.assert_array_equal(t.read(), a)
    t.write(a * 2)
    np.testing.assert_array_equal(t.read(), a * 2)
    i = session.tensor(np.array([1, -2, 3]))
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i.read(), [1, -2, 3])
    z = session.tensor(shape=(2, 2))
    np.testing.assert_array_equal(z.read(), np.zeros((2, 2), np.float32))
    out = np.empty((3, 4), np.float32)
    assert t.read(out=out) is out


def test_wrong_sizes_are_refused_before_sending(session):
    t = session.tensor(shape=(4,))
    with pytest.raises(ValueError):
        t.write(np.ones(5, np.float32))


def test_matmul_graph_matches_numpy(session):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    g = salus.Graph()
    xv = g.input((4, 16))
    y = g.op("matmul", [xv, g.param(session.tensor(w))])
    assert y.shape == (4, 8)
    peak = session.register(g)
    assert peak >= 0 and g.id > 0
    (out,) = session.run(g, [x], fetch=[y])
    np.testing.assert_allclose(out, x @ w, rtol=1e-5, atol=1e-5)
    (again,) = session.run(g, {xv: x * 2}, fetch=[y])
    np.testing.assert_allclose(again, 2 * (x @ w), rtol=1e-5, atol=1e-5)


def test_non_contiguous_and_float64_feeds_are_converted(session):
    w = np.eye(3, dtype=np.float32)
    g = salus.Graph()
    xv = g.input((3, 3))
    y = g.op("matmul", [xv, g.param(session.tensor(w))])
    session.register(g)
    x = np.arange(9, dtype=np.float64).reshape(3, 3).T  # neither f32 nor C order
    (out,) = session.run(g, [x], fetch=[y])
    np.testing.assert_array_equal(out, x.astype(np.float32))


def test_builder_errors_name_the_op(session):
    g = salus.Graph()
    a = g.input((2, 3))
    b = g.input((4, 5))
    with pytest.raises(salus.Error) as e:
        g.op("matmul", [a, b])
    assert e.value.code == salus.Code.EINVAL
    assert "matmul" in e.value.message
    g = salus.Graph()  # a builder stays failed after its first error
    with pytest.raises(salus.Error) as e:
        g.op("no_such_op", [g.input((2, 3))])
    assert "no_such_op" in str(e.value)


def test_server_errors_carry_code_and_message(client, session):
    t = session.tensor(shape=(2,))
    g = salus.Graph()
    y = g.op("relu", [g.param(t)])
    session.register(g)
    with pytest.raises(salus.Error) as e:
        t.free()
    assert e.value.code == salus.Code.EBUSY
    with pytest.raises(salus.Error) as e:
        client.set_policy("no-such-policy")
    assert e.value.code in (salus.Code.EINVAL, salus.Code.EPERM)
    assert e.value.message
    assert y.shape == (2,)


def test_closed_objects_raise_instead_of_crashing(client):
    s = client.session()
    t = s.tensor(shape=(2,))
    s.close()
    s.close()  # idempotent
    with pytest.raises(salus.Error):
        t.read()


def test_large_run_moves_through_shared_memory(session):
    n = 256 * 1024  # 1 MiB of f32 each way: past the shared-memory threshold
    g = salus.Graph()
    x = g.input((n,))
    y = g.op("relu", [x])
    session.register(g)
    data = np.linspace(-1, 1, n, dtype=np.float32)
    (out,) = session.run(g, [data], fetch=[y])
    np.testing.assert_array_equal(out, np.maximum(data, 0))
    assert session.shm_bytes >= data.nbytes

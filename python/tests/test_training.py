"""The training API through the binding: Trainer (autodiff) against a NumPy
reference, named tensors, checkpoints, per-step learning rate, errors."""
import numpy as np
import pytest

import salus


def softmax_xent_grad(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(labels)), labels]).mean()
    p[np.arange(len(labels)), labels] -= 1
    return loss, p / len(labels)


def test_trainer_sgd_step_matches_numpy(session):
    """One SGD step of a linear classifier: the loss and the updated weight
    equal the float64 NumPy computation of the same step."""
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((6, 3)).astype(np.float32) * 0.3
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8).astype(np.int32)
    w = session.tensor(w0)
    g = salus.Graph()
    logits = g.op("matmul", [g.input((8, 6)), g.param(w)])
    t = salus.Trainer(session, g, logits, salus.SGD(0.5))
    assert t.params == [w.id]
    loss = t.step(x, y)
    ref_loss, dlogits = softmax_xent_grad(x.astype(np.float64) @ w0, y)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    np.testing.assert_allclose(w.read(), w0 - 0.5 * (x.T.astype(np.float64) @ dlogits),
                               rtol=1e-5, atol=1e-6)


def test_gradients_of_a_sum(session):
    g = salus.Graph()
    a = g.input((4,))
    total = g.op("reduce_sum", [g.op("mul", [a, a])])
    (da,) = g.gradients(total, [a])
    session.register(g)
    x = np.array([1, -2, 3, 0.5], np.float32)
    (out,) = session.run(g, [x], fetch=[da])
    np.testing.assert_allclose(out, 2 * x, rtol=1e-6)


def test_named_tensors_checkpoint_and_schedule(session, tmp_path):
    m = salus.Model((4,)).dense(3)
    m.compile(session, salus.Momentum(0.1, lr_schedule=True), batch=8, seed=2)
    assert m.names("param") == ["0.weight", "0.bias"]
    assert "optimizer.lr" in m.names()
    w = m.get("0.weight")
    assert w.shape == (4, 3)  # dense weights are [in, out]
    m.set("0.weight", np.ones((4, 3), np.float32))
    np.testing.assert_array_equal(m.get("0.weight"), np.ones((4, 3)))
    x = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    y = np.arange(8, dtype=np.int32) % 3
    m.train_step(x, y)
    m.save(tmp_path / "ck")
    after_save = m.state_dict(kind=None)
    l1 = m.train_step(x, y)
    m.load(tmp_path / "ck")
    for name, value in m.state_dict(kind=None).items():
        np.testing.assert_array_equal(value, after_save[name], err_msg=name)
    assert m.train_step(x, y) == l1  # resumes exactly where it was saved
    m.set_lr(0.0)
    before = m.get("0.bias")
    m.train_step(x, y)
    # lr 0: the velocity still accumulates but no parameter moves
    np.testing.assert_array_equal(m.get("0.bias"), before)
    with pytest.raises(KeyError):
        m.get("no.such")


def test_optimizer_arguments_are_checked(session):
    m = salus.Model((4,)).dense(2)
    with pytest.raises(salus.Error) as e:
        m.compile(session, salus.Adam(1e-3, beta1=1.5), batch=4)
    assert e.value.code == salus.Code.EINVAL and "beta" in e.value.message
    m2 = salus.Model((4,)).dense(2)
    m2.compile(session, salus.Adam(1e-3, beta1=0.0), batch=4)  # beta1 = 0 is expressible
    with pytest.raises(salus.Error):
        m2.set_lr(0.1)  # not compiled with lr_schedule=True

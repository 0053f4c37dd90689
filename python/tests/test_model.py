"""nn models through the binding: compiling, training, predicting, errors."""
import numpy as np
import pytest

import salus


def blobs(n, seed):
    """Two separable Gaussian classes in 8 dimensions."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.int32)
    x = rng.standard_normal((n, 8)).astype(np.float32) + (2 * y[:, None] - 1) * 1.5
    return x, y


def test_mlp_learns_two_blobs(session):
    m = salus.Model((8,)).dense(16).relu().dense(2)
    m.compile(session, salus.Momentum(0.05, momentum=0.9), batch=32, infer_batch=256, seed=3)
    assert m.param_count == 8 * 16 + 16 + 16 * 2 + 2
    x, y = blobs(32 * 40, seed=1)
    losses = [m.train_step(x[i:i + 32], y[i:i + 32]) for i in range(0, len(x), 32)]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    xt, yt = blobs(256, seed=2)
    assert (m.predict(xt) == yt).mean() > 0.9


def test_sgd_step_lowers_the_loss_of_its_batch(session):
    m = salus.Model((4,)).dense(3)
    m.compile(session, salus.SGD(0.5), batch=8, seed=7)
    g = m.training_graph
    assert g.id > 0
    x = np.random.default_rng(5).standard_normal((8, 4)).astype(np.float32)
    y = np.arange(8, dtype=np.int32) % 3
    l1 = m.train_step(x, y)
    l2 = m.train_step(x, y)
    assert np.isfinite(l1) and l2 < l1


def test_model_errors_are_raised_with_the_cause(session):
    with pytest.raises(salus.Error) as e:
        salus.Model((1, 8, 8)).dense(4)  # dense wants a flat sample
    assert e.value.code == salus.Code.EINVAL and e.value.message
    m = salus.Model((4,)).dense(2)
    with pytest.raises(salus.Error):
        m.train_step(np.zeros((8, 4), np.float32), np.zeros(8, np.int32))


def test_cnn_compiles_and_trains_a_step(session):
    m = (salus.Model((1, 8, 8)).conv2d(4, 3, pad=1).relu().maxpool(2).flatten().dense(3))
    m.compile(session, salus.Adam(1e-3), batch=4, infer_batch=2, seed=1)
    x = np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32)
    loss = m.train_step(x, np.array([0, 1, 2, 0], np.int32))
    assert np.isfinite(loss)
    assert m.predict(x[:2]).shape == (2,)


def test_residual_blocks_train_and_check_their_shapes(session):
    m = (salus.Model((2, 8, 8)).conv2d(4, 3, pad=1).batchnorm().relu()
         .residual_begin().conv2d(4, 3, pad=1).batchnorm().relu().conv2d(4, 3, pad=1).batchnorm()
         .residual_end().relu()
         .residual_begin().conv2d(8, 3, stride=2, pad=1).batchnorm()
         .residual_shortcut().conv2d(8, 1, stride=2, bias=False).batchnorm().residual_end()
         .relu().avgpool(4).flatten().dense(3))
    m.compile(session, salus.Momentum(0.05, momentum=0.9), batch=16, seed=2)
    convs = [(2, 4, 3), (4, 4, 3), (4, 4, 3), (4, 8, 3)]  # with biases; the projection has none
    bns = [4, 4, 4, 8, 8]
    assert m.param_count == (sum(i * o * k * k + o for i, o, k in convs) + 4 * 8
                             + 2 * sum(bns) + 8 * 3 + 3)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 2, 8, 8)).astype(np.float32)
    y = np.arange(16, dtype=np.int32) % 3
    losses = [m.train_step(x, y) for _ in range(30)]
    assert np.isfinite(losses[0]) and losses[-1] < 0.5 * losses[0]
    with pytest.raises(salus.Error) as e:
        salus.Model((2, 8, 8)).residual_begin().conv2d(4, 3, pad=1).residual_end()
    assert "[4,8,8]" in str(e.value) and "[2,8,8]" in str(e.value)
    with pytest.raises(salus.Error) as e:
        salus.Model((4,)).residual_end()
    assert "without a begin" in str(e.value)


def test_predict_sees_weights_written_between_predictions(session):
    """salusd keeps convolution weights reordered across predictions; a
    tensor write (Model.set) must reach the next prediction."""
    def model(seed):
        m = (salus.Model((8, 12, 12)).conv2d(16, 3, pad=1).relu().conv2d(16, 3, pad=1).relu()
             .flatten().dense(10))
        return m.compile(session, salus.SGD(0.1), batch=32, seed=seed)

    a, b = model(1), model(2)
    x = np.random.default_rng(3).standard_normal((32, 8, 12, 12)).astype(np.float32)
    before, want = [a.predict(x) for _ in range(2)], b.predict(x)
    np.testing.assert_array_equal(before[0], before[1])
    assert (before[0] != want).any()  # two random models disagree somewhere
    for name in b.names("param"):
        a.set(name, b.get(name))
    np.testing.assert_array_equal(a.predict(x), want)
    np.testing.assert_array_equal(a.predict(x), want)

"""ONNX from Python against a real salusd: models exported by PyTorch at test
time, run and trained through the binding, compared with PyTorch itself."""
import io

import numpy as np
import pytest

import salus

torch = pytest.importorskip("torch", reason="python3-torch is not installed: the ONNX tests "
                            "export their models with PyTorch (apt-get install python3-torch)")

BATCH = 8


def cnn():
    """The Fashion-MNIST CNN of examples/fashion_train.c."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def export(model, shape, **kw):
    buf = io.BytesIO()
    model.eval()
    torch.onnx.export(model, torch.zeros(shape), buf, input_names=["image"],
                      output_names=["logits"], opset_version=13, **kw)
    return buf.getvalue()


def data(seed=1):
    rng = np.random.default_rng(seed)
    return (rng.random((BATCH, 1, 28, 28), dtype=np.float32),
            rng.integers(0, 10, BATCH).astype(np.int32))


def assert_rel(got, want, tol=1e-4):
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
    assert err <= tol, f"max relative difference {err:.3g} > {tol}"


def torch_momentum_losses(model, x, labels, steps):
    """The losses of `steps` SGD steps (lr 0.02, momentum 0.9, mean
    cross-entropy) of model in training mode, in PyTorch."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)),
                                                 torch.from_numpy(labels).long())
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def test_inference_matches_pytorch(session, tmp_path):
    model = cnn()
    path = tmp_path / "cnn.onnx"
    path.write_bytes(export(model, (BATCH, 1, 28, 28)))
    x, _ = data()
    with session.load_onnx(path) as m:
        assert m.inputs == [("image", (BATCH, 1, 28, 28), np.float32)]
        assert m.outputs == [("logits", (BATCH, 10), np.float32)]
        (y,) = m.run(x)
        (y2,) = m.run({"image": x})
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    assert y.shape == (BATCH, 10) and y.dtype == np.float32
    assert_rel(y, want)
    np.testing.assert_array_equal(y, y2)


def test_dynamic_batch_needs_batch(session):
    onnx = export(cnn(), (2, 1, 28, 28), dynamic_axes={"image": {0: "n"}, "logits": {0: "n"}})
    with pytest.raises(salus.Error) as e:
        session.load_onnx(onnx)
    assert e.value.code == salus.Code.EUNSUPPORTED and "image" in e.value.message
    with session.load_onnx(onnx, batch=3) as m:
        assert m.inputs[0][1] == (3, 1, 28, 28) and m.outputs[0][1] == (3, 10)


def test_unsupported_op_names_node_and_op(session):
    class Odd(torch.nn.Module):
        def forward(self, x):
            return torch.det(x)

    onnx = export(Odd(), (2, 3, 3))
    with pytest.raises(salus.Error) as e:
        session.load_onnx(onnx)
    assert e.value.code == salus.Code.EUNSUPPORTED
    assert "Det" in e.value.message, e.value.message


def test_malformed_model_is_einval(session):
    with pytest.raises(salus.Error) as e:
        session.load_onnx(b"\x08\x07this is no model")
    assert e.value.code == salus.Code.EINVAL


def test_run_checks_feeds(session):
    with session.load_onnx(export(cnn(), (BATCH, 1, 28, 28))) as m:
        with pytest.raises(ValueError, match="image"):
            m.run(np.zeros((BATCH, 1, 28, 27), np.float32))
        with pytest.raises(ValueError, match="no input"):
            m.run({"x": np.zeros((BATCH, 1, 28, 28), np.float32)})
    with pytest.raises(salus.Error):
        m.run(np.zeros((BATCH, 1, 28, 28), np.float32))


def test_first_sgd_step_matches_pytorch(session):
    model = cnn()
    onnx = export(model, (BATCH, 1, 28, 28))
    x, labels = data(2)
    probe, _ = data(3)
    lr = 0.1
    with session.load_onnx(onnx) as m:
        t = m.trainer(salus.SGD(lr))
        assert len(t.params) == 8  # 4 weights, 4 biases: every initialiser trained
        loss = t.step(x, labels)
        (after,) = m.run(probe)  # the same tensors, updated in place

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    want_loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)),
                                                  torch.from_numpy(labels).long())
    opt.zero_grad()
    want_loss.backward()
    opt.step()
    with torch.no_grad():
        want_after = model(torch.from_numpy(probe)).numpy()
    assert abs(loss - want_loss.item()) <= 1e-4 * abs(want_loss.item())
    assert_rel(after, want_after)


def test_training_lowers_the_loss_as_pytorch_does(session):
    model = cnn()
    x, labels = data(4)
    with session.load_onnx(export(model, (BATCH, 1, 28, 28))) as m:
        t = m.trainer(salus.Momentum(0.02, momentum=0.9), output="logits")
        losses = [t.step(x, labels) for _ in range(30)]
    want = torch_momentum_losses(model, x, labels, 30)
    assert losses[-1] < 0.7 * losses[0], losses
    np.testing.assert_allclose(losses, want, rtol=2e-3)


def test_batchnorm_model_refuses_training_naming_op(session):
    torch.manual_seed(0)
    nn = torch.nn
    # first, so the exporter cannot fold it into a preceding convolution
    model = nn.Sequential(nn.BatchNorm2d(1), nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 26 * 26, 10))
    model.train()
    model(torch.rand(16, 1, 28, 28) * 3 + 1)  # running statistics other than 0 and 1
    with session.load_onnx(export(model, (BATCH, 1, 28, 28))) as m:
        x, _ = data()
        (y,) = m.run(x)
        with torch.no_grad():
            assert_rel(y, model(torch.from_numpy(x)).numpy())
        with pytest.raises(salus.Error) as e:
            m.trainer(salus.SGD(0.1))
        assert e.value.code == salus.Code.EUNSUPPORTED and "batchnorm" in e.value.message


@pytest.mark.parametrize("opset", [13, 15])
def test_batchnorm_training_mode_trains_as_pytorch_does(session, opset):
    """A CNN with batch norm (2-D and 1-D) exported in training mode: opset
    13 marks it by BatchNormalization's extra outputs, opset 15 by
    training_mode=1. It trains through salusd with the batch's statistics,
    as PyTorch's model.train() does."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 8, 5, stride=2), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 6 * 6, 32),
                          nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    buf = io.BytesIO()
    model.train()
    torch.onnx.export(model, torch.zeros(BATCH, 1, 28, 28), buf, input_names=["image"],
                      output_names=["logits"], opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    x, labels = data(5)
    x = x * 3 + 1  # a batch mean far from 0: the batch statistics matter
    with session.load_onnx(buf.getvalue()) as m:
        t = m.trainer(salus.Momentum(0.02, momentum=0.9))
        # the running statistics are batch-norm state, not trained parameters
        assert len(t.params) == 10, t.params
        losses = [t.step(x, labels) for _ in range(20)]
    want = torch_momentum_losses(model, x, labels, 20)
    assert losses[-1] < 0.7 * losses[0], losses
    np.testing.assert_allclose(losses, want, rtol=2e-3)


def test_session_close_frees_model_and_trainer(client):
    s = client.session(name="onnx-close")
    m = s.load_onnx(export(cnn(), (BATCH, 1, 28, 28)))
    t = m.trainer(salus.SGD(0.1))
    s.close()
    with pytest.raises(salus.Error):
        m.run(np.zeros((BATCH, 1, 28, 28), np.float32))
    with pytest.raises(salus.Error):
        t.step(*data())


def test_graphs_of_freed_objects_raise(session):
    model = salus.Model((4,)).dense(2)
    model.compile(session, salus.SGD(0.1), batch=2)
    g = model.training_graph
    model.close()
    with pytest.raises(salus.Error, match="freed"):
        g.inputs
    with session.load_onnx(export(cnn(), (BATCH, 1, 28, 28))) as m:
        fg = m.graph
    with pytest.raises(salus.Error, match="freed"):
        fg.inputs


def test_inference_sees_weights_training_steps_changed(session):
    """salusd keeps convolution weights reordered across runs of a served
    model; training steps that change them in place must be seen by the
    next run (and by the one after, reading the kept copy). Three steps:
    from the second on, every layout the step uses is already kept, so
    nothing but the weights' version tells the copies are stale."""
    model = cnn()
    x, labels = data(6)
    probe, _ = data(7)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with session.load_onnx(export(model, (BATCH, 1, 28, 28))) as m:
        t = m.trainer(salus.SGD(0.5))
        for step in range(4):
            runs = [m.run(probe)[0] for _ in range(2)]
            with torch.no_grad():
                want = model(torch.from_numpy(probe)).numpy()
            assert_rel(runs[0], want)
            np.testing.assert_array_equal(runs[0], runs[1])
            if step == 3:
                break
            t.step(x, labels)
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)),
                                                     torch.from_numpy(labels).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                moved = np.max(np.abs(model(torch.from_numpy(probe)).numpy() - want))
            assert moved > 1e-3, f"step {step} changed the outputs by only {moved}"

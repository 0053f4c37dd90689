"""Mixed-precision training (precision="bf16" / "f16") against PyTorch's own:
torch.autocast("cpu", dtype=torch.bfloat16) on the same model, weights and
batches, and f16's loss scaling against GradScaler's rules."""
import numpy as np
import pytest

import salus

torch = pytest.importorskip("torch", reason="python3-torch is not installed: the loss match "
                            "trains the same model with PyTorch's autocast")

STEPS, BATCH = 50, 32


def fashion_cnn_pair(seed):
    """The CNN of examples/fashion_train.c in PyTorch and in salus, with the
    PyTorch model's initial weights copied into the salus model (a dense
    weight is nn.Linear's transposed)."""
    torch.manual_seed(seed)
    nn = torch.nn
    tm = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                       nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    sm = (salus.Model((1, 28, 28)).conv2d(16, 3, pad=1).relu().maxpool(2)
          .conv2d(32, 3, pad=1).relu().maxpool(2).flatten().dense(128).relu().dense(10))
    return tm, sm


def copy_weights(tm, sm):
    for name, p in tm.state_dict().items():
        v = p.detach().numpy()
        sm.set(name, v.T.copy() if name.startswith(("7.", "9.")) and v.ndim == 2 else v)


def batches(seed):
    rng = np.random.default_rng(seed)
    x = rng.random((STEPS, BATCH, 1, 28, 28), dtype=np.float32) * 0.5
    y = rng.integers(0, 10, (STEPS, BATCH)).astype(np.int32)
    # class k brightens rows 2k..2k+2: learnable, so the loss falls
    for s in range(STEPS):
        for b in range(BATCH):
            x[s, b, 0, 2 * y[s, b]:2 * y[s, b] + 3] += 0.5
    return x, y


def torch_autocast_losses(tm, x, y):
    opt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = tm(torch.from_numpy(x[s]))
            loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(y[s]).long())
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return np.array(losses)


def test_bf16_losses_match_torch_autocast(session):
    """The first 50 losses of the fashion_train CNN, SGD with momentum, from
    identical weights and batches: salus precision="bf16" against PyTorch
    1.13's CPU autocast in bfloat16, within 2e-2 relative."""
    torch.set_num_threads(1)
    x, y = batches(3)
    tm, sm = fashion_cnn_pair(3)
    sm.compile(session, salus.Momentum(0.01, 0.9), batch=BATCH, precision="bf16")
    copy_weights(tm, sm)
    ours = np.array([sm.train_step(x[s], y[s]) for s in range(STEPS)])
    theirs = torch_autocast_losses(tm, x, y)
    np.testing.assert_allclose(ours, theirs, rtol=2e-2)
    # it learned, and the master weights stayed f32 tensors
    assert ours[-5:].mean() < ours[:5].mean()
    assert sm.get("0.weight").dtype == np.float32


def test_f16_loss_scaling_skips_an_overflowing_step(session):
    """precision="f16": the loss scale starts at 2**16; a batch whose f16
    activations overflow is skipped (weights and momentum unchanged, the
    scale halved, the skip counted), not an error; clean steps train."""
    g = salus.Graph()
    w = session.tensor(np.full((4, 3), 0.1, np.float32))
    logits = g.op("matmul", [g.input((2, 4)), g.param(w)])
    t = salus.Trainer(session, g, logits, salus.Momentum(0.1), precision="f16")
    assert t.amp_state() == (65536.0, 0)
    y = np.array([0, 2], np.int32)
    x = np.ones((2, 4), np.float32)
    first = t.step(x, y)
    assert np.isfinite(first) and t.amp_state() == (65536.0, 0)
    before = w.read()
    t.step(np.full((2, 4), 1e6, np.float32), y)  # beyond f16's 65504: inf
    np.testing.assert_array_equal(w.read(), before)
    assert t.amp_state() == (32768.0, 1)
    assert t.step(x, y) < first
    assert not np.array_equal(w.read(), before)
    assert t.amp_state() == (32768.0, 1)

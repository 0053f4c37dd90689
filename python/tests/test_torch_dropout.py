"""Dropout with p > 0 through salus.torch: masks drawn by salusd's seeded
Philox dropout from the client's seed and the step count, reproducible
for one seed and different for another, keeping 1 - p of the elements
scaled by 1 / (1 - p), dropping the same positions in the gradient as in
the forward pass, and absent in eval mode."""
import pytest

torch = pytest.importorskip("torch")

import salus  # noqa: E402
import salus.torch  # noqa: E402

P = 0.3
N = 4096


class _Scaled(torch.nn.Module):
    """loss = sum(dropout(w * x)): the gradient of w is x * mask / (1 - p)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, N))
        self.drop = torch.nn.Dropout(P)

    def forward(self, x):
        return self.drop(self.w * x)


def _sum(y, target):
    return (y * target).sum()


def _step(session, seed, train=True):
    model = _Scaled().train(train)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    x, t = torch.ones(N), torch.ones(N)
    return salus.torch.compile_step(model, _sum, opt, (x, t), session=session, seed=seed), x, t


def _grads(step, x, t, n):
    """(loss, gradient of w) of n steps: SGD at lr 1 moves w by the gradient."""
    out = []
    for _ in range(n):
        before = step.state_dict()["w"]
        loss = step(x, t)
        out.append((loss, before - step.state_dict()["w"], before))
    return out


def test_masks_follow_the_seed_and_the_step(session):
    a, x, t = _step(session, seed=7)
    b, _, _ = _step(session, seed=7)
    c, _, _ = _step(session, seed=8)
    ga, gb, gc = _grads(a, x, t, 3), _grads(b, x, t, 3), _grads(c, x, t, 3)
    for (la, da, _), (lb, db, _) in zip(ga, gb):
        assert la == lb and torch.equal(da, db)  # the same seed: the same masks
    for (_, da, _), (_, dc, _) in zip(ga, gc):
        assert not torch.equal(da != 0, dc != 0)  # another seed: other masks
    assert not torch.equal(ga[0][1] != 0, ga[1][1] != 0)  # each step its own mask
    assert a.steps == 3


def test_mask_statistics_and_gradient(session):
    step, x, t = _step(session, seed=1)
    for loss, grad, w in _grads(step, x, t, 4):
        kept = grad != 0
        frac = kept.float().mean().item()
        # 4096 draws: the kept fraction's standard deviation is 0.007
        assert abs(frac - (1 - P)) < 0.03, frac
        # kept elements are scaled by 1 / (1 - p), dropped ones get no gradient
        assert torch.allclose(grad[kept], torch.full_like(grad[kept], 1 / (1 - P)), rtol=1e-5)
        assert torch.equal(grad[~kept], torch.zeros_like(grad[~kept]))
        # the forward pass dropped the same elements as the backward pass
        want = (w * grad).sum().item()
        assert abs(loss - want) <= 1e-5 * abs(want), (loss, want)


def test_eval_mode_has_no_dropout(session):
    step, x, t = _step(session, seed=1, train=False)
    loss, grad, w = _grads(step, x, t, 1)[0]
    assert torch.equal(grad, torch.ones(N))
    assert abs(loss - w.sum().item()) <= 1e-5 * w.sum().item()
    # switching the model to training mode captures a graph with dropout,
    # over the same weights
    step.model.train()
    loss, grad, w2 = _grads(step, x, t, 1)[0]
    assert torch.equal(w2, w - 1)
    assert 0.6 < (grad != 0).float().mean().item() < 0.8
    assert len(step.captured) == 2


def test_transformer_dropout_trains(session):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
    x, y = torch.randn(4, 8, 16), torch.randn(4, 8, 16)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    step = salus.torch.compile_step(layer, torch.nn.MSELoss(), opt, (x, y), session=session,
                                    seed=3)
    losses = [step(x, y) for _ in range(5)]
    assert len(set(losses)) == 5  # new masks each step
    assert all(abs(v - losses[0]) < 0.5 * losses[0] for v in losses)


def test_module_in_training_mode_drops_and_in_eval_mode_does_not(session):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(P))
    x = torch.randn(32, 64)
    module = salus.torch.compile_module(model, (x,), session=session, seed=5)
    a, b = module(x), module(x)
    assert not torch.equal(a != 0, b != 0)
    assert abs((a != 0).float().mean().item() - (1 - P)) < 0.05
    model.eval()
    with torch.no_grad():
        want = model(x)
    got = module(x)
    assert (got - want).abs().max().item() <= 1e-5 * want.abs().max().item()
    kept = a != 0
    assert torch.allclose(a[kept], want[kept] / (1 - P), rtol=1e-4, atol=1e-6)

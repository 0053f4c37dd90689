"""salus/_compat.py on the torch this suite runs (Debian's 1.13): the
capture replaces torch.nn.functional.scaled_dot_product_attention (torch
2.x's fused attention, which has no salus op) by its math in ops salus
lowers. 1.13 has no such function, so the tests install one that, like
2.x's, computes attention through ops salus refuses (triu, logical_not):
a step that reached the graph through it would be refused."""
import copy
import math

import pytest

torch = pytest.importorskip("torch")

import salus.torch  # noqa: E402
from salus import _compat  # noqa: E402

F = torch.nn.functional


def _reference_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
    att = (q @ k.transpose(-2, -1)) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        att = att.masked_fill(torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1),
                              float("-inf"))
    if attn_mask is not None:
        att = att.masked_fill(attn_mask.logical_not(), float("-inf"))
    return att.softmax(-1) @ v


@pytest.fixture
def fused_sdpa(monkeypatch):
    monkeypatch.setattr(F, "scaled_dot_product_attention", _reference_sdpa, raising=False)


class _Attn(torch.nn.Module):
    def __init__(self, d=16, heads=2, vocab=32, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.emb = torch.nn.Embedding(vocab, d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, vocab)

    def forward(self, ids, mask=None):
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def _loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _data(n, pad):
    g = torch.Generator().manual_seed(3)
    out = []
    for _ in range(n):
        ids = torch.randint(0, 32, (2, 6), generator=g)
        tgt = torch.randint(0, 32, (2, 6), generator=g)
        if pad:
            # each row attends to its own first 4 or 6 keys, every query row
            # keeps at least one key
            keep = torch.ones(2, 1, 6, 6, dtype=torch.bool)
            keep[0, :, :, 4:] = False
            out.append((ids, keep, tgt))
        else:
            out.append((ids, tgt))
    return out


@pytest.mark.parametrize("pad", [False, True], ids=["causal", "bool_mask"])
def test_sdpa_is_captured_as_its_math(session, fused_sdpa, pad):
    torch.manual_seed(0)
    eager = _Attn(causal=not pad)
    model = copy.deepcopy(eager)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt_s = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = _data(5, pad)
    step = salus.torch.compile_step(model, _loss, opt_s, data[0], session=session)
    for batch in data:
        opt_e.zero_grad()
        want = _loss(eager(*batch[:-1]), batch[-1])
        want.backward()
        opt_e.step()
        got = step(*batch)
        assert abs(got - want.item()) <= 1e-4 * abs(want.item()), (got, want.item())
    # outside the capture the module's own function is back
    assert F.scaled_dot_product_attention is _reference_sdpa


def test_sdpa_math_matches_the_reference():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
    mask[..., 0] = True
    for kw in ({}, {"is_causal": True}, {"attn_mask": mask}, {"scale": 0.3, "is_causal": True}):
        want = _reference_sdpa(q, k, v, **kw)
        got = _compat._sdpa(q, k, v, **kw)
        assert torch.allclose(got, want, atol=1e-6), kw


def test_register_backend_is_a_no_op_before_torch_2():
    if _compat.TORCH_MAJOR >= 2:
        pytest.skip("torch 2.x: the backend is registered at import")
    assert _compat.register_backend("salus-test", lambda gm, ex: gm) is False

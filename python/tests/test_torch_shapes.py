"""salus.torch shape buckets: a BERT-style encoder and a GPT-style decoder
trained on batches of varying batch size and sequence length, padded to
power-of-two buckets, give PyTorch eager's losses and weights on the
unpadded batches; every bucket updates one copy of the state in salusd;
a padding the loss does not ignore is refused."""
import copy
import math

import pytest

torch = pytest.importorskip("torch")

import salus  # noqa: E402
import salus.torch  # noqa: E402
from status_util import persistent_bytes  # noqa: E402

MAX_SEQ = 16
# (batch, length) per step: buckets 4x4, 4x8, 2x8, 4x16, 2x16 and back
SHAPES = [(4, 3), (3, 7), (4, 8), (2, 5), (4, 13), (1, 16), (3, 6), (4, 2), (2, 11), (4, 8),
          (3, 4), (4, 15)]


class _Bert(torch.nn.Module):
    """Token embedding (padding id 0), learned positions cut to the
    batch's length, nn.TransformerEncoder with a key padding mask, a
    classifier on the first token."""

    def __init__(self, vocab=50, d=32, heads=4, layers=2, classes=3):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d, padding_idx=0)
        self.pos = torch.nn.Parameter(torch.randn(MAX_SEQ, d) * 0.02)
        self.norm = torch.nn.LayerNorm(d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, ids, pad):
        x = self.norm(self.tok(ids) + self.pos[:ids.shape[1]])
        return self.head(self.enc(x, src_key_padding_mask=pad)[:, 0])


def _bert_batches(vocab=50, classes=3):
    g = torch.Generator().manual_seed(1)
    out = []
    for b, t in SHAPES:
        lengths = torch.randint(1, t + 1, (b,), generator=g)
        pad = torch.arange(t)[None, :] >= lengths[:, None]
        ids = torch.randint(1, vocab, (b, t), generator=g).masked_fill(pad, 0)
        out.append((ids, pad, torch.randint(0, classes, (b,), generator=g)))
    return out


class _Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x, causal):
        b, t, d = x.shape
        h = self.heads
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class _Gpt(torch.nn.Module):
    """Causal self-attention whose mask and positions are cut to the
    batch's length: a position never reads a later (padded) one."""

    def __init__(self, vocab=64, d=32, heads=4, layers=2):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(MAX_SEQ, d)
        self.blocks = torch.nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("positions", torch.arange(MAX_SEQ), persistent=False)
        self.register_buffer("causal", torch.ones(MAX_SEQ, MAX_SEQ, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(self.positions[:t])
        for blk in self.blocks:
            x = blk(x, self.causal[:t, :t])
        return self.head(self.ln(x))


def _lm_loss(logits, targets):
    # the mean over real targets: padded ones hold ignore_index
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1), ignore_index=-100)


def _gpt_batches(vocab=64):
    g = torch.Generator().manual_seed(1)
    out = []
    for b, t in SHAPES:
        text = torch.randint(0, vocab, (b, t + 1), generator=g)
        out.append((text[:, :-1], text[:, 1:]))
    return out


def _persistent_bytes(client, name):
    """The session's persistent bytes as salusd's status counts them."""
    held = persistent_bytes(client, name)
    assert held is not None, f"session {name} not in the status:\n{client.status()}"
    return held


def _train(client, make_model, loss_fn, make_opt, batches, buckets):
    torch.manual_seed(0)
    eager = make_model()
    model = copy.deepcopy(eager)
    start = {n: t.clone() for n, t in eager.state_dict().items()}
    opt_e, opt_s = make_opt(eager.parameters()), make_opt(model.parameters())
    with client.session(name="buckets") as s:
        step = salus.torch.compile_step(model, loss_fn, opt_s, batches[0], session=s,
                                        buckets=buckets)
        one = step.persistent_bytes()
        held_one = _persistent_bytes(client, "buckets")
        for i, batch in enumerate(batches):
            opt_e.zero_grad()
            want = loss_fn(eager(*batch[:-1]), batch[-1])
            want.backward()
            opt_e.step()
            got = step(*batch)
            assert abs(got - want.item()) <= 1e-4 * abs(want.item()), (i, got, want.item())
        keys = step.captured
        assert len({k[:2] for k in keys}) >= 4, keys
        # the state is stored once: each further bucket holds only its own
        # constants, and salusd counts what the buckets say they hold
        sizes = step.persistent_bytes()
        assert sizes["shared"] == one["shared"]
        shared = sizes.pop("shared")
        assert max(v[0] for v in sizes.values()) < 0.1 * shared[0], (shared, sizes)
        held = _persistent_bytes(client, "buckets")
        # salusd rounds each tensor up to 256 bytes, its status to 0.1 KiB
        added = [v for k, v in sizes.items() if k != keys[0]]
        assert held - held_one <= sum(n + 256 * t for n, t in added) + 103, (held, held_one, sizes)
        total = shared[0] + sum(n for n, _ in sizes.values())
        tensors = shared[1] + sum(t for _, t in sizes.values())
        assert total - 103 <= held <= total + 256 * tensors + 103, (held, shared, sizes)
        trained = step.state_dict()
    for name, want in eager.state_dict().items():
        got = trained[name]
        err = (got - want).abs().max().item()
        assert err <= 1e-4 * max(want.abs().max().item(), 1.0), (name, err)
        moved = (want - start[name]).abs().max().item()
        if moved > 1e-6:
            assert err <= 0.05 * moved, (name, err, moved)


_SGD = (lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=1e-4))
_ADAMW = (lambda ps: torch.optim.AdamW(ps, lr=1e-3, eps=1e-6))


@pytest.mark.parametrize("make_opt", [_SGD, _ADAMW], ids=["sgd_momentum", "adamw"])
def test_gpt_decoder_trains_through_length_and_batch_buckets(client, make_opt):
    _train(client, _Gpt, _lm_loss, make_opt, _gpt_batches(),
           salus.torch.Buckets(pad=(0, -100)))


@pytest.mark.parametrize("make_opt", [_SGD, _ADAMW], ids=["sgd_momentum", "adamw"])
def test_bert_encoder_trains_through_length_and_batch_buckets(client, make_opt):
    _train(client, _Bert, torch.nn.CrossEntropyLoss(), make_opt, _bert_batches(),
           salus.torch.Buckets(pad=(0, True, -100)))


def test_inference_buckets_cut_outputs_back(session):
    torch.manual_seed(0)
    model = _Gpt().eval()
    module = salus.torch.compile_module(model, (torch.zeros(2, 4, dtype=torch.long),),
                                        session=session, buckets=salus.torch.Buckets(pad=(0,)))
    for ids, _ in _gpt_batches()[:5]:
        with torch.no_grad():
            want = model(ids)
        got = module(ids)
        assert got.shape == want.shape
        assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()


def test_padding_the_loss_counts_is_refused(session):
    torch.manual_seed(0)
    model = _Gpt()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = _gpt_batches()
    # targets padded with 0, a real token the loss does not ignore
    step = salus.torch.compile_step(model, _lm_loss, opt, batches[2], session=session,
                                    buckets=salus.torch.Buckets(pad=(0, 0)))
    step(*batches[2])  # 4 x 8: a bucket exactly, nothing padded
    with pytest.raises(salus.Error) as e:
        step(*batches[1])  # 3 x 7 padded to 4 x 8
    assert e.value.code == salus.Code.EUNSUPPORTED
    assert "changes the loss" in e.value.message and "ignore_index" in e.value.message
    with pytest.raises(salus.Error, match="changes the loss"):
        step(*batches[0])  # 4 x 3: a new bucket, refused before it is captured
    assert len(step.captured) == 1


def test_batch_norm_over_padded_rows_is_refused(session):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(3, 8), torch.randint(0, 3, (3,))
    with pytest.raises(salus.Error, match="changes the loss"):
        salus.torch.compile_step(model, torch.nn.CrossEntropyLoss(), opt, (x, y),
                                 session=session, buckets=salus.torch.Buckets(pad=(None, -100)))

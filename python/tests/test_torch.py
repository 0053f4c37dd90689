"""salus.torch against PyTorch eager: a captured ResNet-18 training step
(forward, loss, backward and the optimizer's update in one salus graph)
gives the losses and the weights PyTorch gives from the same weights and
batches, and an unsupported model is refused with every op listed."""
import copy
import math

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import salus  # noqa: E402
import salus.torch  # noqa: E402

STEPS = 20


def _batches(n, batch=4, size=32, classes=10):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 3, size, size, generator=g),
             torch.randint(0, classes, (batch,), generator=g)) for _ in range(n)]


def _resnet():
    torch.manual_seed(0)
    # zero_init_residual: each block starts as the identity, so 20 steps at
    # batch 4 stay well conditioned (float32 PyTorch agrees with float64 to
    # about 1e-5; with the default init it differs by 1e-3 after 3 steps)
    return torchvision.models.resnet18(num_classes=10, zero_init_residual=True)


def _compare(session, make_opt, make_model=None, batches=None, loss_fn=None):
    eager = (make_model or _resnet)()
    model = copy.deepcopy(eager)
    start = {n: t.clone() for n, t in eager.state_dict().items()}
    opt_e, opt_s = make_opt(eager.parameters()), make_opt(model.parameters())
    loss_fn = loss_fn or torch.nn.CrossEntropyLoss()
    batches = batches or _batches(STEPS)
    step = salus.torch.compile_step(model, loss_fn, opt_s, batches[0], session=session)
    for i, batch in enumerate(batches):
        opt_e.zero_grad()
        want = loss_fn(eager(*batch[:-1]), batch[-1])
        want.backward()
        opt_e.step()
        got = step(*batch)
        assert abs(got - want.item()) <= 1e-4 * abs(want.item()), (i, got, want.item())
    trained = step.state_dict()
    for name, want in eager.state_dict().items():
        got = trained[name]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        if not want.dtype.is_floating_point:
            assert torch.equal(got, want), name  # num_batches_tracked
            continue
        # 1e-4 relative to the tensor's largest element, or absolute for
        # tensors below 1 (the zero-initialised batch norm weights)
        err = (got - want).abs().max().item()
        assert err <= 1e-4 * max(want.abs().max().item(), 1.0), (name, err)
        # the updates themselves agree, not only weights that barely moved;
        # below 1e-5 over the steps a tensor's gradient is rounding noise
        # (a batch norm's shift ahead of a convolution and another batch
        # norm has none), which Adam's scaling makes differ in any order
        moved = (want - start[name]).abs().max().item()
        if moved > 1e-5:
            assert err <= 0.05 * moved, (name, err, moved)
    # the trained state goes back into the module by name
    model.load_state_dict(trained)
    for name, want in trained.items():
        assert torch.equal(model.state_dict()[name], want), name
    return step


def test_resnet18_sgd_momentum_matches_eager(session):
    step = _compare(session, lambda ps: torch.optim.SGD(ps, lr=0.001, momentum=0.9,
                                                        weight_decay=1e-4))
    state = step.optimizer_state_dict()
    assert len(state["state"]) == len(list(step.model.parameters()))
    assert "momentum_buffer" in state["state"][0]


def test_resnet18_adamw_matches_eager(session):
    step = _compare(session, lambda ps: torch.optim.AdamW(ps, lr=2e-5, eps=1e-5))
    assert float(step.optimizer_state_dict()["state"][0]["step"]) == STEPS


_SGD = (lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=1e-4))
_ADAMW = (lambda ps: torch.optim.AdamW(ps, lr=1e-3, eps=1e-6))


def _mobilenet():
    torch.manual_seed(0)
    # hardswish, and hardsigmoid in the squeeze-excitation blocks, with their gradients
    return torchvision.models.mobilenet_v3_small(num_classes=10, dropout=0.0)


# at 32x32, batch 4 the last stages' batch norms normalise 4 values per
# channel, and float32 PyTorch itself leaves float64's losses by 1e-2
# within 8 steps; at 64x64, batch 8 and these rates it agrees with float64
# to 1e-7 (SGD at lr 0.01 moves the first conv's weights 1.2e-4 from eager's
# in 20 steps, as far as float32 summation order carries them)
@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.005, momentum=0.9, weight_decay=1e-4),
    lambda ps: torch.optim.AdamW(ps, lr=1e-4, eps=1e-6)], ids=["sgd_momentum", "adamw"])
def test_mobilenet_v3_small_matches_eager(session, make_opt):
    _compare(session, make_opt, _mobilenet, _batches(STEPS, batch=8, size=64))


class _Bert(torch.nn.Module):
    """A BERT-style encoder: token embedding (padding id 0) plus learned
    positions, layer norm, nn.TransformerEncoder (multi-head attention
    with a key padding mask, GELU MLP), a classifier on the first token."""

    def __init__(self, vocab=50, d=32, heads=4, layers=2, seq=8, classes=3):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d, padding_idx=0)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.norm = torch.nn.LayerNorm(d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, ids, pad):
        x = self.norm(self.tok(ids) + self.pos)
        return self.head(self.enc(x, src_key_padding_mask=pad)[:, 0])


def _bert():
    torch.manual_seed(0)
    return _Bert()


def _bert_batches(n, batch=4, seq=8, vocab=50, classes=3):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        lengths = torch.randint(2, seq + 1, (batch,), generator=g)
        pad = torch.arange(seq)[None, :] >= lengths[:, None]  # a bool mask, True: padding
        ids = torch.randint(1, vocab, (batch, seq), generator=g).masked_fill(pad, 0)
        out.append((ids, pad, torch.randint(0, classes, (batch,), generator=g)))
    return out


@pytest.mark.parametrize("make_opt", [_SGD, _ADAMW], ids=["sgd_momentum", "adamw"])
def test_bert_encoder_with_padding_mask_matches_eager(session, make_opt):
    _compare(session, make_opt, _bert, _bert_batches(STEPS))


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
    """A GPT-style decoder: token and position embeddings, causal
    self-attention (masked_fill with -inf above the diagonal, a constant
    bool mask), layer norm, GELU MLP, an LM head over the vocabulary."""

    def __init__(self, vocab=64, d=32, heads=4, layers=2, seq=8):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("positions", torch.arange(seq), persistent=False)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions)
        for blk in self.blocks:
            x = blk(x, self.causal)
        return self.head(self.ln(x))


def _gpt():
    torch.manual_seed(0)
    return _Gpt()


def _lm_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))


def _gpt_batches(n, batch=4, seq=8, vocab=64):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        text = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        out.append((text[:, :-1], text[:, 1:]))
    return out


@pytest.mark.parametrize("make_opt", [_SGD, _ADAMW], ids=["sgd_momentum", "adamw"])
def test_gpt_decoder_with_causal_mask_matches_eager(session, make_opt):
    _compare(session, make_opt, _gpt, _gpt_batches(STEPS), _lm_loss)


# the schedulers' warning assumes optimizer.step(), which the compiled step replaces
@pytest.mark.filterwarnings("ignore:Detected call of")
def test_lr_change_reaches_the_graph(session):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    eager = copy.deepcopy(model)
    opt_s, opt_e = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager))
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss_fn = torch.nn.CrossEntropyLoss()
    step = salus.torch.compile_step(model, loss_fn, opt_s, (x, y), session=session)
    sched_s = torch.optim.lr_scheduler.StepLR(opt_s, 1, gamma=0.5)
    sched_e = torch.optim.lr_scheduler.StepLR(opt_e, 1, gamma=0.5)
    for _ in range(4):
        step(x, y)
        sched_s.step()
        opt_e.zero_grad()
        loss_fn(eager(x), y).backward()
        opt_e.step()
        sched_e.step()
    got = step.state_dict()["0.weight"]
    assert torch.allclose(got, eager[0].weight.detach(), rtol=1e-5, atol=1e-6)


def test_compile_module_inference_matches_eager(session):
    model = _resnet().eval()
    x = _batches(1, batch=2)[0][0]
    module = salus.torch.compile_module(model, (x,), session=session)
    with torch.no_grad():
        want = model(x)
    got = module(x)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
    with pytest.raises(ValueError, match="captured"):
        module(torch.randn(3, 3, 32, 32))


class _Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.proj(x), dim=1)


class _Odd(torch.nn.Module):
    """Three ops salus has no lowering for, in two modules."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(8, 8)
        self.head = _Head()

    def forward(self, x):
        return self.head(torch.flip(self.body(x), [1])).cummax(dim=1).values


def test_unsupported_ops_are_all_listed_with_module_paths(session):
    model = _Odd()
    x, y = torch.randn(4, 8), torch.randint(0, 8, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(salus.Error) as e:
        salus.torch.compile_step(model, torch.nn.CrossEntropyLoss(), opt, (x, y),
                                 session=session)
    msg = e.value.message
    assert e.value.code == salus.Code.EUNSUPPORTED
    # every unsupported op at once, forward and backward, with shapes and paths
    assert "aten.flip.default(float32[4, 8], [1]) -> [4, 8] in _Odd" in msg, msg
    assert "aten.cumsum.default(float32[4, 8], 1) -> [4, 8] in head (_Head)" in msg, msg
    assert "aten.cummax.default" in msg, msg
    assert "nothing was registered" in msg


class _TwoLayer(torch.nn.Module):
    """An MLP with a layer the loss never reaches (no gradient)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(12, 16), torch.nn.Linear(16, 5)
        self.unused = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def _groups(opt, **second):
    """opt over two parameter groups: the first layer with opt's options,
    the rest with `second` overriding them."""
    def make(m):
        first = [p for n, p in m.named_parameters() if n.startswith("a.")]
        rest = [p for n, p in m.named_parameters() if not n.startswith("a.")]
        return opt([{"params": first}, dict(second, params=rest)])
    return make


# (the optimizer, and whether each group's update is one salus op)
_OPTIMIZERS = {
    "sgd": (lambda m: torch.optim.SGD(m.parameters(), lr=0.1), [True]),
    "sgd_momentum_wd": (lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9,
                                                  weight_decay=0.01), [True]),
    "adam": (lambda m: torch.optim.Adam(m.parameters(), lr=0.01), [True]),
    "adamw": (lambda m: torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.1), [True]),
    "sgd_wd": (lambda m: torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=0.01), [False]),
    "adam_l2": (lambda m: torch.optim.Adam(m.parameters(), lr=0.01, weight_decay=0.1), [False]),
    "amsgrad": (lambda m: torch.optim.AdamW(m.parameters(), lr=0.01, amsgrad=True), [False]),
    "mixed": (_groups(lambda gs: torch.optim.SGD(gs, lr=0.05, momentum=0.9), nesterov=True),
              [True, False]),
}


@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_optimizer_updates_match_eager(session, name):
    """Each optimizer's update, one salus op where the group's options
    allow it and op by op where not, gives PyTorch's parameters and
    state; a parameter without a gradient is left as it is."""
    make_opt, fused = _OPTIMIZERS[name]
    torch.manual_seed(0)
    eager = _TwoLayer()
    model = copy.deepcopy(eager)
    opt_e, opt_s = make_opt(eager), make_opt(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 12, generator=g), torch.randint(0, 5, (8,), generator=g))
               for _ in range(STEPS)]
    step = salus.torch.compile_step(model, loss_fn, opt_s, batches[0], session=session)
    assert [f is not None for f in step._fuse] == fused
    for x, y in batches:
        opt_e.zero_grad()
        want = loss_fn(eager(x), y)
        want.backward()
        opt_e.step()
        assert abs(step(x, y) - want.item()) <= 1e-5 * abs(want.item())
    trained = step.state_dict()
    for n, want in eager.state_dict().items():
        assert torch.allclose(trained[n], want, rtol=1e-5, atol=1e-6), n
    assert torch.equal(trained["unused.weight"], eager.unused.weight.detach())
    state = step.optimizer_state_dict()["state"]
    for k, (n, p) in enumerate(eager.named_parameters()):
        for key, want in opt_e.state.get(p, {}).items():
            if torch.is_tensor(want) and want.dim() > 0:
                assert torch.allclose(state[k][key], want, rtol=1e-5, atol=1e-6), (n, key)

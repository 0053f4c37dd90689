"""Optimizers and the Trainer: training graphs made from any forward graph
by automatic differentiation (salus_graph_train)."""

from ._core import Code, Error, _buffer, ffi, lib
from .graph import Graph, Value


# Mixed-precision training (salus_optimizer.precision): "bf16" or "f16" run
# forward and backward in that type with PyTorch autocast's rules, on f32
# master weights; "f16" adds GradScaler's dynamic loss scaling.
_PRECISIONS = {"f32": lib.SALUS_F32, "bf16": lib.SALUS_BF16, "f16": lib.SALUS_F16}


def _amp_state(session, fn, ptr):
    scale, skipped = ffi.new("float *"), ffi.new("int64_t *")
    session._check(fn(ptr, scale, skipped))
    return float(scale[0]), int(skipped[0])


class _Optimizer:
    """What salus_optimizer holds; the subclasses are the optimizers. Their
    semantics are PyTorch's torch.optim ones (salus.h states each update).
    lr_schedule=True keeps the learning rate in a tensor so set_lr() can
    change it before any step (one more element-wise pass per parameter)."""

    kind = None

    def __init__(self, lr, weight_decay=0.0, lr_schedule=False):
        if not lr > 0:
            raise ValueError(f"lr must be > 0, not {lr}")
        self.lr, self.weight_decay, self.lr_schedule = lr, weight_decay, lr_schedule

    def _struct(self, precision="f32"):
        if precision not in _PRECISIONS:
            raise ValueError(f"precision is one of {sorted(_PRECISIONS)}, not {precision!r}")
        opt = ffi.new("salus_optimizer *")
        opt.precision = _PRECISIONS[precision]
        opt.kind, opt.lr, opt.weight_decay = self.kind, self.lr, self.weight_decay
        opt.flags = lib.SALUS_OPT_LR_PER_STEP if self.lr_schedule else 0
        self._fill(opt)
        return opt

    def _fill(self, opt):
        pass


class SGD(_Optimizer):
    """Plain SGD: p -= lr * (g + weight_decay * p)."""

    kind = lib.SALUS_SGD


class Momentum(_Optimizer):
    """SGD with momentum, as torch.optim.SGD(momentum=m) (dampening 0)."""

    kind = lib.SALUS_MOMENTUM

    def __init__(self, lr, momentum=0.9, weight_decay=0.0, lr_schedule=False):
        super().__init__(lr, weight_decay, lr_schedule)
        self.momentum = momentum

    def _fill(self, opt):
        opt.momentum = self.momentum


class Adam(_Optimizer):
    """Adam as torch.optim.Adam (weight_decay is L2 added to the gradient);
    the betas and eps are taken as written (beta1=0 is allowed)."""

    kind = lib.SALUS_ADAM
    decoupled = False

    def __init__(self, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, lr_schedule=False):
        super().__init__(lr, weight_decay, lr_schedule)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def _fill(self, opt):
        opt.beta1, opt.beta2, opt.eps = self.beta1, self.beta2, self.eps
        opt.flags |= lib.SALUS_OPT_EXACT | (lib.SALUS_OPT_DECOUPLED_WD if self.decoupled else 0)


class AdamW(Adam):
    """AdamW as torch.optim.AdamW: decoupled weight decay (default 0.01)."""

    decoupled = True

    def __init__(self, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, lr_schedule=False):
        super().__init__(lr, beta1, beta2, eps, weight_decay, lr_schedule)


_LOSSES = {"cross_entropy": lib.SALUS_LOSS_SOFTMAX_XENT, "mse": lib.SALUS_LOSS_MSE,
           "scalar": lib.SALUS_LOSS_SCALAR}


class Trainer:
    """A training graph built from a forward Graph by automatic
    differentiation: each step() runs forward, loss, backward and the
    optimizer's update of every parameter (each Graph.param not written in
    place) once, in the server.

    loss: "cross_entropy" (softmax cross-entropy of [N, C] logits against
    int32 labels [N], averaged; torch.nn.CrossEntropyLoss), "mse" (mean
    squared error against a target shaped as `output`) or "scalar" (output
    already is the loss). The forward graph is copied, not changed; the
    optimizer's state tensors are created in `session`.

    precision: "f32", or "bf16" / "f16" for mixed precision as
    torch.autocast (f32 master weights and optimizer state; matmuls and
    convolutions in the half type; losses, softmax, norms and reductions in
    f32); "f16" adds dynamic loss scaling with GradScaler's defaults
    (amp_state).
    """

    def __init__(self, session, forward, output, optimizer, loss="cross_entropy",
                 precision="f32"):
        if loss not in _LOSSES:
            raise ValueError(f"loss is one of {sorted(_LOSSES)}")
        if output.graph is not forward:
            raise ValueError("output must be a value of the forward graph")
        forward._check_builder()
        out = ffi.new("salus_trainer **")
        session._check(lib.salus_graph_train(session._live(), forward._live(), _LOSSES[loss],
                                             output.handle, optimizer._struct(precision),
                                             out))
        self._ptr = out[0]
        self.session = session
        self.graph = Graph(_borrowed=lib.salus_trainer_graph(self._ptr), _owner=self)
        self.loss = Value(self.graph, lib.salus_trainer_loss(self._ptr))
        session._dependents.add(self)

    def _live(self):
        if self._ptr is None:
            raise Error(Code.EINVAL, "the trainer is freed")
        return self._ptr

    def step(self, *feeds):
        """One iteration; feeds: the forward graph's inputs in order, then the
        labels (or the target). Returns the loss computed before the update."""
        inputs = self.graph.inputs
        if len(feeds) != len(inputs):
            raise ValueError(f"the training graph takes {len(inputs)} feeds "
                             f"(the forward inputs, then labels or target), {len(feeds)} given")
        keep, ptrs = [], ffi.new("void *[]", max(len(feeds), 1))
        for i, (v, f) in enumerate(zip(inputs, feeds)):
            a, p = _buffer(f, v.dtype_code, v.shape, f"feed {i}")
            keep.append(a)
            ptrs[i] = p
        loss = ffi.new("float *")
        self.session._check(lib.salus_trainer_step(self._live(),
                                                   ffi.cast("const void *const *", ptrs), loss))
        return float(loss[0])

    def set_lr(self, lr):
        """The learning rate of the following steps (optimizer made with
        lr_schedule=True)."""
        self.session._check(lib.salus_trainer_set_lr(self._live(), lr))

    def amp_state(self):
        """precision="f16": (the loss scale of the next step, the steps skipped
        so far because a gradient held an inf or NaN)."""
        return _amp_state(self.session, lib.salus_trainer_amp_state, self._live())

    @property
    def params(self):
        """Session tensor ids of the parameters trained."""
        t = self._live()
        return [int(lib.salus_trainer_param_tensor(t, i))
                for i in range(lib.salus_trainer_param_count(t))]

    def close(self):
        """Frees the trainer and its graph (state tensors stay in the session)."""
        if self._ptr is not None:
            # the borrowed Graph must not reach the freed builder afterwards
            self.graph._ptr = None
            lib.salus_trainer_free(self._ptr)
        self._ptr = None

    def __del__(self):
        if getattr(self, "_ptr", None) is not None and self.session._ptr is not None:
            self.close()

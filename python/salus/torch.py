"""PyTorch models through salusd without a rewrite: a whole training step
(forward, loss, backward and the optimizer's update) or an inference
captured as one graph of aten ops by make_fx, lowered to salus ops and
registered as ONE salus graph, so each call is one Run request.

    import salus, salus.torch
    with salus.connect() as c, c.session(name="resnet") as s:
        step = salus.torch.compile_step(model, torch.nn.CrossEntropyLoss(), optimizer,
                                        (images, labels), session=s)
        for images, labels in loader:
            loss = step(images, labels)          # a float
        model.load_state_dict(step.state_dict())  # the trained weights, by name

compile_step(model, loss_fn, optimizer, example_inputs, session, targets=1,
             buckets=None, seed=0)
    The step is loss_fn(model(*inputs[:-targets]), *inputs[-targets:]).
    Parameters, buffers (batch norm's running statistics) and the
    optimizer's state live in salusd as persistent tensors of `session`.
    Optimizers: torch.optim.SGD (momentum, nesterov, weight_decay,
    maximize; dampening 0), Adam and AdamW (weight_decay, amsgrad,
    maximize), each param group with its own settings, computed as
    PyTorch's single-tensor implementations compute them. A group whose
    options a salus optimizer op covers (SGD with or without momentum,
    Adam without L2 decay, AdamW; not nesterov, amsgrad or maximize) is
    updated by that op, one pass over each parameter as soon as its
    gradient is made; other groups' updates run op by op. The learning
    rate of each param group lives in a persistent tensor: a change of
    optimizer.param_groups[i]["lr"] (an LR scheduler's) is written to it
    by the next step's Run request itself.

    buckets=Buckets(pad=...): batches of varying batch size and sequence
    length, padded to power-of-two buckets, one graph each, all over the
    same persistent state (see Buckets). seed: the key of dropout's
    masks with the step count (see compile_step).

compile_module(model, example_inputs, session, buckets=None, seed=0)
    Inference: module(*inputs) returns what model(*inputs) returns, as
    torch tensors, run in the model's current mode (eval() first for
    batch norm's running statistics).

Both refuse, before anything is registered, a model with any aten op salus
cannot compute: the salus.Error (Code.EUNSUPPORTED) lists every such op
with its argument shapes and the module path it came from. Without
buckets, shapes are those of example_inputs and a call with other shapes
is refused. Each mode (model.train() / eval()) has its own graph,
captured on its first call. Dropout with p > 0 draws from salus's seeded
Philox dropout op, keyed by (seed, calls run so far).

Works with torch 1.13 and torch 2.x (what differs: salus/_compat.py; in
2.x scaled_dot_product_attention is captured as its math), where importing
this module also registers a torch.compile backend named "salus"
(inference, in a session of its own on salus.default_url()).
"""

import bisect

import numpy as np
import torch
from . import _compat
from ._aten import HostCounter, op_key
from ._lower import lower
from ._core import BF16, F16, F32, I32, Code, Error
from .graph import Graph

__all__ = ["compile_step", "compile_module", "CompiledStep", "CompiledModule", "Generator",
           "sample"]

_functional_call = _compat.functional_call

# bool tensors (masks) are salus's i32 masks of 0s and 1s
_DTYPES = {torch.float32: F32, torch.int64: I32, torch.int32: I32, torch.float16: F16,
           torch.bfloat16: BF16, torch.bool: I32}


_MAX_RUN_WRITES = 16  # salus_run_ex's limit


def _salus_dtype(t, what):
    if t.dtype not in _DTYPES:
        raise Error(Code.EUNSUPPORTED, f"{what}: salus has no {t.dtype} tensors")
    return _DTYPES[t.dtype]


def _numpy(t, dtype):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if dtype == I32 and a.dtype != np.int32:
        a = a.astype(np.int32)
    return a


def _named_tensors(model):
    """Every parameter and buffer name, tied ones included, with a list of
    the distinct tensors and, per name, its index in that list; and the
    names of the buffers a state_dict() leaves out (persistent=False)."""
    params, buffers = [], []
    p_index, b_index, seen, transient = {}, {}, {}, set()

    def walk(mod, prefix):
        for n, p in mod._parameters.items():
            if p is not None:
                if id(p) not in seen:
                    seen[id(p)] = len(params)
                    params.append((prefix + n, p))
                p_index[prefix + n] = seen[id(p)]
        for n, b in mod._buffers.items():
            if b is not None and n in mod._non_persistent_buffers_set:
                transient.add(prefix + n)
            if b is not None:
                b_index[prefix + n] = len(buffers)
                buffers.append((prefix + n, b))
        for n, c in mod._modules.items():
            if c is not None:
                walk(c, prefix + n + ".")
    walk(model, "")
    return params, p_index, buffers, b_index, transient


class _Tracker:
    """Module paths of captured nodes: forward hooks note, as modules are
    entered and left, how many nodes the graph being captured holds."""

    def __init__(self, model):
        self.events = [(0, "")]
        self.stack = []
        self.handles = []
        for path, mod in model.named_modules():
            label = f"{path} ({type(mod).__name__})" if path else type(mod).__name__
            self.handles.append(mod.register_forward_pre_hook(self._enter(label)))
            self.handles.append(mod.register_forward_hook(self._leave()))

    @staticmethod
    def _graph_len():
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        except ImportError:
            return None
        for mode in reversed(_get_current_dispatch_mode_stack()):
            graph = getattr(getattr(mode, "tracer", None), "graph", None)
            if graph is not None:
                return len(graph.nodes)
        return None

    def mark(self, label):
        n = self._graph_len()
        if n is not None:
            self.events.append((n, label))

    def _enter(self, label):
        def hook(mod, args):
            self.stack.append(label)
            self.mark(label)
        return hook

    def _leave(self):
        def hook(mod, args, out):
            if self.stack:
                self.stack.pop()
            self.mark(self.stack[-1] if self.stack else self.phase)
        return hook

    phase = ""

    def set_phase(self, label):
        self.phase = label
        self.mark(label)

    def close(self):
        for h in self.handles:
            h.remove()

    def labeller(self, gm, ph_labels):
        """where(node) for _aten.lower: the module a node was made in; a
        backward op names the forward module whose tensors it reads."""
        nodes = list(gm.graph.nodes)
        index = {n: i for i, n in enumerate(nodes)}
        keys = [k for k, _ in self.events]
        phs = [n for n in nodes if n.op == "placeholder"]
        ph_label = dict(zip(phs, ph_labels))

        def own(node):
            if node in ph_label:
                return ph_label[node]
            i = bisect.bisect_right(keys, index[node]) - 1
            return self.events[i][1] if i >= 0 else ""

        def where(node):
            label = own(node)
            if label != "(backward)":
                return label
            params = [a for a in node.all_input_nodes if a in ph_label and
                      ph_label[a].startswith("parameter ")]
            if params:
                return "backward of " + ph_label[params[0]][len("parameter "):]
            fwd = [a for a in node.all_input_nodes if own(a) not in ("", "(backward)")]
            if fwd:
                src = where(max(fwd, key=lambda a: index[a]))
                return src if src.startswith("backward of ") else "backward of " + src
            return "backward"
        return where


def _param_label(name, model):
    path = name.rpartition(".")[0]
    try:
        mod = model.get_submodule(path) if path else model
        return f"parameter {path} ({type(mod).__name__}) .{name.rpartition('.')[2]}"
    except AttributeError:
        return f"parameter {name}"


def _pow2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


class Buckets:
    """Shape buckets: how a compiled step or module takes batches whose
    batch size and sequence length vary. A call's sequence length t (the
    size along `seq_dim` of every input that has a pad value and that dim;
    they must agree) is padded up to the next power of two T; with
    batch=True its batch size b (dim 0 of every input) is padded up to the
    next power of two B. Each (B, T) and training mode gets its own
    captured graph, made and registered on first use; all of them read and
    update ONE copy of the parameters, buffers and optimizer state in
    salusd.

    pad: one entry per input (the model's inputs, then the targets): the
    value that input's padded sequence positions hold (a padding token id,
    True in a key padding mask, the loss's ignore_index in targets), or
    None for an input without a sequence dim. Padded batch rows repeat row
    0 of each model input and hold the pad value in targets, so with
    batch=True every target needs one.

    Exactness is the model's and the loss's: padded positions must not
    reach real ones (a causal or key padding mask; no batch norm over
    padded rows or positions) and the loss must ignore padded targets
    (cross_entropy(..., ignore_index=pad)), averaging over real ones only.
    The first padded call of each bucket checks this in PyTorch (forward
    and loss on the call's batch as given and as padded, dropout off) and
    refuses the bucket, Code.EUNSUPPORTED, when they differ."""

    def __init__(self, pad, seq_dim=1, batch=True):
        if int(seq_dim) < 1:
            raise ValueError("seq_dim must be at least 1 (dim 0 is the batch)")
        self.pad, self.seq_dim, self.batch = tuple(pad), int(seq_dim), bool(batch)

    def shape_of(self, inputs):
        """((b, t), (B, T)): the call's batch size and sequence length
        (t None when no input has one) and its bucket's."""
        if len(inputs) != len(self.pad):
            raise ValueError(f"{len(self.pad)} inputs expected (one pad entry each), "
                             f"{len(inputs)} given")
        b = t = None
        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor) or x.dim() == 0:
                raise ValueError(f"input {i} is not a batched tensor")
            if b is None:
                b = x.shape[0]
            elif x.shape[0] != b:
                raise ValueError(f"input {i} has batch size {x.shape[0]}, input 0 has {b}")
            if self.pad[i] is not None and x.dim() > self.seq_dim:
                n = x.shape[self.seq_dim]
                if t is not None and n != t:
                    raise ValueError(f"input {i} has sequence length {n}, an earlier one {t}")
                t = n
        return (b, t), (_pow2(b) if self.batch else b, None if t is None else _pow2(t))

    def padded(self, inputs, bucket, targets):
        """inputs padded to bucket (B, T); the last `targets` are targets."""
        B, T = bucket
        out = []
        for i, x in enumerate(inputs):
            pv = self.pad[i]
            if T is not None and pv is not None and x.dim() > self.seq_dim and \
                    x.shape[self.seq_dim] < T:
                shape = list(x.shape)
                shape[self.seq_dim] = T - x.shape[self.seq_dim]
                x = torch.cat([x, torch.full(shape, pv, dtype=x.dtype)], dim=self.seq_dim)
            if B > x.shape[0]:
                if i < len(inputs) - targets:
                    fill = x[:1].expand(B - x.shape[0], *x.shape[1:])
                elif pv is None:
                    raise Error(Code.EUNSUPPORTED, f"input {i} (a target) has no pad value: "
                                "padded batch rows would count in the loss")
                else:
                    fill = torch.full((B - x.shape[0],) + tuple(x.shape[1:]), pv, dtype=x.dtype)
                x = torch.cat([x, fill])
            out.append(x)
        return tuple(out)

    def cut(self, out, call, bucket):
        """An output of the padded graph cut back to the call's shape: dim 0
        from B to b, seq_dim from T to t."""
        (b, t), (B, T) = call, bucket
        if out.dim() >= 1 and out.shape[0] == B and B != b:
            out = out[:b]
        if T is not None and t != T and out.dim() > self.seq_dim and \
                out.shape[self.seq_dim] == T:
            out = out.narrow(self.seq_dim, 0, t)
        return out


class _State:
    """One persistent tensor of the session (a parameter, a buffer, an
    optimizer state, a constant): made once and read by every graph that
    binds it (rank 0 tensors are stored as [1])."""

    def __init__(self, session, name, data, dtype=F32, torch_dtype=torch.float32):
        data = np.asarray(data)
        self.name, self.torch_shape = name, tuple(data.shape)
        self.dtype, self.torch_dtype = dtype, torch_dtype
        self.tensor = session.tensor(data.reshape(data.shape or (1,)), dtype=dtype)
        self.nbytes = int(np.prod(data.shape or (1,))) * (2 if dtype in (F16, BF16) else 4)

    def bind(self, graph):
        """A _Slot: this tensor as a param of `graph`."""
        return _Slot(self, graph)

    def read(self):
        return self.tensor.read().reshape(self.torch_shape)

    def read_torch(self):
        return torch.from_numpy(self.read()).to(self.torch_dtype)

    def write_torch(self, t):
        self.tensor.write(_numpy(t, self.dtype).reshape(-1))

    def free(self):
        try:
            self.tensor.free()
        except Error:
            pass


class _Slot:
    """A _State as one graph sees it: the param Value and the entry ops
    read (rank 0 tensors through a reshape to [])."""

    def __init__(self, state, graph):
        self.state = state
        self.value = graph.param(state.tensor)
        self.entry = self.value if state.torch_shape else graph.op("reshape", [self.value])


class _Bucket:
    """One captured graph: its salus Graph, its constants and its feeds."""

    def __init__(self, key):
        self.key = key
        self.graph = Graph()
        self.consts = []  # _States only this graph reads
        self.zero_flag = None
        self.in_shapes, self.in_dtypes = [], []
        self.seed = None  # the dropout seed's Value, when the graph draws
        self.counter_steps = {}  # {buffer name: its HostCounter's increment per run}
        self.checked = False  # the padding check has passed
        self.gm = None

    def free(self):
        self.graph.close()
        for s in self.consts:
            s.free()
        self.consts = []


class _Compiled:
    """What compile_step and compile_module share: the session's persistent
    tensors (shared by every bucket), the buckets' graphs, the choice of a
    bucket per call and the dropout seed."""

    def __init__(self, session, model, buckets, seed, targets):
        if buckets is not None and not isinstance(buckets, Buckets):
            raise TypeError("buckets must be a salus.torch.Buckets")
        if not 0 <= int(seed) < 2 ** 32:
            raise ValueError("seed must be in [0, 2^32)")
        self.session, self.model, self.buckets = session, model, buckets
        self.seed, self.targets = int(seed), targets
        self.steps = 0  # calls run: the second word of the dropout key
        self._graphs = {}
        self._states = []  # every shared _State, to free
        self._seed_state = None
        self._counters = {}  # {buffer name: [increments so far, initial tensor]}
        self._b_states = None  # per buffer: its _State, or None for a HostCounter

    @property
    def graph(self):
        """The salus Graph of the first bucket."""
        return next(iter(self._graphs.values())).graph

    @property
    def captured(self):
        """The keys of the graphs captured so far: (batch, length, training)
        with buckets, (input shapes, training) without."""
        return list(self._graphs)

    def persistent_bytes(self):
        """{"shared": (bytes, tensors) of the state every bucket reads, key:
        (bytes, tensors) of that bucket's own constants}: what this holds in
        salusd, before its allocator rounds each tensor up."""
        out = {"shared": (sum(s.nbytes for s in self._states), len(self._states))}
        for k, b in self._graphs.items():
            out[k] = (sum(s.nbytes for s in b.consts), len(b.consts))
        return out

    def _state(self, name, data, dtype=F32, torch_dtype=torch.float32):
        s = _State(self.session, name, data, dtype, torch_dtype)
        self._states.append(s)
        return s

    def _select(self, inputs):
        """(bucket, the inputs its graph takes, (call shape, bucket shape)):
        the graph for this call, captured and registered on first use."""
        inputs = tuple(inputs)
        training = bool(self.model.training)
        if self.buckets is None:
            shapes = tuple(tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor))
            # one graph per mode: a call with other shapes than the mode's
            # first is refused when fed
            key = next((k for k in self._graphs if k[1] == training), (shapes, training))
            call = None
            feed = inputs
        else:
            call, shape = self.buckets.shape_of(inputs)
            key = shape + (training,)
            feed = self.buckets.padded(inputs, shape, self.targets) if call != shape else inputs
            call = (call, shape)
        b = self._graphs.get(key)
        if feed is not inputs and (b is None or not b.checked):
            self._check_padding(inputs, feed, call)
        if b is None:
            b = _Bucket(key)
            try:
                self._capture_bucket(b, feed)
                self.session.register(b.graph)
            except BaseException:
                b.free()
                if not self._graphs:
                    self._free_states()
                raise
            self._graphs[key] = b
        if feed is not inputs:
            b.checked = True
        return b, feed, call

    def _check_padding(self, inputs, padded, call):
        """Refuses a bucket whose padding changes what PyTorch computes
        (dropout off, batch norm's statistics left as they are)."""
        import torch.nn.functional as F
        saved = F.dropout
        F.dropout = lambda x, p=0.5, training=True, inplace=False: x
        try:
            with torch.no_grad():
                want = self._reference(inputs)
                got = self._reference(padded)
        finally:
            F.dropout = saved
        if self.targets:
            got = [got]
            want = [want]
        else:
            got = [self.buckets.cut(o, *call) for o in got]
        for w, g in zip(want, got):
            w, g = w.to(torch.float64), g.to(torch.float64)
            if w.shape != g.shape or not torch.allclose(g, w, rtol=1e-5, atol=1e-6):
                (b, t), (B, T) = call
                raise Error(Code.EUNSUPPORTED,
                            f"padding a batch of {b} x {t} to the bucket {B} x {T} changes "
                            f"{'the loss' if self.targets else 'the outputs'} in PyTorch "
                            f"({w.flatten()[:1].item():.6g} unpadded, {g.flatten()[:1].item():.6g} "
                            "padded): the model must mask padded positions (attention masks) "
                            "and keep batch rows apart (no batch norm), and the loss ignore "
                            "padded targets (ignore_index); nothing was registered for it")

    def _reference(self, inputs):
        bufs = {n: b.detach().clone() for n, b in self._buffers}
        n_in = len(inputs) - self.targets
        out = _functional_call(self.model, bufs, tuple(inputs[:n_in]))
        if self.targets:
            return self.loss_fn(out, *inputs[n_in:])
        return torch.utils._pytree.tree_flatten(out)[0]

    def _seed_of(self, b):
        """seed() for lower(): the bucket's Value of the shared seed tensor."""
        def seed():
            if b.seed is None:
                if self._seed_state is None:
                    self._seed_state = self._state("dropout seed", np.zeros(2, np.int32), I32,
                                                   torch.int32)
                b.seed = _Slot(self._seed_state, b.graph).value
            return b.seed
        return seed

    def _run(self, b, inputs, fetch, writes=()):
        """Runs bucket b's graph once; returns the fetched arrays."""
        writes = list(writes)
        if b.seed is not None:
            # the key (seed, step): each step draws new masks, the same
            # ones for the same seed in every run of the program
            key = np.array([self.seed, self.steps % 2 ** 32], np.uint32).view(np.int32)
            writes.insert(0, (self._seed_state.tensor, key))
        for t, a in writes[_MAX_RUN_WRITES:]:  # more than a request carries
            t.write(a)
        out = self.session.run(b.graph, self._feeds(b, inputs), fetch=fetch,
                               writes=writes[:_MAX_RUN_WRITES])
        self.steps += 1
        for n, inc in b.counter_steps.items():
            self._counters[n][0] += inc
        return out

    def _buffer_entries(self, b, gm, first, buffers):
        """Entries of the buffers, placeholders first.. of gm: float buffers
        and integer ones the step only reads (positions, masks) as
        persistent tensors; an integer buffer the step changes in place
        (batch norm's num_batches_tracked) as a HostCounter. The first
        graph decides which; later ones follow."""
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"][first:first + len(buffers)]
        if self._b_states is None:
            self._b_states = []
            for (n, t), ph in zip(buffers, phs):
                mutated = any((op_key(u.target) or ("",))[0].endswith("_") and u.args[0] is ph
                              for u in ph.users)
                if t.dtype.is_floating_point or not mutated:
                    dt = F32 if t.dtype.is_floating_point else _salus_dtype(t, f"buffer {n}")
                    self._b_states.append(self._state(
                        n, _numpy(t.to(torch.float32) if dt == F32 else t, dt), dt, t.dtype))
                else:
                    self._counters[n] = [0, t.detach().clone()]
                    self._b_states.append(None)
        entries, counters = [], []
        for (n, t), st in zip(buffers, self._b_states):
            if st is not None:
                entries.append(_Slot(st, b.graph).entry)
            else:
                c = HostCounter(n, tuple(t.shape))
                counters.append(c)
                entries.append(c)
        return entries, counters

    def _make_const(self, b, value, shape):
        if shape is None:  # a tensor the captured code made
            t = value.detach().cpu()
            dt = _salus_dtype(t, "a constant")
            s = _State(self.session, "constant", _numpy(t, dt), dt)
        else:
            s = _State(self.session, "constant", np.full(shape, value, dtype=np.float32))
        b.consts.append(s)
        return _Slot(s, b.graph).entry

    def _inputs(self, b, example):
        entries = []
        for i, t in enumerate(example):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input {i} is a {type(t).__name__}, not a tensor")
            dt = _salus_dtype(t, f"input {i}")
            shape = tuple(t.shape)
            v = b.graph.input(shape or (1,), dt)
            b.in_shapes.append(shape)
            b.in_dtypes.append(dt)
            entries.append(v if shape else b.graph.op("reshape", [v]))
        return entries

    def _feeds(self, b, inputs):
        if len(inputs) != len(b.in_shapes):
            raise ValueError(f"{len(b.in_shapes)} inputs expected, {len(inputs)} given")
        feeds = []
        for i, (t, shape, dt) in enumerate(zip(inputs, b.in_shapes, b.in_dtypes)):
            a = _numpy(t, dt)
            if tuple(a.shape) != shape:
                raise ValueError(f"input {i} has shape {tuple(a.shape)}; the graph was captured "
                                 f"for {shape} (salus.torch.Buckets takes varying shapes)")
            feeds.append(a.reshape(shape or (1,)))
        return feeds

    @staticmethod
    def _shaped_for(b, slot, entry, cx):
        """entry as a Value of slot's tensor's shape, or None when it is that
        tensor itself (nothing to write)."""
        src = cx.v(entry)
        if src == slot.entry or src == slot.value:
            return None
        if tuple(src.shape) != tuple(slot.value.shape):
            src = b.graph.op("reshape", [src], slot.value.shape)
        return src

    def _commit(self, b, slot, entry, cx):
        """Writes `entry` into slot's tensor at the end of the iteration:
        amp_commit with a flag that is always 0 is an exact copy."""
        src = self._shaped_for(b, slot, entry, cx)
        if src is None:
            return
        if b.zero_flag is None:
            s = _State(self.session, "commit flag", np.zeros(1, np.float32))
            b.consts.append(s)
            b.zero_flag = _Slot(s, b.graph).value
        b.graph.op("amp_commit", [slot.value, src, b.zero_flag])

    def _free_states(self):
        for s in self._states:
            s.free()
        self._states = []

    def close(self):
        """Frees every bucket's graph and the persistent tensors in the session."""
        for b in self._graphs.values():
            b.free()
        self._graphs = {}
        self._free_states()


def _capture(fn, flat, model):
    tracker = _Tracker(model)
    try:
        gm = _compat.capture(fn(tracker), flat)
    finally:
        tracker.close()
    return gm, tracker


# ---- optimizers, written as torch.optim's single-tensor code computes ----

def _hyper(opt, group):
    kind = "adamw" if isinstance(opt, torch.optim.AdamW) else \
        "adam" if isinstance(opt, torch.optim.Adam) else \
        "sgd" if isinstance(opt, torch.optim.SGD) else None
    if kind is None:
        raise Error(Code.EUNSUPPORTED, f"optimizer {type(opt).__name__} (salus.torch lowers SGD, "
                    "Adam and AdamW)")
    if kind == "sgd" and group.get("dampening", 0) != 0 and group.get("momentum", 0) != 0:
        raise Error(Code.EUNSUPPORTED, "SGD with dampening")
    return kind


def _state_names(kind, group):
    if kind == "sgd":
        return ["momentum_buffer"] if group.get("momentum", 0) != 0 else []
    return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group.get("amsgrad") else [])


def _fused(kind, g):
    """(op, attributes after the learning rate) of the salus optimizer op
    that makes a parameter group's whole update in one pass, or None when
    the group's options have none (its update is lowered op by op)."""
    if g.get("maximize") or g.get("amsgrad"):
        return None
    wd = float(g.get("weight_decay", 0))
    if kind == "sgd":
        if g.get("nesterov") or g.get("dampening", 0) != 0:
            return None
        if g.get("momentum", 0) != 0:
            return "momentum_update_lr", [float(g["momentum"]), wd]
        return ("sgd_update_lr", []) if wd == 0 else None
    beta1, beta2 = g["betas"]
    if kind == "adam" and wd != 0:
        return None
    return "adam_update_lr", [float(beta1), float(beta2), float(g["eps"])] + \
        ([wd] if kind == "adamw" else [])


def _update(kind, g, p, grad, state, lr, step):
    """The new parameter and state of one parameter, as torch.optim."""
    grad = -grad if g.get("maximize") else grad
    wd = g.get("weight_decay", 0)
    if kind == "sgd":
        d = grad.add(p, alpha=wd) if wd != 0 else grad
        new_state = []
        if g.get("momentum", 0) != 0:
            # a zero buffer makes the first step's buffer d, as PyTorch's clone
            buf = state[0].mul(g["momentum"]).add(d)
            new_state = [buf]
            d = d.add(buf, alpha=g["momentum"]) if g.get("nesterov") else buf
        return p.sub(lr * d), new_state
    beta1, beta2 = g["betas"]
    if kind == "adamw":
        p = p.mul(1 - lr * wd)
    elif wd != 0:
        grad = grad.add(p, alpha=wd)
    m = state[0].mul(beta1).add(grad, alpha=1 - beta1)
    v = state[1].mul(beta2).addcmul(grad, grad, value=1 - beta2)
    bc1 = 1 - torch.pow(beta1, step)
    bc2 = 1 - torch.pow(beta2, step)
    step_size = lr / bc1
    new_state = [m, v]
    if g.get("amsgrad"):
        vmax = torch.maximum(state[2], v)
        new_state.append(vmax)
        v = vmax
    denom = v.sqrt() / bc2.sqrt() + g["eps"]
    return p - step_size * (m / denom), new_state


class CompiledStep(_Compiled):
    """One training step of a model in salus graphs (compile_step): one
    per shape bucket and mode, all updating the same persistent state."""

    def __init__(self, model, loss_fn, optimizer, example_inputs, session, targets=1,
                 buckets=None, seed=0):
        example = tuple(example_inputs)
        if not 0 < targets < len(example):
            raise ValueError("example_inputs holds the model's inputs, then `targets` targets")
        super().__init__(session, model, buckets, seed, targets)
        self.optimizer, self.loss_fn = optimizer, loss_fn
        params, self._p_index, buffers, self._b_index, self._transient = _named_tensors(model)
        self._params, self._buffers = params, buffers
        groups = {}
        for gi, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                groups[id(p)] = gi
        self._kinds = [_hyper(optimizer, g) for g in optimizer.param_groups]
        self._trained = [i for i, (_, p) in enumerate(params)
                         if p.requires_grad and id(p) in groups]
        self._adam = any(k != "sgd" for k in self._kinds)
        self._group_of = [groups[id(params[i][1])] for i in self._trained]
        self._n_state = [len(_state_names(self._kinds[gi], optimizer.param_groups[gi]))
                         for gi in self._group_of]
        # a group's update as one salus op (the graph's output is then the
        # gradient), or traced op by op as torch.optim writes it
        self._fuse = [_fused(k, g) for k, g in zip(self._kinds, optimizer.param_groups)]
        self._p_states = self._s_states = self._lr_states = None
        self._step_state = None
        self._lrs = [float(g["lr"]) for g in optimizer.param_groups]
        self._select(example)
        session._dependents.add(self)

    def _step_fn(self, tracker):
        params, buffers, optimizer = self._params, self._buffers, self.optimizer
        model, loss_fn, targets, trained = self.model, self.loss_fn, self.targets, self._trained

        def step_fn(*flat):
            k = 0
            ps = list(flat[k:k + len(params)]); k += len(params)
            bs = list(flat[k:k + len(buffers)]); k += len(buffers)
            states = []
            for n in self._n_state:
                states.append(list(flat[k:k + n])); k += n
            lrs = list(flat[k:k + len(optimizer.param_groups)]); k += len(lrs)
            step = None
            if self._adam:
                step = flat[k] + 1
                k += 1
            inputs = flat[k:]
            state = {n: ps[i] for n, i in self._p_index.items()}
            state.update({n: bs[i] for n, i in self._b_index.items()})
            tracker.set_phase("")
            out = _functional_call(model, state, tuple(inputs[:-targets]))
            tracker.set_phase("loss_fn")
            loss = loss_fn(out, *inputs[-targets:])
            tracker.set_phase("(backward)")
            grads = torch.autograd.grad(loss, [ps[i] for i in trained], allow_unused=True)
            tracker.set_phase("(optimizer)")
            new_p, new_s = [], []
            for j, i in enumerate(trained):
                gi = self._group_of[j]
                if self._fuse[gi]:
                    # the gradient, which the group's update op reads
                    new_p.append(ps[i] if grads[j] is None else grads[j])
                    continue
                if grads[j] is None:  # PyTorch skips a parameter without a gradient
                    new_p.append(ps[i])
                    new_s.extend(states[j])
                    continue
                p, s = _update(self._kinds[gi], optimizer.param_groups[gi], ps[i], grads[j],
                               states[j], lrs[gi], step)
                new_p.append(p)
                new_s.extend(s)
            return tuple([loss] + new_p + new_s + ([step] if self._adam else []))
        return step_fn

    def _capture_bucket(self, b, example):
        # the capture runs one real step on copies: the model is not changed
        params, buffers, model = self._params, self._buffers, self.model
        flat, labels = [], []
        for i, (n, p) in enumerate(params):
            flat.append(p.detach().clone().requires_grad_(i in self._trained))
            labels.append(_param_label(n, model))
        for n, t in buffers:
            flat.append(t.detach().clone())
            labels.append(f"buffer {n}")
        init_states = self._initial_state()
        for j, sts in enumerate(init_states):
            for k, s in enumerate(sts):
                flat.append(s.clone())
                labels.append(f"optimizer state {k} of {params[self._trained[j]][0]}")
        for gi, g in enumerate(self.optimizer.param_groups):
            flat.append(torch.tensor(float(g["lr"])))
            labels.append(f"learning rate of param group {gi}")
        if self._adam:
            flat.append(torch.tensor(float(self._initial_step())))
            labels.append("the step count")
        for i, t in enumerate(example):
            flat.append(t)
            labels.append(f"input {i}")
        gm, tracker = _capture(self._step_fn, flat, model)
        b.gm = self.gm = gm
        self._build(b, gm, tracker.labeller(gm, labels), init_states, example)

    def _initial_state(self):
        """Each trained parameter's optimizer state (zeros, or the torch
        optimizer's own when it has stepped already)."""
        out = []
        for j, i in enumerate(self._trained):
            gi = self._group_of[j]
            p = self._params[i][1]
            st = self.optimizer.state.get(p, {})
            names = _state_names(self._kinds[gi], self.optimizer.param_groups[gi])
            out.append([st[n].detach().to(torch.float32).clone() if st.get(n) is not None
                        else torch.zeros_like(p, dtype=torch.float32) for n in names])
        return out

    def _initial_step(self):
        steps = [float(self.optimizer.state.get(self._params[i][1], {}).get("step", 0))
                 for i in self._trained]
        return max(steps, default=0.0)

    def _make_states(self, init_states):
        """The persistent state every bucket shares, from the module and the
        optimizer as they are when the first graph is captured."""
        params = self._params
        self._p_states = [self._state(n, p.detach().cpu().numpy().astype(np.float32))
                          for n, p in params]
        self._s_states = []
        for j, sts in enumerate(init_states):
            for k, s in enumerate(sts):
                self._s_states.append(self._state(
                    f"state {k} of {params[self._trained[j]][0]}", s.numpy()))
        self._lr_states = [self._state(f"lr {gi}", np.float32(grp["lr"]))
                           for gi, grp in enumerate(self.optimizer.param_groups)]
        if self._adam:
            self._step_state = self._state("step", np.float32(self._initial_step()))

    def _build(self, b, gm, where, init_states, example):
        g = b.graph
        if self._p_states is None:
            self._make_states(init_states)
        p_slots = [_Slot(s, g) for s in self._p_states]
        b_entries, counters = self._buffer_entries(b, gm, len(self._params), self._buffers)
        b_slots = [None if st is None else _Slot(st, g) for st in self._b_states]
        b_entries = [e if s is None else s.entry for e, s in zip(b_entries, b_slots)]
        s_slots = [_Slot(s, g) for s in self._s_states]
        lr_slots = [_Slot(s, g) for s in self._lr_states]
        step_slots = [_Slot(self._step_state, g)] if self._adam else []
        entries = [s.entry for s in p_slots] + b_entries + [s.entry for s in s_slots] + \
            [s.entry for s in lr_slots] + [s.entry for s in step_slots] + self._inputs(b, example)
        # output k+1 is the new value of placeholder wanted[k]'s tensor, or
        # for a fused group's parameter its gradient
        n_p, n_b = len(p_slots), len(b_slots)
        wanted, s_of, k = list(self._trained), {}, 0
        for j, n in enumerate(self._n_state):
            s_of[self._trained[j]] = list(range(k, k + n))
            if not self._fuse[self._group_of[j]]:
                wanted += [n_p + n_b + k + m for m in range(n)]
            k += n
        step_idx = n_p + n_b + len(s_slots) + len(lr_slots)
        if self._adam:
            wanted.append(step_idx)
        slots = p_slots + b_slots + s_slots + lr_slots + step_slots
        group_of = dict(zip(self._trained, self._group_of))
        cxs, new_step = [], []

        def commit(p_idx, entry):
            fuse = self._fuse[group_of[p_idx]] if p_idx in group_of else None
            if fuse:
                self._fused_update(b, slots[p_idx], entry, cxs[0], fuse,
                                   [s_slots[m] for m in s_of[p_idx]], lr_slots[group_of[p_idx]],
                                   new_step)
                return
            if p_idx == step_idx:
                new_step.append(cxs[0].v(entry))
            self._commit(b, slots[p_idx], entry, cxs[0])
        outputs, assigned, cx = lower(gm, g, entries, lambda v, s: self._make_const(b, v, s),
                                      where, ({p: k + 1 for k, p in enumerate(wanted)}, commit),
                                      on_start=cxs.append, seed=self._seed_of(b),
                                      ignore_targets=self.buckets is not None)
        b.loss = cx.v(outputs[0])
        if tuple(b.loss.shape) not in ((), (1,)):
            raise Error(Code.EINVAL, f"the loss has shape {list(b.loss.shape)}, not a scalar")
        fixed = p_slots + b_slots + s_slots
        for idx, e in assigned.items():
            if idx >= len(fixed) or fixed[idx] is None:
                raise Error(Code.EUNSUPPORTED, f"the step writes into input or learning rate "
                            f"{idx - len(fixed)}")
            self._commit(b, fixed[idx], e, cx)
        b.counter_steps = {c.name: c.step for c in counters}

    def _fused_update(self, b, slot, grad, cx, fuse, s_slots, lr_slot, new_step):
        """Updates a parameter (its _Slot) and its optimizer state in place
        with one op, as soon as its gradient is made and its old value read."""
        g = self._shaped_for(b, slot, grad, cx)
        if g is None:
            return  # no gradient: PyTorch leaves the parameter as it is
        name, attrs = fuse
        ins = [slot.value, g] + [s.value for s in s_slots]
        if name == "adam_update_lr":
            if not new_step:  # counted at the top of the graph, so never
                raise Error(Code.EINTERNAL, "the step count is updated after a parameter")
            ins.append(new_step[0])
        b.graph.op(name, ins + [lr_slot.value], [], [1.0] + attrs)

    def __call__(self, *inputs):
        """One training step (one Run request); returns the loss (a float)
        computed before the update. With buckets the inputs may have any
        batch size and sequence length; the first call of a new bucket
        captures and registers its graph."""
        b, feed, _ = self._select(inputs)
        writes, changed = [], []
        for gi, grp in enumerate(self.optimizer.param_groups):
            if float(grp["lr"]) != self._lrs[gi]:
                # in the Run request itself: a schedule costs no round trip
                writes.append((self._lr_states[gi].tensor, np.array([grp["lr"]], np.float32)))
                changed.append(gi)
        (loss,) = self._run(b, feed, [b.loss], writes)
        # the optimizer stepped (in salusd): LR schedulers check for that
        self.optimizer._step_count = getattr(self.optimizer, "_step_count", 0) + 1
        self.optimizer._opt_called = True
        for gi in changed:
            self._lrs[gi] = float(self.optimizer.param_groups[gi]["lr"])
        return float(loss.reshape(()))

    def state_dict(self):
        """The module's state as trained in salusd, {name: tensor} as
        model.state_dict() names them (tied parameters under every name)."""
        out = {}
        for n, i in self._p_index.items():
            out[n] = torch.from_numpy(self._p_states[i].read())
        for n, i in self._b_index.items():
            if n in self._transient:
                continue
            st = self._b_states[i]
            if st is not None:
                out[n] = st.read_torch()
            else:
                inc, init = self._counters[n]
                out[n] = init + inc
        return out

    def load_state_dict(self, state):
        """Writes a model.state_dict() (or this one's) into salusd's tensors."""
        for n, t in state.items():
            if n in self._p_index:
                self._p_states[self._p_index[n]].tensor.write(_numpy(t, F32).reshape(-1))
            elif n in self._b_index:
                st = self._b_states[self._b_index[n]]
                if st is not None:
                    st.write_torch(t)
                else:
                    self._counters[n] = [0, t.detach().clone()]
            else:
                raise KeyError(f"the model has no parameter or buffer {n!r}")

    def optimizer_state_dict(self):
        """The optimizer's state in torch.optim's state_dict() form:
        optimizer.load_state_dict(step.optimizer_state_dict()) hands it
        back to PyTorch."""
        sd = self.optimizer.state_dict()
        order = {}
        k = 0
        for grp in self.optimizer.param_groups:
            for p in grp["params"]:
                order[id(p)] = k
                k += 1
        state, s = {}, 0
        step = float(self._step_state.read()) if self._step_state else None
        for j, i in enumerate(self._trained):
            gi = self._group_of[j]
            names = _state_names(self._kinds[gi], self.optimizer.param_groups[gi])
            entry = {}
            for name in names:
                entry[name] = torch.from_numpy(self._s_states[s].read())
                s += 1
            if step is not None:
                entry["step"] = torch.tensor(step)
            if entry:
                state[order[id(self._params[i][1])]] = entry
        sd["state"] = state
        return sd


class CompiledModule(_Compiled):
    """A model's forward pass in salus graphs (compile_module): one per
    shape bucket and mode, all reading the same persistent state."""

    def __init__(self, model, example_inputs, session, buckets=None, seed=0):
        super().__init__(session, model, buckets, seed, 0)
        params, self._p_index, buffers, self._b_index, self._transient = _named_tensors(model)
        self._params, self._buffers = params, buffers
        self._p_states = None
        self._select(tuple(example_inputs))
        session._dependents.add(self)

    def _capture_bucket(self, b, example):
        params, buffers, model = self._params, self._buffers, self.model
        p_index, b_index = self._p_index, self._b_index
        spec = {}

        def fn(tracker):
            def forward(*flat):
                ps, bs = flat[:len(params)], flat[len(params):len(params) + len(buffers)]
                state = {n: ps[i] for n, i in p_index.items()}
                state.update({n: bs[i] for n, i in b_index.items()})
                out = _functional_call(model, state, tuple(flat[len(params) + len(buffers):]))
                leaves, spec["tree"] = torch.utils._pytree.tree_flatten(out)
                return tuple(leaves)
            return forward

        flat = [p.detach().clone() for _, p in params] + [t.detach().clone() for _, t in buffers]
        labels = [_param_label(n, model) for n, _ in params] + [f"buffer {n}" for n, _ in buffers]
        flat += list(example)
        labels += [f"input {i}" for i in range(len(example))]
        with torch.no_grad():
            gm, tracker = _capture(fn, flat, model)
        b.gm = self.gm = gm
        b.tree = spec["tree"]
        if self._p_states is None:
            self._p_states = [self._state(n, p.detach().cpu().numpy().astype(np.float32))
                              for n, p in params]
        p_slots = [_Slot(s, b.graph) for s in self._p_states]
        b_entries, counters = self._buffer_entries(b, gm, len(params), buffers)
        b_slots = [None if st is None else _Slot(st, b.graph) for st in self._b_states]
        b_entries = [e if s is None else s.entry for e, s in zip(b_entries, b_slots)]
        entries = [s.entry for s in p_slots] + b_entries + self._inputs(b, example)
        outputs, assigned, cx = lower(gm, b.graph, entries, lambda v, s: self._make_const(b, v, s),
                                      tracker.labeller(gm, labels), seed=self._seed_of(b))
        b.outs = [cx.v(o) for o in outputs]
        slots = p_slots + b_slots
        for idx, e in assigned.items():
            if idx >= len(slots) or slots[idx] is None:
                raise Error(Code.EUNSUPPORTED, "the forward pass writes into an input")
            self._commit(b, slots[idx], e, cx)
        b.counter_steps = {c.name: c.step for c in counters}

    def __call__(self, *inputs):
        """One inference (one Run request): the model's outputs as tensors
        (cut back to the call's batch and length when padded)."""
        b, feed, call = self._select(inputs)
        leaves = [torch.from_numpy(o) for o in self._run(b, feed, b.outs)]
        if feed is not inputs and call is not None:
            leaves = [self.buckets.cut(o, *call) for o in leaves]
        return torch.utils._pytree.tree_unflatten(leaves, b.tree)

    def state_dict(self):
        """Parameters and buffers as held in salusd (batch norm's running
        statistics change when the model ran in training mode)."""
        out = {n: torch.from_numpy(self._p_states[i].read()) for n, i in self._p_index.items()}
        for n, i in self._b_index.items():
            if n in self._transient:
                continue
            st = self._b_states[i]
            out[n] = st.read_torch() if st is not None else \
                self._counters[n][1] + self._counters[n][0]
        return out


class _Decode(torch.nn.Module):
    """model.decode as a module's forward, so that its KV cache (buffers of
    model) and weights are captured like any module's state."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, position):
        return self.model.decode(tokens, position)


class Generator:
    """Token-by-token generation with a KV cache held in salusd: each
    decode step is one Run request of one registered graph, and the cache
    is a set of persistent tensors of `session`, counted against its
    memory like any other. The model provides init_cache(batch),
    drop_cache(), decode(tokens [B, 1], position [1]) -> logits [B, vocab]
    and `seq`, the cache's length (salus.gpt.GPT is one such model).

    The model's weights are copied into the session when the Generator is
    made (load a CompiledStep's state_dict() into the model first to
    generate from what it trained). close(), or leaving a `with` block,
    frees the cache and the graph; so does the session closing or the
    client going away."""

    def __init__(self, model, session, batch=1):
        for need in ("init_cache", "drop_cache", "decode", "seq"):
            if not hasattr(model, need):
                raise TypeError(f"the model has no {need}: Generator needs init_cache(batch), "
                                "drop_cache(), decode(tokens, position) and seq "
                                "(see salus.gpt.GPT)")
        self.model, self.batch, self.seq = model, int(batch), int(model.seq)
        was_training = model.training
        model.eval()
        before = {id(b) for b in model.buffers()}
        model.init_cache(self.batch)
        # the cache: the buffers init_cache made (held as f32 tensors)
        self.cache_bytes = sum(b.numel() * 4 for b in model.buffers() if id(b) not in before)
        try:
            example = (torch.zeros(self.batch, 1, dtype=torch.long),
                       torch.zeros(1, dtype=torch.long))
            self._step = CompiledModule(_Decode(model), example, session)
        finally:
            model.drop_cache()
            model.train(was_training)

    def logits(self, tokens, position):
        """One decode step: the logits [batch, vocab] of the next token after
        `tokens` ([batch] or [batch, 1]) at `position`."""
        if not 0 <= position < self.seq:
            raise ValueError(f"position {position} is outside the cache (0..{self.seq - 1})")
        tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(self.batch, 1)
        (out,) = torch.utils._pytree.tree_flatten(
            self._step(tokens, torch.tensor([position], dtype=torch.long)))[0]
        return out

    def generate(self, prompt, max_new_tokens, top_k=None, temperature=1.0, seed=None,
                 on_token=None):
        """Continues `prompt` ([batch, P] token ids, or a list of ids when
        batch is 1) by max_new_tokens tokens; returns [batch, P + new].
        top_k None: greedy (argmax). Else samples from the top_k logits
        divided by temperature, with a torch.Generator seeded by `seed`:
        the same seed gives the same tokens. on_token(step, tokens [batch])
        is called after each new token (progress, streaming). The prompt
        is fed one token per step; P + max_new_tokens must fit the cache."""
        ids = torch.as_tensor(prompt, dtype=torch.long).reshape(self.batch, -1)
        n = ids.shape[1]
        if n < 1:
            raise ValueError("the prompt is empty")
        if n + max_new_tokens > self.seq:
            raise ValueError(f"{n} prompt tokens and {max_new_tokens} new ones do not fit the "
                             f"cache of {self.seq} positions")
        rng = None
        if top_k is not None:
            rng = torch.Generator()
            rng.manual_seed(0 if seed is None else int(seed))
        out = [ids]
        for pos in range(n - 1):
            self.logits(ids[:, pos], pos)
        last = ids[:, -1]
        for i in range(max_new_tokens):
            logits = self.logits(last, n - 1 + i)
            last = sample(logits, top_k, temperature, rng)
            out.append(last.unsqueeze(1))
            if on_token is not None:
                on_token(i, last)
        return torch.cat(out, dim=1)

    def close(self):
        """Frees the cache and the graph in salusd."""
        if self._step is not None:
            self._step.session._dependents.discard(self._step)
            self._step.close()
            self._step = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sample(logits, top_k=None, temperature=1.0, rng=None):
    """The next token of each row of logits [batch, vocab]: the argmax when
    top_k is None, else a draw from the softmax of the top_k logits divided
    by temperature (rng: a torch.Generator)."""
    if top_k is None:
        return logits.argmax(dim=-1)
    vals, idx = torch.topk(logits / temperature, min(int(top_k), logits.shape[-1]), dim=-1)
    pick = torch.multinomial(torch.softmax(vals, dim=-1), 1, generator=rng)
    return idx.gather(-1, pick).squeeze(-1)


def compile_step(model, loss_fn, optimizer, example_inputs, session, targets=1, buckets=None,
                 seed=0):
    """Captures one training step of `model` and registers it with
    `session`; returns a CompiledStep: step(*inputs) -> loss. buckets: a
    Buckets for inputs of varying batch size and sequence length. seed:
    the dropout generator's key, in [0, 2^32)."""
    return CompiledStep(model, loss_fn, optimizer, example_inputs, session, targets, buckets,
                        seed)


def compile_module(model, example_inputs, session, buckets=None, seed=0):
    """Captures model's forward pass and registers it with `session`;
    returns a CompiledModule: module(*inputs) -> outputs."""
    return CompiledModule(model, example_inputs, session, buckets, seed)


def aten_ops(model_or_fn, example_inputs):
    """{aten op: count} of a model's (or a function's) captured forward
    pass, and whether salus lowers each: {name: (count, lowered)}."""
    from ._aten import RULES
    fn = model_or_fn
    gm = _compat.capture(lambda *a: fn(*a), example_inputs)
    out = {}
    for n in gm.graph.nodes:
        key = op_key(n.target) if n.op == "call_function" else None
        if key:
            base = key[0][:-1] if key[0].endswith("_") else key[0]
            c, _ = out.get(str(n.target), (0, None))
            out[str(n.target)] = (c + 1, f"{base}.{key[1]}" in RULES)
    return out


def _dynamo_backend(gm, example_inputs):
    """torch.compile(model, backend="salus"): inference in a session of
    this process on salus.default_url()."""
    if "session" not in _dynamo_state:
        from .client import connect
        _dynamo_state["client"] = connect()
        _dynamo_state["session"] = _dynamo_state["client"].session(name="torch.compile")
    return compile_module(gm, example_inputs, _dynamo_state["session"])


_dynamo_state = {}
_compat.register_backend("salus", _dynamo_backend)

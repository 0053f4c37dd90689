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

compile_step(model, loss_fn, optimizer, example_inputs, session)
    The step is loss_fn(model(*inputs[:-targets]), *inputs[-targets:]).
    Parameters, buffers (batch norm's running statistics) and the
    optimizer's state live in salusd as persistent tensors of `session`.
    Optimizers: torch.optim.SGD (momentum, nesterov, weight_decay,
    maximize; dampening 0), Adam and AdamW (weight_decay, amsgrad,
    maximize), each param group with its own settings, computed as
    PyTorch's single-tensor implementations compute them. The learning
    rate of each param group lives in a persistent tensor: a change of
    optimizer.param_groups[i]["lr"] (an LR scheduler's) is written to it
    by the next step's Run request itself.

compile_module(model, example_inputs, session)
    Inference: module(*inputs) returns what model(*inputs) returns, as
    torch tensors, run in the model's current mode (eval() first for
    batch norm's running statistics).

Both refuse, before anything is registered, a model with any aten op salus
cannot compute: the salus.Error (Code.EUNSUPPORTED) lists every such op
with its argument shapes and the module path it came from. Shapes are
those of example_inputs; a call with other shapes is refused.

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

__all__ = ["compile_step", "compile_module", "CompiledStep", "CompiledModule"]

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


class _Slot:
    """One persistent tensor of the compiled graph: its session Tensor, the
    graph's param Value of it, and the entry ops read (rank 0 tensors are
    stored as [1] and read through a reshape to [])."""

    def __init__(self, session, graph, name, data, dtype=F32, torch_dtype=torch.float32):
        data = np.asarray(data)
        self.name, self.torch_shape = name, tuple(data.shape)
        self.dtype, self.torch_dtype = dtype, torch_dtype
        self.tensor = session.tensor(data.reshape(data.shape or (1,)), dtype=dtype)
        self.value = graph.param(self.tensor)
        self.entry = self.value if data.shape else graph.op("reshape", [self.value])

    def read(self):
        return self.tensor.read().reshape(self.torch_shape)

    def read_torch(self):
        return torch.from_numpy(self.read()).to(self.torch_dtype)

    def write_torch(self, t):
        self.tensor.write(_numpy(t, self.dtype).reshape(-1))


class _Compiled:
    """What compile_step and compile_module share: the session's tensors,
    the graph and its feeds."""

    def __init__(self, session):
        self.session = session
        self.graph = Graph()
        self._slots = []
        self._consts = []
        self._zero_flag = None

    def _slot(self, name, data, dtype=F32, torch_dtype=torch.float32):
        s = _Slot(self.session, self.graph, name, data, dtype, torch_dtype)
        self._slots.append(s)
        return s

    def _buffer_entries(self, gm, first, buffers):
        """Entries of the buffers, placeholders first.. of gm: float buffers
        and integer ones the step only reads (positions, masks) as
        persistent tensors; an integer buffer the step changes in place
        (batch norm's num_batches_tracked) as a HostCounter."""
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"][first:first + len(buffers)]
        self._b_slots, self._counters, entries = [], {}, []
        for (n, b), ph in zip(buffers, phs):
            mutated = any((op_key(u.target) or ("",))[0].endswith("_") and u.args[0] is ph
                          for u in ph.users)
            if b.dtype.is_floating_point or not mutated:
                dt = F32 if b.dtype.is_floating_point else _salus_dtype(b, f"buffer {n}")
                s = self._slot(n, _numpy(b.to(torch.float32) if dt == F32 else b, dt), dt,
                               b.dtype)
                self._b_slots.append(s)
                entries.append(s.entry)
            else:
                c = HostCounter(n, tuple(b.shape))
                self._counters[n] = (c, b.detach().clone())
                self._b_slots.append(None)
                entries.append(c)
        return entries

    def _make_const(self, value, shape):
        if shape is None:  # a tensor the captured code made
            t = value.detach().cpu()
            s = self._slot("constant", _numpy(t, _salus_dtype(t, "a constant")),
                           _salus_dtype(t, "a constant"))
        else:
            s = self._slot("constant", np.full(shape, value, dtype=np.float32))
        self._consts.append(s)
        return s.entry

    def _inputs(self, example):
        self._in_shapes, self._in_dtypes, entries = [], [], []
        for i, t in enumerate(example):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input {i} is a {type(t).__name__}, not a tensor")
            dt = _salus_dtype(t, f"input {i}")
            shape = tuple(t.shape)
            v = self.graph.input(shape or (1,), dt)
            self._in_shapes.append(shape)
            self._in_dtypes.append(dt)
            entries.append(v if shape else self.graph.op("reshape", [v]))
        return entries

    def _feeds(self, inputs):
        if len(inputs) != len(self._in_shapes):
            raise ValueError(f"{len(self._in_shapes)} inputs expected, {len(inputs)} given")
        feeds = []
        for i, (t, shape, dt) in enumerate(zip(inputs, self._in_shapes, self._in_dtypes)):
            a = _numpy(t, dt)
            if tuple(a.shape) != shape:
                raise ValueError(f"input {i} has shape {tuple(a.shape)}; the graph was captured "
                                 f"for {shape}")
            feeds.append(a.reshape(shape or (1,)))
        return feeds

    def _commit(self, slot, entry, cx):
        """Writes `entry` into slot's tensor at the end of the iteration:
        amp_commit with a flag that is always 0 is an exact copy."""
        src = cx.v(entry)
        if src == slot.entry or src == slot.value:
            return
        if self._zero_flag is None:
            self._zero_flag = self._slot("commit flag", np.zeros(1, np.float32)).value
        if tuple(src.shape) != tuple(slot.value.shape):
            src = self.graph.op("reshape", [src], slot.value.shape)
        self.graph.op("amp_commit", [slot.value, src, self._zero_flag])

    def _fail_cleanup(self):
        for s in self._slots:
            try:
                s.tensor.free()
            except Error:
                pass
        self._slots = []
        self.graph.close()

    def close(self):
        """Frees the graph and the persistent tensors in the session."""
        if self.graph._ptr is None:
            return
        self.graph.close()
        for s in self._slots:
            try:
                s.tensor.free()
            except Error:
                pass
        self._slots = []


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
    """One training step of a model in a salus graph (compile_step)."""

    def __init__(self, model, loss_fn, optimizer, example_inputs, session, targets=1):
        super().__init__(session)
        example = tuple(example_inputs)
        if not 0 < targets < len(example):
            raise ValueError("example_inputs holds the model's inputs, then `targets` targets")
        self.model, self.optimizer, self.targets = model, optimizer, targets
        params, self._p_index, buffers, self._b_index, self._transient = _named_tensors(model)
        self._params, self._buffers = params, buffers
        groups = {}
        for gi, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                groups[id(p)] = gi
        self._kinds = [_hyper(optimizer, g) for g in optimizer.param_groups]
        trained = [i for i, (_, p) in enumerate(params) if p.requires_grad and id(p) in groups]
        self._trained = trained
        self._adam = any(k != "sgd" for k in self._kinds)
        n_state = [len(_state_names(self._kinds[groups[id(params[i][1])]],
                                    optimizer.param_groups[groups[id(params[i][1])]]))
                   for i in trained]
        self._group_of = [groups[id(params[i][1])] for i in trained]

        def fn(tracker):
            def step_fn(*flat):
                k = 0
                ps = list(flat[k:k + len(params)]); k += len(params)
                bs = list(flat[k:k + len(buffers)]); k += len(buffers)
                states = []
                for n in n_state:
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

        # the capture runs one real step on copies: the model is not changed
        flat, labels = [], []
        for i, (n, p) in enumerate(params):
            flat.append(p.detach().clone().requires_grad_(i in trained))
            labels.append(_param_label(n, model))
        for n, b in buffers:
            flat.append(b.detach().clone())
            labels.append(f"buffer {n}")
        init_states = self._initial_state()
        for j, sts in enumerate(init_states):
            for k, s in enumerate(sts):
                flat.append(s.clone())
                labels.append(f"optimizer state {k} of {params[trained[j]][0]}")
        for gi, g in enumerate(optimizer.param_groups):
            flat.append(torch.tensor(float(g["lr"])))
            labels.append(f"learning rate of param group {gi}")
        if self._adam:
            flat.append(torch.tensor(float(self._initial_step())))
            labels.append("the step count")
        for i, t in enumerate(example):
            flat.append(t)
            labels.append(f"input {i}")
        gm, tracker = _capture(fn, flat, model)
        self.gm = gm
        try:
            self._build(gm, tracker.labeller(gm, labels), params, buffers, init_states, example)
        except BaseException:
            self._fail_cleanup()
            raise
        session._dependents.add(self)

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

    def _build(self, gm, where, params, buffers, init_states, example):
        g = self.graph
        entries = []
        self._p_slots = [self._slot(n, p.detach().cpu().numpy().astype(np.float32))
                         for n, p in params]
        entries += [s.entry for s in self._p_slots]
        self._b_slots, self._counters = [], {}
        entries += self._buffer_entries(gm, len(params), buffers)
        self._s_slots = []
        for j, sts in enumerate(init_states):
            for k, s in enumerate(sts):
                slot = self._slot(f"state {k} of {params[self._trained[j]][0]}", s.numpy())
                self._s_slots.append(slot)
                entries.append(slot.entry)
        self._lr_slots, self._lrs = [], []
        for gi, grp in enumerate(self.optimizer.param_groups):
            self._lr_slots.append(self._slot(f"lr {gi}", np.float32(grp["lr"])))
            self._lrs.append(float(grp["lr"]))
            entries.append(self._lr_slots[-1].entry)
        self._step_slot = None
        if self._adam:
            self._step_slot = self._slot("step", np.float32(self._initial_step()))
            entries.append(self._step_slot.entry)
        entries += self._inputs(example)
        # output k+1 is the new value of placeholder wanted[k]'s tensor
        n_p, n_b = len(params), len(buffers)
        wanted = list(self._trained) + [n_p + n_b + k for k in range(len(self._s_slots))]
        if self._adam:
            wanted.append(n_p + n_b + len(self._s_slots) + len(self._lr_slots))
        slots = self._p_slots + self._b_slots + self._s_slots + self._lr_slots + \
            ([self._step_slot] if self._adam else [])
        cxs = []

        def commit(p_idx, entry):
            self._commit(slots[p_idx], entry, cxs[0])
        outputs, assigned, cx = lower(gm, g, entries, self._make_const, where,
                                      ({p: k + 1 for k, p in enumerate(wanted)}, commit),
                                      on_start=cxs.append)
        self._loss = cx.v(outputs[0])
        if tuple(self._loss.shape) not in ((), (1,)):
            raise Error(Code.EINVAL, f"the loss has shape {list(self._loss.shape)}, not a scalar")
        n_fixed = len(params) + len(buffers) + len(self._s_slots)
        for idx, e in assigned.items():
            slots = self._p_slots + self._b_slots + self._s_slots
            if idx >= n_fixed or slots[idx] is None:
                raise Error(Code.EUNSUPPORTED, f"the step writes into input or learning rate "
                            f"{idx - n_fixed}")
            self._commit(slots[idx], e, cx)
        self.session.register(g)

    def __call__(self, *inputs):
        """One training step (one Run request); returns the loss (a float)
        computed before the update."""
        feeds = self._feeds(inputs)
        writes, changed = [], []
        for gi, grp in enumerate(self.optimizer.param_groups):
            if float(grp["lr"]) != self._lrs[gi]:
                # in the Run request itself: a schedule costs no round trip
                writes.append((self._lr_slots[gi].tensor, np.array([grp["lr"]], np.float32)))
                changed.append(gi)
        for t, a in writes[_MAX_RUN_WRITES:]:  # more groups than a request carries
            t.write(a)
        (loss,) = self.session.run(self.graph, feeds, fetch=[self._loss],
                                   writes=writes[:_MAX_RUN_WRITES])
        for gi in changed:
            self._lrs[gi] = float(self.optimizer.param_groups[gi]["lr"])
        for c, _ in self._counters.values():
            c.value += c.step
        return float(loss.reshape(()))

    def state_dict(self):
        """The module's state as trained in salusd, {name: tensor} as
        model.state_dict() names them (tied parameters under every name)."""
        out = {}
        for n, i in self._p_index.items():
            out[n] = torch.from_numpy(self._p_slots[i].read())
        for n, i in self._b_index.items():
            if n in self._transient:
                continue
            slot = self._b_slots[i]
            if slot is not None:
                out[n] = slot.read_torch()
            else:
                c, init = self._counters[n]
                out[n] = init + c.value
        return out

    def load_state_dict(self, state):
        """Writes a model.state_dict() (or this one's) into salusd's tensors."""
        for n, t in state.items():
            if n in self._p_index:
                self._p_slots[self._p_index[n]].tensor.write(_numpy(t, F32).reshape(-1))
            elif n in self._b_index:
                slot = self._b_slots[self._b_index[n]]
                if slot is not None:
                    slot.write_torch(t)
                else:
                    c, _ = self._counters[n]
                    self._counters[n] = (c, t.detach().clone())
                    c.value = 0
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
        step = float(self._step_slot.read()) if self._step_slot else None
        for j, i in enumerate(self._trained):
            gi = self._group_of[j]
            names = _state_names(self._kinds[gi], self.optimizer.param_groups[gi])
            entry = {}
            for name in names:
                entry[name] = torch.from_numpy(self._s_slots[s].read())
                s += 1
            if step is not None:
                entry["step"] = torch.tensor(step)
            if entry:
                state[order[id(self._params[i][1])]] = entry
        sd["state"] = state
        return sd


class CompiledModule(_Compiled):
    """A model's forward pass in a salus graph (compile_module)."""

    def __init__(self, model, example_inputs, session):
        super().__init__(session)
        example = tuple(example_inputs)
        params, p_index, buffers, b_index, self._transient = _named_tensors(model)
        self._p_index, self._b_index = p_index, b_index
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

        flat = [p.detach().clone() for _, p in params] + [b.detach().clone() for _, b in buffers]
        labels = [_param_label(n, model) for n, _ in params] + [f"buffer {n}" for n, _ in buffers]
        flat += list(example)
        labels += [f"input {i}" for i in range(len(example))]
        with torch.no_grad():
            gm, tracker = _capture(fn, flat, model)
        self.gm, self._tree = gm, spec["tree"]
        try:
            entries, self._b_slots, self._counters = [], [], {}
            self._p_slots = [self._slot(n, p.detach().cpu().numpy().astype(np.float32))
                             for n, p in params]
            entries += [s.entry for s in self._p_slots]
            entries += self._buffer_entries(gm, len(params), buffers)
            entries += self._inputs(example)
            outputs, assigned, cx = lower(gm, self.graph, entries, self._make_const,
                                          tracker.labeller(gm, labels))
            self._outs = [cx.v(o) for o in outputs]
            slots = self._p_slots + self._b_slots
            for idx, e in assigned.items():
                if idx >= len(slots) or slots[idx] is None:
                    raise Error(Code.EUNSUPPORTED, "the forward pass writes into an input")
                self._commit(slots[idx], e, cx)
            session.register(self.graph)
        except BaseException:
            self._fail_cleanup()
            raise
        session._dependents.add(self)

    def __call__(self, *inputs):
        """One inference (one Run request): the model's outputs as tensors."""
        outs = self.session.run(self.graph, self._feeds(inputs), fetch=self._outs)
        leaves = [torch.from_numpy(o) for o in outs]
        return torch.utils._pytree.tree_unflatten(leaves, self._tree)

    def state_dict(self):
        """Parameters and buffers as held in salusd (batch norm's running
        statistics change when the model ran in training mode)."""
        out = {n: torch.from_numpy(self._p_slots[i].read()) for n, i in self._p_index.items()}
        for n, i in self._b_index.items():
            if n in self._transient:
                continue
            slot = self._b_slots[i]
            out[n] = slot.read_torch() if slot is not None else self._counters[n][1]
        return out


def compile_step(model, loss_fn, optimizer, example_inputs, session, targets=1):
    """Captures one training step of `model` and registers it with
    `session`; returns a CompiledStep: step(*inputs) -> loss."""
    return CompiledStep(model, loss_fn, optimizer, example_inputs, session, targets)


def compile_module(model, example_inputs, session):
    """Captures model's forward pass and registers it with `session`;
    returns a CompiledModule: module(*inputs) -> outputs."""
    return CompiledModule(model, example_inputs, session)


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

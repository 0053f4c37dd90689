"""Lowering of aten graphs (torch.fx graphs of aten ops, as make_fx
captures them) to salus graph ops: the table of rules, one per aten op
overload (the walk that applies them is _lower.lower).

A rule is `rule(cx, *args, **kwargs)` for one aten overload, registered
with @lowers("name.overload", ...) (the names as `str(op)` spells them
without the "aten." namespace). Its arguments are the node's, with every
fx Node replaced by what an earlier rule produced for it: a graph Value,
a deferred value (Transposed, LogSoftmax, ...; rules that can use one take
it as it is, others call cx.v() to make it a Value), a tuple of them for an
op with several outputs, or a Python constant. It returns the same kinds
of thing. A rule raises Unsupported, with the reason, for arguments salus
cannot compute exactly; the walk collects every such node before anything
is registered, so a user sees the whole list at once.

In-place variants ("relu_.default", "add_.Tensor") need no rule of their
own: the walk applies the functional rule and rebinds the mutated tensor
(and its identity aliases) to the result, so a later read sees the new
value, as in PyTorch. A mutated placeholder is reported to the caller,
which writes the new value back into its persistent tensor at the end of
the iteration.

Adding an op is adding a row: a function decorated with @lowers that
builds the op from salus ops (docs/ops.md).
"""

import math
import struct

from ._core import I32, _dtype_code

_I32_CODE = _dtype_code(I32)



class Unsupported(Exception):
    """A node salus cannot compute; the message says why."""


RULES = {}


def lowers(*names):
    """Registers the decorated function as the rule of aten overloads
    `names` ("convolution.default", "add.Tensor")."""
    def deco(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return deco


# ---- deferred values: results that some consumers take as they are ----

class Transposed:
    """aten.t of a 2-D value: a matmul reads it with its trans flag."""

    def __init__(self, base):
        self.base = base
        self.shape = (base.shape[1], base.shape[0])
        self.value = None  # the transpose, once a reader needed it made


class LogSoftmax:
    """aten._log_softmax of x along dim: nll_loss over it becomes one
    softmax_xent (whose probabilities its backward reuses)."""

    def __init__(self, x, dim):
        self.x, self.dim, self.shape = x, dim, x.shape
        self.xent = None  # (loss, probs, labels) once nll_loss took it


class NllGrad:
    """nll_loss_backward of a LogSoftmax: the gradient of log_softmax's
    backward becomes softmax_xent_grad."""

    def __init__(self, grad, ls, scale):
        self.grad, self.ls, self.scale, self.shape = grad, ls, scale, ls.shape


class Opaque:
    """A value only particular consumers read (maxpool's indices,
    nll_loss's total weight, dropout's mask); `why` says what it is."""

    def __init__(self, why, shape=None, **data):
        self.why, self.shape, self.data = why, shape, data


class HostCounter:
    """An integer buffer that is only ever incremented by constants
    (batchnorm's num_batches_tracked): counted by the client, which adds
    `step` per iteration."""

    def __init__(self, name, shape):
        self.name, self.shape, self.step = name, shape, 0
        self.value = 0  # the increments of the iterations run so far


class _Poison:
    """The result of a node that depends on an unsupported one."""


POISON = _Poison()


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _pair(v):
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[0])) if len(v) == 1 else (int(v[0]), int(v[1]))
    return int(v), int(v)


def _axes(dims, rank):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if not isinstance(dims, (list, tuple)):
        dims = [dims]
    return sorted(int(d) % rank if rank else 0 for d in dims)


class Lowering:
    """What a rule builds with: the salus Graph, constants and the node
    being lowered. Made by lower(); rules use op(), v(), const(), fill()
    and out_shape()."""

    def __init__(self, graph, make_const):
        self.graph = graph
        self._make_const = make_const
        self._consts = {}
        self.node = None
        # seed() -> the graph's dropout seed (an i32 [2] Value), or None when
        # the caller has none; each random op takes the next stream offset
        self.seed = None
        self.n_random = 0
        # targets may hold cross-entropy's ignore_index (padded positions)
        self.ignore_targets = False

    def op(self, type, inputs, iattrs=(), fattrs=(), outputs=1):
        return self.graph.op(type, [self.v(i) for i in inputs], iattrs, fattrs, outputs)

    def v(self, e):
        """e as a graph Value (deferred values are computed here)."""
        if isinstance(e, Transposed):
            if e.value is None:
                e.value = self.graph.op("transpose", [self.v(e.base)], [1, 0])
            return e.value
        if isinstance(e, LogSoftmax):
            return _softmax_op(self, "log_softmax", e.x, e.dim)
        if isinstance(e, NllGrad):
            raise Unsupported("nll_loss_backward is lowered only as the gradient of log_softmax "
                              "followed by nll_loss (cross-entropy)")
        if isinstance(e, Opaque):
            raise Unsupported(f"{e.why} is read only by its own backward op")
        if isinstance(e, HostCounter):
            raise Unsupported(f"integer buffer {e.name!r} may only be incremented by a constant")
        if e is None:
            raise Unsupported("an absent tensor (None) is read")
        if _is_number(e):
            raise Unsupported("a tensor was expected, got a number")
        return e

    def const(self, value, shape=()):
        """A constant tensor of `shape` filled with float `value`."""
        key = (struct.pack("<f", float(value)), tuple(shape))
        if key not in self._consts:
            self._consts[key] = self._make_const(float(value), tuple(shape))
        return self._consts[key]

    def int_const(self, value, shape):
        """A constant i32 tensor of `shape` filled with int `value`."""
        import torch
        key = ("i32", int(value), tuple(shape))
        if key not in self._consts:
            self._consts[key] = self._make_const(torch.full(tuple(shape), int(value),
                                                            dtype=torch.int32), None)
        return self._consts[key]

    def fill(self, like, value):
        """A tensor of like's shape filled with value (no persistent memory)."""
        return self.graph.op("fill", [self.v(like)], (), [float(value)])

    def out_shape(self):
        """The shape PyTorch computed for the current node's output."""
        shape = meta_shape(self.node)
        if shape is None:
            raise Unsupported("the capture recorded no output shape")
        return shape

    def reshape(self, x, shape):
        x = self.v(x)
        shape = tuple(int(d) for d in shape)
        if tuple(x.shape) == shape:
            return x
        if any(d == 0 for d in shape) or len(shape) > 6:
            raise Unsupported(f"salus has no tensors of shape {list(shape)}")
        return self.graph.op("reshape", [x], shape)


def meta_shape(node):
    """The tensor shape make_fx recorded for node (None for other outputs)."""
    for key in ("val", "tensor_meta"):
        m = node.meta.get(key)
        if m is not None and hasattr(m, "shape"):
            return tuple(int(d) for d in m.shape)
    return None


def _is_float(v):
    return v.dtype_code != _I32_CODE


def meta_dtype(node):
    for key in ("val", "tensor_meta"):
        m = node.meta.get(key)
        if m is not None and hasattr(m, "dtype"):
            return m.dtype
    return None


# ---- element-wise ----

_EW_BINARY = {"add": 0, "sub": 1, "mul": 2, "div": 3, "pow": 4, "max": 5, "min": 6}


def _scalar_const(cx, value, rank):
    return cx.const(value, (1,) * rank)


def binary(cx, kind, a, b):
    """a (kind) b with numpy broadcasting; either may be a number."""
    if _is_number(a) and _is_number(b):
        raise Unsupported("both operands are numbers")
    if _is_number(b):
        b = _scalar_const(cx, b, len(cx.v(a).shape))
    if _is_number(a):
        a = _scalar_const(cx, a, len(cx.v(b).shape))
    a, b = cx.v(a), cx.v(b)
    if a.shape == b.shape and kind in ("add", "mul"):
        return cx.op(kind, [a, b])
    return cx.op("ew_binary", [a, b], [_EW_BINARY[kind]])


def _scaled(cx, x, alpha):
    if alpha == 1:
        return x
    if _is_number(x):
        return x * alpha
    return cx.op("scale", [x], (), [alpha])


@lowers("add.Tensor", "add.Scalar")
def _add(cx, a, b, alpha=1):
    if not _is_number(b) and alpha != 1 and cx.v(a).shape == cx.v(b).shape:
        return cx.op("axpy", [b, a], (), [alpha])
    return binary(cx, "add", a, _scaled(cx, b, alpha))


@lowers("sub.Tensor", "sub.Scalar")
def _sub(cx, a, b, alpha=1):
    return binary(cx, "sub", a, _scaled(cx, b, alpha))


@lowers("rsub.Scalar", "rsub.Tensor")
def _rsub(cx, a, b, alpha=1):
    return binary(cx, "sub", b, _scaled(cx, a, alpha))


@lowers("mul.Tensor", "mul.Scalar")
def _mul(cx, a, b):
    if _is_number(a):
        a, b = b, a
    if _is_number(b):
        if not math.isfinite(b):
            return binary(cx, "mul", a, b)
        return cx.op("scale", [a], (), [b])
    va, vb = cx.v(a), cx.v(b)
    if va.shape != vb.shape:
        if math.prod(vb.shape) == 1 and len(vb.shape) <= len(va.shape) and len(vb.shape) <= 1:
            return cx.op("mul_scalar", [va, vb])
        if math.prod(va.shape) == 1 and len(va.shape) <= len(vb.shape) and len(va.shape) <= 1:
            return cx.op("mul_scalar", [vb, va])
    return binary(cx, "mul", va, vb)


@lowers("div.Tensor", "div.Scalar")
def _div(cx, a, b):
    return binary(cx, "div", a, b)


@lowers("addcmul.default")
def _addcmul(cx, x, t1, t2, value=1):
    # x + value * t1 * t2, multiplied in PyTorch's order
    return binary(cx, "add", x, binary(cx, "mul", _scaled(cx, t1, value), t2))


@lowers("addcdiv.default")
def _addcdiv(cx, x, t1, t2, value=1):
    return binary(cx, "add", x, binary(cx, "div", _scaled(cx, t1, value), t2))


@lowers("maximum.default")
def _maximum(cx, a, b):
    return binary(cx, "max", a, b)


@lowers("minimum.default")
def _minimum(cx, a, b):
    return binary(cx, "min", a, b)


@lowers("pow.Tensor_Scalar")
def _pow(cx, x, e):
    if e == 2:
        return cx.op("mul", [x, x])
    if e == 1:
        return cx.v(x)
    if e == 0.5:
        return unary(cx, "sqrt", x)
    if e == -1:
        return unary(cx, "reciprocal", x)
    return binary(cx, "pow", x, e)


@lowers("pow.Scalar")
def _pow_scalar(cx, base, e):
    return binary(cx, "pow", base, e)


@lowers("pow.Tensor_Tensor")
def _pow_tensor(cx, x, e):
    return binary(cx, "pow", x, e)


# ew_unary kinds (docs/ops.md) of the aten ops that are exactly one of them
_EW_UNARY = {"sqrt": 0, "erf": 1, "exp": 2, "log": 3, "neg": 4, "abs": 5, "reciprocal": 6,
             "floor": 9, "ceil": 10, "sign": 18, "sin": 16, "cos": 17, "round": 28,
             "hardswish": 30, "silu": 35}


def unary(cx, name, x, alpha=0.0, beta=0.0):
    return cx.op("ew_unary", [x], [_EW_UNARY[name]], [alpha, beta])


def _unary_rule(name):
    return lambda cx, x: unary(cx, name, x)


for _name in _EW_UNARY:
    lowers(f"{_name}.default")(_unary_rule(_name))


@lowers("rsqrt.default")
def _rsqrt(cx, x):
    return unary(cx, "reciprocal", unary(cx, "sqrt", x))


@lowers("relu.default")
def _relu(cx, x):
    return cx.op("relu", [x])


@lowers("sigmoid.default")
def _sigmoid(cx, x):
    return cx.op("sigmoid", [x])


@lowers("tanh.default")
def _tanh(cx, x):
    return cx.op("tanh", [x])


@lowers("threshold_backward.default")
def _threshold_backward(cx, grad, x, threshold):
    if threshold != 0:
        raise Unsupported(f"threshold {threshold} (only relu's 0 is lowered)")
    # relu's output is positive exactly where its input is
    return cx.op("relu_grad", [grad, x])


@lowers("sigmoid_backward.default")
def _sigmoid_backward(cx, grad, y):
    return cx.op("sigmoid_grad", [grad, y])


@lowers("tanh_backward.default")
def _tanh_backward(cx, grad, y):
    return cx.op("tanh_grad", [grad, y])


def _clip(cx, x, lo, hi):
    lo = -math.inf if lo is None else float(lo)
    hi = math.inf if hi is None else float(hi)
    return cx.op("ew_unary", [x], [7], [lo, hi])


@lowers("clamp.default")
def _clamp(cx, x, min=None, max=None):
    return _clip(cx, x, min, max)


@lowers("hardtanh.default")
def _hardtanh(cx, x, min_val=-1.0, max_val=1.0):
    return _clip(cx, x, min_val, max_val)


@lowers("leaky_relu.default")
def _leaky_relu(cx, x, negative_slope=0.01):
    return cx.op("ew_unary", [x], [8], [negative_slope, 0.0])


@lowers("hardsigmoid.default")
def _hardsigmoid(cx, x):
    return cx.op("ew_unary", [x], [11], [1.0 / 6.0, 0.5])


_GELU = {"none": 33, "tanh": 34}


def _gelu_kind(approximate):
    if approximate not in _GELU:
        raise Unsupported(f"gelu with approximate={approximate!r}")
    return _GELU[approximate]


@lowers("gelu.default")
def _gelu(cx, x, approximate="none"):
    return cx.op("ew_unary", [x], [_gelu_kind(approximate)])


# the gradients of ew_unary kinds: dx = dy * f'(x), from the forward's input

@lowers("gelu_backward.default")
def _gelu_backward(cx, grad, x, approximate="none"):
    return cx.op("ew_unary_grad", [grad, x], [_gelu_kind(approximate)])


@lowers("silu_backward.default")
def _silu_backward(cx, grad, x):
    return cx.op("ew_unary_grad", [grad, x], [_EW_UNARY["silu"]])


@lowers("hardswish_backward.default")
def _hardswish_backward(cx, grad, x):
    return cx.op("ew_unary_grad", [grad, x], [_EW_UNARY["hardswish"]])


@lowers("hardsigmoid_backward.default")
def _hardsigmoid_backward(cx, grad, x):
    return cx.op("ew_unary_grad", [grad, x], [11], [1.0 / 6.0, 0.5])


# ---- views, copies and constants ----

@lowers("detach.default", "alias.default", "clone.default", "lift_fresh_copy.default",
        "contiguous.default")
def _identity(cx, x, *args, **kwargs):
    return x


@lowers("view.default", "_reshape_alias.default", "reshape.default", "_unsafe_view.default",
        "unsqueeze.default", "squeeze.dim", "squeeze.default", "squeeze.dims",
        "flatten.using_ints", "view.dtype")
def _view(cx, x, *args, **kwargs):
    return cx.reshape(x, cx.out_shape())


@lowers("t.default")
def _t(cx, x):
    if isinstance(x, Transposed) and not any(
            (op_key(u.target) or ("",))[0] in ("mm", "addmm") for u in cx.node.users):
        # read as it was: a transpose made twice is no transpose. A matmul
        # still takes the transposed copy and flag it always had: the
        # other operand layout runs another GEMM kernel, whose rounding
        # is enough to move AdamW's updates of near-zero gradients
        return x.base
    if len(cx.v(x).shape) < 2:
        return x
    return Transposed(x)


def _permute(cx, x, perm):
    x = cx.v(x)
    perm = [int(p) % len(x.shape) for p in perm]
    if perm == list(range(len(perm))):
        return x
    return cx.op("transpose", [x], perm)


@lowers("permute.default")
def _permute_rule(cx, x, dims):
    return _permute(cx, x, dims)


@lowers("transpose.int")
def _transpose(cx, x, d0, d1):
    rank = len(cx.v(x).shape)
    perm = list(range(rank))
    d0, d1 = d0 % rank, d1 % rank
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute(cx, x, perm)


@lowers("expand.default")
def _expand(cx, x, size, implicit=False):
    x = cx.v(x)
    out = cx.out_shape()
    if tuple(x.shape) == out:
        return x
    lead = len(out) - len(x.shape)
    src = (1,) * lead + tuple(x.shape)
    if not _is_float(x):
        # an integer mask: gathers of index 0 along each broadcast axis
        x = cx.reshape(x, src)
        for d, (s_, o) in enumerate(zip(src, out)):
            if s_ == 1 and o != 1:
                x = cx.op("gather", [x, cx.int_const(0, (o,))], [d])
        return x
    # x + (-0.0) is x exactly; the constant holds only the new extents
    cshape = tuple(o if s == 1 and o != 1 else 1 for s, o in zip(src, out))
    return cx.op("ew_binary", [x, cx.const(-0.0, cshape)], [0])


def _slice(cx, x, dim, start, end, step=1):
    x = cx.v(x)
    n = x.shape[dim]
    start, end = max(0, min(n, start + n if start < 0 else start)), \
        max(0, min(n, end + n if end < 0 else end))
    if start == 0 and end == n and step == 1:
        return x
    if end <= start:
        raise Unsupported("an empty slice")
    return cx.op("slice", [x], [dim, start, end, step])


@lowers("slice.Tensor")
def _slice_rule(cx, x, dim=0, start=None, end=None, step=1):
    rank = len(cx.v(x).shape)
    return _slice(cx, x, dim % rank, 0 if start is None else start,
                  cx.v(x).shape[dim % rank] if end is None else min(end, 2 ** 62), step)


@lowers("select.int")
def _select(cx, x, dim, index):
    x = cx.v(x)
    dim = dim % len(x.shape)
    index = index % x.shape[dim]
    return cx.reshape(_slice(cx, x, dim, index, index + 1), cx.out_shape())


def _split_at(cx, x, dim, sizes):
    x = cx.v(x)
    dim = dim % len(x.shape)
    out, at = [], 0
    for n in sizes:
        out.append(_slice(cx, x, dim, at, at + n))
        at += n
    return tuple(out)


@lowers("split.Tensor")
def _split(cx, x, size, dim=0):
    n = cx.v(x).shape[dim]
    return _split_at(cx, x, dim, [min(size, n - at) for at in range(0, n, size)])


@lowers("split_with_sizes.default")
def _split_with_sizes(cx, x, sizes, dim=0):
    return _split_at(cx, x, dim, sizes)


@lowers("unbind.int")
def _unbind(cx, x, dim=0):
    x = cx.v(x)
    dim = dim % len(x.shape)
    shape = x.shape[:dim] + x.shape[dim + 1:]
    return tuple(cx.reshape(p, shape) for p in _split_at(cx, x, dim, [1] * x.shape[dim]))


def _concat(cx, parts, dim):
    parts = [cx.v(p) for p in parts if p is not None]
    y = parts[0]
    for p in parts[1:]:
        y = cx.op("concat", [y, p], [dim])
    return y


@lowers("cat.default")
def _cat(cx, tensors, dim=0):
    tensors = [cx.v(t) for t in tensors if math.prod(cx.v(t).shape) != 0]
    return _concat(cx, tensors, dim % len(tensors[0].shape))


@lowers("stack.default")
def _stack(cx, tensors, dim=0):
    tensors = [cx.v(t) for t in tensors]
    rank = len(tensors[0].shape) + 1
    dim = dim % rank
    shape = tensors[0].shape[:dim] + (1,) + tensors[0].shape[dim:]
    return _concat(cx, [cx.reshape(t, shape) for t in tensors], dim)


def _pad_axis(cx, grad, sizes, dim, start, end):
    """grad placed at [start, end) along dim of zeros of shape sizes (the
    gradient of a slice: concat of zeros, grad, zeros)."""
    grad = cx.v(grad)
    parts = []
    if start > 0:
        parts.append(cx.const(0.0, tuple(sizes[:dim]) + (start,) + tuple(sizes[dim + 1:])))
    parts.append(grad)
    if end < sizes[dim]:
        parts.append(cx.const(0.0, tuple(sizes[:dim]) + (sizes[dim] - end,) +
                              tuple(sizes[dim + 1:])))
    return _concat(cx, parts, dim)


@lowers("slice_backward.default")
def _slice_backward(cx, grad, sizes, dim, start, end, step):
    dim = dim % len(sizes)
    n = sizes[dim]
    start, end = max(0, min(n, start + n if start < 0 else start)), \
        max(0, min(n, end + n if end < 0 else end))
    if step != 1:
        raise Unsupported(f"the gradient of a slice with step {step}")
    return _pad_axis(cx, grad, list(sizes), dim, start, end)


@lowers("select_backward.default")
def _select_backward(cx, grad, sizes, dim, index):
    dim = dim % len(sizes)
    index = index % sizes[dim]
    shape = tuple(sizes[:dim]) + (1,) + tuple(sizes[dim + 1:])
    return _pad_axis(cx, cx.reshape(grad, shape), list(sizes), dim, index, index + 1)


def _fill_like(cx, x, value):
    dt = meta_dtype(cx.node)
    if dt is not None and not dt.is_floating_point:
        raise Unsupported(f"a {dt} tensor made by {cx.node.target}")
    if _is_float(cx.v(x)):
        return cx.fill(x, value)
    # a float tensor of a mask's shape
    return cx.const(value, cx.out_shape())


@lowers("ones_like.default")
def _ones_like(cx, x, **kwargs):
    return _fill_like(cx, x, 1.0)


@lowers("zeros_like.default", "empty_like.default")
def _zeros_like(cx, x, **kwargs):
    return _fill_like(cx, x, 0.0)


@lowers("full_like.default")
def _full_like(cx, x, value, **kwargs):
    return _fill_like(cx, x, value)


@lowers("zeros.default", "new_zeros.default")
def _zeros(cx, *args, **kwargs):
    return cx.const(0.0, cx.out_shape())


@lowers("ones.default", "new_ones.default")
def _ones(cx, *args, **kwargs):
    return cx.const(1.0, cx.out_shape())


@lowers("scalar_tensor.default")
def _scalar_tensor(cx, value, **kwargs):
    return cx.const(value, ())


_CASTS = {"torch.float32": 0, "torch.bfloat16": 2, "torch.float16": 3}


@lowers("_to_copy.default")
def _to_copy(cx, x, dtype=None, **kwargs):
    if dtype is None or str(dtype) == str(meta_dtype(cx.node.args[0])):
        return x
    if str(dtype) not in _CASTS:
        raise Unsupported(f"conversion to {dtype}")
    return cx.op("cast", [x], [_CASTS[str(dtype)]])


# ---- reductions ----

def _reduce(cx, kind, x, dims, keepdim):
    x = cx.v(x)
    rank = len(x.shape)
    if rank == 0:
        return x
    mask = 0
    for a in _axes(dims, rank):
        mask |= 1 << a
    y = cx.op("reduce_axes", [x], [kind, mask])
    return y if keepdim else cx.reshape(y, cx.out_shape())


@lowers("sum.dim_IntList")
def _sum_dim(cx, x, dim, keepdim=False, dtype=None):
    return _reduce(cx, 0, x, dim, keepdim)


@lowers("sum.default")
def _sum(cx, x, dtype=None):
    return cx.op("reduce_sum", [x])


@lowers("mean.dim")
def _mean_dim(cx, x, dim, keepdim=False, dtype=None):
    return _reduce(cx, 1, x, dim, keepdim)


@lowers("mean.default")
def _mean(cx, x, dtype=None):
    return cx.op("reduce_mean", [x])


@lowers("amax.default")
def _amax(cx, x, dim=(), keepdim=False):
    return _reduce(cx, 2, x, dim, keepdim)


@lowers("amin.default")
def _amin(cx, x, dim=(), keepdim=False):
    return _reduce(cx, 3, x, dim, keepdim)


# ---- matrix products ----

def _matmul(cx, a, b):
    ta, tb = isinstance(a, Transposed), isinstance(b, Transposed)
    a = a.base if ta else a
    b = b.base if tb else b
    va, vb = cx.v(a), cx.v(b)
    if len(va.shape) != 2 or len(vb.shape) != 2:
        raise Unsupported("matmul of tensors that are not matrices")
    return cx.op("matmul", [va, vb], [int(ta), int(tb)])


@lowers("mm.default")
def _mm(cx, a, b):
    return _matmul(cx, a, b)


@lowers("addmm.default")
def _addmm(cx, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Unsupported(f"addmm with beta={beta}, alpha={alpha}")
    y = _matmul(cx, a, b)
    bias = cx.v(bias)
    if len(bias.shape) == 1 and bias.shape[0] == y.shape[1]:
        return cx.op("bias_add", [y, bias])
    return binary(cx, "add", y, bias)


@lowers("bmm.default")
def _bmm(cx, a, b):
    return cx.op("batch_matmul", [a, b])


@lowers("baddbmm.default")
def _baddbmm(cx, x, a, b, beta=1, alpha=1):
    y = _scaled(cx, cx.op("batch_matmul", [a, b]), alpha)
    if beta == 0:
        return y
    return binary(cx, "add", _scaled(cx, x, beta), y)


# ---- convolution, pooling, normalisation ----

def _conv_attrs(stride, padding, dilation, groups):
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    return [sh, sw, ph, pw, ph, pw, dh, dw, int(groups)]


def _conv_check(x, transposed, output_padding):
    if transposed:
        raise Unsupported("transposed convolution")
    if len(x.shape) != 4:
        raise Unsupported(f"{len(x.shape) - 2}-D convolution (salus has 2-D)")


@lowers("convolution.default")
def _convolution(cx, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    x = cx.v(x)
    _conv_check(x, transposed, output_padding)
    y = cx.op("conv2d", [x, w], _conv_attrs(stride, padding, dilation, groups))
    if bias is not None:
        y = cx.op("channel_bias_add", [y, bias])
    return y


@lowers("convolution_backward.default")
def _convolution_backward(cx, dy, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    x = cx.v(x)
    _conv_check(x, transposed, output_padding)
    attrs = _conv_attrs(stride, padding, dilation, groups)
    dx = cx.op("conv2d_grad_input", [dy, w, x], attrs) if output_mask[0] else None
    dw = cx.op("conv2d_grad_filter", [dy, x, w], attrs) if output_mask[1] else None
    db = cx.op("channel_bias_grad", [dy]) if output_mask[2] else None
    return dx, dw, db


def _pool_attrs(cx, x, kernel, stride, padding, dilation, ceil_mode):
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride) if stride else (kh, kw)
    ph, pw = _pair(padding)
    if _pair(dilation) != (1, 1):
        raise Unsupported("dilated pooling")
    if len(x.shape) != 4:
        raise Unsupported("pooling of a tensor that is not [N,C,H,W]")
    if ceil_mode:
        oh = (x.shape[2] + 2 * ph - kh) // sh + 1
        ow = (x.shape[3] + 2 * pw - kw) // sw + 1
        out = meta_shape(cx.node)
        if out is None or tuple(out[-2:]) != (oh, ow):
            raise Unsupported("ceil_mode pooling whose windows overhang the input")
    return [kh, kw, sh, sw, ph, pw, ph, pw]


@lowers("max_pool2d_with_indices.default")
def _max_pool(cx, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    x = cx.v(x)
    attrs = _pool_attrs(cx, x, kernel, stride, padding, dilation, ceil_mode)
    y = cx.op("maxpool", [x], attrs)
    return y, Opaque("max_pool2d's indices", x=x, y=y, attrs=attrs)


@lowers("max_pool2d_with_indices_backward.default")
def _max_pool_backward(cx, dy, x, kernel, stride, padding, dilation, ceil_mode, indices):
    if not isinstance(indices, Opaque) or "attrs" not in indices.data:
        raise Unsupported("max_pool2d indices that max_pool2d_with_indices did not make")
    d = indices.data
    return cx.op("maxpool_grad", [dy, d["x"], d["y"]], d["attrs"])


@lowers("avg_pool2d.default")
def _avg_pool(cx, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    if divisor_override is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    x = cx.v(x)
    attrs = _pool_attrs(cx, x, kernel, stride, padding, 1, ceil_mode)
    return cx.op("avgpool", [x], attrs + [int(bool(count_include_pad))])


@lowers("avg_pool2d_backward.default")
def _avg_pool_backward(cx, dy, x, kernel, stride, padding, ceil_mode, count_include_pad,
                       divisor_override):
    if divisor_override is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    x = cx.v(x)
    attrs = _pool_attrs(cx, x, kernel, stride, padding, 1, ceil_mode)
    return cx.op("avgpool_grad", [dy, x], attrs + [int(bool(count_include_pad))])


def _adaptive_kernel(x, size):
    oh, ow = _pair(size)
    h, w = x.shape[2], x.shape[3]
    if h % oh or w % ow:
        raise Unsupported(f"adaptive pooling of {h}x{w} to {oh}x{ow} (windows of unequal size)")
    return [h // oh, w // ow, h // oh, w // ow, 0, 0, 0, 0, 0]


@lowers("_adaptive_avg_pool2d.default")
def _adaptive_avg_pool(cx, x, size):
    x = cx.v(x)
    return cx.op("avgpool", [x], _adaptive_kernel(x, size))


@lowers("_adaptive_avg_pool2d_backward.default")
def _adaptive_avg_pool_backward(cx, dy, x):
    x, dy = cx.v(x), cx.v(dy)
    return cx.op("avgpool_grad", [dy, x], _adaptive_kernel(x, dy.shape[2:]))


def _bn_affine(cx, w, b, c):
    w = cx.const(1.0, (c,)) if w is None else w
    b = cx.const(0.0, (c,)) if b is None else b
    return w, b


@lowers("native_batch_norm.default", "_native_batch_norm_legit.default")
def _batch_norm(cx, x, w, b, running_mean, running_var, training, momentum, eps):
    x = cx.v(x)
    if len(x.shape) not in (2, 4):
        raise Unsupported("batch norm of a tensor that is not [N,C] or [N,C,H,W]")
    c = x.shape[1]
    w, b = _bn_affine(cx, w, b, c)
    if not training:
        if running_mean is None:
            raise Unsupported("batch norm in eval mode without running statistics")
        y = cx.op("batchnorm_infer", [x, w, b, running_mean, running_var], (), [eps])
        return y, Opaque("batch norm's saved mean"), Opaque("batch norm's saved invstd")
    if running_mean is None:
        # track_running_stats=False: the op still writes statistics somewhere
        running_mean, running_var = cx.const(0.0, (c,)), cx.const(1.0, (c,))
        momentum = 0.0
    # PyTorch's momentum weighs the batch, salus's (ONNX's) the old statistics
    return cx.op("batchnorm", [x, w, b, running_mean, running_var], (), [eps, 1.0 - momentum],
                 outputs=3)


@lowers("_native_batch_norm_legit_no_training.default")
def _batch_norm_eval(cx, x, w, b, running_mean, running_var, momentum, eps):
    return _batch_norm(cx, x, w, b, running_mean, running_var, False, momentum, eps)


@lowers("native_batch_norm_backward.default")
def _batch_norm_backward(cx, dy, x, w, running_mean, running_var, save_mean, save_invstd, train,
                         eps, output_mask):
    if not train:
        raise Unsupported("the gradient of batch norm in eval mode")
    x = cx.v(x)
    w, _ = _bn_affine(cx, w, None, x.shape[1])
    dx, dw, db = cx.op("batchnorm_grad", [dy, x, w, save_mean, save_invstd], outputs=3)
    return (dx if output_mask[0] else None, dw if output_mask[1] else None,
            db if output_mask[2] else None)


@lowers("native_layer_norm.default")
def _layer_norm(cx, x, normalized_shape, w, b, eps):
    x = cx.v(x)
    axis = len(x.shape) - len(normalized_shape)
    shape = tuple(x.shape[axis:])
    w = cx.const(1.0, shape) if w is None else w
    b = cx.const(0.0, shape) if b is None else b
    return cx.op("layer_norm", [x, w, b], [axis], [eps], outputs=3)


@lowers("native_layer_norm_backward.default")
def _layer_norm_backward(cx, dy, x, normalized_shape, mean, rstd, w, b, output_mask):
    x = cx.v(x)
    axis = len(x.shape) - len(normalized_shape)
    w = cx.const(1.0, tuple(x.shape[axis:])) if w is None else w
    dx, dw, db = cx.op("layer_norm_grad", [dy, x, w, mean, rstd], [axis], outputs=3)
    return (dx if output_mask[0] else None, dw if output_mask[1] else None,
            db if output_mask[2] else None)


# ---- embeddings and masks ----

@lowers("embedding.default")
def _embedding(cx, w, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return cx.op("gather", [w, ids], [0])


@lowers("embedding_dense_backward.default")
def _embedding_backward(cx, grad, ids, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise Unsupported("embedding with scale_grad_by_freq")
    return cx.op("embedding_grad", [grad, ids], [num_weights, padding_idx])


@lowers("masked_fill.Scalar")
def _masked_fill(cx, x, mask, value):
    if math.isnan(value):
        raise Unsupported("masked_fill with NaN")
    return cx.op("masked_fill", [x, mask], (), [float(value)])


_COMPARES = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}


def _compare_rule(kind):
    def rule(cx, a, b):
        a = cx.v(a)
        if _is_number(b):
            b = cx.const(b, (1,)) if _is_float(a) else cx.int_const(b, (1,))
        return cx.op("compare", [a, b], [kind])
    return rule


for _name, _kind in _COMPARES.items():
    lowers(f"{_name}.Tensor", f"{_name}.Scalar")(_compare_rule(_kind))


@lowers("where.self")
def _where(cx, cond, a, b):
    """cond ? a : b with broadcasting (the select of a KV cache's row)."""
    return cx.op("where", [cond, a, b])


@lowers("index_copy.default")
def _index_copy(cx, dst, dim, index, src):
    """dst.index_copy_(dim, index, src) into a tensor the step holds (a KV
    cache's buffer): index_write changes the rows in place, so nothing else
    of dst is copied. Only in place, into an input of the step that nothing
    read before."""
    node = cx.node
    target = node.args[0]
    if not str(node.target).split(".")[1].endswith("_") or getattr(target, "op", None) != \
            "placeholder":
        raise Unsupported("index_copy other than in place into a buffer or parameter")
    for n in node.graph.nodes:
        if n is node:
            break
        if target in n.all_input_nodes:
            raise Unsupported("index_copy_ into a tensor read earlier in the step")
    d = cx.v(dst)
    dim = dim % len(d.shape)
    cx.op("index_write", [d, index, src], [dim])
    return d


@lowers("copy.default")
def _copy(cx, dst, src, non_blocking=False):
    """dst's new value (copy_ into a buffer: committed at the end of the
    iteration as any in-place update of state)."""
    d, v = cx.v(dst), cx.v(src)
    if tuple(d.shape) != tuple(v.shape):
        raise Unsupported("copy_ with broadcasting")
    if d.dtype_code != v.dtype_code:
        raise Unsupported("copy_ between dtypes")
    return v


def _random_mask(cx, x, p):
    """dropout's (y, i32 mask) of x for drop probability p, from the
    graph's seed and the next stream offset."""
    if cx.seed is None:
        raise Unsupported("a random op in a graph without a dropout seed")
    if not 0 <= p < 1:
        raise Unsupported(f"dropout with p={p}")
    offset = cx.n_random
    cx.n_random += 1
    return cx.op("dropout", [x, cx.seed()], [offset], [float(p)], outputs=2)


@lowers("native_dropout.default")
def _dropout(cx, x, p, train):
    if train is False or p == 0:
        return x, Opaque("dropout's mask")
    return _random_mask(cx, x, p)


@lowers("native_dropout_backward.default")
def _dropout_backward(cx, grad, mask, scale):
    if isinstance(mask, Opaque):  # the identity of p = 0 or eval mode
        if scale != 1.0:
            raise Unsupported(f"dropout's gradient with scale {scale}")
        return grad
    return cx.op("dropout_grad", [grad, mask], (), [float(scale)])


@lowers("bernoulli.float", "bernoulli.p")
def _bernoulli(cx, x, p=0.5, generator=None):
    """A float tensor of x's shape holding 1 with probability p, else 0:
    dropout's mask as torch 1.13 builds it (bernoulli_ of an empty_like,
    then a division by p and a product)."""
    if generator is not None:
        raise Unsupported("bernoulli with a torch.Generator (the graph's seed draws)")
    if not _is_number(p) or not 0 < p <= 1:
        raise Unsupported(f"bernoulli with p={p}")
    if not _is_float(cx.v(x)):
        raise Unsupported("bernoulli of a non-float tensor")
    if p == 1:
        return cx.fill(x, 1.0)
    _, mask = _random_mask(cx, x, 1.0 - p)
    return cx.op("where", [mask, cx.const(1.0, ()), cx.const(0.0, ())])


# ---- softmax and losses ----

def _softmax_op(cx, type, x, dim):
    """softmax or log_softmax of x along dim: the row op for the last dim
    of a matrix, softmax_axis for any other."""
    x = cx.v(x)
    rank = len(x.shape)
    if rank == 0:
        raise Unsupported(f"{type} of a scalar")
    if rank == 2 and dim % rank == 1:
        return cx.op(type, [x])
    return cx.op("softmax_axis", [x], [dim % rank, int(type == "log_softmax")])


@lowers("_log_softmax.default")
def _log_softmax(cx, x, dim, half_to_float=False):
    cx.v(x)
    return LogSoftmax(x, dim)


@lowers("_softmax.default")
def _softmax(cx, x, dim, half_to_float=False):
    return _softmax_op(cx, "softmax", x, dim)


@lowers("_softmax_backward_data.default")
def _softmax_backward(cx, grad, y, dim, input_dtype=None):
    y = cx.v(y)
    return cx.op("softmax_axis_grad", [grad, y], [dim % len(y.shape), 0])


_REDUCTION_MEAN, _REDUCTION_SUM = 1, 2


@lowers("nll_loss_forward.default")
def _nll_loss(cx, x, target, weight, reduction, ignore_index):
    if not isinstance(x, LogSoftmax):
        raise Unsupported("nll_loss of anything but log_softmax (cross-entropy)")
    if weight is not None:
        raise Unsupported("class weights")
    if reduction not in (_REDUCTION_MEAN, _REDUCTION_SUM):
        raise Unsupported("reduction='none'")
    logits = cx.v(x.x)
    if len(logits.shape) != 2 or x.dim % 2 != 1:
        raise Unsupported("cross-entropy over anything but [N, C] logits")
    labels = cx.v(target)
    if cx.ignore_targets or 0 <= ignore_index < logits.shape[1]:
        return _xent_ignoring(cx, x, logits, labels, reduction, ignore_index)
    loss, probs = cx.op("softmax_xent", [logits, labels], outputs=2)
    x.xent = (loss, probs, labels)
    if reduction == _REDUCTION_SUM:
        loss = cx.op("scale", [loss], (), [float(logits.shape[0])])
    return loss, Opaque("nll_loss's total weight")


def _xent_ignoring(cx, x, logits, labels, reduction, ignore_index):
    """Cross-entropy whose rows labelled ignore_index count for nothing,
    the mean taken over the others (PyTorch's ignore_index)."""
    import torch
    n, c = logits.shape
    classes = cx._make_const(torch.arange(c, dtype=torch.int32).reshape(1, c), None)
    onehot = cx.op("compare", [cx.reshape(labels, (n, 1)), classes], [0])
    valid = cx.op("compare", [labels, cx.int_const(ignore_index, (1,))], [1])
    one, zero = cx.const(1.0, (1,)), cx.const(0.0, (1,))
    picked = cx.op("where", [onehot, _softmax_op(cx, "log_softmax", logits, 1), zero])
    loss = cx.op("scale", [cx.op("reduce_sum", [picked])], (), [-1.0])
    count = None
    if reduction == _REDUCTION_MEAN:
        count = cx.op("reduce_sum", [cx.op("where", [valid, one, zero])])
        loss = cx.op("ew_binary", [loss, count], [_EW_BINARY["div"]])
    x.xent = ("ignoring", onehot, cx.reshape(valid, (n, 1)), count)
    return loss, Opaque("nll_loss's total weight")


def _xent_ignoring_grad(cx, grad, logits, onehot, valid, count):
    one, zero = cx.const(1.0, (1,)), cx.const(0.0, (1,))
    d = cx.op("ew_binary", [cx.op("softmax", [logits]), cx.op("where", [onehot, one, zero])],
              [_EW_BINARY["sub"]])
    d = cx.op("where", [valid, d, zero])
    scale = cx.v(grad)
    if count is not None:
        scale = cx.op("ew_binary", [scale, count], [_EW_BINARY["div"]])
    return cx.op("mul_scalar", [d, scale])


@lowers("nll_loss_backward.default")
def _nll_loss_backward(cx, grad, x, target, weight, reduction, ignore_index, total_weight):
    if not isinstance(x, LogSoftmax) or x.xent is None:
        raise Unsupported("nll_loss_backward of anything but log_softmax (cross-entropy)")
    scale = float(cx.v(x.x).shape[0]) if reduction == _REDUCTION_SUM else 1.0
    return NllGrad(grad, x, scale)


@lowers("_log_softmax_backward_data.default")
def _log_softmax_backward(cx, grad, y, dim, input_dtype=None):
    if isinstance(grad, NllGrad) and grad.ls.xent[0] == "ignoring":
        _, onehot, valid, count = grad.ls.xent
        return _xent_ignoring_grad(cx, grad.grad, cx.v(grad.ls.x), onehot, valid, count)
    if isinstance(grad, NllGrad):
        _, probs, labels = grad.ls.xent
        d = cx.op("softmax_xent_grad", [probs, labels])
        if grad.scale != 1.0:
            d = cx.op("scale", [d], (), [grad.scale])
        return cx.op("mul_scalar", [d, grad.grad])
    y = cx.v(y)
    return cx.op("softmax_axis_grad", [grad, y], [dim % len(y.shape), 1])


@lowers("mse_loss.default")
def _mse_loss(cx, x, target, reduction=_REDUCTION_MEAN):
    if reduction not in (_REDUCTION_MEAN, _REDUCTION_SUM):
        raise Unsupported("reduction='none'")
    loss = cx.op("mse_loss", [x, target])
    if reduction == _REDUCTION_SUM:
        loss = cx.op("scale", [loss], (), [float(math.prod(cx.v(x).shape))])
    return loss


@lowers("mse_loss_backward.default")
def _mse_loss_backward(cx, grad, x, target, reduction):
    if reduction not in (_REDUCTION_MEAN, _REDUCTION_SUM):
        raise Unsupported("reduction='none'")
    d = cx.op("mse_grad", [x, target])
    if reduction == _REDUCTION_SUM:
        d = cx.op("scale", [d], (), [float(math.prod(cx.v(x).shape))])
    return cx.op("mul_scalar", [d, grad])


def op_key(target):
    """("relu_", "default") for torch.ops.aten.relu_.default; None for
    anything that is not an aten op overload."""
    text = str(target)
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        return None
    return parts[1], parts[2]

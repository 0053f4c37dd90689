"""Python binding of libsalusclient: train and serve through a salusd.

    import numpy as np, salus

    with salus.connect() as client, client.session(name="mlp") as s:
        w = s.tensor(np.random.rand(784, 10).astype(np.float32))
        g = salus.Graph()
        x = g.input((128, 784))
        y = g.op("matmul", [x, g.param(w)])
        s.register(g)
        (out,) = s.run(g, [batch], fetch=[y])   # numpy arrays in and out

The objects mirror the C API in <salus/salus.h>, whose comments are the
reference for every call's semantics:

* Client      one connection to salusd (salus_client)
* Session     sessions own persistent tensors and registered graphs
* Tensor      a persistent tensor, read and written as numpy arrays
* Graph       the validating graph builder; Value is one of its values
* Model       nn models compiled to a training and an inference graph, their
              named tensors (state_dict), checkpoints and ONNX export
* Trainer     a training graph made from any forward Graph by automatic
              differentiation, with a loss and an optimizer
* OnnxModel   an ONNX model imported into a session (Session.load_onnx): run
              for inference, or trained through OnnxModel.trainer()

Every failure raises salus.Error, carrying the salus status code (`code`,
a salus.Code) and the server's message (`message`).

Memory: feeds are passed to the server straight from the numpy arrays' own
buffers when they are C-contiguous and of the graph input's dtype (else one
converted copy is made), and fetched values are written by the C library
directly into the numpy arrays returned, so a run copies nothing in Python.

Lifetimes: a Session keeps its Client alive, and a Tensor, Graph, Model,
Trainer or OnnxModel keeps its Session alive. Closing a Client closes its
sessions; closing a Session frees the graphs registered with it, the models
compiled in it, its trainers and its ONNX models. Objects are also released
when garbage-collected, but close() (or a `with` block) says when.
"""

import enum
import threading
import weakref

import numpy as np

from ._native import ffi, lib

__all__ = [
    "Code", "Error", "connect", "Client", "Session", "Tensor", "Graph", "Value",
    "Model", "Trainer", "OnnxModel", "SGD", "Momentum", "Adam", "AdamW", "default_url", "F32", "I32",
]

F32 = "f32"
I32 = "i32"
_DTYPE_CODE = {F32: lib.SALUS_F32, I32: lib.SALUS_I32}
_NUMPY = {lib.SALUS_F32: np.dtype(np.float32), lib.SALUS_I32: np.dtype(np.int32)}


class Code(enum.IntEnum):
    """salus status codes: the numbers of the C API and of the wire protocol."""
    OK = lib.SALUS_OK
    EINVAL = lib.SALUS_EINVAL
    ENOMEM = lib.SALUS_ENOMEM
    EEXHAUSTED = lib.SALUS_EEXHAUSTED
    ENOTFOUND = lib.SALUS_ENOTFOUND
    EPERM = lib.SALUS_EPERM
    EPROTO = lib.SALUS_EPROTO
    EDEVICE = lib.SALUS_EDEVICE
    ENODEV = lib.SALUS_ENODEV
    ESHUTDOWN = lib.SALUS_ESHUTDOWN
    EUNSUPPORTED = lib.SALUS_EUNSUPPORTED
    ETIMEDOUT = lib.SALUS_ETIMEDOUT
    ECONN = lib.SALUS_ECONN
    EINTERNAL = lib.SALUS_EINTERNAL
    ESESSIONLOST = lib.SALUS_ESESSIONLOST
    EDEVICERESET = lib.SALUS_EDEVICERESET
    EBUSY = lib.SALUS_EBUSY


class Error(Exception):
    """A failed salus call.

    code     the status code (a Code, or a plain int for a code this binding
             does not know)
    message  the server's (or library's) explanation; may be empty
    """

    def __init__(self, code, message=""):
        try:
            code = Code(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        text = _text(lib.salus_strerror(int(code)))
        name = code.name if isinstance(code, Code) else str(int(code))
        super().__init__(f"{name}: {message}" if message else f"{name}: {text}")


def _text(cstr):
    return ffi.string(cstr).decode("utf-8", "replace") if cstr != ffi.NULL else ""


def _dims(shape):
    shape = tuple(int(d) for d in shape)
    if not 0 < len(shape) <= lib.SALUS_MAX_DIMS:
        raise ValueError(f"a shape has 1 to {lib.SALUS_MAX_DIMS} dimensions, not {len(shape)}")
    return shape, ffi.new("int64_t[]", shape)


def _dtype_code(dtype):
    if isinstance(dtype, str):
        if dtype not in _DTYPE_CODE:
            raise ValueError(f"unknown dtype {dtype!r} (known: f32, i32)")
        return _DTYPE_CODE[dtype]
    for code, npd in _NUMPY.items():
        if np.dtype(dtype) == npd:
            return code
    raise ValueError(f"salus tensors are float32 or int32, not {np.dtype(dtype)}")


def _buffer(array, dtype_code, shape, what):
    """A C-contiguous array of the right dtype and size (the caller's own
    array when it already is one) and a pointer into it."""
    a = np.ascontiguousarray(array, dtype=_NUMPY[dtype_code])
    if a.size != int(np.prod(shape)):
        raise ValueError(f"{what}: {a.size} elements given, {tuple(shape)} needs {int(np.prod(shape))}")
    return a, ffi.from_buffer(a)


def default_url():
    """The URL salus.connect() uses when given none ($SALUS_URL, else the
    user's own salusd socket, else the system's)."""
    return _text(lib.salus_default_url())


def connect(url=None):
    """Connects to salusd at `url` (None: default_url()). Returns a Client."""
    return Client(url)


class Client:
    """One connection to salusd. Usable from several threads (the C library
    serialises its requests); reconnects by itself after a server restart,
    but sessions do not survive one (Code.ESESSIONLOST)."""

    def __init__(self, url=None):
        out = ffi.new("salus_client **")
        rc = lib.salus_connect(url.encode() if url is not None else ffi.NULL, out)
        if rc:
            raise Error(rc, _text(lib.salus_last_error(ffi.NULL)))
        self._ptr = out[0]
        self._sessions = weakref.WeakSet()
        self._lock = threading.Lock()

    def _check(self, rc):
        if rc:
            raise Error(rc, _text(lib.salus_last_error(self._live())))

    def _live(self):
        if self._ptr is None:
            raise Error(Code.EINVAL, "the client is closed")
        return self._ptr

    @property
    def device(self):
        """The server's device and policy, as it described them on connect."""
        return _text(lib.salus_server_device(self._live()))

    def session(self, name="", priority=0, weight=1.0, persistent_bytes=0, ephemeral_bytes=0,
                expected_total_s=0.0, expected_iterations=0, wait=False):
        """Opens a session (see salus_session_opts in salus.h for each
        argument; wait=True waits for admission instead of failing with
        Code.EEXHAUSTED)."""
        return Session(self, name, priority, weight, persistent_bytes, ephemeral_bytes,
                       expected_total_s, expected_iterations, wait)

    def status(self):
        """The server's status as text (what `salusctl status` prints)."""
        out = ffi.new("char **")
        self._check(lib.salus_status_text(self._live(), out))
        try:
            return _text(out[0])
        finally:
            lib.salus_free(out[0])

    def set_policy(self, policy, strict=False):
        """Changes the scheduling policy (an operator call)."""
        self._check(lib.salus_set_policy(self._live(), policy.encode(), int(bool(strict))))

    def set_session(self, session_id, priority=None, weight=None):
        """Changes a session's priority and/or weight."""
        self._check(lib.salus_set_session(self._live(), int(session_id), priority is not None,
                                          int(priority or 0), weight is not None,
                                          float(weight or 0.0)))

    def close(self):
        """Closes every session still open, then the connection. Idempotent."""
        if self._ptr is None:
            return
        for s in list(self._sessions):
            s.close()
        lib.salus_disconnect(self._ptr)
        self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            self.close()


class Session:
    """A session: persistent tensors, registered graphs and runs. It lives as
    long as its client's connection; open it with Client.session()."""

    def __init__(self, client, name, priority, weight, persistent_bytes, ephemeral_bytes,
                 expected_total_s, expected_iterations, wait):
        opts = ffi.new("salus_session_opts *")
        cname = ffi.new("char[]", name.encode())
        opts.name = cname
        opts.priority = int(priority)
        opts.weight = float(weight)
        opts.persistent_bytes = int(persistent_bytes)
        opts.ephemeral_bytes = int(ephemeral_bytes)
        opts.expected_total_s = float(expected_total_s)
        opts.expected_iterations = int(expected_iterations)
        opts.wait_for_admission = int(bool(wait))
        out = ffi.new("salus_session **")
        client._check(lib.salus_session_open(client._live(), opts, out))
        self.client = client
        self._ptr = out[0]
        self._dependents = weakref.WeakSet()
        client._sessions.add(self)

    @property
    def id(self):
        """The session's id on the server (what salusctl shows)."""
        return int(lib.salus_session_id(self._live()))

    @property
    def shm_bytes(self):
        """Shared memory the session's runs move data through (0: inline)."""
        return int(lib.salus_session_shm_bytes(self._live()))

    def _live(self):
        if self._ptr is None:
            raise Error(Code.EINVAL, "the session is closed")
        return self._ptr

    def _check(self, rc):
        self.client._check(rc)

    def tensor(self, data=None, shape=None, dtype=None):
        """Creates a persistent tensor: from `data` (an array; int32 if its
        values are integers, else float32, unless `dtype` says), or zeros of
        `shape` and `dtype` (default float32)."""
        if data is not None:
            arr = np.asarray(data)
            if dtype is None:
                dtype = I32 if arr.dtype.kind in "iub" else F32
            shape = arr.shape if shape is None else shape
        elif shape is None:
            raise ValueError("give data or a shape")
        code = _dtype_code(F32 if dtype is None else dtype)
        shape, dims = _dims(shape)
        init = ffi.NULL
        if data is not None:
            keep, init = _buffer(data, code, shape, "tensor data")
        tid = ffi.new("uint64_t *")
        self._check(lib.salus_tensor_create(self._live(), code, len(shape), dims, init, tid))
        return Tensor(self, int(tid[0]), shape, code)

    def register(self, graph):
        """Registers a Graph with this session; returns the ephemeral bytes one
        iteration needs, as the server planned them."""
        peak = ffi.new("uint64_t *")
        graph._check_builder()
        self._check(lib.salus_graph_register(self._live(), graph._live(), peak))
        graph._session = self
        self._dependents.add(graph)
        return int(peak[0])

    def run(self, graph, feeds=(), fetch=()):
        """Runs one iteration of a registered graph. feeds: one array per graph
        input, in the order the inputs were made (or a dict {Value: array}).
        fetch: Values whose contents to return. Returns a list of new numpy
        arrays, one per fetched value, written in place by the library."""
        inputs = graph.inputs
        if isinstance(feeds, dict):
            missing = [v for v in inputs if v not in feeds]
            if missing:
                raise ValueError(f"no feed for graph input(s) {missing}")
            feeds = [feeds[v] for v in inputs]
        feeds = list(feeds)
        if len(feeds) != len(inputs):
            raise ValueError(f"the graph has {len(inputs)} inputs, {len(feeds)} feeds given")
        keep, ptrs = [], ffi.new("void *[]", max(len(feeds), 1))
        for i, (v, f) in enumerate(zip(inputs, feeds)):
            a, p = _buffer(f, v.dtype_code, v.shape, f"feed {i}")
            keep.append(a)
            ptrs[i] = p
        fetch = list(fetch)
        handles = ffi.new("salus_value[]", max(len(fetch), 1))
        outs, out_ptrs = [], ffi.new("void *[]", max(len(fetch), 1))
        for j, v in enumerate(fetch):
            if v.graph is not graph:
                raise ValueError(f"fetch {j} is a value of another graph")
            handles[j] = v.handle
            o = np.empty(v.shape, dtype=_NUMPY[v.dtype_code])
            outs.append(o)
            out_ptrs[j] = ffi.from_buffer(o)
        self._check(lib.salus_run(self._live(), graph._live(), ffi.cast("const void *const *", ptrs),
                                  len(fetch), handles, out_ptrs))
        return outs

    def load_onnx(self, model, batch=None):
        """Imports an ONNX model (a path, or the file's bytes) into this
        session as an inference graph; returns an OnnxModel. batch: the size
        of a symbolic leading input dimension (a batch exported as dynamic);
        None refuses symbolic dimensions. An op, attribute, opset, dtype or
        shape salus cannot compute exactly raises Error(Code.EUNSUPPORTED)
        whose message names the node and its op."""
        return OnnxModel(self, model, batch)

    def close(self):
        """Frees the graphs and models of this session, then closes it on the
        server (freeing its tensors). Idempotent."""
        if self._ptr is None:
            return
        for d in list(self._dependents):
            d.close()
        rc = lib.salus_session_close(self._ptr)
        self._ptr = None
        self.client._sessions.discard(self)
        if rc not in (Code.OK, Code.ESESSIONLOST, Code.ECONN):
            raise Error(rc, "closing the session")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_ptr", None) is not None and self.client._ptr is not None:
            try:
                self.close()
            except Error:
                pass


class Tensor:
    """A persistent tensor of a session: stays resident in the server."""

    def __init__(self, session, tensor_id, shape, dtype_code):
        self.session = session
        self.id = tensor_id
        self.shape = tuple(shape)
        self.dtype_code = dtype_code

    @property
    def dtype(self):
        return _NUMPY[self.dtype_code]

    def read(self, out=None):
        """The tensor's contents as a new array (or into `out`, a C-contiguous
        array of its shape and dtype)."""
        if out is None:
            out = np.empty(self.shape, dtype=self.dtype)
        elif not (out.flags.c_contiguous and out.dtype == self.dtype and out.shape == self.shape):
            raise ValueError(f"out must be a C-contiguous {self.dtype} array of shape {self.shape}")
        self.session._check(lib.salus_tensor_read(self.session._live(), self.id,
                                                  ffi.from_buffer(out), out.nbytes))
        return out

    def write(self, data):
        """Overwrites the tensor with `data` (its shape's number of elements)."""
        a, p = _buffer(data, self.dtype_code, self.shape, "tensor data")
        self.session._check(lib.salus_tensor_write(self.session._live(), self.id, p, a.nbytes))

    def free(self):
        """Frees the tensor on the server (Code.EBUSY while a graph uses it)."""
        self.session._check(lib.salus_tensor_free(self.session._live(), self.id))

    def __repr__(self):
        return f"salus.Tensor(id={self.id}, shape={self.shape}, dtype={self.dtype})"


class Value:
    """One value of a Graph: an input, a parameter or an op's output."""

    def __init__(self, graph, handle):
        self.graph = graph
        self.handle = handle
        dtype, ndim = ffi.new("int *"), ffi.new("int *")
        dims = ffi.new("int64_t[]", lib.SALUS_MAX_DIMS)
        if lib.salus_graph_shape(graph._live(), handle, dtype, ndim, dims):
            raise Error(Code.EINVAL, f"graph has no value {handle}")
        self.dtype_code = dtype[0]
        self.shape = tuple(dims[i] for i in range(ndim[0]))

    @property
    def dtype(self):
        return _NUMPY[self.dtype_code]

    def __hash__(self):
        return hash((id(self.graph), self.handle))

    def __eq__(self, other):
        return isinstance(other, Value) and other.graph is self.graph and other.handle == self.handle

    def __repr__(self):
        return f"salus.Value({self.handle}, shape={self.shape}, dtype={self.dtype})"


class Graph:
    """The graph builder. Each call validates as it goes (shapes are inferred
    with the server's own op registry); the first error is raised at once as
    Error(Code.EINVAL) naming the op and what is wrong, and the builder then
    stays failed (build the graph again). Ops, their inputs and attributes
    are listed in docs/ops.md."""

    def __init__(self, _borrowed=None, _owner=None):
        if _borrowed is not None:
            self._ptr, self._owned, self._owner = _borrowed, False, _owner
        else:
            self._ptr, self._owned, self._owner = lib.salus_graph_new(), True, None
            if self._ptr == ffi.NULL:
                raise MemoryError("salus_graph_new")
        self._inputs = None  # cached Values of the inputs, in feed order
        self._session = None

    def _live(self):
        if self._ptr is None:
            raise Error(Code.EINVAL, "the graph is freed")
        return self._ptr

    def _check_builder(self):
        err = lib.salus_graph_error(self._live())
        if err != ffi.NULL:
            raise Error(Code.EINVAL, _text(err))

    def _value(self, handle):
        if handle == lib.SALUS_NO_VALUE:
            self._check_builder()
            raise Error(Code.EINVAL, "graph builder failed")
        return Value(self, handle)

    def input(self, shape, dtype=F32):
        """An input fed at every run."""
        shape, dims = _dims(shape)
        self._inputs = None
        return self._value(lib.salus_graph_input(self._live(), _dtype_code(dtype), len(shape), dims))

    def param(self, tensor):
        """A persistent Tensor of the session the graph will be registered with."""
        shape, dims = _dims(tensor.shape)
        return self._value(lib.salus_graph_param(self._live(), tensor.id, tensor.dtype_code,
                                                 len(shape), dims))

    def op(self, type, inputs, iattrs=(), fattrs=(), outputs=1):
        """Adds an op; returns its output Value, or a tuple of `outputs` Values
        for ops with several. iattrs/fattrs are the positional integer and
        float attributes of docs/ops.md."""
        ins = ffi.new("salus_value[]", [v.handle for v in inputs] or [0])
        ia = ffi.new("int64_t[]", [int(a) for a in iattrs] or [0])
        fa = ffi.new("float[]", [float(a) for a in fattrs] or [0.0])
        for v in inputs:
            if v.graph is not self:
                raise ValueError("an input is a value of another graph")
        first = self._value(lib.salus_graph_op(self._live(), type.encode(), len(inputs), ins,
                                               len(iattrs), ia, len(fattrs), fa))
        if outputs == 1:
            return first
        return tuple([first] + [self._value(first.handle + i) for i in range(1, outputs)])

    @property
    def inputs(self):
        """The graph's inputs, in feed order."""
        if self._inputs is None:
            g = self._live()
            self._inputs = [Value(self, lib.salus_graph_input_value(g, i))
                            for i in range(lib.salus_graph_n_inputs(g))]
        return list(self._inputs)

    def gradients(self, loss, wrt):
        """Appends the ops computing d(loss)/d(w) for each Value w in `wrt`
        (loss: a scalar f32 Value) and returns the gradient Values. Raises
        Error(Code.EUNSUPPORTED) naming an op on the way without a gradient."""
        wrt = list(wrt)
        handles = ffi.new("salus_value[]", [v.handle for v in wrt] or [0])
        grads = ffi.new("salus_value[]", max(len(wrt), 1))
        rc = lib.salus_graph_gradients(self._live(), loss.handle, len(wrt), handles, grads)
        if rc:
            raise Error(rc, _text(lib.salus_graph_error(self._live())))
        return [Value(self, grads[i]) for i in range(len(wrt))]

    @property
    def id(self):
        """The server-side id (0 before registration)."""
        return int(lib.salus_graph_id(self._live()))

    def memory(self):
        """(planned_peak, naive_bytes) of a registered graph."""
        peak, naive = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        rc = lib.salus_graph_memory(self._live(), peak, naive)
        if rc:
            raise Error(rc, "the graph is not registered")
        return int(peak[0]), int(naive[0])

    def close(self):
        """Frees the builder (and the server-side graph, if registered)."""
        if self._ptr is not None and self._owned:
            lib.salus_graph_free(self._ptr)
        self._ptr = None

    def __del__(self):
        if getattr(self, "_ptr", None) is not None and self._owned:
            s = self._session
            if s is None or s._ptr is not None:
                self.close()


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

    def _struct(self):
        opt = ffi.new("salus_optimizer *")
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


class Model:
    """A stack of layers on one sample's shape (no batch dimension), compiled
    in a session to a training graph (softmax cross-entropy over the last
    layer's class scores, int32 labels) and an inference graph (argmax).
    Layer methods return the model, so they chain:

        m = salus.Model((784,)).dense(128).relu().dense(10)
        m.compile(session, salus.Momentum(0.02), batch=128)
        loss = m.train_step(x, labels)
    """

    def __init__(self, sample_shape):
        shape, dims = _dims(sample_shape)
        self._ptr = lib.salus_model_new(len(shape), dims)
        if self._ptr == ffi.NULL:
            raise ValueError(f"invalid sample shape {shape}")
        self.sample_shape = shape
        self.session = None
        self.batch = self.infer_batch = None
        self._graphs = weakref.WeakSet()  # borrowed Graphs handed out, detached on close

    def _live(self):
        if self._ptr is None:
            raise Error(Code.EINVAL, "the model is freed")
        return self._ptr

    def _check(self, rc):
        if rc:
            msg = _text(lib.salus_model_error(self._live()))
            if self.session is not None and not msg:
                msg = _text(lib.salus_last_error(self.session.client._live()))
            raise Error(rc, msg)

    def _layer(self, rc):
        self._check(rc)
        return self

    def dense(self, units):
        return self._layer(lib.salus_model_dense(self._live(), units))

    def conv2d(self, filters, kernel, stride=1, pad=0):
        return self._layer(lib.salus_model_conv2d(self._live(), filters, kernel, stride, pad))

    def maxpool(self, kernel, stride=None):
        return self._layer(lib.salus_model_maxpool(self._live(), kernel, stride or kernel))

    def avgpool(self, kernel, stride=None):
        return self._layer(lib.salus_model_avgpool(self._live(), kernel, stride or kernel))

    def batchnorm(self):
        return self._layer(lib.salus_model_batchnorm(self._live()))

    def relu(self):
        return self._layer(lib.salus_model_relu(self._live()))

    def sigmoid(self):
        return self._layer(lib.salus_model_sigmoid(self._live()))

    def tanh(self):
        return self._layer(lib.salus_model_tanh(self._live()))

    def flatten(self):
        return self._layer(lib.salus_model_flatten(self._live()))

    def compile(self, session, optimizer, batch, infer_batch=None, seed=0):
        """Creates the parameters in `session` and registers both graphs."""
        opt = optimizer._struct()
        infer_batch = batch if infer_batch is None else infer_batch
        self._check(lib.salus_model_compile(self._live(), session._live(), opt, batch,
                                            infer_batch, seed))
        self.session, self.batch, self.infer_batch = session, int(batch), int(infer_batch)
        session._dependents.add(self)
        return self

    def _compiled(self):
        if self.session is None:
            raise Error(Code.EINVAL, "compile the model first")

    def train_step(self, x, labels):
        """One iteration on x[batch, *sample_shape] and int labels[batch];
        returns the batch's mean loss before the update."""
        self._compiled()
        xa, xp = _buffer(x, lib.SALUS_F32, (self.batch,) + self.sample_shape, "x")
        la, lp = _buffer(labels, lib.SALUS_I32, (self.batch,), "labels")
        loss = ffi.new("float *")
        self._check(lib.salus_model_train_step(self._live(), ffi.cast("float *", xp),
                                               ffi.cast("int32_t *", lp), loss))
        return float(loss[0])

    def predict(self, x):
        """Predicted classes of x[infer_batch, *sample_shape] (int32)."""
        self._compiled()
        xa, xp = _buffer(x, lib.SALUS_F32, (self.infer_batch,) + self.sample_shape, "x")
        out = np.empty(self.infer_batch, dtype=np.int32)
        self._check(lib.salus_model_predict(self._live(), ffi.cast("float *", xp),
                                            ffi.cast("int32_t *", ffi.from_buffer(out))))
        return out

    @property
    def param_count(self):
        """Trainable parameters (after compile)."""
        return int(lib.salus_model_param_count(self._live()))

    @property
    def training_graph(self):
        """The compiled training Graph (owned by the model)."""
        self._compiled()
        g = Graph(_borrowed=lib.salus_model_training_graph(self._live()), _owner=self)
        self._graphs.add(g)
        return g

    @property
    def inference_graph(self):
        """The compiled inference Graph (owned by the model)."""
        self._compiled()
        g = Graph(_borrowed=lib.salus_model_inference_graph(self._live()), _owner=self)
        self._graphs.add(g)
        return g

    # -- named tensors, as PyTorch's state_dict and optimizer state name them

    def _index(self, name):
        i = lib.salus_model_tensor_find(self._live(), name.encode())
        if i < 0:
            raise KeyError(f"the model has no tensor {name!r} (see Model.names())")
        return i

    def _session_check(self, rc):
        if rc:
            raise Error(rc, _text(lib.salus_last_error(self.session.client._live())))

    def names(self, kind=None):
        """Names of the model's tensors ("0.weight", "0.bias",
        "1.running_mean", "0.weight.exp_avg", "optimizer.lr", ...), in order;
        kind: "param", "buffer" or "optimizer" to keep only those."""
        self._compiled()
        kinds = {"param": lib.SALUS_TENSOR_PARAM, "buffer": lib.SALUS_TENSOR_BUFFER,
                 "optimizer": lib.SALUS_TENSOR_OPTIMIZER}
        if kind is not None and kind not in kinds:
            raise ValueError(f"kind is one of {sorted(kinds)}")
        out, k = [], ffi.new("int *")
        for i in range(lib.salus_model_tensor_count(self._live())):
            lib.salus_model_tensor_info(self._live(), i, k, ffi.NULL, ffi.NULL, ffi.NULL)
            if kind is None or k[0] == kinds[kind]:
                out.append(_text(lib.salus_model_tensor_name(self._live(), i)))
        return out

    def _shape(self, i):
        ndim, dims = ffi.new("int *"), ffi.new("int64_t[]", lib.SALUS_MAX_DIMS)
        lib.salus_model_tensor_info(self._live(), i, ffi.NULL, ndim, dims, ffi.NULL)
        return tuple(dims[d] for d in range(ndim[0]))

    def get(self, name):
        """The tensor `name` read from the server, as a new float32 array."""
        i = self._index(name)
        out = np.empty(self._shape(i), np.float32)
        self._session_check(lib.salus_model_tensor_read(
            self._live(), i, ffi.cast("float *", ffi.from_buffer(out)), out.nbytes))
        return out

    def set(self, name, value):
        """Overwrites the tensor `name` (from the next step or prediction)."""
        i = self._index(name)
        a, p = _buffer(value, lib.SALUS_F32, self._shape(i), name)
        self._session_check(lib.salus_model_tensor_write(self._live(), i, ffi.cast("float *", p),
                                                         a.nbytes))

    def state_dict(self, kind="param"):
        """{name: array} of the parameters (kind="param"), batch-norm buffers
        ("buffer"), optimizer state ("optimizer"), or all (None). Dense
        weights are [in, out]: PyTorch's nn.Linear weight transposed."""
        return {n: self.get(n) for n in self.names(kind)}

    def load_state_dict(self, state):
        """Writes every {name: array} of `state` (names as state_dict's)."""
        for name, value in state.items():
            self.set(name, value)

    def save(self, path):
        """Checkpoints every named tensor (optimizer state too) to `path`."""
        self._compiled()
        self._session_check(lib.salus_model_save(self._live(), str(path).encode()))

    def load(self, path):
        """Restores a checkpoint of a model of the same layers and optimizer."""
        self._compiled()
        self._session_check(lib.salus_model_load(self._live(), str(path).encode()))

    def set_lr(self, lr):
        """The learning rate of the following steps (optimizer made with
        lr_schedule=True)."""
        self._compiled()
        self._session_check(lib.salus_model_set_lr(self._live(), lr))

    def export_onnx(self, path):
        """Writes the inference forward pass with the current weights as an
        ONNX model (opset 13; input "input", output "logits")."""
        self._compiled()
        self._session_check(lib.salus_model_export_onnx(self._live(), str(path).encode()))

    def close(self):
        """Frees the model and its graphs (its tensors go with the session)."""
        if self._ptr is not None:
            for g in list(self._graphs):
                g._ptr = None
            lib.salus_model_free(self._ptr)
        self._ptr = None

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            s = self.session
            if s is None or s._ptr is not None:
                self.close()


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
    """

    def __init__(self, session, forward, output, optimizer, loss="cross_entropy"):
        if loss not in _LOSSES:
            raise ValueError(f"loss is one of {sorted(_LOSSES)}")
        if output.graph is not forward:
            raise ValueError("output must be a value of the forward graph")
        forward._check_builder()
        out = ffi.new("salus_trainer **")
        session._check(lib.salus_graph_train(session._live(), forward._live(), _LOSSES[loss],
                                             output.handle, optimizer._struct(), out))
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


class OnnxModel:
    """An ONNX model imported into a session (Session.load_onnx): its
    initialisers are persistent tensors of the session, its nodes one
    registered inference graph.

    inputs / outputs  lists of (name, shape, dtype) in the model's order
                      (int64/int32 inputs are fed as int32)
    run(*arrays)      one inference; returns the outputs as numpy arrays
    graph             the registered Graph (owned by the model)
    trainer(...)      a Trainer of the same graph and the same weights

    The model is freed by close(), or with its session.
    """

    def __init__(self, session, model, batch=None):
        opts = ffi.new("salus_onnx_options *")
        opts.batch = 0 if batch is None else int(batch)
        if batch is not None and opts.batch <= 0:
            raise ValueError(f"batch must be > 0, not {batch}")
        out = ffi.new("salus_onnx_model **")
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = ffi.from_buffer(model)
            rc = lib.salus_onnx_load_buffer(session._live(), data, len(data), opts, out)
        else:
            rc = lib.salus_onnx_load(session._live(), str(model).encode(), opts, out)
        session._check(rc)
        self._ptr = out[0]
        self.session = session
        self._trainers = weakref.WeakSet()
        self.inputs = [self._io(lib.salus_onnx_input, i)
                       for i in range(lib.salus_onnx_n_inputs(self._ptr))]
        self.outputs = [self._io(lib.salus_onnx_output, i)
                        for i in range(lib.salus_onnx_n_outputs(self._ptr))]
        self.graph = Graph(_borrowed=lib.salus_onnx_graph(self._ptr), _owner=self)
        session._dependents.add(self)

    def _io(self, fn, i):
        name, dtype = ffi.new("const char **"), ffi.new("int *")
        ndim, dims = ffi.new("int *"), ffi.new("int64_t[]", lib.SALUS_MAX_DIMS)
        if fn(self._ptr, i, name, dtype, ndim, dims):
            raise Error(Code.EINVAL, f"no input/output {i}")
        return (_text(name[0]), tuple(dims[d] for d in range(ndim[0])), _NUMPY[dtype[0]])

    def _live(self):
        if self._ptr is None:
            raise Error(Code.EINVAL, "the ONNX model is freed")
        return self._ptr

    def run(self, *arrays):
        """One inference: one array per input in order (or a single dict
        {input name: array}). Returns a list of new numpy arrays, one per
        output, written in place by the library; inputs already C-contiguous
        and of the input's dtype are sent from their own buffers."""
        if len(arrays) == 1 and isinstance(arrays[0], dict):
            feeds = arrays[0]
            unknown = set(feeds) - {n for n, _, _ in self.inputs}
            if unknown:
                raise ValueError(f"the model has no input(s) {sorted(unknown)}")
            missing = [n for n, _, _ in self.inputs if n not in feeds]
            if missing:
                raise ValueError(f"no feed for input(s) {missing}")
            arrays = [feeds[n] for n, _, _ in self.inputs]
        if len(arrays) != len(self.inputs):
            raise ValueError(f"the model has {len(self.inputs)} inputs, {len(arrays)} given")
        keep, ptrs = [], ffi.new("void *[]", max(len(arrays), 1))
        for i, ((name, shape, dtype), a) in enumerate(zip(self.inputs, arrays)):
            a, p = _buffer(a, lib.SALUS_I32 if dtype == np.int32 else lib.SALUS_F32, shape,
                           f"input {name!r}")
            keep.append(a)
            ptrs[i] = p
        outs = [np.empty(shape, dtype) for _, shape, dtype in self.outputs]
        out_ptrs = ffi.new("void *[]", max(len(outs), 1))
        for j, o in enumerate(outs):
            out_ptrs[j] = ffi.from_buffer(o)
        self.session._check(lib.salus_onnx_run(self._live(), ffi.cast("const void *const *", ptrs),
                                               out_ptrs))
        return outs

    def output_value(self, i=0):
        """The graph Value of output i (a name or an index)."""
        if isinstance(i, str):
            names = [n for n, _, _ in self.outputs]
            if i not in names:
                raise KeyError(f"the model has no output {i!r} (outputs: {names})")
            i = names.index(i)
        h = lib.salus_onnx_output_value(self._live(), int(i))
        if h == lib.SALUS_NO_VALUE:
            raise IndexError(f"output {i} out of range ({len(self.outputs)} outputs)")
        return Value(self.graph, h)

    def trainer(self, optimizer, loss="cross_entropy", output=0):
        """A Trainer of the imported forward graph (salus_graph_train): every
        initialiser is a trained parameter, updated in place, so run() sees
        the trained weights. output: the output (index or name) the loss is
        taken of. Ops without a gradient (BatchNormalization, imported in its
        inference form) raise Error(Code.EUNSUPPORTED) naming the op."""
        t = Trainer(self.session, self.graph, self.output_value(output), optimizer, loss)
        self._trainers.add(t)
        return t

    def close(self):
        """Frees the trainers made from it, the model, its graph and its
        tensors in the session. Idempotent."""
        if self._ptr is None:
            return
        for t in list(self._trainers):
            t.close()
        self.graph._ptr = None
        lib.salus_onnx_free(self._ptr)
        self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_ptr", None) is not None and self.session._ptr is not None:
            self.close()

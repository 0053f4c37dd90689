"""The validating graph builder (salus_graph) and its values."""

from ._core import F32, Code, Error, _NUMPY, _dims, _dtype_code, _text, ffi, lib


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

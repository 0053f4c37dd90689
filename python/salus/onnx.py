"""ONNX models imported into a session (salus_onnx_*), run for inference
or trained through a Trainer."""

import weakref

import numpy as np

from ._core import Code, Error, _NUMPY, _buffer, _text, ffi, lib
from .graph import Graph, Value
from .train import Trainer


class OnnxModel:
    """An ONNX model imported into a session (Session.load_onnx): its
    initialisers are persistent tensors of the session, its nodes one
    registered inference graph.

    inputs / outputs  lists of (name, shape, dtype) in the model's order
                      (int64/int32 inputs are fed as int32; float16 as
                      float16, bfloat16 as uint16 bit patterns, salus.to_bf16)
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
        self._input_codes = []
        self.inputs = [self._io(lib.salus_onnx_input, i, self._input_codes)
                       for i in range(lib.salus_onnx_n_inputs(self._ptr))]
        self.outputs = [self._io(lib.salus_onnx_output, i)
                        for i in range(lib.salus_onnx_n_outputs(self._ptr))]
        self.graph = Graph(_borrowed=lib.salus_onnx_graph(self._ptr), _owner=self)
        session._dependents.add(self)

    def _io(self, fn, i, codes=None):
        name, dtype = ffi.new("const char **"), ffi.new("int *")
        ndim, dims = ffi.new("int *"), ffi.new("int64_t[]", lib.SALUS_MAX_DIMS)
        if fn(self._ptr, i, name, dtype, ndim, dims):
            raise Error(Code.EINVAL, f"no input/output {i}")
        if codes is not None:
            codes.append(dtype[0])
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
        for i, ((name, shape, _), code, a) in enumerate(zip(self.inputs, self._input_codes,
                                                            arrays)):
            a, p = _buffer(a, code, shape, f"input {name!r}")
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

    def trainer(self, optimizer, loss="cross_entropy", output=0, precision="f32"):
        """A Trainer of the imported forward graph (salus_graph_train): every
        initialiser is a trained parameter, updated in place, so run() sees
        the trained weights. output: the output (index or name) the loss is
        taken of. Ops without a gradient (BatchNormalization, imported in its
        inference form) raise Error(Code.EUNSUPPORTED) naming the op.
        precision: "f32", "bf16" or "f16" (mixed precision, see Trainer)."""
        t = Trainer(self.session, self.graph, self.output_value(output), optimizer, loss,
                    precision)
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

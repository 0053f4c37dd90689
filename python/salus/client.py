"""Connections, sessions and persistent tensors (salus_client,
salus_session, salus_tensor_*)."""

import threading
import weakref

import numpy as np

from ._core import F16, F32, I32, Code, Error, _NUMPY, _buffer, _dims, _dtype_code, _text, ffi, lib
from .onnx import OnnxModel


_MATH = {None: lib.SALUS_MATH_DEFAULT, "exact": lib.SALUS_MATH_EXACT, "tf32": lib.SALUS_MATH_TF32}


def _math(choice, what):
    if choice not in _MATH:
        raise ValueError(f"{what} is \"exact\", \"tf32\" or None (the default), not {choice!r}")
    return _MATH[choice]


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
                expected_total_s=0.0, expected_iterations=0, wait=False, math_matmul=None,
                math_conv=None):
        """Opens a session (see salus_session_opts in salus.h for each
        argument; wait=True waits for admission instead of failing with
        Code.EEXHAUSTED). math_matmul and math_conv: "exact" or "tf32", how
        f32 matmuls and convolutions may round their products (None:
        PyTorch's defaults, matmul exact and convolution tf32; TF32 needs a
        device with TF32 tensor cores, others stay exact)."""
        return Session(self, name, priority, weight, persistent_bytes, ephemeral_bytes,
                       expected_total_s, expected_iterations, wait, math_matmul, math_conv)

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
                 expected_total_s, expected_iterations, wait, math_matmul=None, math_conv=None):
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
        opts.math_matmul = _math(math_matmul, "math_matmul")
        opts.math_conv = _math(math_conv, "math_conv")
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
        values are integers, float16 for a float16 array, else float32,
        unless `dtype` says), or zeros of `shape` and `dtype` (default
        float32). dtype "bf16" takes uint16 bit patterns (to_bf16) or
        floats, which are rounded to bf16; "f16" takes any floats."""
        if data is not None:
            arr = np.asarray(data)
            if dtype is None and arr.dtype == np.uint16:
                raise ValueError("uint16 data is ambiguous: say dtype=\"bf16\" for bfloat16 bit "
                                 "patterns, or convert it")
            if dtype is None:
                dtype = I32 if arr.dtype.kind in "iub" else F16 if arr.dtype == np.float16 else F32
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

    def run(self, graph, feeds=(), fetch=(), writes=()):
        """Runs one iteration of a registered graph. feeds: one array per graph
        input, in the order the inputs were made (or a dict {Value: array}).
        fetch: Values whose contents to return. writes: (Tensor, array)
        pairs, whole small tensors of this session (at most 256 bytes, at
        most 16) written on the device before the iteration's first op, in
        the same request: per-step scalars at no extra round trip. Returns a
        list of new numpy arrays, one per fetched value, written in place by
        the library."""
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
        writes = list(writes)
        ws = ffi.new("salus_run_write[]", max(len(writes), 1))
        for k, (t, data) in enumerate(writes):
            a, p = _buffer(data, t.dtype_code, t.shape, f"write {k}")
            keep.append(a)
            ws[k].tensor, ws[k].data, ws[k].bytes = t.id, p, a.nbytes
        self._check(lib.salus_run_ex(self._live(), graph._live(),
                                     ffi.cast("const void *const *", ptrs), len(fetch), handles,
                                     out_ptrs, len(writes), ws))
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

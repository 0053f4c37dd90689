"""nn models (salus_model): layer stacks compiled to a training and an
inference graph, their named tensors, checkpoints and ONNX export."""

import weakref

import numpy as np

from ._core import Code, Error, _buffer, _dims, _text, ffi, lib
from .graph import Graph


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

    def conv2d(self, filters, kernel, stride=1, pad=0, bias=True):
        flags = 0 if bias else lib.SALUS_CONV_NO_BIAS
        return self._layer(lib.salus_model_conv2d_ex(self._live(), filters, kernel, stride, pad,
                                                     flags))

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

    def residual_begin(self):
        """Starts a residual block at the current output x: the layers that
        follow are its main path (salus_model_residual_begin)."""
        return self._layer(lib.salus_model_residual_begin(self._live()))

    def residual_shortcut(self):
        """Ends the block's main path: the layers that follow transform x for
        the shortcut (a projection). Without it the shortcut is x."""
        return self._layer(lib.salus_model_residual_shortcut(self._live()))

    def residual_end(self):
        """Adds the main path and the shortcut (same shapes)."""
        return self._layer(lib.salus_model_residual_end(self._live()))

    def compile(self, session, optimizer, batch, infer_batch=None, seed=0, precision="f32"):
        """Creates the parameters in `session` and registers both graphs.
        precision "bf16" or "f16" trains in mixed precision as torch.autocast
        (see Trainer); "f16" adds dynamic loss scaling (amp_state)."""
        opt = optimizer._struct(precision)
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

    def amp_state(self):
        """precision="f16": (the loss scale of the next step, the steps
        skipped so far for an inf or NaN gradient)."""
        self._compiled()
        scale, skipped = ffi.new("float *"), ffi.new("int64_t *")
        self._check(lib.salus_model_amp_state(self._live(), scale, skipped))
        return float(scale[0]), int(skipped[0])

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

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

The package's modules, all re-exported here: _core (the native library,
Code, Error, dtype and buffer conversions), client (Client, Session,
Tensor), graph (Graph, Value), train (the optimizers, Trainer), nn (Model),
onnx (OnnxModel).

Every failure raises salus.Error, carrying the salus status code (`code`,
a salus.Code) and the server's message (`message`).

dtypes: "f32" (numpy.float32), "i32" (numpy.int32), "f16" (numpy.float16)
and "bf16", which numpy lacks: bf16 elements are carried as numpy.uint16
arrays of their bit patterns; salus.to_bf16 makes them from floats and
salus.from_bf16 reads them back as float32, rounding exactly as salusd
does. Tensors, graph inputs and feeds of a bf16 or f16 value also take
float arrays and round them; fetches and reads of bf16 return uint16.

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

from ._core import BF16, F16, F32, I32, Code, Error, default_url, from_bf16, to_bf16
from .client import Client, Session, Tensor, connect
from .graph import Graph, Value
from .nn import Model
from .onnx import OnnxModel
from .train import SGD, Adam, AdamW, Momentum, Trainer

__all__ = [
    "Code", "Error", "connect", "Client", "Session", "Tensor", "Graph", "Value",
    "Model", "Trainer", "OnnxModel", "SGD", "Momentum", "Adam", "AdamW", "default_url", "F32", "I32",
    "BF16", "F16", "to_bf16", "from_bf16",
]

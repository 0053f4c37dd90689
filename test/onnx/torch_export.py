#!/usr/bin/python3
"""Exports PyTorch models to ONNX with PyTorch's own outputs beside them.

For each model: DIR/NAME.onnx (torch.onnx.export, eval mode, random weights
from a fixed seed: nothing is downloaded), DIR/NAME.in (the input, raw, in
the model's input type as salus feeds it: bert's int64 token ids as int32) and DIR/NAME.out (PyTorch's output for it, raw
float32), and a line in DIR/models.txt: NAME. The C checker
(onnx_torch_check) runs the .onnx through salusd and compares.

NAME_f16 and NAME_bf16 are the same models in float16 and bfloat16.
PyTorch 1.13 cannot run most float16 ops on the CPU, so the half model is
the float export converted with the onnx package (to_half: initialisers,
constants, Cast targets, inputs, outputs and value_info of type float
become the half type). PyTorch's reference is its float32 output for the
weights and input the half model holds: both rounded to the half type
first, so what the comparison measures is salus's half-precision
arithmetic, not the rounding of the weights.

  torch_export.py DIR [--models mlp,cnn,resnet18,mobilenet_v2,transformer,bert,
                       resnet18_bf16,resnet18_f16,transformer_bf16,
                       transformer_f16] [--batch N]
Exits 77 when torch or torchvision is missing (meson: SKIP)."""
import argparse
import os
import sys

try:
    import torch
    import torch.nn as nn
    import numpy as np
except ImportError as e:
    print(f"SKIP: PyTorch is not installed ({e}); apt-get install python3-torch")
    sys.exit(77)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                                 nn.Dropout(0.2), nn.Linear(256, 128), nn.Tanh(),
                                 nn.Linear(128, 10), nn.LogSoftmax(dim=1))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, stride=1, padding=2, dilation=2), nn.ReLU6(),
            nn.Conv2d(32, 32, 3, padding=1, groups=4), nn.Sigmoid(), nn.AvgPool2d(2))
        self.head = nn.Sequential(nn.Linear(32 * 7 * 7, 64), nn.GELU(), nn.Linear(64, 10))

    def forward(self, x):
        y = self.f(x)
        y = y.reshape(y.shape[0], -1)  # Shape/Gather/Concat around Reshape
        return torch.softmax(self.head(y), dim=-1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 64)
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                           dropout=0.1, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(64)
        self.out = nn.Linear(64, 5)

    def forward(self, x):
        return self.out(self.norm(self.enc(self.embed(x))).mean(dim=1))


class Bert(nn.Module):
    """A BERT-style encoder over token ids with a key padding mask (id 0 is
    padding): token and position embeddings, 2 layers whose attention
    skips the padding, and the mean over the real tokens. Its export
    computes the mask (Equal), broadcasts it (Reshape, Expand), turns it
    into -inf scores (Where) and back into floats (Not, Cast)."""
    SEQ = 12

    def __init__(self, vocab=100):
        super().__init__()
        self.tok = nn.Embedding(vocab, 64, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, self.SEQ, 64) * 0.1)
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                           dropout=0.1, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(64)
        self.out = nn.Linear(64, 5)

    def forward(self, ids):
        pad = ids == 0
        h = self.enc(self.tok(ids) + self.pos, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.out((self.norm(h) * keep).sum(dim=1) / keep.sum(dim=1))


def token_ids(batch):
    """Token ids in [1, 100) with 0s (padding) at the end of each row,
    every row keeping at least half its tokens."""
    ids = torch.randint(1, 100, (batch, Bert.SEQ))
    for b in range(batch):
        ids[b, Bert.SEQ // 2 + b % (Bert.SEQ // 2):] = 0
    return ids


def build(name):
    if name == "mlp":
        return MLP(), (1, 28, 28)
    if name == "cnn":
        return CNN(), (1, 28, 28)
    if name == "transformer":
        return Encoder(), (12, 16)
    if name == "bert":
        return Bert(), None
    import torchvision
    if name == "resnet18":
        return torchvision.models.resnet18(weights=None), (3, 224, 224)
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(weights=None), (3, 224, 224)
    raise SystemExit(f"unknown model {name}")


HALF = {"f16": torch.float16, "bf16": torch.bfloat16}


def half_bits(a, kind):
    """float32 array a rounded to the half type (to nearest even), as the
    16-bit patterns ONNX stores."""
    t = torch.from_numpy(np.array(a, dtype=np.float32)).to(HALF[kind])
    return t.view(torch.int16).numpy().view(np.uint16)


def to_half(src, dst, kind):
    """Rewrites the float ONNX model src as a float16 or bfloat16 one."""
    import onnx
    from onnx import TensorProto, numpy_helper
    f = TensorProto.FLOAT
    half = TensorProto.FLOAT16 if kind == "f16" else TensorProto.BFLOAT16

    def tensor(t):
        if t.data_type != f:
            return
        bits = half_bits(numpy_helper.to_array(t), kind)
        t.CopyFrom(TensorProto(name=t.name, data_type=half, dims=t.dims,
                               raw_data=bits.astype("<u2").tobytes()))

    m = onnx.load(src)
    g = m.graph
    for t in g.initializer:
        tensor(t)
    for n in g.node:
        for a in n.attribute:
            if a.name == "value" and n.op_type in ("Constant", "ConstantOfShape"):
                tensor(a.t)
            elif a.name == "to" and n.op_type == "Cast" and a.i == f:
                a.i = half
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == f:
            vi.type.tensor_type.elem_type = half
    onnx.save(m, dst)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--models", default="mlp,cnn,transformer,bert,resnet18,mobilenet_v2,"
                    "transformer_f16,transformer_bf16,resnet18_f16,resnet18_bf16")
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args()
    names = args.models.split(",")
    if any(n.split("_")[0] in ("resnet18", "mobilenet") for n in names):
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            print(f"SKIP: torchvision is not installed ({e}); apt-get install python3-torchvision")
            sys.exit(77)
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(1234)
    with open(os.path.join(args.dir, "models.txt"), "w") as listing:
        for name in names:
            base, _, kind = name.rpartition("_")
            if kind not in HALF:
                base, kind = name, None
            model, shape = build(base)
            model.eval()
            # batch norm statistics that are not the identity, so that the
            # exported (folded) normalisation is exercised
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
            x = token_ids(args.batch) if shape is None else torch.randn(args.batch, *shape)
            if kind:
                with torch.no_grad():
                    for t in list(model.parameters()) + list(model.buffers()):
                        if t.is_floating_point():
                            t.copy_(t.to(HALF[kind]).float())
                x = x.to(HALF[kind]).float()
            with torch.no_grad():
                y = model(x)
            path = os.path.join(args.dir, name + ".onnx")
            torch.onnx.export(model, x, path + ".f32" if kind else path, opset_version=14,
                              do_constant_folding=True, input_names=["input"],
                              output_names=["output"])
            if kind:
                to_half(path + ".f32", path, kind)
                os.remove(path + ".f32")
                half_bits(x.numpy(), kind).astype("<u2").tofile(
                    os.path.join(args.dir, name + ".in"))
            else:  # token ids (int64 in the model) are fed as int32
                x.numpy().astype("int32" if shape is None else "float32").tofile(
                    os.path.join(args.dir, name + ".in"))
            y.numpy().astype("float32").tofile(os.path.join(args.dir, name + ".out"))
            listing.write(name + "\n")
            print(f"exported {name}: input {list(x.shape)}, output {list(y.shape)}")


if __name__ == "__main__":
    main()

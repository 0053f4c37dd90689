#!/usr/bin/python3
"""Exports PyTorch models to ONNX with PyTorch's own outputs beside them.

For each model: DIR/NAME.onnx (torch.onnx.export, eval mode, random weights
from a fixed seed: nothing is downloaded), DIR/NAME.in (the input, raw
float32) and DIR/NAME.out (PyTorch's output for it, raw float32), and a
line in DIR/models.txt: NAME. The C checker (onnx_torch_check) runs the
.onnx through salusd and compares.

  torch_export.py DIR [--models mlp,cnn,resnet18,mobilenet_v2,transformer]
                      [--batch N]
Exits 77 when torch or torchvision is missing (meson: SKIP)."""
import argparse
import os
import sys

try:
    import torch
    import torch.nn as nn
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


def build(name):
    if name == "mlp":
        return MLP(), (1, 28, 28)
    if name == "cnn":
        return CNN(), (1, 28, 28)
    if name == "transformer":
        return Encoder(), (12, 16)
    import torchvision
    if name == "resnet18":
        return torchvision.models.resnet18(weights=None), (3, 224, 224)
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(weights=None), (3, 224, 224)
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--models", default="mlp,cnn,transformer,resnet18,mobilenet_v2")
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args()
    names = args.models.split(",")
    if any(n in ("resnet18", "mobilenet_v2") for n in names):
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            print(f"SKIP: torchvision is not installed ({e}); apt-get install python3-torchvision")
            sys.exit(77)
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(1234)
    with open(os.path.join(args.dir, "models.txt"), "w") as listing:
        for name in names:
            model, shape = build(name)
            model.eval()
            # batch norm statistics that are not the identity, so that the
            # exported (folded) normalisation is exercised
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
            x = torch.randn(args.batch, *shape)
            with torch.no_grad():
                y = model(x)
            path = os.path.join(args.dir, name + ".onnx")
            torch.onnx.export(model, x, path, opset_version=14, do_constant_folding=True,
                              input_names=["input"], output_names=["output"])
            x.numpy().astype("float32").tofile(os.path.join(args.dir, name + ".in"))
            y.numpy().astype("float32").tofile(os.path.join(args.dir, name + ".out"))
            listing.write(name + "\n")
            print(f"exported {name}: input {list(x.shape)}, output {list(y.shape)}")


if __name__ == "__main__":
    main()

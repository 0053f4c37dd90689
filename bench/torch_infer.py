"""PyTorch side of bench/onnx_infer: inference of one model at a small
batch (random weights from a fixed seed: every process builds the same
model; nothing is downloaded), in eval mode under torch.no_grad(). Run by
Debian's python3 (python3-torch, python3-torchvision):
    torch_infer.py THREADS [EXPORT_DIR|-] [MODEL] [BATCH]
MODEL: resnet18 (the default), resnet50, efficientnet_b0,
mobilenet_v3_small or convnext_tiny (torchvision, 224x224 images), bert (a
BERT-style encoder over 128 token ids with a key padding mask) or gpt (a
GPT-style decoder over 128 token ids with a causal mask). BATCH defaults
to 1. With EXPORT_DIR it first writes EXPORT_DIR/MODEL.onnx
(torch.onnx.export, opset 14), the input (MODEL.in: float32 images, or
the token ids as int32, which is how salus feeds ONNX's int64) and its
output (MODEL.out) as raw float32. Prints "ready", then answers commands
on stdin, one per line:
    run N     N inferences of the same input, prints "ms T1 T2 ... TN"
    quit
"""
import os
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openblas_core  # noqa: E402,F401  (before OpenBLAS is loaded with torch)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402

VISION = ("resnet18", "resnet50", "efficientnet_b0", "mobilenet_v3_small", "convnext_tiny")
SEQ = 128
VOCAB = 1000


class Bert(nn.Module):
    """A BERT-style encoder the size of BERT-mini (4 layers, width 256, 4
    heads, feed-forward 1024) over token ids where 0 is padding: token and
    position embeddings, attention that skips the padding, and the mean of
    the normalised states over the real tokens."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, 256, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, SEQ, 256) * 0.1)
        layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                           dropout=0.1, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(256)
        self.out = nn.Linear(256, 2)

    def forward(self, ids):
        pad = ids == 0
        h = self.enc(self.tok(ids) + self.pos, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.out((self.norm(h) * keep).sum(dim=1) / keep.sum(dim=1))


class Gpt(nn.Module):
    """A GPT-style decoder of the same size (pre-norm layers, causal
    attention) that returns the next-token logits at every position."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, 256)
        self.pos = nn.Parameter(torch.randn(1, SEQ, 256) * 0.1)
        layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                           dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.dec = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(256)
        self.head = nn.Linear(256, VOCAB)

    def forward(self, ids):
        n = ids.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self.head(self.norm(self.dec(self.tok(ids) + self.pos, mask=causal)))


def token_ids(batch, padded):
    """Token ids in [1, VOCAB); with padded, each row ends in padding (0)
    after between 1/2 and 3/4 of its length."""
    ids = torch.randint(1, VOCAB, (batch, SEQ))
    if padded:
        for b in range(batch):
            ids[b, SEQ // 2 + (b * 17) % (SEQ // 4):] = 0
    return ids


def main():
    threads = int(sys.argv[1])
    torch.set_num_threads(threads)
    torch.manual_seed(4321)
    name = sys.argv[3] if len(sys.argv) > 3 else "resnet18"
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if name in VISION:
        model = getattr(torchvision.models, name)(weights=None)
        x = torch.randn(batch, 3, 224, 224)
    elif name in ("bert", "gpt"):
        model = Bert() if name == "bert" else Gpt()
        x = token_ids(batch, name == "bert")
    else:
        sys.exit(f"torch_infer.py: unknown model {name}")
    model.eval()
    if len(sys.argv) > 2 and sys.argv[2] != "-":
        out_dir = sys.argv[2]
        with torch.no_grad():
            y = model(x)
        torch.onnx.export(model, x, os.path.join(out_dir, f"{name}.onnx"), opset_version=14,
                          input_names=["input"], output_names=["output"])
        x.numpy().astype("float32" if name in VISION else "int32").tofile(
            os.path.join(out_dir, f"{name}.in"))
        y.numpy().tofile(os.path.join(out_dir, f"{name}.out"))
    with torch.no_grad():
        model(x)  # warm-up: first-call allocations
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        times = []
        with torch.no_grad():
            for _ in range(int(cmd[1])):
                t0 = time.perf_counter()
                model(x)
                times.append((time.perf_counter() - t0) * 1e3)
        print("ms " + " ".join(f"{t:.4f}" for t in times), flush=True)


if __name__ == "__main__":
    main()

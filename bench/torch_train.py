"""PyTorch side of bench/train_vs_torch: the same models as the salus side,
batch, optimizer (SGD with momentum 0.9) and data (Fashion-MNIST training
set, batches taken in order). Run by Debian's python3 (it has python3-torch):
    torch_train.py THREADS BATCH LR
Models: "mlp" (784-256-128-10, ReLU) and "cnn", the one of
examples/fashion_train.c (conv 16 3x3 pad 1, ReLU, maxpool 2, conv 32 3x3
pad 1, ReLU, maxpool 2, flatten, dense 128, ReLU, dense 10). Reads
commands on stdin, one per line:
    warm MODEL STEPS     trains STEPS iterations untimed, prints "ok"
    run MODEL STEPS      trains STEPS iterations, prints "sps SAMPLES_PER_SECOND loss L"
    quit
"""
import gzip
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openblas_core  # noqa: E402,F401  (before OpenBLAS is loaded with torch)
import torch  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def load(split):
    with gzip.open(f"{DATA}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(f"{DATA}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


def build(kind):
    nn = torch.nn
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10)), (784,)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10)), (1, 28, 28)


class Job:
    def __init__(self, kind, x, y, batch, lr):
        self.model, shape = build(kind)
        self.x = x.reshape(-1, *shape)  # a view: no copy
        self.y = y
        self.batch = batch
        self.pos = 0
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def step(self):
        b = self.batch
        if self.pos + b > self.x.shape[0]:
            self.pos = 0
        xb, yb = self.x[self.pos:self.pos + b], self.y[self.pos:self.pos + b]
        self.pos += b
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(xb), yb)
        loss.backward()
        self.opt.step()
        return loss


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    lr = float(sys.argv[3]) if len(sys.argv) > 3 else 0.02
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x, y = load("train")
    jobs = {k: Job(k, x, y, batch, lr) for k in ("mlp", "cnn")}
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        job, steps = jobs[cmd[1]], int(cmd[2])
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = job.step()
        value = float(loss)  # the last step's result is materialised, as salus fetches its loss
        dt = time.perf_counter() - t0
        if cmd[0] == "warm":
            print("ok", flush=True)
        else:
            print(f"sps {steps * batch / dt:.1f} loss {value:.4f}", flush=True)


if __name__ == "__main__":
    main()

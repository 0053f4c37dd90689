"""PyTorch side of bench/train_vs_torch: the same models as the salus side
(MLP 784-256-128-10 with ReLU, or the CNN of examples/fashion_train.c:
conv 16 3x3 pad 1, ReLU, maxpool 2, conv 32 3x3 pad 1, ReLU, maxpool 2,
dense 128, ReLU, dense 10), batch, optimizer (SGD with momentum 0.9) and
data (Fashion-MNIST training set, batches taken in order). Run by Debian's
python3 (it has python3-torch):
    torch_train.py MODEL THREADS BATCH LR
Reads commands on stdin, one per line:
    run STEPS    trains STEPS iterations, prints "sps SAMPLES_PER_SECOND loss L"
    quit
"""
import gzip
import sys
import time

import numpy as np
import torch

DATA = "/usr/share/datasets/fashion-mnist"


def load(split, image_shape):
    with gzip.open(f"{DATA}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, *image_shape)
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


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    lr = float(sys.argv[4]) if len(sys.argv) > 4 else 0.02
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model, shape = build(kind)
    x, y = load("train", shape)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    pos = 0

    def step():
        nonlocal pos
        if pos + batch > x.shape[0]:
            pos = 0
        xb, yb = x[pos:pos + batch], y[pos:pos + batch]
        pos += batch
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    for _ in range(20):  # warm-up: allocator, threads, oneDNN primitives
        step()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        steps = int(cmd[1])
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        float(loss)  # the last step's result is materialised, as salus fetches its loss
        dt = time.perf_counter() - t0
        print(f"sps {steps * batch / dt:.1f} loss {float(loss):.4f}", flush=True)


if __name__ == "__main__":
    main()

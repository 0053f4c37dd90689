#!/usr/bin/python3
"""Exports a torch.nn.Module (the CNN of examples/fashion_train: conv 5x5x32,
pool, conv 5x5x64, pool, dense 128, dense 10) to ONNX, trains it on
Fashion-MNIST through a salusd from Python, and trains the same model with
PyTorch alone: same initial weights, same batches in the same order, same
optimizer (SGD, momentum 0.9). PyTorch runs with 1 and with 2 threads and
its better rate counts. The three trainings advance in turns of a few
batches (salus, torch 1 thread, torch 2 threads, again), so each sees the
same machine load; samples/s is each one's training loop as the caller sees
it (salus: Trainer.step, a round trip to the server; torch: forward,
backward, step). Progress goes to stderr; the last line is

    BENCH onnx_train model=cnn salus_acc=... torch_acc=... salus_sps=... torch_sps=... ratio=...

    SALUS_URL=ipc:///path/salus.sock examples/python/onnx_train.py --epochs 1
"""
import argparse
import copy
import io
import json
import sys
import time

import numpy as np
import torch

import fashion_mnist
import salus

TURN = 20  # batches per turn of each training


def cnn():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def export(model, batch):
    """The model as ONNX bytes (opset 13, fixed batch; eval mode changes
    nothing here: the model has no dropout or batch norm)."""
    buf = io.BytesIO()
    model.eval()
    torch.onnx.export(model, torch.zeros(batch, 1, 28, 28), buf, input_names=["image"],
                      output_names=["logits"], opset_version=13)
    model.train()
    return buf.getvalue()


def accuracy(predict, x, y, batch):
    """Test accuracy in %, predicting in batches of `batch` (the last one
    padded with zeros, its padding not counted)."""
    right = 0
    for i in range(0, len(x), batch):
        xb = x[i:i + batch]
        n = len(xb)
        if n < batch:
            xb = np.concatenate([xb, np.zeros((batch - n,) + xb.shape[1:], xb.dtype)])
        right += int((predict(xb)[:n].argmax(1) == y[i:i + n]).sum())
    return 100.0 * right / len(x)


class TorchRun:
    """PyTorch alone at a fixed thread count."""

    def __init__(self, model, lr, threads):
        self.model, self.threads, self.seconds = model, threads, 0.0
        self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        self.loss = torch.nn.CrossEntropyLoss()

    def steps(self, chunk):
        torch.set_num_threads(self.threads)
        t0 = time.perf_counter()
        for xb, yb in chunk:
            self.opt.zero_grad()
            loss = self.loss(self.model(torch.from_numpy(xb)), torch.from_numpy(yb).long())
            loss.backward()
            self.opt.step()
        self.seconds += time.perf_counter() - t0
        return float(loss)

    def predict(self, xb):
        with torch.no_grad():
            return self.model(torch.from_numpy(xb)).numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="salusd URL (default: $SALUS_URL or the user's socket)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--limit", type=int, default=0,
                    help="train on the first N images and test on the first N (a fast run)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the BENCH figures to this JSON file")
    args = ap.parse_args()

    x, y = fashion_mnist.load("train")
    xt, yt = fashion_mnist.load("t10k")
    if args.limit:
        x, y, xt, yt = x[:args.limit], y[:args.limit], xt[:args.limit], yt[:args.limit]
    torch.manual_seed(args.seed)
    model = cnn()
    torches = [TorchRun(copy.deepcopy(model), args.lr, n) for n in (1, 2)]
    onnx = export(model, args.batch)

    with salus.connect(args.url) as client, client.session(name="onnx-train") as s:
        m = s.load_onnx(onnx)
        trainer = m.trainer(salus.Momentum(args.lr, momentum=0.9))
        print(f"cnn: {sum(p.numel() for p in model.parameters())} parameters, ONNX "
              f"{len(onnx)} bytes, {client.device}", flush=True)
        salus_s, seen = 0.0, 0
        rng = np.random.default_rng(args.seed)
        for epoch in range(args.epochs):
            batches = list(fashion_mnist.batches(x, y, args.batch, rng))
            for c in range(0, len(batches), TURN):
                chunk = batches[c:c + TURN]
                t0 = time.perf_counter()
                for xb, yb in chunk:
                    loss = trainer.step(xb, yb)
                salus_s += time.perf_counter() - t0
                tl = [t.steps(chunk) for t in torches]
                seen += len(chunk) * args.batch
                print(f"\repoch {epoch + 1}/{args.epochs} step {c + len(chunk)}/{len(batches)} "
                      f"loss salus {loss:.4f} torch {tl[0]:.4f} | samples/s salus "
                      f"{seen / salus_s:,.0f} torch1 {seen / torches[0].seconds:,.0f} "
                      f"torch2 {seen / torches[1].seconds:,.0f}", end="", file=sys.stderr,
                      flush=True)
            print(file=sys.stderr)
            salus_acc = accuracy(lambda xb: m.run(xb)[0], xt, yt, args.batch)
            accs = [accuracy(t.predict, xt, yt, args.batch) for t in torches]
            print(f"epoch {epoch + 1}: test accuracy salus {salus_acc:.2f} %, torch "
                  f"{accs[0]:.2f} % (1 thread) {accs[1]:.2f} % (2 threads)", flush=True)
        if not seen:
            sys.exit("no full batch to train on: --limit is below --batch")
        best = max(torches, key=lambda t: seen / t.seconds)
        torch_acc = accs[torches.index(best)]
        salus_sps, torch_sps = seen / salus_s, seen / best.seconds
        print(f"salus: {salus_acc:.2f} % test accuracy, {salus_sps:,.0f} samples/s")
        print(f"torch: {torch_acc:.2f} % test accuracy, {torch_sps:,.0f} samples/s "
              f"({best.threads} thread{'s' if best.threads > 1 else ''}, the better of 1 and 2)")
        bench = {"model": "cnn", "epochs": args.epochs, "samples": seen,
                 "salus_acc": round(salus_acc, 2), "torch_acc": round(torch_acc, 2),
                 "salus_sps": round(salus_sps, 1), "torch_sps": round(torch_sps, 1),
                 "ratio": round(salus_sps / torch_sps, 3), "torch_threads": best.threads}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(bench, f, indent=1)
        print("BENCH onnx_train " + " ".join(f"{k}={v}" for k, v in bench.items()), flush=True)


if __name__ == "__main__":
    main()

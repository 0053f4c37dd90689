#!/usr/bin/python3
"""Trains the CNN of examples/fashion_train (conv 5x5x32, pool, conv 5x5x64,
pool, dense 128, dense 10; SGD with momentum 0.9) on Fashion-MNIST through a
salusd from Python, printing progress and the test accuracy.

    SALUS_URL=ipc:///path/salus.sock examples/python/train_nn.py --epochs 1
"""
import argparse
import sys
import time

import numpy as np

import fashion_mnist
import salus


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="salusd URL (default: $SALUS_URL or the user's socket)")
    ap.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--limit", type=int, default=0, help="train on the first N images only")
    args = ap.parse_args()

    x, y = fashion_mnist.load("train")
    xt, yt = fashion_mnist.load("t10k")
    if args.limit:
        x, y = x[:args.limit], y[:args.limit]
    if args.model == "mlp":
        x, xt = x.reshape(len(x), 784), xt.reshape(len(xt), 784)
        model = salus.Model((784,)).dense(256).relu().dense(128).relu().dense(10)
    else:
        model = (salus.Model((1, 28, 28)).conv2d(32, 5, pad=2).relu().maxpool(2)
                 .conv2d(64, 5, pad=2).relu().maxpool(2).flatten().dense(128).relu().dense(10))
    infer = 100
    with salus.connect(args.url) as client, client.session(name=f"py-{args.model}") as s:
        model.compile(s, salus.Momentum(args.lr, momentum=0.9), batch=args.batch,
                      infer_batch=infer, seed=1)
        print(f"{args.model}: {model.param_count} parameters, {client.device}", flush=True)
        rng = np.random.default_rng(1)
        for epoch in range(args.epochs):
            t0, seen, losses = time.monotonic(), 0, []
            steps = len(x) // args.batch
            for i, (xb, yb) in enumerate(fashion_mnist.batches(x, y, args.batch, rng)):
                losses.append(model.train_step(xb, yb))
                seen += len(xb)
                if (i + 1) % 50 == 0 or i + 1 == steps:
                    rate = seen / (time.monotonic() - t0)
                    print(f"\repoch {epoch + 1}/{args.epochs} step {i + 1}/{steps} "
                          f"loss {np.mean(losses[-50:]):.4f} {rate:,.0f} samples/s",
                          end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
            right = sum(int((model.predict(xt[i:i + infer]) == yt[i:i + infer]).sum())
                        for i in range(0, len(xt) - infer + 1, infer))
            print(f"epoch {epoch + 1}: loss {np.mean(losses[-50:]):.4f}, "
                  f"test accuracy {100.0 * right / len(xt):.2f} %", flush=True)


if __name__ == "__main__":
    main()

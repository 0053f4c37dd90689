"""Trains torchvision's ResNet-18, unchanged PyTorch code, on Fashion-MNIST
through salusd: salus.torch.compile_step captures the whole training step
(forward, cross-entropy, backward, SGD with momentum) as one salus graph,
and each batch is one Run request. The trained weights come back into the
PyTorch module by name, which then evaluates the test set in PyTorch.

    python3 torch_resnet.py --steps 300
"""
import argparse
import time

import numpy as np
import torch
import torchvision

import fashion_mnist
import salus
import salus.torch


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="salusd URL (default: $SALUS_URL or the user's socket)")
    ap.add_argument("--steps", type=int, default=300, help="training steps")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--test", type=int, default=1000, help="test images evaluated")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    # one grey channel in, as Fashion-MNIST has
    model.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    x, y = fashion_mnist.load("train")
    rng = np.random.default_rng(0)
    batches = fashion_mnist.batches(x, y, args.batch, rng)

    with salus.connect(args.url) as client, client.session(name="torch-resnet18") as s:
        xb, yb = next(batches)
        step = salus.torch.compile_step(model, torch.nn.CrossEntropyLoss(), opt,
                                        (torch.from_numpy(xb), torch.from_numpy(yb).long()),
                                        session=s)
        print(f"captured ResNet-18's training step: {len(step.gm.graph.nodes)} aten nodes, "
              "one salus graph", flush=True)
        t0, seen, losses = time.monotonic(), 0, []
        for i in range(args.steps):
            if i:
                try:
                    xb, yb = next(batches)
                except StopIteration:
                    batches = fashion_mnist.batches(x, y, args.batch, rng)
                    xb, yb = next(batches)
            losses.append(step(torch.from_numpy(xb), torch.from_numpy(yb)))
            sched.step()
            seen += len(xb)
            if (i + 1) % 20 == 0 or i + 1 == args.steps:
                rate = seen / (time.monotonic() - t0)
                print(f"step {i + 1}/{args.steps}  loss {np.mean(losses[-20:]):.4f}  "
                      f"lr {sched.get_last_lr()[0]:.4f}  {rate:.0f} images/s", flush=True)
        model.load_state_dict(step.state_dict())

    model.eval()
    xt, yt = fashion_mnist.load("t10k")
    with torch.no_grad():
        pred = model(torch.from_numpy(xt[:args.test])).argmax(1).numpy()
    print(f"test accuracy {100.0 * np.mean(pred == yt[:args.test]):.1f}% "
          f"({args.test} images, PyTorch with the weights trained in salusd)")


if __name__ == "__main__":
    main()

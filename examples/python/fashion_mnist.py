"""Fashion-MNIST from Debian's dataset-fashion-mnist package, as numpy arrays.

images: float32 [n, 1, 28, 28] scaled to [0, 1]; labels: int32 [n]."""
import gzip
import os

import numpy as np

DIR = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def _idx(path, magic):
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SystemExit(f"fashion-mnist: cannot read {path} ({e}); install dataset-fashion-mnist")
    if int.from_bytes(data[:4], "big") != magic:
        raise SystemExit(f"fashion-mnist: {path} is not an idx file")
    return data


def load(split="train"):
    """(images, labels) of split "train" (60,000) or "t10k" (10,000)."""
    img = _idx(f"{DIR}/{split}-images-idx3-ubyte.gz", 0x0803)
    lab = _idx(f"{DIR}/{split}-labels-idx1-ubyte.gz", 0x0801)
    n = int.from_bytes(img[4:8], "big")
    if int.from_bytes(lab[4:8], "big") != n or len(img) != 16 + n * 784 or len(lab) != 8 + n:
        raise SystemExit(f"fashion-mnist: {split} images and labels do not match")
    x = np.frombuffer(img, np.uint8, offset=16).reshape(n, 1, 28, 28).astype(np.float32) / 255
    y = np.frombuffer(lab, np.uint8, offset=8).astype(np.int32)
    return x, y


def batches(x, y, batch, rng=None):
    """Consecutive (or, with rng, shuffled) full batches of one epoch."""
    order = rng.permutation(len(x)) if rng is not None else np.arange(len(x))
    for i in range(0, len(x) - batch + 1, batch):
        idx = order[i:i + batch]
        yield x[idx], y[idx]

#!/usr/bin/python3
"""Serves a torchvision ResNet-18 (random weights: nothing is downloaded)
through a salusd at batch 1: the model is exported to ONNX, loaded with
Session.load_onnx, and each request is one OnnxModel.run. Prints the
latency p50/p99 beside PyTorch's in-process latency on the same inputs
(the better of 1 and 2 threads) and the largest absolute and relative
difference of the outputs. Requests alternate salus, torch 1 thread, torch
2 threads, so each sees the same machine load. The last line is

    BENCH serve_resnet model=resnet18 salus_p50_ms=... salus_p99_ms=... torch_p50_ms=... ...

    SALUS_URL=ipc:///path/salus.sock examples/python/serve_resnet.py --requests 200
"""
import argparse
import io
import json
import sys
import time

import numpy as np
import torch
import torchvision

import salus


def percentile(xs, p):
    return float(np.percentile(np.asarray(xs) * 1e3, p))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="salusd URL (default: $SALUS_URL or the user's socket)")
    ap.add_argument("--requests", type=int, default=200, help="timed requests of each")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--size", type=int, default=224, help="image height and width")
    ap.add_argument("--json", help="also write the BENCH figures to this JSON file")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    buf = io.BytesIO()
    torch.onnx.export(model, torch.zeros(1, 3, args.size, args.size), buf, input_names=["image"],
                      output_names=["logits"], opset_version=13)
    rng = np.random.default_rng(0)
    lat = {"salus": [], 1: [], 2: []}
    max_abs = max_rel = 0.0
    with salus.connect(args.url) as client, client.session(name="serve-resnet18") as s:
        with s.load_onnx(buf.getvalue()) as m:
            print(f"resnet18: {sum(p.numel() for p in model.parameters())} parameters, "
                  f"input {m.inputs[0][1]}, {client.device}", flush=True)
            for i in range(args.warmup + args.requests):
                x = rng.standard_normal((1, 3, args.size, args.size), dtype=np.float32)
                t0 = time.perf_counter()
                (y,) = m.run(x)
                t_salus = time.perf_counter() - t0
                ts = {}
                for n in (1, 2):
                    torch.set_num_threads(n)
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        want = model(torch.from_numpy(x)).numpy()
                    ts[n] = time.perf_counter() - t0
                max_abs = max(max_abs, float(np.max(np.abs(y - want))))
                max_rel = max(max_rel, float(np.max(np.abs(y - want)) / np.max(np.abs(want))))
                if i >= args.warmup:
                    lat["salus"].append(t_salus)
                    for n in (1, 2):
                        lat[n].append(ts[n])
                if (i + 1) % 10 == 0:
                    print(f"\rrequest {i + 1}/{args.warmup + args.requests}", end="",
                          file=sys.stderr, flush=True)
            print(file=sys.stderr)
    best = min((1, 2), key=lambda n: percentile(lat[n], 50))
    sp50, sp99 = percentile(lat["salus"], 50), percentile(lat["salus"], 99)
    tp50, tp99 = percentile(lat[best], 50), percentile(lat[best], 99)
    print(f"salus:  p50 {sp50:.2f} ms  p99 {sp99:.2f} ms (batch 1, through salusd)")
    print(f"torch:  p50 {tp50:.2f} ms  p99 {tp99:.2f} ms (in process, {best} "
          f"thread{'s' if best > 1 else ''}, the better of 1 and 2)")
    print(f"outputs: max abs difference {max_abs:.3g}, max relative {max_rel:.3g}")
    bench = {"model": "resnet18", "requests": args.requests, "salus_p50_ms": round(sp50, 3),
             "salus_p99_ms": round(sp99, 3), "torch_p50_ms": round(tp50, 3),
             "torch_p99_ms": round(tp99, 3), "torch_threads": best,
             "max_abs_err": float(f"{max_abs:.3g}"), "max_rel_err": float(f"{max_rel:.3g}")}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(bench, f, indent=1)
    print("BENCH serve_resnet " + " ".join(f"{k}={v}" for k, v in bench.items()), flush=True)


if __name__ == "__main__":
    main()

"""PyTorch side of bench/onnx_infer: batch-1 inference of a torchvision
model (random weights from a fixed seed: every process builds the same
model; nothing is downloaded), in eval mode under torch.no_grad(). Run by
Debian's python3 (python3-torch, python3-torchvision):
    torch_infer.py THREADS [EXPORT_DIR|-] [MODEL]
MODEL: resnet18 (the default), resnet50, efficientnet_b0 or
mobilenet_v3_small. With EXPORT_DIR it first writes EXPORT_DIR/MODEL.onnx
(torch.onnx.export, opset 14), the input (MODEL.in) and its output
(MODEL.out) as raw float32. Prints "ready", then answers commands on stdin, one per line:
    run N     N inferences of the same input, prints "ms T1 T2 ... TN"
    quit
"""
import os
import sys
import time

import torch
import torchvision


def main():
    threads = int(sys.argv[1])
    torch.set_num_threads(threads)
    torch.manual_seed(4321)
    name = sys.argv[3] if len(sys.argv) > 3 else "resnet18"
    if name not in ("resnet18", "resnet50", "efficientnet_b0", "mobilenet_v3_small"):
        sys.exit(f"torch_infer.py: unknown model {name}")
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    if len(sys.argv) > 2 and sys.argv[2] != "-":
        out_dir = sys.argv[2]
        with torch.no_grad():
            y = model(x)
        torch.onnx.export(model, x, os.path.join(out_dir, f"{name}.onnx"), opset_version=14,
                          input_names=["input"], output_names=["output"])
        x.numpy().tofile(os.path.join(out_dir, f"{name}.in"))
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

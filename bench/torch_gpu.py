"""PyTorch side of bench/gpu_train: the models the salus side builds with
salus_model (the same layers, shapes, loss and optimizer: SGD with momentum
0.9), trained on synthetic batches that are copied from pinned host memory
to the device every step, as salus's client uploads its batch.

    torch_gpu.py DEVICE MODEL BATCH IMAGE

DEVICE is cuda or cpu; MODEL mlp (784-256-128-10), cnn (the Fashion-MNIST
CNN of examples/fashion_train.c) or resnet50 (ResNet-50 v1.5 as salus_model
builds it: the stem's max pool has no padding, so the stages see 55, 28, 14
and 7 pixels at IMAGE 224). Each variant is a model of its own:
    f32         PyTorch's defaults (matmuls exact, convolutions TF32)
    bf16        torch.autocast(dtype=torch.bfloat16)
    bf16_graph  the same step, forward, backward and update, captured once
                as a CUDA graph and replayed (cuda only)
Reads commands on stdin, one per line:
    warm VARIANT STEPS   trains STEPS steps untimed, prints "ok"
    run VARIANT STEPS    prints "sps SAMPLES_PER_SECOND loss L"
    quit
A variant the device cannot run answers "na REASON".
"""
import sys
import time

import torch

nn = torch.nn
HOST_BATCHES = 4


def bottleneck(cin, width, stride):
    out = width * 4
    main = nn.Sequential(
        nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))
    short = None
    if stride != 1 or cin != out:
        short = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))
    return main, short


class Block(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.main, self.short = bottleneck(cin, width, stride)

    def forward(self, x):
        s = x if self.short is None else self.short(x)
        return torch.relu(self.main(x) + s)


def resnet50(image):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Block(cin, width, stride if b == 0 else 1))
            cin = width * 4
    side = (image + 2 * 3 - 7) // 2 + 1
    side = (side - 3) // 2 + 1
    for _ in range(3):
        side = (side + 2 - 3) // 2 + 1
    layers += [nn.AvgPool2d(side), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers), (3, image, image), 1000


def build(kind, image):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10)), (784,), 10
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)), (1, 28, 28), 10
    if kind == "resnet50":
        return resnet50(image)
    sys.exit(f"torch_gpu.py: unknown model {kind}")


class Variant:
    def __init__(self, name, dev, kind, batch, image):
        self.name, self.dev, self.batch = name, dev, batch
        model, shape, classes = build(kind, image)
        self.model = model.to(dev).to(memory_format=torch.channels_last) \
            if len(shape) == 3 and dev.type == "cuda" else model.to(dev)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        pin = dev.type == "cuda"
        self.hx = [torch.rand(batch, *shape).pin_memory() if pin else torch.rand(batch, *shape)
                   for _ in range(HOST_BATCHES)]
        self.hy = [torch.randint(0, classes, (batch,)) for _ in range(HOST_BATCHES)]
        if pin:
            self.hy = [y.pin_memory() for y in self.hy]
        self.i = 0
        self.autocast = name != "f32"
        self.graph = None
        if name == "bf16_graph":
            self.capture()

    def forward_backward(self, x, y):
        with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.autocast):
            loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss

    def capture(self):
        self.sx = self.hx[0].to(self.dev)
        self.sy = self.hy[0].to(self.dev)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                self.forward_backward(self.sx, self.sy)
                self.opt.step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.sloss = self.forward_backward(self.sx, self.sy)
            self.opt.step()

    def step(self):
        k = self.i % HOST_BATCHES
        self.i += 1
        if self.graph is not None:
            self.sx.copy_(self.hx[k], non_blocking=True)
            self.sy.copy_(self.hy[k], non_blocking=True)
            self.graph.replay()
            return self.sloss
        x = self.hx[k].to(self.dev, non_blocking=True)
        y = self.hy[k].to(self.dev, non_blocking=True)
        if x.dim() == 4 and self.dev.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        self.opt.zero_grad(set_to_none=True)
        loss = self.forward_backward(x, y)
        self.opt.step()
        return loss


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: torch_gpu.py cuda|cpu MODEL BATCH IMAGE")
    dev = torch.device(sys.argv[1])
    kind, batch, image = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.manual_seed(1)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    variants = {}
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        name, steps = cmd[1], int(cmd[2])
        if name == "bf16_graph" and dev.type != "cuda":
            print("na CUDA graphs need a GPU", flush=True)
            continue
        if name not in variants:
            variants[name] = Variant(name, dev, kind, batch, image)
        v = variants[name]
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = v.step()
        value = float(loss)  # waits for the last step, as salus's client gets its loss
        dt = time.perf_counter() - t0
        if cmd[0] == "warm":
            print("ok", flush=True)
        else:
            print(f"sps {steps * batch / dt:.1f} loss {value:.4f}", flush=True)


if __name__ == "__main__":
    main()

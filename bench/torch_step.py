"""bench/torch_step: training throughput of a PyTorch model through salusd
with salus.torch.compile_step (one captured graph per step) against the
same model, batch, optimizer and data trained by PyTorch on the cpu,
best of 1 and 2 threads.

    torch_step.py --salusd PATH --model gpt|resnet18 [--rounds 5]
                  [--seconds 3] [--json FILE]

Models: "gpt", a GPT-style decoder (4 layers, width 128, 4 heads, vocab
512, sequence 64, causal mask, GELU MLP) at batch 8 with AdamW; and
"resnet18", torchvision's ResNet-18 (10 classes) on 3x32x32 images at
batch 32 with SGD and momentum 0.9. The data set is fixed and synthetic
(made from a seed by every process alike): an epoch is 16 batches.

Each side trains whole epochs until at least --seconds have passed, and
a round is salus, PyTorch 1 thread, salus, PyTorch 2 threads: both sides
measured alternately, each PyTorch configuration in its own process
(this script run with --peer THREADS). samples/s counts whole steps as
the caller sees them (for salus: feeding the batch, running the step,
fetching the loss). The ratio is salus's median over the better PyTorch
configuration's median; p99 step times come from every timed step.
After the rounds a fresh PyTorch process of the better configuration
trains alone for as long as all its rounds took, and its rate is printed
beside the in-bench one: a gap says the rounds disturbed PyTorch, and the
ratio is taken over the higher of the two (ratio_bench: over the in-bench
median alone).
Prints per-round figures, then
    BENCH torch_step model=M ratio=... salus_sps=... torch_sps=... ...
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openblas_core  # noqa: E402  (before OpenBLAS is loaded with torch)
import salusd_proc  # noqa: E402
import torch  # noqa: E402

EPOCH = 16  # batches in the synthetic data set
WARM_STEPS = 5


class _Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x, causal):
        b, t, d = x.shape
        h = self.heads
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self, vocab=512, d=128, heads=4, layers=4, seq=64):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("positions", torch.arange(seq), persistent=False)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions)
        for blk in self.blocks:
            x = blk(x, self.causal)
        return self.head(self.ln(x))


def _lm_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))


def setup(kind):
    """(model, loss_fn, optimizer, batches, batch size): the same in every
    process."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if kind == "gpt":
        model, batch = Gpt(), 8
        data = []
        for _ in range(EPOCH):
            text = torch.randint(0, 512, (batch, 65), generator=g)
            data.append((text[:, :-1].contiguous(), text[:, 1:].contiguous()))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        return model, _lm_loss, opt, data, batch
    import torchvision
    model, batch = torchvision.models.resnet18(num_classes=10), 32
    data = [(torch.randn(batch, 3, 32, 32, generator=g),
             torch.randint(0, 10, (batch,), generator=g)) for _ in range(EPOCH)]
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, torch.nn.CrossEntropyLoss(), opt, data, batch


def eager_step(model, loss_fn, opt):
    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)  # materialised, as salus fetches its loss
    return step


def train_for(step, data, batch, seconds):
    """Whole epochs until `seconds` have passed: (samples/s, step times in ms)."""
    times = []
    t0 = time.perf_counter()
    while True:
        for x, y in data:
            s = time.perf_counter()
            step(x, y)
            times.append((time.perf_counter() - s) * 1e3)
        if time.perf_counter() - t0 >= seconds:
            break
    return len(times) * batch / (time.perf_counter() - t0), times


def peer(threads, kind):
    """A PyTorch configuration: answers "run SECONDS" with its rate and step
    times, "alone SECONDS" likewise (a standalone run), "quit"."""
    torch.set_num_threads(threads)
    model, loss_fn, opt, data, batch = setup(kind)
    step = eager_step(model, loss_fn, opt)
    for x, y in data[:WARM_STEPS]:
        step(x, y)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        sps, times = train_for(step, data, batch, float(cmd[1]))
        print(f"sps {sps:.3f} ms " + " ".join(f"{t:.3f}" for t in times), flush=True)


class Peer:
    def __init__(self, threads, kind):
        self.threads = threads
        self.proc = subprocess.Popen([sys.executable, __file__, "--peer", str(threads),
                                      "--model", kind], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"torch_step: the PyTorch peer ({threads} threads) did not start")

    def run(self, seconds):
        self.proc.stdin.write(f"run {seconds}\n")
        self.proc.stdin.flush()
        words = self.proc.stdout.readline().split()
        if not words or words[0] != "sps":
            raise SystemExit(f"torch_step: the PyTorch peer ({self.threads} threads) stopped")
        return float(words[1]), [float(w) for w in words[3:]]

    def stop(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait()


def p99(times):
    return float(np.percentile(np.asarray(times), 99))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--salusd")
    ap.add_argument("--model", default="gpt", choices=("gpt", "resnet18"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json")
    ap.add_argument("--peer", type=int)
    a = ap.parse_args()
    if a.peer:
        return peer(a.peer, a.model)
    if not a.salusd:
        ap.error("--salusd is required")
    import salus
    import salus.torch

    load_before = os.getloadavg()[0]
    server, url = salusd_proc.start(a.salusd, "torch_step")
    peers = []
    try:
        peers = [Peer(1, a.model), Peer(2, a.model)]
        model, loss_fn, opt, data, batch = setup(a.model)
        with salus.connect(url) as c, c.session(name="torch_step") as s:
            t0 = time.perf_counter()
            step = salus.torch.compile_step(model, loss_fn, opt, data[0], session=s)
            capture_s = time.perf_counter() - t0
            for x, y in data[:WARM_STEPS]:
                step(x, y)
            salus_sps, salus_ms = [], []
            torch_sps = {p.threads: [] for p in peers}
            torch_ms = {p.threads: [] for p in peers}
            for r in range(a.rounds):
                line = f"{a.model} round {r}:"
                for p in peers:
                    sps, ms = train_for(step, data, batch, a.seconds)
                    salus_sps.append(sps)
                    salus_ms += ms
                    tsps, tms = p.run(a.seconds)
                    torch_sps[p.threads].append(tsps)
                    torch_ms[p.threads] += tms
                    line += f"  salus {sps:.1f} torch{p.threads} {tsps:.1f}"
                print(line + " samples/s", flush=True)
            final_loss = step(*data[0])
        best = max(torch_sps, key=lambda k: float(np.median(torch_sps[k])))
        for p in peers:
            p.stop()
        peers = []
        # the same script alone, as long as all its rounds took
        alone = Peer(best, a.model)
        alone_sps, _ = alone.run(a.seconds * a.rounds)
        alone.stop()
    finally:
        for p in peers:
            p.proc.kill()
        server.terminate()
        server.wait()
    load_after = os.getloadavg()[0]
    sal = float(np.median(salus_sps))
    tor = float(np.median(torch_sps[best]))
    out = {
        "bench": "torch_step", "model": a.model, "batch": batch, "rounds": a.rounds,
        "seconds": a.seconds, "ratio": sal / max(tor, alone_sps), "ratio_bench": sal / tor, "salus_sps": sal, "torch_sps": tor,
        "torch_best": f"torch{best}", "torch1_sps": float(np.median(torch_sps[1])),
        "torch2_sps": float(np.median(torch_sps[2])), "torch_alone_sps": alone_sps,
        "salus_p99_ms": p99(salus_ms), "torch_p99_ms": p99(torch_ms[best]),
        "salus_median_ms": float(np.median(salus_ms)),
        "torch_median_ms": float(np.median(torch_ms[best])), "capture_s": capture_s,
        "load_before": load_before, "load_after": load_after,
    }
    print(f"{a.model}: capture and registration {capture_s:.2f} s; salus final loss "
          f"{final_loss:.4f}; batch {batch}, epoch {EPOCH} batches")
    print(f"PyTorch torch{best}: {tor:.1f} samples/s in the bench, {alone_sps:.1f} alone "
          f"({100 * (tor / alone_sps - 1):+.1f} %)")
    print(f"load average (1 min) {load_before:.2f} before, {load_after:.2f} after")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
            f.write("\n")
    print(f"BENCH torch_step model={a.model} ratio={out['ratio']:.3f} salus_sps={sal:.1f} "
          f"ratio_bench={sal / tor:.3f} torch_sps={tor:.1f} torch_best=torch{best} torch1_sps={out['torch1_sps']:.1f} "
          f"torch2_sps={out['torch2_sps']:.1f} torch_alone_sps={alone_sps:.1f} "
          f"salus_p99_ms={out['salus_p99_ms']:.2f} torch_p99_ms={out['torch_p99_ms']:.2f} "
          f"rounds={a.rounds} torch_blas={openblas_core.CORETYPE or 'auto'}")


if __name__ == "__main__":
    main()

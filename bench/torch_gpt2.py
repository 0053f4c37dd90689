"""A GPT-2-small-shaped training step through salusd (salus.torch's
compile_step: the whole step, forward, loss, backward and AdamW, as one
salus graph) against PyTorch on the same device at its best.

    torch_gpt2.py check --salusd PATH [--device DEV]
    torch_gpt2.py bench --salusd PATH [--device DEV] [--predict DEV|none]
                        [--quick] [--rounds 5] [--steps N] [--seq 1024] [--batch 4]

check: compile_step on the torch this python holds (the quick answer to
"does salus.torch work on torch 2.x"): a tiny GPT decoder whose attention
is torch.nn.functional.scaled_dot_product_attention where torch has it
(captured through salus/_compat.py), trained 5 steps with SGD-momentum and
with AdamW against eager PyTorch from the same weights and batches, and
compile_module's inference against eager. Last line:
    BENCH torch_compat torch=V ok=0|1 sgd_rel=... adamw_rel=... infer_rel=...
        backend=registered|absent

bench: GPT-2 small (12 layers, d 768, 12 heads, vocab 50257, learned
positions, pre-norm blocks, GELU MLP, tied LM head) at --seq tokens (1024,
GPT-2's context) and --batch sequences a step, AdamW (lr 3e-4, weight
decay 0.1). The model code is the same on both sides: attention through
scaled_dot_product_attention, which PyTorch runs with its fused kernels
and salus captures as its math (softmax(q k^T / 8 + causal mask) v).
    salus_f32_exact   salusd on DEV, f32 products exact
    salus_f32         the same with TF32 matmuls (math_matmul="tf32")
    torch_f32         eager, TF32 off, fused AdamW
    torch_tf32        eager, TF32 on
    torch_bf16        bf16 autocast (TF32 on)
    torch_bf16_graph  the bf16 step captured once as a CUDA graph and
                      replayed (capturable fused AdamW; cuda only)
and, with --predict (default sim:h200 when DEV is cuda), salus_f32 on a
second salusd on that simulated device: the simulator's prediction. A
round runs `steps` steps of each in turn; figures are medians over rounds
of tokens/s (salus: each step's loss back at the client; PyTorch: the
last step's). salusd runs the steps; PyTorch runs on cuda when DEV is a
cuda device, else on the cpu (a check that the script runs, not a
figure). --quick: a tiny configuration (2 layers, d 64, seq 32) and
short rounds. Last line:
    BENCH gpu_vs_torch model=gpt2s ratio=SALUS_BEST/TORCH_BEST seq=S batch=B
        salus_tps=... torch_tps=... torch_best=VARIANT ... sim_tps=...
A python without the salus binding prints the PyTorch figures and
"salus=unavailable".
"""
import argparse
import copy
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import torch

F = torch.nn.functional

try:
    import salus
    import salus.torch
    SALUS_ERROR = None
except Exception as e:  # no binding for this python (no cffi, other version)
    SALUS_ERROR = f"{type(e).__name__}: {e}"


# ---- the model ----

class Block(torch.nn.Module):
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
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: the same math
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
            y = att.masked_fill(causal[:t, :t], float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self, vocab, d, heads, layers, seq):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # GPT-2 ties them
        self.register_buffer("positions", torch.arange(seq), persistent=False)
        # torch 1.13's attention (no scaled_dot_product_attention there)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions[:ids.shape[1]])
        for blk in self.blocks:
            x = blk(x, self.causal)
        return self.head(self.ln(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_model(cfg):
    torch.manual_seed(0)
    model = Gpt(cfg["vocab"], cfg["d"], cfg["heads"], cfg["layers"], cfg["seq"])
    for mod in model.modules():  # GPT-2's initialisation: N(0, 0.02) weights
        if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(mod.weight, std=0.02)
        if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
            torch.nn.init.zeros_(mod.bias)
    return model


def batches(cfg, n, batch):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        text = torch.randint(0, cfg["vocab"], (batch, cfg["seq"] + 1), generator=g)
        out.append((text[:, :-1].contiguous(), text[:, 1:].contiguous()))
    return out


# ---- salusd ----

class Salusd:
    """A salusd of this script's own on a private ipc:// socket."""

    def __init__(self, exe, device):
        self.dir = tempfile.mkdtemp(prefix="salus-gpt2-")
        self.url = f"ipc://{self.dir}/salus.sock"
        args = [exe, "--listen", self.url, "--log-level", "warn"]
        if device:
            args += ["--device", device]
        if os.environ.get("SALUS_BENCH_MEMORY"):  # leaves the rest of the GPU to PyTorch
            args += ["--memory-limit", os.environ["SALUS_BENCH_MEMORY"]]
        if os.geteuid() == 0:
            args.append("--allow-root")
        self.proc = subprocess.Popen(args)
        deadline = time.monotonic() + 30
        while True:
            try:
                salus.connect(self.url).close()
                return
            except salus.Error:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    sys.exit(f"torch_gpt2.py: salusd on {device} did not start")
                time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- check ----

def _rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def check(args):
    tiny = {"vocab": 64, "d": 32, "heads": 4, "layers": 2, "seq": 8}
    ver = torch.__version__.split("+")[0]
    if SALUS_ERROR:
        print(f"salus binding not importable by {sys.executable}: {SALUS_ERROR}")
        print(f"BENCH torch_compat torch={ver} ok=0 salus=unavailable")
        return 1
    srv = Salusd(args.salusd, args.device)
    rels = {}
    ok = True
    try:
        with salus.connect(srv.url) as c, c.session(name="torch-compat") as s:
            data = batches(tiny, 5, 4)
            opts = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)}
            for name, make_opt in opts.items():
                eager = make_model(tiny)
                model = copy.deepcopy(eager)
                opt_e, opt_s = make_opt(eager.parameters()), make_opt(model.parameters())
                step = salus.torch.compile_step(model, lm_loss, opt_s, data[0], session=s)
                worst = 0.0
                for ids, tgt in data:
                    opt_e.zero_grad()
                    want = lm_loss(eager(ids), tgt)
                    want.backward()
                    opt_e.step()
                    worst = max(worst, _rel(step(ids, tgt), want.item()))
                rels[name] = worst
                ok = ok and worst <= 1e-4
                step.close()
            eager = make_model(tiny).eval()
            mod = salus.torch.compile_module(eager, (data[0][0],), session=s)
            with torch.no_grad():
                want = eager(data[1][0])
            got = mod(data[1][0])
            rels["infer"] = ((got - want).abs().max() / want.abs().max()).item()
            ok = ok and rels["infer"] <= 1e-4
            mod.close()
    except Exception as e:  # the answer this check exists for: print it, go on
        print(f"torch_gpt2.py check: {type(e).__name__}: {e}")
        ok = False
    finally:
        srv.stop()
    backend = "absent"
    if int(ver.split(".")[0]) >= 2:
        try:
            from torch._dynamo import list_backends
            if "salus" in list_backends(exclude_tags=()):
                backend = "registered"
        except Exception as e:  # a dynamo this was not written against
            print(f"torch_gpt2.py check: torch._dynamo.list_backends: {e}")
    figs = " ".join(f"{k}_rel={v:.2e}" for k, v in rels.items())
    print(f"BENCH torch_compat torch={ver} ok={int(ok)} {figs} backend={backend}")
    return 0 if ok else 1


# ---- bench ----

class TorchVariant:
    def __init__(self, name, cfg, dev, data):
        self.name, self.dev = name, dev
        cuda = dev.type == "cuda"
        tf32 = name != "f32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        self.model = make_model(cfg).to(dev)
        kw = {"fused": True} if cuda else {}
        if name == "bf16_graph":
            kw["capturable"] = True
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.1, **kw)
        self.autocast = name.startswith("bf16")
        pin = cuda
        self.host = [(i.pin_memory(), t.pin_memory()) if pin else (i, t) for i, t in data]
        self.i = 0
        self.graph = None
        if name == "bf16_graph":
            self._capture()

    def _fwd_bwd(self, ids, tgt):
        with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.autocast):
            loss = lm_loss(self.model(ids), tgt)
        loss.backward()
        return loss

    def _capture(self):
        self.sids = self.host[0][0].to(self.dev)
        self.stgt = self.host[0][1].to(self.dev)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                self._fwd_bwd(self.sids, self.stgt)
                self.opt.step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.sloss = self._fwd_bwd(self.sids, self.stgt)
            self.opt.step()

    def set_math(self):
        tf32 = self.name != "f32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

    def steps(self, n):
        self.set_math()
        if self.dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            ids, tgt = self.host[self.i % len(self.host)]
            self.i += 1
            if self.graph is not None:
                self.sids.copy_(ids, non_blocking=True)
                self.stgt.copy_(tgt, non_blocking=True)
                self.graph.replay()
                loss = self.sloss
            else:
                self.opt.zero_grad(set_to_none=True)
                loss = self._fwd_bwd(ids.to(self.dev, non_blocking=True),
                                     tgt.to(self.dev, non_blocking=True))
                self.opt.step()
        value = float(loss)  # waits for the last step
        dt = time.perf_counter() - t0
        return n / dt, value


class SalusVariant:
    def __init__(self, name, url, math_matmul, cfg, data):
        self.name = name
        self.client = salus.connect(url)
        self.session = self.client.session(name=name, math_matmul=math_matmul)
        model = make_model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        t0 = time.perf_counter()
        self.step = salus.torch.compile_step(model, lm_loss, opt, data[0], session=self.session)
        self.compile_s = time.perf_counter() - t0
        self.data = data
        self.i = 0

    def steps(self, n):
        t0 = time.perf_counter()
        for _ in range(n):
            ids, tgt = self.data[self.i % len(self.data)]
            self.i += 1
            loss = self.step(ids, tgt)
        return n / (time.perf_counter() - t0), loss

    def close(self):
        self.step.close()
        self.session.close()
        self.client.close()


def bench(args):
    if args.quick:
        cfg = {"vocab": 256, "d": 64, "heads": 4, "layers": 2, "seq": 32}
        batch, steps, rounds = 2, args.steps or 2, args.rounds
    else:
        cfg = {"vocab": 50257, "d": 768, "heads": 12, "layers": 12, "seq": args.seq}
        batch, steps, rounds = args.batch, args.steps or 5, args.rounds
    on_gpu = (args.device or "").startswith("cuda")
    predict = args.predict or ("sim:h200" if on_gpu else "none")
    dev = torch.device("cuda" if on_gpu and torch.cuda.is_available() else "cpu")
    if dev.type == "cpu":
        torch.set_num_threads(1)
    tokens = batch * cfg["seq"]
    data = batches(cfg, 4, batch)
    print(f"gpt2s: {cfg['layers']} layers, d {cfg['d']}, {cfg['heads']} heads, "
          f"vocab {cfg['vocab']}, seq {cfg['seq']}, batch {batch} ({tokens} tokens a step); "
          f"salusd on {args.device or 'its default'}, PyTorch on {dev.type}", flush=True)
    series = {}
    salus_vs, servers = [], []
    if SALUS_ERROR:
        print(f"salus binding not importable by {sys.executable}: {SALUS_ERROR}")
    else:
        srv = Salusd(args.salusd, args.device)
        servers.append(srv)
        salus_vs.append(SalusVariant("salus_f32_exact", srv.url, "exact", cfg, data))
        salus_vs.append(SalusVariant("salus_f32", srv.url, "tf32", cfg, data))
        if predict != "none":
            sim = Salusd(args.salusd, predict)
            servers.append(sim)
            salus_vs.append(SalusVariant("sim_f32", sim.url, "tf32", cfg, data))
        for v in salus_vs:
            print(f"{v.name}: captured and registered in {v.compile_s:.1f} s", flush=True)
    names = ["f32", "tf32", "bf16"] + (["bf16_graph"] if dev.type == "cuda" else [])
    torch_vs = [TorchVariant(n, cfg, dev, data) for n in names]
    try:
        for v in salus_vs + torch_vs:  # warm-up, untimed
            v.steps(max(steps // 2, 1))
        for k in range(rounds):
            line = []
            for v in salus_vs + torch_vs:
                name = v.name if isinstance(v, SalusVariant) else "torch_" + v.name
                sps, _ = v.steps(steps)
                series.setdefault(name, []).append(sps * tokens)
                line.append(f"{name} {sps * tokens:.0f}")
            print(f"gpt2s round {k + 1}: " + " ".join(line) + " tokens/s", flush=True)
    finally:
        for v in salus_vs:
            v.close()
        for s in servers:
            s.stop()
    med = {n: statistics.median(x) for n, x in series.items()}
    t_best = max((n for n in med if n.startswith("torch_")), key=lambda n: med[n])
    figs = " ".join(f"{n}_tps={med[n]:.0f}" for n in med)
    shape = f"seq={cfg['seq']} batch={batch}"
    if SALUS_ERROR:
        print(f"BENCH gpu_vs_torch model=gpt2s salus=unavailable {shape} "
              f"torch_best={t_best[6:]} {figs}")
        return 1
    s_best = max(("salus_f32_exact", "salus_f32"), key=lambda n: med[n])
    print(f"BENCH gpu_vs_torch model=gpt2s ratio={med[s_best] / med[t_best]:.3f} {shape} "
          f"salus_tps={med[s_best]:.0f} salus_best={s_best[6:]} torch_tps={med[t_best]:.0f} "
          f"torch_best={t_best[6:]} {figs}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["check", "bench"])
    ap.add_argument("--salusd", required=True)
    ap.add_argument("--device", default=os.environ.get("SALUS_BENCH_DEVICE"))
    ap.add_argument("--predict")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    return check(args) if args.mode == "check" else bench(args)


if __name__ == "__main__":
    sys.exit(main())

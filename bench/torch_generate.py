"""bench/torch_generate: greedy generation at batch 1 of a GPT-style decoder
through salusd (salus.torch.Generator: one decode step per Run request,
the KV cache in the session) against PyTorch on the cpu generating with
its own KV cache, at its best: 1 or 2 threads, and either cache PyTorch
users write (a growing cache, concatenated each step, as Hugging Face's
default; or the same fixed cache salus uses), under inference_mode.

    torch_generate.py --salusd PATH [--rounds 5] [--seconds 3]
                      [--tokens 128] [--json FILE]

The model is salus.gpt.GPT(vocab=256, d=384, heads=6, layers=6, seq=256),
10.8 M parameters, from a fixed seed in every process. A generation is
--tokens new tokens after a one-token prompt (so no prefill on either
side); tokens/s counts whole generations as the caller sees them,
repeated until --seconds have passed. A round is salus, then each PyTorch
configuration (each in its own process, this script with --peer), salus
again before each: both sides measured alternately. The ratio is salus's
median over the best PyTorch configuration's median; p99 is over every
token's latency. After the rounds, a fresh process of the best PyTorch
configuration generates alone for as long as all its rounds took, and the
ratio is taken over the higher of its two rates (ratio_bench: over the
in-bench median). Both sides' tokens are checked to be the same.
Prints per-round figures, then
    BENCH generate model=gpt ratio=... salus_tps=... torch_tps=... ...
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openblas_core  # noqa: E402  (before OpenBLAS is loaded with torch)
import salusd_proc  # noqa: E402
import torch  # noqa: E402

CONFIGS = [(1, "cat"), (2, "cat"), (1, "fixed"), (2, "fixed")]


def make_model():
    import salus.gpt
    torch.manual_seed(0)
    return salus.gpt.GPT(vocab=256, d=384, heads=6, layers=6, seq=256).eval()


def _decode_cat(model, tok, pos, past):
    """One step with a growing cache: past is a list of (keys, values) per
    block, None before the first token."""
    x = model.tok(tok) + model.pos(pos)
    new = []
    for blk, kv in zip(model.blocks, past):
        q, k, v = blk._qkv(x)
        if kv is not None:
            k, v = torch.cat((kv[0], k), 2), torch.cat((kv[1], v), 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / q.shape[-1] ** 0.5)
        x = blk._rest(x, att.softmax(dim=-1), v)
        new.append((k, v))
    return model.head(model.ln(x))[:, 0], new


def torch_generator(model, cache):
    """generate(n) -> (tokens, per-token seconds) for a PyTorch cache."""
    if cache == "fixed":
        model.init_cache(1)

    def generate(n):
        out, times = [1], []
        last = torch.tensor([[1]])
        past = [None] * len(model.blocks)
        with torch.inference_mode():
            for i in range(n):
                t = time.perf_counter()
                pos = torch.tensor([i])
                if cache == "cat":
                    logits, past = _decode_cat(model, last, pos, past)
                else:
                    logits = model.decode(last, pos)
                last = logits.argmax(-1).reshape(1, 1)
                out.append(int(last))
                times.append(time.perf_counter() - t)
        return out, times
    return generate


def run_for(generate, tokens, seconds):
    """Whole generations until `seconds` have passed: (tokens/s, per-token
    ms, the last generation's tokens)."""
    times = []
    t0 = time.perf_counter()
    while True:
        out, ts = generate(tokens)
        times += ts
        if time.perf_counter() - t0 >= seconds:
            break
    return len(times) / (time.perf_counter() - t0), [t * 1e3 for t in times], out


def peer(threads, cache, tokens):
    """A PyTorch configuration: answers "run SECONDS" with its rate, token
    times and tokens; "quit"."""
    torch.set_num_threads(threads)
    generate = torch_generator(make_model(), cache)
    generate(8)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        tps, ms, out = run_for(generate, tokens, float(cmd[1]))
        print(f"tps {tps:.3f} out {','.join(map(str, out))} ms " +
              " ".join(f"{t:.3f}" for t in ms), flush=True)


class Peer:
    def __init__(self, threads, cache, tokens):
        self.threads, self.cache = threads, cache
        self.name = f"torch{threads}-{cache}"
        self.proc = subprocess.Popen([sys.executable, __file__, "--peer", str(threads),
                                      "--cache", cache, "--tokens", str(tokens)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ))
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"torch_generate: the PyTorch peer {self.name} did not start")

    def run(self, seconds):
        self.proc.stdin.write(f"run {seconds}\n")
        self.proc.stdin.flush()
        words = self.proc.stdout.readline().split()
        if not words or words[0] != "tps":
            raise SystemExit(f"torch_generate: the PyTorch peer {self.name} stopped")
        return float(words[1]), [float(w) for w in words[5:]], [int(t) for t in words[3].split(",")]

    def stop(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait()


def p99(times):
    return float(np.percentile(np.asarray(times), 99))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--salusd", help="the salusd to start")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="per side per round")
    ap.add_argument("--tokens", type=int, default=128, help="new tokens per generation")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--peer", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cache", default="cat", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:
        return peer(a.peer, a.cache, a.tokens)
    if not a.salusd:
        ap.error("--salusd is required")
    if not 0 < a.tokens < 256:
        ap.error("--tokens must be in 1..255 (the model's cache holds 256 positions)")
    import salus
    import salus.torch

    load_before = os.getloadavg()[0]
    server, url = salusd_proc.start(a.salusd, "torch_generate")
    peers = []
    try:
        peers = [Peer(t, c, a.tokens) for t, c in CONFIGS]
        model = make_model()
        with salus.connect(url) as c, c.session(name="torch_generate") as s:
            t0 = time.perf_counter()
            gen = salus.torch.Generator(model, session=s)
            capture_s = time.perf_counter() - t0

            def salus_generate(n):
                times, t = [], [time.perf_counter()]

                def tick(i, tok):
                    now = time.perf_counter()
                    times.append(now - t[0])
                    t[0] = now
                out = gen.generate([[1]], n, on_token=tick)
                return out[0].tolist(), times
            salus_generate(8)
            salus_tps, salus_ms = [], []
            tps = {p.name: [] for p in peers}
            ms = {p.name: [] for p in peers}
            same = True
            for r in range(a.rounds):
                line = f"round {r}:"
                for p in peers:
                    v, m, out = run_for(salus_generate, a.tokens, a.seconds)
                    salus_tps.append(v)
                    salus_ms += m
                    tv, tm, tout = p.run(a.seconds)
                    tps[p.name].append(tv)
                    ms[p.name] += tm
                    same &= tout == out
                    line += f"  salus {v:.1f} {p.name} {tv:.1f}"
                print(line + " tokens/s", flush=True)
            gen.close()
        best = max(tps, key=lambda k: float(np.median(tps[k])))
        threads, cache = next((p.threads, p.cache) for p in peers if p.name == best)
        for p in peers:
            p.stop()
        peers = []
        alone = Peer(threads, cache, a.tokens)
        alone_tps, _, _ = alone.run(a.seconds * a.rounds)
        alone.stop()
    finally:
        for p in peers:
            p.proc.kill()
        server.terminate()
        server.wait()
    load_after = os.getloadavg()[0]
    sal = float(np.median(salus_tps))
    tor = float(np.median(tps[best]))
    out = {"bench": "generate", "model": "gpt", "params": sum(p.numel() for p in model.parameters()),
           "tokens": a.tokens, "rounds": a.rounds, "seconds": a.seconds,
           "ratio": sal / max(tor, alone_tps), "ratio_bench": sal / tor, "salus_tps": sal,
           "torch_tps": tor, "torch_best": best, "torch_alone_tps": alone_tps,
           "salus_p99_ms": p99(salus_ms), "torch_p99_ms": p99(ms[best]),
           "salus_median_ms": float(np.median(salus_ms)),
           "torch_median_ms": float(np.median(ms[best])), "same_tokens": int(same),
           "capture_s": capture_s, "load_before": load_before, "load_after": load_after}
    for k in tps:
        out[f"{k}_tps"] = float(np.median(tps[k]))
    print(f"gpt ({out['params'] / 1e6:.1f} M parameters): capture and registration "
          f"{capture_s:.2f} s; {a.tokens} tokens a generation; same tokens on both sides: "
          f"{'yes' if same else 'NO'}")
    print("PyTorch medians: " + ", ".join(f"{k} {out[k + '_tps']:.1f}" for k in tps) +
          " tokens/s")
    print(f"PyTorch {best}: {tor:.1f} tokens/s in the bench, {alone_tps:.1f} alone "
          f"({100 * (tor / alone_tps - 1):+.1f} %)")
    print(f"load average (1 min) {load_before:.2f} before, {load_after:.2f} after")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
            f.write("\n")
    print(f"BENCH generate model=gpt ratio={out['ratio']:.3f} salus_tps={sal:.1f} "
          f"torch_tps={tor:.1f} ratio_bench={out['ratio_bench']:.3f} torch_best={best} "
          f"torch_alone_tps={alone_tps:.1f} salus_p99_ms={out['salus_p99_ms']:.2f} "
          f"torch_p99_ms={out['torch_p99_ms']:.2f} same_tokens={int(same)} rounds={a.rounds} "
          f"torch_blas={openblas_core.CORETYPE or 'auto'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

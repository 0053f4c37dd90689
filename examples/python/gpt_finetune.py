"""Trains a GPT-style decoder (salus.gpt.GPT, 10.8 M parameters at the
defaults) on the quotations Debian's `fortunes` package ships, through
salusd, then generates from it:
- salus.torch.compile_step captures the whole training step (forward,
  cross entropy, backward, AdamW) as one salus graph: each batch is one
  Run request, and the cosine schedule's learning rate travels in it;
- salus.torch.Generator then decodes one token per Run request, with the
  KV cache held in the session and freed at the end.
Characters are bytes (a vocabulary of 256). --init fine-tunes a
checkpoint that --save wrote (another corpus, more steps) instead of
starting from the seed's weights.

    apt-get install fortunes        # the corpus: /usr/share/games/fortunes
    python3 gpt_finetune.py --steps 300 --save gpt.pt
    python3 gpt_finetune.py --init gpt.pt --corpus startrek --steps 100
"""
import argparse
import glob
import math
import os
import sys
import time

import torch

import salus
import salus.gpt
import salus.torch

CORPUS = "/usr/share/games/fortunes"


def load_corpus(names):
    """The corpus' bytes: every fortune file, or those named."""
    files = sorted(f for f in glob.glob(os.path.join(CORPUS, "*"))
                   if not f.endswith((".dat", ".u8")) and os.path.isfile(f))
    if names:
        wanted = set(names.split(","))
        files = [f for f in files if os.path.basename(f) in wanted]
    if not files:
        sys.exit(f"gpt_finetune: no corpus in {CORPUS} (apt-get install fortunes), "
                 f"or none named {names!r}")
    data = b"".join(open(f, "rb").read() for f in files)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long(), len(files)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="salusd URL (default: $SALUS_URL or the user's socket)")
    ap.add_argument("--corpus", help="fortune files to train on, comma-separated (default: all)")
    ap.add_argument("--steps", type=int, default=300, help="training steps")
    ap.add_argument("--batch", type=int, default=16, help="sequences a step")
    ap.add_argument("--context", type=int, default=128, help="tokens a sequence")
    ap.add_argument("--width", type=int, default=384, help="the model's width")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (cosine)")
    ap.add_argument("--init", help="a checkpoint (--save's) to fine-tune")
    ap.add_argument("--save", help="write the trained weights here (torch.save)")
    ap.add_argument("--prompt", default="The computer", help="text to continue")
    ap.add_argument("--tokens", type=int, default=200, help="bytes to generate")
    ap.add_argument("--top-k", type=int, default=20, help="0: greedy")
    ap.add_argument("--seed", type=int, default=1, help="the sampling seed")
    args = ap.parse_args()
    seq = max(256, args.context)
    if len(args.prompt.encode()) + args.tokens > seq:
        ap.error(f"--prompt and --tokens must fit the model's {seq} positions")

    data, n_files = load_corpus(args.corpus)
    torch.manual_seed(0)
    model = salus.gpt.GPT(vocab=256, d=args.width, heads=args.heads, layers=args.layers,
                          seq=seq)
    if args.init:
        model.load_state_dict(torch.load(args.init))
    params = sum(p.numel() for p in model.parameters())
    print(f"corpus: {len(data) / 1e6:.2f} MB from {n_files} fortune files; model: "
          f"{params / 1e6:.1f} M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warm = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) *
        0.5 * (1 + math.cos(math.pi * min(i, args.steps) / args.steps)))
    g = torch.Generator().manual_seed(0)

    def batch():
        start = torch.randint(0, len(data) - args.context - 1, (args.batch,), generator=g)
        rows = torch.stack([data[s:s + args.context + 1] for s in start.tolist()])
        return rows[:, :-1], rows[:, 1:]

    with salus.connect(args.url) as client, client.session(name="gpt-finetune") as s:
        x, y = batch()
        t0 = time.monotonic()
        step = salus.torch.compile_step(model, model.loss, opt, (x, y), session=s)
        print(f"captured the training step in {time.monotonic() - t0:.1f} s: "
              f"{len(step.gm.graph.nodes)} aten nodes, one salus graph", flush=True)
        t0, losses, every = time.monotonic(), [], max(1, min(20, args.steps // 10))
        for i in range(args.steps):
            if i:
                x, y = batch()
            losses.append(step(x, y))
            sched.step()
            if (i + 1) % every == 0 or i + 1 == args.steps:
                took = time.monotonic() - t0
                rate = (i + 1) * args.batch * args.context / took
                left = took / (i + 1) * (args.steps - i - 1)
                recent = losses[-every:]
                print(f"step {i + 1}/{args.steps}  loss {sum(recent) / len(recent):.4f}  "
                      f"lr {sched.get_last_lr()[0]:.2e}  {rate:.0f} tokens/s  "
                      f"{left:.0f} s left", flush=True)
        model.load_state_dict(step.state_dict())
        step.close()
        if args.save:
            torch.save(model.state_dict(), args.save)
            print(f"saved the weights to {args.save}")

        prompt = list(args.prompt.encode())
        with salus.torch.Generator(model, session=s) as gen:
            print(f"generating {args.tokens} bytes ({gen.cache_bytes / 2 ** 20:.1f} MiB of "
                  "KV cache in the session):", flush=True)
            t0 = time.monotonic()
            out = gen.generate([prompt], args.tokens, top_k=args.top_k or None,
                               seed=args.seed)
            took = time.monotonic() - t0
        text = bytes(out[0].tolist()).decode("utf-8", errors="replace")
        print("-" * 60)
        print(text)
        print("-" * 60)
        print(f"{(len(prompt) + args.tokens) / took:.0f} tokens/s through salusd; "
              f"final loss {sum(losses[-every:]) / len(losses[-every:]):.4f} "
              f"(first {losses[0]:.4f})")


if __name__ == "__main__":
    main()

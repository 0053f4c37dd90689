"""salus.torch.Generator: a GPT-style decoder (salus.gpt.GPT) generates
through salusd one decode step per Run request, with its KV cache held in
the session; its tokens are PyTorch eager's with the same cache protocol,
and greedy decoding agrees with full forward passes that use no cache.
The cache is counted in the session's persistent memory and freed by
close() and by the client going away."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

import salus  # noqa: E402
import salus.gpt  # noqa: E402
import salus.torch  # noqa: E402
from status_util import persistent_bytes  # noqa: E402

PROMPT = [[5, 17, 3, 40, 9]]
NEW = 24


def _model(seed=0, seq=48):
    torch.manual_seed(seed)
    return salus.gpt.GPT(vocab=64, d=32, heads=4, layers=2, seq=seq).eval()


def _eager(model, prompt, new, top_k=None, seed=None):
    """What Generator.generate does, in PyTorch eager: the same decode
    steps and the same sampling."""
    ids = torch.tensor(prompt)
    rng = None
    if top_k is not None:
        rng = torch.Generator()
        rng.manual_seed(seed)
    model.init_cache(ids.shape[0])
    out, logits = [ids], []
    try:
        with torch.no_grad():
            for pos in range(ids.shape[1] - 1):
                model.decode(ids[:, pos:pos + 1], torch.tensor([pos]))
            last = ids[:, -1]
            for i in range(new):
                lg = model.decode(last.reshape(-1, 1), torch.tensor([ids.shape[1] - 1 + i]))
                logits.append(lg)
                last = salus.torch.sample(lg, top_k, 1.0, rng)
                out.append(last.unsqueeze(1))
    finally:
        model.drop_cache()
    return torch.cat(out, dim=1), logits


def test_greedy_matches_eager_and_full_forward(session):
    model = _model()
    want, want_logits = _eager(model, PROMPT, NEW)
    with salus.torch.Generator(model, session=session) as gen:
        got = gen.generate(PROMPT, NEW)
        # logits of the last position, step by step, as PyTorch's
        lg = gen.logits(got[:, -2], got.shape[1] - 2)
    assert got.tolist() == want.tolist()
    assert torch.allclose(lg, want_logits[-1], rtol=1e-4, atol=1e-5)
    # no cache at all: each token is the argmax of a full forward pass
    with torch.no_grad():
        full = model(got[:, :-1])
    assert full[0, len(PROMPT[0]) - 1:].argmax(-1).tolist() == got[0, len(PROMPT[0]):].tolist()


def test_seeded_top_k_is_reproducible_and_eager(session):
    model = _model(1)
    with salus.torch.Generator(model, session=session) as gen:
        a = gen.generate(PROMPT, NEW, top_k=8, seed=3)
        b = gen.generate(PROMPT, NEW, top_k=8, seed=3)
        c = gen.generate(PROMPT, NEW, top_k=8, seed=4)
    want, _ = _eager(model, PROMPT, NEW, top_k=8, seed=3)
    assert a.tolist() == b.tolist() == want.tolist()
    assert a.tolist() != c.tolist()


def test_batch_of_two_prompts(session):
    model = _model(2)
    prompts = [[1, 2, 3], [60, 61, 62]]
    want, _ = _eager(model, prompts, 10)
    with salus.torch.Generator(model, session=session, batch=2) as gen:
        assert gen.generate(prompts, 10).tolist() == want.tolist()


def test_cache_is_counted_and_freed(client):
    model = _model(seq=256)
    with client.session(name="gen-mem") as s:
        before = persistent_bytes(client, "gen-mem")
        gen = salus.torch.Generator(model, session=s)
        # 2 layers x (keys, values) x 4 heads x 256 positions x 8 floats
        assert gen.cache_bytes == 2 * 2 * 4 * 256 * 8 * 4
        held = persistent_bytes(client, "gen-mem")
        assert held - before >= gen.cache_bytes
        gen.generate([[1, 2]], 3)
        gen.close()
        assert persistent_bytes(client, "gen-mem") == before


def test_cache_freed_when_the_client_goes_away(server, client):
    code = textwrap.dedent(f"""
        import os, sys, torch, salus, salus.gpt, salus.torch
        torch.manual_seed(0)
        m = salus.gpt.GPT(vocab=64, d=32, heads=4, layers=2, seq=64)
        c = salus.connect({server.url!r})
        s = c.session(name="gen-gone")
        g = salus.torch.Generator(m, session=s)
        g.generate([[1, 2, 3]], 4)
        print("ready", flush=True)
        sys.stdin.readline()
        os._exit(0)  # no close: the connection just ends
        """)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert p.stdout.readline().strip() == "ready"
        assert persistent_bytes(client, "gen-gone") is not None
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    deadline = time.monotonic() + 10
    while persistent_bytes(client, "gen-gone") is not None:
        assert time.monotonic() < deadline, client.status()
        time.sleep(0.05)


def test_refusals_name_what_is_wrong(session):
    with pytest.raises(TypeError, match="init_cache"):
        salus.torch.Generator(torch.nn.Linear(2, 2), session=session)
    model = _model(seq=8)
    with salus.torch.Generator(model, session=session) as gen:
        with pytest.raises(ValueError, match="do not fit the cache of 8"):
            gen.generate([[1, 2, 3]], 6)
        with pytest.raises(ValueError, match="prompt is empty"):
            gen.generate([[]], 2)


def test_generates_what_compile_step_trained(session):
    """Trained through salusd on one repeated sequence, then generated
    from: the weights come back by name and greedy decoding recites it."""
    model = _model(3, seq=32).train()
    text = torch.tensor([[7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = salus.torch.compile_step(model, model.loss, opt, (text[:, :-1], text[:, 1:]),
                                    session=session)
    for _ in range(60):
        loss = step(text[:, :-1], text[:, 1:])
    assert loss < 0.05
    model.load_state_dict(step.state_dict())
    with salus.torch.Generator(model, session=session) as gen:
        assert gen.generate(text[:, :3], 14).tolist() == text.tolist()
    step.close()

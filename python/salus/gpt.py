"""A GPT-style decoder in plain PyTorch, written so that both its training
step and its decoding compile to static salus graphs: causal self-attention
with a KV cache of fixed size held in buffers.

    model = salus.gpt.GPT(vocab=256, d=384, heads=6, layers=6, seq=256)
    step = salus.torch.compile_step(model, model.loss, optimizer, (ids, targets), session=s)
    ...
    with salus.torch.Generator(model, session=s) as gen:
        out = gen.generate(prompt, 100, top_k=40, seed=1)

forward(ids [B, T]) -> logits [B, T, vocab] for training (T <= seq).
decode(tokens [B, 1], position [1]) -> logits [B, vocab]: one token at
`position` of every sequence, attending to the cached keys and values of
positions 0..position and writing its own into the cache first. The cache
is a pair of buffers per layer, [B, heads, seq, d/heads], made by
init_cache(batch) and dropped by drop_cache(); they are not part of
state_dict(). The step writes its keys and values at `position` in place
(index_copy_, salus's index_write) and attention masks the positions after
it, so one graph serves every position.

This is also the protocol salus.torch.Generator needs from any model:
init_cache(batch), drop_cache(), decode(tokens, position) and a `seq`
attribute (the cache's length).
"""

import math

import torch

__all__ = ["GPT"]


class _Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.register_buffer("k_cache", None, persistent=False)
        self.register_buffer("v_cache", None, persistent=False)

    def _qkv(self, x):
        b, t, d = x.shape
        h = self.heads
        return (z.view(b, t, h, d // h).transpose(1, 2)
                for z in self.qkv(self.ln1(x)).split(d, dim=2))

    def _rest(self, x, att, v):
        b, t, d = x.shape
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    def forward(self, x, causal):
        q, k, v = self._qkv(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        return self._rest(x, att.masked_fill(causal, float("-inf")).softmax(dim=-1), v)

    def decode(self, x, position, after):
        """x [B, 1, d] at `position` ([1]); after [seq] bool (the positions
        not yet written)."""
        q, k, v = self._qkv(x)
        self.k_cache.index_copy_(2, position, k)
        self.v_cache.index_copy_(2, position, v)
        att = (q @ self.k_cache.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        return self._rest(x, att.masked_fill(after, float("-inf")).softmax(dim=-1), self.v_cache)


class GPT(torch.nn.Module):
    """Token and position embeddings, `layers` pre-norm blocks of causal
    self-attention and a GELU MLP, a final layer norm and an untied head."""

    def __init__(self, vocab=256, d=384, heads=6, layers=6, seq=256):
        super().__init__()
        if d % heads:
            raise ValueError(f"d ({d}) must be a multiple of heads ({heads})")
        self.seq = seq
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("positions", torch.arange(seq), persistent=False)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(self.positions[:t])
        causal = self.causal[:t, :t]
        for blk in self.blocks:
            x = blk(x, causal)
        return self.head(self.ln(x))

    @staticmethod
    def loss(logits, targets):
        """Next-token cross entropy: logits [B, T, vocab], targets [B, T]."""
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))

    def init_cache(self, batch):
        """Zeroed keys and values for `batch` sequences of up to seq tokens."""
        for blk in self.blocks:
            d = blk.qkv.in_features
            shape = (batch, blk.heads, self.seq, d // blk.heads)
            for name in ("k_cache", "v_cache"):
                blk.register_buffer(name, torch.zeros(shape), persistent=False)

    def drop_cache(self):
        for blk in self.blocks:
            blk.k_cache = blk.v_cache = None

    def decode(self, tokens, position):
        x = self.tok(tokens) + self.pos(position)
        after = self.positions > position
        for blk in self.blocks:
            x = blk.decode(x, position, after)
        return self.head(self.ln(x))[:, 0]

"""What differs between the PyTorch versions salus.torch runs on: Debian's
torch 1.13 and torch 2.x (the GPU machines hold 2.11).

- make_fx is torch.fx.experimental.proxy_tensor.make_fx in both.
- functional_call: torch.func.functional_call in 2.x (functorch's
  make_functional is gone there); torch.nn.utils.stateless in 1.13.
- scaled_dot_product_attention (2.x only) reaches the captured graph as
  one of the fused kernels' ops (_scaled_dot_product_flash_attention,
  _efficient_attention, _cudnn_attention, _flash_attention_for_cpu) or,
  on the math path, as ops that change between releases (_safe_softmax
  since 2.5): none of them has a salus op. While a step is captured,
  torch.nn.functional.scaled_dot_product_attention is replaced by the
  same computation written with ops salus lowers (matmul, masked_fill,
  softmax, dropout), so the graph holds those whatever kernel the device
  would have picked.
- A bool attn_mask row with no key allowed gives NaN here, as PyTorch
  before 2.5; 2.5+ gives 0 there.
- torch.compile backends (2.x): registered through torch._dynamo's
  register_backend; 1.13 has no torch.compile.
"""

import contextlib
import math

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ._core import Code, Error

__all__ = ["TORCH_MAJOR", "functional_call", "capture", "register_backend"]

TORCH_MAJOR = int(torch.__version__.split(".")[0])

try:
    from torch.func import functional_call
except ImportError:  # torch 1.13
    from torch.nn.utils.stateless import functional_call


def _causal_mask(rows, cols):
    """True above the diagonal (the positions a query may not see), as
    PyTorch's is_causal aligns it (top left); made with numpy, so the
    capture holds it as a constant rather than as ops building it."""
    return torch.from_numpy(np.triu(np.ones((rows, cols), dtype=bool), 1))


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's math, in ops salus
    lowers: softmax(q k^T * scale + mask) v, with dropout on the weights."""
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        raise Error(Code.EUNSUPPORTED, "scaled_dot_product_attention with enable_gqa "
                    f"({query.shape[-3]} query heads, {key.shape[-3]} key heads)")
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    att = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        att = att.masked_fill(_causal_mask(query.shape[-2], key.shape[-2]), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            # True = may attend: a bias of -inf, set to 0 where allowed
            # (masked_fill fills where its mask is true)
            att = att + torch.full_like(att, float("-inf")).masked_fill(attn_mask, 0.0)
        else:
            att = att + attn_mask
    att = att.softmax(dim=-1)
    if dropout_p > 0.0:
        att = torch.nn.functional.dropout(att, dropout_p, training=True)
    return att @ value


@contextlib.contextmanager
def _sdpa_as_math():
    fn = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if fn is None:  # torch 1.13
        yield
        return
    torch.nn.functional.scaled_dot_product_attention = _sdpa
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = fn


def capture(fn, flat):
    """make_fx(fn)(*flat): fn's aten graph, traced with this version's
    differences taken care of (see the module's comment)."""
    with _sdpa_as_math():
        return make_fx(fn)(*flat)


def register_backend(name, compiler_fn):
    """Registers compiler_fn(gm, example_inputs) -> callable as the
    torch.compile backend `name` (torch 2.x); returns whether it is
    registered (False on 1.13, or where dynamo refuses it)."""
    if TORCH_MAJOR < 2:
        return False
    try:
        from torch._dynamo import list_backends, register_backend as register
    except ImportError:
        return False
    try:
        if name not in list_backends(exclude_tags=()):
            register(compiler_fn=compiler_fn, name=name)
        return True
    except Exception:  # a dynamo that refuses the name or the tags argument
        try:
            register(compiler_fn=compiler_fn, name=name)
            return True
        except Exception:
            return False

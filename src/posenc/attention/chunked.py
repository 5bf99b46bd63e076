"""The ``chunked`` backend: every family, every mask, the KV cache, in O(block · keys) memory.

* Without logit terms (NoPE, additive, rotary), SDPA's own kernels already run in O(keys)
  memory: the ``sdpa`` backend's mask forms are used (:mod:`posenc.attention.sdpa`).
* Where an encoding's structure allows it, the CPU takes an exact plan
  (:mod:`posenc.attention.plans`): ALiBi at any positions, T5-like biases constant
  beyond a distance at default positions, Shaw and (without gradients) Transformer-XL; in
  training at short causal lengths, the explicit plans of
  :mod:`posenc.attention.plans.explicit` (one softmax with a hand-written backward).
* Otherwise blocks of query rows (:func:`posenc.attention.blocks.blocked`), with
  activation checkpointing under autograd.
"""

from __future__ import annotations

from torch import Tensor

from posenc.attention.blocks import blocked
from posenc.attention.context import AttentionContext
from posenc.attention.plans import run_plan
from posenc.attention.sdpa import sdpa_attention
from posenc.encoding.resolve import Hooks

__all__ = ["chunked_attention"]


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
    block_size: int | None = None,
    structured: bool = True,
) -> Tensor:
    """Attention by the cheapest path that keeps memory at O(block · keys)."""
    if not hooks.logit_terms and block_size is None:
        return sdpa_attention(
            q, k, v, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p
        )
    if structured:
        out = run_plan(
            q,
            k,
            v,
            hooks=hooks,
            context=context,
            scale=scale,
            dropout_p=dropout_p,
            block_size=block_size,
        )
        if out is not None:
            return out
    return blocked(
        q,
        k,
        v,
        hooks=hooks,
        context=context,
        scale=scale,
        dropout_p=dropout_p,
        block_size=block_size,
    )

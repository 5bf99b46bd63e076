"""Stick-breaking attention over blocks of query rows: the plan serving
:class:`~posenc.softmax.stick_breaking.StickBreaking` (its weights replace the softmax)."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.blocks import over_row_blocks
from posenc.attention.context import AttentionContext
from posenc.attention.rows import compute_dtype, expand_heads
from posenc.encoding.resolve import Hooks

__all__ = ["stick_breaking_attention"]


def stick_breaking_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
    block_size: int | None,
) -> Tensor:
    """Stick-breaking attention over blocks of query rows (one block: ``block_size=q_len``).

    Shapes as :func:`~posenc.attention.rows.attend_rows`. Each block sees the keys up to
    the last its causal order allows (the ones after add nothing: hidden keys break
    nothing); under autograd each block is recomputed in the backward pass.
    """
    step = partial(_block, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p)
    return over_row_blocks(step, q, k, v, hooks=hooks, context=context, block_size=block_size)


def _block(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    start: int,
    stop: int,
    scale: float,
    dropout_p: float,
) -> Tensor:
    encoding = hooks.weights
    assert encoding is not None
    mask = context.mask
    out_dtype, cdt = q.dtype, compute_dtype(q.dtype)
    heads, rows, end = q.shape[1], q.shape[2], k.shape[2]
    q = q.to(cdt)
    k, v = expand_heads(k.to(cdt), heads), expand_heads(v.to(cdt), heads)
    visible = mask.block(start, stop, 0, end, heads=heads)
    if not encoding.attend_current:  # the query's own key (bottom-right aligned) is left out
        q_index = torch.arange(rows, device=q.device) + start + mask.causal_offset
        others = torch.arange(end, device=q.device) != q_index[:, None]  # (rows, end)
        visible = others if visible is None else visible & others
    weights = encoding.attention_weights((q @ k.transpose(-1, -2)) * scale, visible)
    remaining = 1.0 - weights.sum(dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ v
    term = encoding.remainder_term(remaining)
    if term is not None:
        out = out + term
    return out.to(out_dtype)

"""Blocks of query rows, each attending over the keys it may see (the memory-bounded path).

A block sees complete rows of keys (up to the last key its causal order allows), so a
scores reader gets whole rows and the mask is applied after it. Each block's bias,
contextual term and mask are built for that block only and handed to
:func:`~posenc.attention.rows.attend_rows`; under autograd every block is recomputed in the
backward pass (activation checkpointing), so training memory stays O(block · keys) too.

Block size: ``block_size`` rows, or by default as many rows as keep one block's
``(batch, heads, rows, keys)`` scores at about :data:`BLOCK_ELEMENTS` = 2^24 elements
(64 MiB in float32), between 16 and 1024 rows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from posenc.attention.context import AttentionContext
from posenc.attention.rows import attend_rows, compute_dtype
from posenc.encoding.resolve import Hooks

__all__ = ["BLOCK_ELEMENTS", "blocked", "default_block_rows", "over_row_blocks"]

#: Elements of one block's score tensor the default block size aims at.
BLOCK_ELEMENTS = 1 << 24


def default_block_rows(batch: int, heads: int, keys: int) -> int:
    """Rows per block so that ``batch · heads · rows · keys ≈ BLOCK_ELEMENTS`` (16 to 1024)."""
    rows = BLOCK_ELEMENTS // max(1, batch * heads * keys)
    return max(16, min(1024, rows))


def _needs_grad(q: Tensor, k: Tensor, v: Tensor, hooks: Hooks) -> bool:
    if not torch.is_grad_enabled():
        return False
    if q.requires_grad or k.requires_grad or v.requires_grad:
        return True
    encoding = hooks.encoding
    return encoding is not None and any(p.requires_grad for p in encoding.parameters())


def blocked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
    block_size: int | None = None,
) -> Tensor:
    """Attention in blocks of query rows, each with the block's own terms and mask.

    Shapes as :func:`~posenc.attention.rows.attend_rows`; ``context`` supplies positions
    and the mask. Nothing larger than one block's ``(batch, heads, rows, keys)`` is built.
    """
    step = partial(_block, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p)
    return over_row_blocks(step, q, k, v, hooks=hooks, context=context, block_size=block_size)


def over_row_blocks(
    step: Callable[..., Tensor],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    block_size: int | None,
) -> Tensor:
    """``step(q_rows, k, v, start=, stop=)`` for each block of query rows ``[start, stop)``,
    over the keys up to the last the block's mask may show, the outputs concatenated along
    the rows (the loop of :func:`blocked` and of stick-breaking's blocks).

    ``block_size`` rows per block (None: :func:`default_block_rows`). When anything requires
    a gradient and there is more than one block, each block is checkpointed (recomputed in
    the backward pass). A block that sees no key gives zeros.
    """
    batch, heads, q_len, _ = q.shape
    rows = block_size or default_block_rows(batch, heads, k.shape[-2])
    grad = _needs_grad(q, k, v, hooks) and q_len > rows
    outs = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        end = context.mask.key_end(stop)
        if end == 0:  # no key visible to any row of the block
            outs.append(q.new_zeros(batch, heads, stop - start, v.shape[-1]))
            continue
        block = partial(step, start=start, stop=stop)
        args = (q[:, :, start:stop], k[:, :, :end], v[:, :, :end])
        outs.append(checkpoint(block, *args, use_reentrant=False) if grad else block(*args))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


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
    end = k.shape[-2]
    token_bias = context.token_bias
    bias = None
    if token_bias is not None:  # FoX: this block's rows over its keys
        bias = token_bias.block(start, stop, end, compute_dtype(q.dtype))
    return attend_rows(
        q,
        k,
        v,
        hooks=hooks,
        q_pos=context.q_pos[..., start:stop],
        k_pos=context.k_pos[..., :end],
        allowed=context.mask.block(start, stop, 0, end, heads=q.shape[1]),
        scale=scale,
        dropout_p=dropout_p,
        bias=bias,
        contiguous=_contiguous(context, start),
        causal=context.mask.causal,
    )


def _contiguous(context: AttentionContext, start: int) -> tuple[int, int] | None:
    """``(q_start, 0)`` of a block of queries when positions are token indices."""
    if not context.index_positions:
        return None
    return start + context.mask.causal_offset, 0

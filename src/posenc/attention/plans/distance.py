"""A bias of the distance alone, ``b_h(q − k)``, served from one table of the forward's distances.

KERPLE, Sandwich, the dynamic position bias and T5 give a (query, key) pair a bias that
depends on ``q − k`` only (``depends_on_distance_only``): a table of ``q_len + k_len − 1``
values per head holds every pair's bias. At default positions a block of query rows reads it
as the CPU flash kernel's mask without building the block's ``(rows, keys)`` bias: with the
rows reversed (``i' = rows − 1 − i``) the pair ``(i', j)`` sits at table index ``t₀ + i' +
j``, so the mask is the strided view ``M[i', j] = w[i' + j]`` (strides 1 and 1 over one row
of the table). Future keys of causal attention are the table's lowest value.

Autograd (:class:`_TableAttention`): q, k and v get their gradients from the kernel's own
backward; a learnable table gets ``∂L/∂w_t = Σ_{pairs at t} dS``, the score gradients ``dS =
P ⊙ (dP − rowsum(dO ⊙ O))`` of the block (``P`` recomputed from the saved log-sum-exp, keys up
to the block's last, ``dP = dO vᵀ``) summed along the view's anti-diagonals: two matmuls of
the block, no softmax, and nothing of the whole ``L × L``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posenc.attention.blocks import default_block_rows
from posenc.attention.context import AttentionContext
from posenc.attention.flash import (
    CPU_FLASH_BACKWARD,
    CPU_FLASH_FORWARD,
    flush_denormals,
    slices,
)
from posenc.attention.plans.base import FlashPartsPlan, PlanCall
from posenc.encoding.protocols import BiasEncoding
from posenc.encoding.resolve import Hooks

__all__ = ["DISTANCE_ROWS", "DISTANCE_TABLE", "distance_plan", "distance_table"]

#: Query rows per block (the CPU flash kernel tiles queries by 256 from 768 rows on).
DISTANCE_ROWS = 1024


def distance_table(
    encoding: BiasEncoding,
    heads: int,
    q_len: int,
    k_len: int,
    causal: bool,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor:
    """``(heads, q_len + k_len − 1)``: the bias at distances ``k_len − 1, k_len − 2, …,
    −(q_len − 1)`` (descending); future keys get the dtype's lowest value when ``causal``."""
    head = torch.arange(heads, device=device).view(-1, 1)
    distance = torch.arange(k_len - 1, -q_len, -1, device=device).view(1, -1)
    table = encoding.bias_at(head, distance, torch.zeros_like(distance), dtype)
    if causal:
        table = table.masked_fill(distance < 0, torch.finfo(dtype).min)
    return table.contiguous()


def _view(table: Tensor, start: int, rows: int, keys: int) -> Tensor:
    """The block's mask ``(heads, rows, keys)``: ``table[:, start + i' + j]``."""
    return table.as_strided(
        (table.shape[0], rows, keys), (table.stride(0), 1, 1), table.storage_offset() + start
    )


def _expand(mask: Tensor, q: Tensor) -> Tensor:
    return mask.expand(q.shape[0], *mask.shape)


class _TableAttention(torch.autograd.Function):
    """One block of reversed query rows over keys ``k``, ``v`` with the table's view as mask."""

    @staticmethod
    @flush_denormals()
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        table: Tensor,
        start: int,
        scale: float,
        causal: bool,
    ) -> Tensor:
        assert CPU_FLASH_FORWARD is not None
        mask = _expand(_view(table, start, q.shape[-2], k.shape[-2]), q)
        out, lse = CPU_FLASH_FORWARD(q, k, v, 0.0, False, attn_mask=mask, scale=scale)
        ctx.start, ctx.scale, ctx.causal = start, scale, causal
        ctx.save_for_backward(q, k, v, table, out, lse)
        return out

    @staticmethod
    @flush_denormals()
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        assert CPU_FLASH_BACKWARD is not None
        q, k, v, table, out, lse = ctx.saved_tensors
        rows, keys = q.shape[-2], k.shape[-2]
        view = _view(table.detach(), ctx.start, rows, keys)
        grad_out = grad_out.contiguous()
        dq, dk, dv = CPU_FLASH_BACKWARD(
            grad_out, q, k, v, out, lse, 0.0, False, attn_mask=_expand(view, q), scale=ctx.scale
        )
        d_table = None
        if ctx.needs_input_grad[3]:
            d_table = torch.zeros_like(table)
            group = q.shape[1] // k.shape[1]
            k_e = k.repeat_interleave(group, dim=1) if group > 1 else k
            v_e = v.repeat_interleave(group, dim=1) if group > 1 else v
            row_dot = (grad_out * out).sum(-1, keepdim=True)
            step = min(_GRADIENT_ROWS, default_block_rows(q.shape[0], q.shape[1], keys))
            for a in range(0, rows, step):
                b = min(rows, a + step)
                # reversed rows [a, b) see keys up to keys − a − 1 under causal order
                end = keys - a if ctx.causal else keys
                _table_gradient(
                    d_table,
                    ctx.start + a,
                    q[:, :, a:b],
                    k_e[:, :, :end],
                    v_e[:, :, :end],
                    view[:, a:b, :end],
                    lse[..., a:b],
                    grad_out[:, :, a:b],
                    row_dot[:, :, a:b],
                    ctx.scale,
                )
        return dq, dk, dv, d_table, None, None, None


#: Query rows per step of a learnable table's gradient (keys up to each step's last), at most
#: (the blocks' element budget may ask fewer: :func:`posenc.attention.blocks.default_block_rows`).
_GRADIENT_ROWS = 128
#: Logits below this (relative to the row's log-sum-exp) give ``exp`` of 0 in float32 and
#: only slow it down (denormals, the masked entries' lowest value): clamped before it.
_LOW = -80.0


def _table_gradient(
    d_table: Tensor,
    start: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    view: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    row_dot: Tensor,
    scale: float,
) -> None:
    """Add ``Σ_b dS`` of rows ``q`` along the anti-diagonals ``t = start + i' + j``."""
    heads, rows, keys = q.shape[1], q.shape[2], k.shape[2]
    logits = torch.matmul(q, k.transpose(-1, -2)).mul_(scale).add_(view)
    probs = logits.sub_(lse.unsqueeze(-1)).clamp_(min=_LOW).exp_()  # P from the saved LSE
    d_probs = torch.matmul(grad_out, v.transpose(-1, -2))
    d_scores = probs.mul_(d_probs.sub_(row_dot)).sum(0)  # (heads, rows, keys)
    # Σ along anti-diagonals: row i' shifted right by i' (a strided view), then summed.
    shifted = d_scores.new_zeros(heads, rows, rows + keys - 1)
    shifted.as_strided((heads, rows, keys), (rows * (rows + keys - 1), rows + keys, 1)).copy_(
        d_scores
    )
    d_table[:, start : start + rows + keys - 1] += shifted.sum(1)


def distance_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """The plan of :mod:`posenc.attention.plans` for a bias of the distance alone, at
    default positions (query row ``i`` at ``i + k_len − q_len``, key ``j`` at ``j``)."""
    rows = block_size or DISTANCE_ROWS
    if padding is not None and block_size is None:  # the padded mask is built per block
        rows = min(rows, default_block_rows(q.shape[0], q.shape[1], k.shape[2]))
    encoding = hooks.bias
    assert encoding is not None
    heads, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    causal = context.mask.causal
    offset = k_len - q_len
    key = (id(encoding), "distance-table", q_len, k_len, causal, q.dtype, q.device)
    table = context.cached(
        key, lambda: distance_table(encoding, heads, q_len, k_len, causal, q.dtype, q.device)
    )
    blocks = [(start, min(q_len, start + rows)) for start in range(0, q_len, rows)]
    key_ranges = [(0, stop + offset if causal else k_len) for _, stop in blocks]
    qs, ks, vs = slices(q, blocks), slices(k, key_ranges), slices(v, key_ranges)
    outs = []
    for (start, stop), key_range in zip(blocks, key_ranges, strict=True):
        keys = key_range[1]
        # row i of the block (reversed: i' = stop − 1 − i) at distance stop − 1 − i' + offset
        # − j from key j: table index (k_len − 1) − distance = (q_len − stop) + i' + j
        q_rev = qs[start, stop].flip(2)
        k_part, v_part = ks[key_range], vs[key_range]
        if padding is None:
            out = _TableAttention.apply(q_rev, k_part, v_part, table, q_len - stop, scale, causal)
        else:  # the padding makes the mask per row of the batch: build the block's
            from posenc.attention.flash import Part, merge_parts

            mask = _view(table, q_len - stop, stop - start, keys) + padding[..., :keys]
            out = merge_parts(q_rev, [Part(k_part, v_part, mask=mask)], scale)
        outs.append(out.flip(2))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


def _distance_applies(call: PlanCall) -> bool:
    return call.context.index_positions and call.hooks.distance_only(call.k.shape[2] - 1)


#: A bias of the distance alone at default positions: one table, strided per block.
DISTANCE_TABLE = FlashPartsPlan("distance table", BiasEncoding, _distance_applies, distance_plan)

"""Plans that split a biased attention into flash parts (see :mod:`posenc.attention.flash`).

The structures an encoding declares by its kind (:mod:`posenc.encoding.kinds`):

* :class:`~posenc.encoding.kinds.LinearBias` (``linear_bias_slopes() -> Tensor | None``):
  ``bias_at(h, q, k) == m_h · (k − q)`` at any positions (causal ALiBi). Two parts per block of
  queries: the block's diagonal square under the kernel's causal order with the exact dense bias
  from ``bias_at`` (what the reference adds; the same square for every block at default positions,
  built once), and the keys before the block, where ``m_h (k_j − q_i) = m_h (k_j − c) + m_h (c −
  q_i)`` with ``c`` the block's first query position splits into a ``(heads, keys)`` vector read
  with stride 0 and an exact per-row LSE shift. Both stay small where the softmax weight is (near
  the diagonal), so the float32 scores keep the reference's precision at any block size.
* :attr:`~posenc.encoding.protocols.BiasEncoding.depends_on_distance_only` (or
  ``distance_only_up_to(position)`` True for the call's largest query position: FIRE below its
  threshold): ``bias_at(h, q, k)`` is a function of ``q − k`` (KERPLE, Sandwich, the dynamic bias,
  T5): at default positions one table of the forward's distances, read by each block as a strided
  mask (:mod:`posenc.attention.plans.distance`).

Any other pointwise bias, forward only (no gradient tracked), under causal order or none: each block
of queries gets its bias materialized for the keys it may see (``bias_grid`` where the encoding has
one) and passed to the kernel as the mask of two parts, the keys before the block and the block's
diagonal square under the kernel's causal order: no mask fill, no ``(heads, rows, keys)`` copy, and
only the square's upper half computed in vain. A scores reader of kind
:class:`~posenc.encoding.kinds.AdditiveScores` (CoPE, DAPE) runs the same way without gradients:
each block's scaled logits are computed once for the reader, and what it adds to them is the
kernel's mask (the kernel adds ``scale · q kᵀ`` itself, fused with its softmax and ``P v``).

All run on the CPU flash kernel, exact in value and gradient, in O(block · keys) memory
without any ``(heads, L, L)`` tensor; half-precision inputs compute in float32.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posenc.attention.blocks import default_block_rows
from posenc.attention.context import AttentionContext
from posenc.attention.flash import Part, merge_parts, slices, with_padding
from posenc.attention.plans.base import FlashPartsPlan, PlanCall
from posenc.attention.rows import as_4d, expand_heads
from posenc.encoding.kinds import AdditiveScores, LinearBias
from posenc.encoding.protocols import BiasEncoding
from posenc.encoding.resolve import Hooks

__all__ = [
    "ALIBI_ROWS",
    "LINEAR_BIAS",
    "MATERIALIZED_BIAS",
    "MATERIALIZED_ROWS",
    "SCORES_TERM",
    "per_block_masks",
]

#: Query rows per block of the ALiBi plan.
ALIBI_ROWS = 256

#: Query rows per block of the materialized-bias plan.
MATERIALIZED_ROWS = 256


def _linear_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """ALiBi's two parts per block of queries (see the module docstring)."""
    assert isinstance(hooks.bias, LinearBias)
    slopes = hooks.bias.linear_bias_slopes()
    assert slopes is not None
    rows = block_size or ALIBI_ROWS
    heads, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    offset = k_len - q_len
    m = slopes.to(device=q.device, dtype=torch.float64).view(1, heads, 1, 1)
    k_pos = context.k_pos.to(torch.float64).view(-1, 1, 1, k_len)  # (batch | 1, 1, 1, keys)
    q_pos = context.q_pos.to(torch.float64).view(-1, 1, q_len)  # (batch | 1, 1, queries)
    starts = range(0, q_len, rows)
    blocks = [(start, min(q_len, start + rows)) for start in starts]
    key_ranges = [(a + offset, b + offset) for a, b in blocks]
    key_ranges += [(0, a + offset) for a, _ in blocks if a + offset > 0]
    qs = slices(q, blocks)
    ks, vs = slices(k, key_ranges), slices(v, key_ranges)
    outs = []
    for start, stop in blocks:
        first, last = start + offset, stop + offset  # the block's diagonal keys
        diagonal = _diagonal_bias(hooks, context, start, stop, first, last, rows, q.dtype)
        parts = [
            Part(
                ks[first, last],
                vs[first, last],
                causal=True,
                mask=with_padding(diagonal, padding, first, last),
            )
        ]
        if first > 0:
            # m (k_j − q_i) = m (k_j − c) + m (c − q_i): a key vector and a row shift, with c
            # the block's first query position, so both stay small near the block.
            c = q_pos[..., start : start + 1].unsqueeze(-1)  # (batch | 1, 1, 1, 1)
            keys = (m * (k_pos[..., :first] - c)).to(q.dtype)  # (batch | 1, heads, 1, first)
            shift = (m[..., 0] * (c[..., 0] - q_pos[..., start:stop])).to(q.dtype)
            parts.append(
                Part(
                    ks[0, first],
                    vs[0, first],
                    mask=with_padding(keys, padding, 0, first),
                    shift=shift,
                )
            )
        outs.append(merge_parts(qs[start, stop], parts, scale))
    return torch.cat(outs, dim=2)


def _materialized_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """A bias materialized per block as the mask of flash parts (see the module docstring);
    a block's ``(batch, heads, rows, keys)`` bias follows the query-block budget."""
    rows = block_size or min(
        MATERIALIZED_ROWS, default_block_rows(q.shape[0], q.shape[1], k.shape[2])
    )

    def bias(start: int, stop: int, end: int) -> Tensor:
        q_pos, k_pos = context.q_pos[..., start:stop], context.k_pos[..., :end]
        out = as_4d(hooks.materialized_bias(q_pos, k_pos, q.dtype))
        assert out is not None
        return out

    return per_block_masks(q, k, v, context, padding, scale, rows, bias)


def per_block_masks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    rows: int,
    build: Callable[[int, int, int], Tensor],
) -> Tensor:
    """Blocks of ``rows`` queries, each with the mask ``build(start, stop, end)`` over the
    keys ``[0, end)`` it may see: without causal order one part, with it the keys before the
    block and the diagonal square under the kernel's causal order."""
    q_len, k_len = q.shape[2], k.shape[2]
    causal, offset = context.mask.causal, k_len - q_len
    outs = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        first, end = start + offset, (stop + offset if causal else k_len)
        mask = build(start, stop, end)
        if not causal:
            parts = [Part(k, v, mask=with_padding(mask, padding, 0, end))]
        else:
            parts = [
                Part(
                    k[:, :, first:end],
                    v[:, :, first:end],
                    causal=True,
                    mask=with_padding(mask[..., first:end], padding, first, end),
                )
            ]
            if first > 0:
                before = with_padding(mask[..., :first], padding, 0, first)
                parts.append(Part(k[:, :, :first], v[:, :, :first], mask=before))
        outs.append(merge_parts(q[:, :, start:stop], parts, scale))
    return torch.cat(outs, dim=2)


def _scores_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """A scores reader's term per block as the mask of flash parts (module docstring)."""
    heads = q.shape[1]
    rows = block_size or min(MATERIALIZED_ROWS, default_block_rows(q.shape[0], heads, k.shape[2]))
    k_all = expand_heads(k, heads)
    mask = context.mask

    def term(start: int, stop: int, end: int) -> Tensor:
        q_block = q[:, :, start:stop]
        keys = k_all[:, :, :end]
        scores = (q_block @ keys.transpose(-1, -2)).mul_(scale)
        assert isinstance(hooks.scores, AdditiveScores)
        extra = hooks.scores.scores_term(
            scores,
            q=q_block,
            k=keys,
            q_pos=context.q_pos[..., start:stop],
            k_pos=context.k_pos[..., :end],
            allowed=mask.block(start, stop, 0, end, heads=heads),
        )
        out = as_4d(extra.to(q.dtype))
        assert out is not None
        return out

    return per_block_masks(q, k, v, context, padding, scale, rows, term)


def _diagonal_bias(
    hooks: Hooks,
    context: AttentionContext,
    start: int,
    stop: int,
    first: int,
    last: int,
    rows: int,
    dtype: torch.dtype,
) -> Tensor:
    """The exact bias of a block's diagonal square, from ``bias_at`` (as the reference).

    At default positions every block's square is the same (a function of ``k − q``): built
    once per forward for all blocks and layers, and sliced for a shorter last block.
    """
    if context.index_positions:
        size = min(rows, context.mask.q_len)

        def build() -> Tensor:
            local = torch.arange(size, device=context.q_pos.device)
            return hooks.materialized_bias(local, local, dtype)

        square = context.cached((id(hooks.encoding), "diagonal", size, dtype), build)
        return square[..., : stop - start, : stop - start]
    q_pos = context.q_pos[..., start:stop]
    k_pos = context.k_pos[..., first:last]
    return hooks.materialized_bias(q_pos, k_pos, dtype)


def _linear_applies(call: PlanCall) -> bool:
    assert isinstance(call.hooks.bias, LinearBias)
    return call.context.mask.causal and call.hooks.bias.linear_bias_slopes() is not None


#: ALiBi (causal): a key vector and an exact per-row shift beyond each block's diagonal.
LINEAR_BIAS = FlashPartsPlan("linear bias", LinearBias, _linear_applies, _linear_plan)

#: Any pointwise bias, forward only: each block's bias materialized as the kernel's mask.
MATERIALIZED_BIAS = FlashPartsPlan(
    "materialized bias", BiasEncoding, lambda call: not call.grad, _materialized_plan
)

#: A scores reader that adds a term (CoPE, DAPE), forward only: the term as the mask.
SCORES_TERM = FlashPartsPlan(
    "scores term", AdditiveScores, lambda call: not call.grad, _scores_plan
)

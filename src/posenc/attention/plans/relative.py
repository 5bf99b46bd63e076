"""Flash-parts plans for relative terms that read q (Shaw, Transformer-XL), forward only.

Both need default positions (key ``j`` at position ``j``, queries the last keys), a mask of
causal order and key padding only, no gradients (training takes the checkpointed query
blocks of :mod:`posenc.attention.blocks`), and the CPU flash kernel.

* Shaw (:class:`~posenc.encoding.kinds.ClippedRelative`): beyond distance ``k`` every key of a row
  uses the edge vectors. For a block of queries, the keys ``k`` or more before all of them form one
  part on the kernel: the key term ``scale · q_i · a^K_{−k}`` is one LSE shift per row, and the
  value term adds ``a^V_{−k}`` to every value, so the part runs with ``v + a^V_{−k}`` (likewise
  after the block without causal order). The band of ``rows + k − 1`` keys around the diagonal is
  computed explicitly with both terms.
* Transformer-XL (:class:`~posenc.encoding.kinds.SinusoidRelative`): ``u·k_j`` folds into the
  queries (``q + u``). The position term ``(q_i + v)·W_R R_{i−j}`` is one matmul per block against
  the projected encodings of the block's distances in descending order, and Transformer-XL's
  relative shift is a strided view of that product (row stride ``W − 1``), which the kernel reads as
  its mask: no gather, one part for the keys before the block and one causal part for its diagonal
  square.
* DeBERTa (:class:`~posenc.encoding.kinds.DisentangledRelative`): both terms read the table row
  ``c(i − j)``, which stops changing beyond the buckets' reach ``D`` (the edge rows). Keys
  ``D`` or more before every query of a block form one part where c2p, ``q_i · K^r_edge``,
  is an LSE shift per row and p2c, ``k_j · Q^r_edge``, a ``(heads, keys)`` vector read with
  stride 0 over rows (likewise after the block without causal order); the band of
  ``rows + D − 1`` keys around the diagonal gathers both terms per pair, as the reference
  does, and runs as a part before the diagonal and the causal diagonal square.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.attention.blocks import BLOCK_ELEMENTS, default_block_rows
from posenc.attention.context import AttentionContext
from posenc.attention.flash import Part, merge_parts, slices, with_padding
from posenc.attention.plans.base import FlashPartsPlan, PlanCall
from posenc.attention.rows import expand_heads
from posenc.encoding.kinds import ClippedRelative, DisentangledRelative, SinusoidRelative
from posenc.encoding.resolve import Hooks

__all__ = [
    "CLIPPED_RELATIVE",
    "DISENTANGLED_RELATIVE",
    "RELATIVE_ROWS",
    "SINUSOID_RELATIVE",
    "edge_reach",
]

#: Query rows per block of the Shaw and Transformer-XL plans.
RELATIVE_ROWS = 256

#: Query rows per block of the Shaw plan under autograd (at least twice the clip distance).
SHAW_TRAIN_ROWS = 64


def _shaw_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """Shaw et al.'s keys and values on flash parts (see the module docstring), forward and
    backward: the band is a part with a learnable mask and a value term, the keys beyond it
    kernel parts whose LSE shift and shifted values carry the edge vectors' gradients."""
    assert isinstance(hooks.contextual, ClippedRelative)
    key_table, value_table, reach = hooks.contextual.clipped_relative_tables()
    key_table = key_table.to(q.dtype)
    value_table = None if value_table is None else value_table.to(q.dtype)
    grad = torch.is_grad_enabled() and any(
        t.requires_grad
        for t in (q, k, v, key_table, *([] if value_table is None else [value_table]))
    )
    # Training: a narrower band (its softmax is written out twice, forward and backward).
    rows = block_size or (max(SHAW_TRAIN_ROWS, 2 * reach) if grad else RELATIVE_ROWS)
    q_len, k_len = q.shape[2], k.shape[2]
    causal, offset = context.mask.causal, k_len - q_len
    per_row = (q @ key_table.T) * scale  # (batch, heads, queries, 2k + 1): q_i · a^K_c
    layout = []  # per block: its rows, its band's keys (keys before `left` are >= k behind
    for start in range(0, q_len, rows):  # every query; keys from `right` on, >= k after)
        stop = min(q_len, start + rows)
        left = max(0, start + offset - reach + 1)
        right = stop + offset if causal else min(k_len, stop + offset + reach - 1)
        layout.append((start, stop, left, right))
    blocks = [(start, stop) for start, stop, _, _ in layout]
    key_ranges = [
        r for _, _, left, right in layout for r in ((0, left), (left, right), (right, k_len))
    ]
    qs, rows_of = slices(q, blocks), slices(per_row, blocks)
    ks, vs = slices(k, key_ranges), slices(v, key_ranges)
    outs = []
    for start, stop, left, right in layout:
        q_block, block_rows = qs[start, stop], rows_of[start, stop]
        query_keys = torch.arange(stop - start, device=q.device)[:, None] + start + offset
        distance = torch.arange(left, right, device=q.device)[None, :] - query_keys
        index = distance.clamp(-reach, reach) + reach  # (rows, keys)
        band_mask = block_rows.gather(-1, index.expand(*block_rows.shape[:2], *index.shape))
        hidden = distance > 0 if causal else None  # (rows, keys)
        if context.mask.key_padding is not None:
            pads = ~context.mask.key_padding[:, None, None, left:right]  # (batch, 1, 1, keys)
            hidden = pads if hidden is None else hidden | pads
        if hidden is not None:  # one fill: a row with no visible key stays finite
            band_mask = band_mask.masked_fill(hidden, torch.finfo(q.dtype).min)
        parts = [
            Part(
                ks[left, right],
                vs[left, right],
                mask=band_mask,
                value_index=None if value_table is None else index,
                value_table=value_table,
            )
        ]
        for lo, hi, edge in ((0, left, 0), (right, k_len, 2 * reach)):
            if lo >= hi or (causal and edge):
                continue
            values = vs[lo, hi]
            if value_table is not None:
                values = values + value_table[edge]
            parts.append(
                Part(
                    ks[lo, hi],
                    values,
                    mask=with_padding(None, padding, lo, hi),
                    shift=block_rows[..., edge],
                )
            )
        outs.append(merge_parts(q_block, parts, scale))
    return torch.cat(outs, dim=2)


def _xl_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """Transformer-XL's terms on flash parts (see the module docstring).

    A block holds the ``(batch, heads, rows, rows + keys)`` position product, so its rows
    follow the query-block budget (:func:`~posenc.attention.blocks.default_block_rows`).
    """
    rows = block_size or min(RELATIVE_ROWS, default_block_rows(q.shape[0], q.shape[1], k.shape[2]))
    encoding = hooks.contextual
    assert isinstance(encoding, SinusoidRelative)
    u, v_bias = (t.to(q.dtype) for t in encoding.distance_terms())
    q_len, k_len = q.shape[2], k.shape[2]
    causal, offset = context.mask.causal, k_len - q_len
    # Distances i − j in descending order, from the largest any pair has to the smallest.
    largest = k_len - 1
    smallest = -(min(rows, q_len) - 1) if causal else -(k_len - 1)
    distances = torch.arange(largest, smallest - 1, -1, device=q.device)
    projected = encoding.projected(distances).to(q.dtype)  # (heads, n, head_dim)
    content_q = q + u[:, None]  # u·k_j folded into the queries
    position_q = (q + v_bias[:, None]) * scale
    outs = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        count = stop - start
        first, end = start + offset, (stop + offset if causal else k_len)
        top = largest - (stop - 1 + offset)  # row of the block's largest distance
        width = count + end - 1
        table = projected[:, top : top + width]  # (heads, width, head_dim)
        product = position_q[:, :, start:stop] @ table.transpose(-1, -2)  # (b, h, rows, width)
        # Row a needs columns (count − 1 − a) + j: Transformer-XL's relative shift as a view.
        shifted = product.as_strided(
            (*product.shape[:2], count, end),
            (product.stride(0), product.stride(1), width - 1, 1),
            product.storage_offset() + count - 1,
        )
        q_block = content_q[:, :, start:stop]
        parts = []
        if causal:
            if first > 0:
                parts.append(
                    Part(
                        k[:, :, :first],
                        v[:, :, :first],
                        mask=with_padding(shifted[..., :first], padding, 0, first),
                    )
                )
            parts.append(
                Part(
                    k[:, :, first:end],
                    v[:, :, first:end],
                    causal=True,
                    mask=with_padding(shifted[..., first:end], padding, first, end),
                )
            )
        else:
            parts.append(Part(k, v, mask=with_padding(shifted, padding, 0, end)))
        outs.append(merge_parts(q_block, parts, scale))
    return torch.cat(outs, dim=2)


def _deberta_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """DeBERTa's c2p and p2c terms on flash parts (see the module docstring)."""
    rows = block_size or min(RELATIVE_ROWS, default_block_rows(q.shape[0], q.shape[1], k.shape[2]))
    encoding = hooks.contextual
    assert isinstance(encoding, DisentangledRelative)
    # K^r and Q^r, (heads, 2k, d) or None, with the logit scale folded in.
    key_table, query_table = (
        None if t is None else t * scale for t in encoding.position_tables(q.dtype)
    )
    heads, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    causal, offset = context.mask.causal, k_len - q_len
    k_all = expand_heads(k, heads)
    # p2c's Q^r k_jᵀ for every key at once when that is no larger than a few query blocks'
    # scores (else per band: the bands of consecutive blocks overlap by `rows + D` keys).
    per_key_all = None
    if query_table is not None and q.shape[0] * heads * query_table.shape[1] * k_len <= (
        4 * BLOCK_ELEMENTS
    ):
        per_key_all = query_table @ k_all.transpose(-1, -2)  # (batch, heads, 2k, keys)
    # Row of every distance δ = i − j a pair can have, at [δ + k_len − 1].
    table_rows = encoding.distance_rows(torch.arange(1 - k_len, k_len, device=q.device))
    past, future = edge_reach(table_rows[k_len - 1 :]), edge_reach(table_rows[:k_len].flip(0))
    edges = {}
    for name, row in (("past", int(table_rows[-1])), ("future", int(table_rows[0]))):
        per_key = None if query_table is None else k_all @ query_table[:, row, :, None]
        edges[name] = (row, None if per_key is None else per_key.transpose(-1, -2))
    outs = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        first, end = start + offset, (stop + offset if causal else k_len)
        q_block = q[:, :, start:stop]
        per_row = None if key_table is None else q_block @ key_table.transpose(-1, -2)
        # Keys before `lo` are `past` or more before every query; keys from `hi` on are
        # `future` or more after every query (bidirectional only).
        lo = min(first, max(0, first - past + 1))
        hi = (
            end
            if causal
            else max(min(k_len, stop + offset), min(k_len, stop - 1 + offset + future))
        )
        parts = []
        for name, keys in (("past", (0, lo)), ("future", (hi, k_len))):
            if keys[0] >= keys[1] or (causal and name == "future"):
                continue
            row, per_key = edges[name]
            mask = None if per_key is None else per_key[..., keys[0] : keys[1]]
            parts.append(
                Part(
                    k[:, :, keys[0] : keys[1]],
                    v[:, :, keys[0] : keys[1]],
                    mask=with_padding(mask, padding, *keys),
                    shift=None if per_row is None else per_row[..., row],
                )
            )
        if query_table is None:
            per_key = None
        elif per_key_all is not None:
            per_key = per_key_all[..., lo:hi].contiguous()  # the gather reads it by column
        else:
            per_key = query_table @ k_all[:, :, lo:hi].transpose(-1, -2)
        band = _deberta_band(q_block, per_row, per_key, table_rows, first, (lo, hi), k_len)
        pieces = [(lo, first), (first, hi)] if causal else [(lo, hi)]
        for a, b in pieces:
            if a < b:
                parts.append(
                    Part(
                        k[:, :, a:b],
                        v[:, :, a:b],
                        causal=causal and a == first,
                        mask=with_padding(band[..., a - lo : b - lo], padding, a, b),
                    )
                )
        outs.append(merge_parts(q_block, parts, scale))
    return torch.cat(outs, dim=2)


def edge_reach(rows_by_distance: Tensor) -> int:
    """The least ``D`` with the same row at every distance ``≥ D`` (rows indexed by distance
    0, 1, …, the last one the farthest)."""
    differs = (rows_by_distance != rows_by_distance[-1]).nonzero()
    return int(differs.max()) + 1 if differs.numel() else 0


def _deberta_band(
    q: Tensor,
    per_row: Tensor | None,
    per_key: Tensor | None,
    table_rows: Tensor,
    first_query_key: int,
    keys: tuple[int, int],
    k_len: int,
) -> Tensor:
    """c2p + p2c (scaled) of a block's queries and the keys ``keys``, gathered per pair from
    ``per_row = q K^rᵀ`` ``(b, h, rows, 2k)`` and ``per_key = Q^r kᵀ`` ``(b, h, 2k, keys)``."""
    lo, hi = keys
    query_keys = torch.arange(q.shape[2], device=q.device)[:, None] + first_query_key
    distance = query_keys - torch.arange(lo, hi, device=q.device)[None, :]  # i − j
    index = table_rows[distance + k_len - 1]  # (rows, keys)
    shape = (*q.shape[:2], *index.shape)
    term = None if per_row is None else per_row.gather(-1, index.expand(shape))
    if per_key is not None:
        p2c = per_key.gather(-2, index.expand(shape))
        term = p2c if term is None else term.add_(p2c)
    assert term is not None
    return term


def _at_default_positions(call: PlanCall) -> bool:
    return call.context.index_positions


def _forward_at_default_positions(call: PlanCall) -> bool:
    return call.context.index_positions and not call.grad


#: Shaw's relative keys and values, forward and backward, at default positions.
CLIPPED_RELATIVE = FlashPartsPlan(
    "clipped relative", ClippedRelative, _at_default_positions, _shaw_plan
)

#: DeBERTa's c2p and p2c terms, forward only, at default positions.
DISENTANGLED_RELATIVE = FlashPartsPlan(
    "disentangled relative", DisentangledRelative, _forward_at_default_positions, _deberta_plan
)

#: Transformer-XL's terms, forward only, at default positions.
SINUSOID_RELATIVE = FlashPartsPlan(
    "sinusoid relative", SinusoidRelative, _forward_at_default_positions, _xl_plan
)

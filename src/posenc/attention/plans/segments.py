"""The segments' plan: blocks of query rows, each a merge of CPU flash-kernel parts.

Serves a segment method (:class:`~posenc.encoding.protocols.SegmentEncoding`, or a rotary
whose keys are read unrotated from the cache) at default positions under causal order: each
segment's region splits a block's keys into a few ranges (bands of distances, chunks, keys
below a position), each range one part of the kernel with its own rotated keys, merged by
log-sum-exp into one softmax (:func:`posenc.attention.flash.merge_parts`). Each key is read
once per segment; nothing of size L×L is built.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from posenc.attention import flash
from posenc.attention.context import AttentionContext
from posenc.attention.flash import Part, merge_parts
from posenc.attention.rows import compute_dtype
from posenc.segments.base import Region

__all__ = ["PARTS_ROWS", "SegmentRows", "segment_parts", "segment_parts_apply"]

#: Query rows per block of the CPU flash-parts plan (the CPU flash kernel tiles queries by 256
#: from 768 rows on, by 64 below: smaller blocks cost ~20 % more at 16k keys).
PARTS_ROWS = 1024


class SegmentRows(Protocol):
    """One segment of a forward as the plan reads it
    (:class:`posenc.attention.segmented.Segmented`)."""

    @property
    def region(self) -> Region: ...

    @property
    def k(self) -> Tensor:
        """Every key rotated at the segment's key positions."""
        ...

    @property
    def query_requires_grad(self) -> bool:
        """True when the unrotated queries require a gradient."""
        ...

    def rows(self, start: int, stop: int) -> Tensor:
        """Query rows ``start:stop`` rotated at the segment's query positions."""
        ...


def segment_parts_apply(q: Tensor, context: AttentionContext, dropout_p: float) -> bool:
    mask = context.mask
    return (
        flash.available(q)
        and context.index_positions
        and mask.causal
        and not mask.has_pairwise
        and dropout_p == 0.0
        and not torch.compiler.is_compiling()
    )


def _boundaries(rotated: Sequence[SegmentRows], q_len: int, offset: int, rows: int) -> list[int]:
    """Block starts: every ``rows`` rows, and every chunk border of a chunked region (a block
    inside one chunk has whole-chunk key ranges)."""
    starts = set(range(0, q_len, rows))
    for r in rotated:
        chunk = r.region.chunk
        if chunk is not None:
            first = -(-offset // chunk) * chunk  # first border at a position >= offset
            starts.update(range(first - offset, q_len, chunk))
    return sorted(s for s in starts if 0 <= s < q_len)


def _pieces(region: Region, first: int, last: int) -> list[tuple[int, int, bool]]:
    """Key ranges ``(a, b, whole)`` of the region for rows at positions ``first … last``:
    ``whole`` ranges pair with every row (no mask); the others are edges, split where the
    region's lower edge and the causal diagonal start, so that they come out as
    top-left-causal squares where the region allows."""
    (c0, c1), (w0, w1) = region.key_range(first, last)
    c1 = min(c1, last + 1)  # causal
    w1 = min(w1, first)  # keys before the first row are visible to every row
    if c1 <= c0:
        return []
    points = {c0, c1, first}
    if region.lo is not None and region.chunk is None:
        # the lower edge's square starts at first − lo (its diagonal: row i, key first − lo + i)
        w1 = min(w1, first - region.lo)
        points.add(first - region.lo)
    if w0 < w1:
        points.update((w0, w1))
    cuts = sorted(p for p in points if c0 <= p <= c1)
    return [(a, b, w0 <= a and b <= w1) for a, b in itertools.pairwise(cuts) if b > a]


def segment_parts(
    segmented: Sequence[SegmentRows],
    v: Tensor,
    *,
    context: AttentionContext,
    scale: float,
    block_size: int | None,
) -> Tensor:
    """Blocks of query rows, each a merge of flash-kernel parts (see the module docstring).
    Positions are indices: query row ``i`` at position ``i + offset``, key ``j`` at ``j``.
    Query rows are rotated per block (O(block) memory beyond the keys); without gradients the
    blocks are written into one output."""
    mask = context.mask
    out_dtype = v.dtype
    cdt = compute_dtype(out_dtype)
    keys = {id(s.k): s.k.to(cdt) for s in segmented}  # one per key map
    v = v.to(cdt)
    offset = mask.causal_offset
    q_len = mask.q_len
    padding = None
    if mask.key_padding is not None:
        low = torch.finfo(cdt).min
        padding = torch.zeros((), dtype=cdt).masked_fill(~mask.key_padding, low)[:, None, None]
    starts = _boundaries(segmented, q_len, offset, block_size or PARTS_ROWS)
    grad = torch.is_grad_enabled() and (
        v.requires_grad
        or any(k.requires_grad for k in keys.values())
        or segmented[0].query_requires_grad
    )
    outs: list[Tensor] = []
    out: Tensor | None = None
    for index, start in enumerate(starts):
        stop = starts[index + 1] if index + 1 < len(starts) else q_len
        first, last = start + offset, stop - 1 + offset  # positions of the block's rows
        parts: list[Part] = []
        q_first: Tensor | None = None
        for r in segmented:
            k_r = keys[id(r.k)]
            pieces = _pieces(r.region, first, last)
            if not pieces:
                continue
            q_block = r.rows(start, stop).to(cdt)
            q_first = q_block if q_first is None else q_first
            for a, b, whole in pieces:
                causal, reverse, piece = False, False, None
                if not whole:
                    causal, reverse, piece = _edge(
                        context, r.region, first, stop - start, a, b, cdt
                    )
                if padding is not None:  # the kernel takes is_causal together with a mask
                    pad = padding[..., a:b]
                    piece = pad if piece is None else piece + pad
                parts.append(
                    Part(
                        k_r[:, :, a:b],
                        v[:, :, a:b],
                        causal=causal,
                        mask=piece,
                        q=q_block,
                        reverse=reverse,
                    )
                )
        assert q_first is not None  # every row sees itself in some segment
        block = merge_parts(q_first, parts, scale)
        if grad:
            outs.append(block)
            continue
        if out is None:
            out = block.new_empty(*block.shape[:2], q_len, block.shape[-1])
        out[:, :, start:stop] = block
    if grad:
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    assert out is not None
    empty = mask.empty_rows()
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out.to(out_dtype)


def _edge(
    context: AttentionContext,
    region: Region,
    first: int,
    rows: int,
    a: int,
    b: int,
    dtype: torch.dtype,
) -> tuple[bool, bool, Tensor | None]:
    """An edge piece for rows at positions ``first …`` and keys ``a … b − 1``, as ``(causal,
    reverse, mask)``: a top-left-causal square runs as the kernel's ``is_causal``, a square
    visible on and above its diagonal as ``is_causal`` on reversed rows and keys, a piece
    visible everywhere without a mask, anything else with an additive ``(rows, b − a)``
    mask. A band of distances depends on the block only through ``a − first``: one per shape
    serves every block and layer of the forward."""
    invariant = region.chunk is None and region.key_below is None
    invariant = invariant and region.q_from is None and region.q_below is None
    key = ("segment-edge", region, rows, a - first, b - a, dtype, None if invariant else first)

    def build() -> tuple[bool, bool, Tensor | None]:
        device = context.mask.device
        q_pos = torch.arange(first, first + rows, device=device)[:, None]
        k_pos = torch.arange(a, b, device=device)[None, :]
        visible = region.contains(q_pos, k_pos) & (k_pos <= q_pos)
        if bool(visible.all()):
            return False, False, None
        if rows == b - a:
            square = torch.ones_like(visible)
            if bool(torch.equal(visible, square.tril())):
                return True, False, None
            if bool(torch.equal(visible, square.triu())):
                return True, True, None
        low = torch.finfo(dtype).min
        mask = torch.zeros((), dtype=dtype, device=device).masked_fill(~visible, low)
        return False, False, mask

    return context.cached(key, build)

"""Attention of a segment method: rotated scores per segment, merged into one softmax.

A segment method (:mod:`posenc.segments`) gives each (query, key) pair the positions of the
segment whose region holds it. Every backend rotates, for each segment ``s``, the queries
and keys at that segment's positions (``q_s``, ``k_s``: one rotation of each tensor per
segment, never per pair; segments with the same key positions share one) and scores only the
pairs of the segment:

* ``sdpa`` (the reference): for all queries at once, each segment's scores where its region
  holds, one softmax (:func:`segment_rows`);
* ``chunked``: blocks of query rows. On the CPU at default positions each block is a list of
  flash-kernel parts, per segment the keys its region can hold for the block (the keys every
  row of the block pairs with run without any mask; the region's edges as the kernel's
  causal square, on reversed rows and keys where the edge is an upper triangle, or with a
  small mask built once per forward), merged exactly by their log-sum-exp with the kernels'
  own backward (:func:`posenc.attention.flash.merge_parts`); a block never touches keys
  outside its segments and rotates only its own query rows. Otherwise (other positions,
  devices, dropout) each block is :func:`segment_rows` over the keys it can see,
  checkpointed under autograd.
* ``flex``: one FlexAttention call per segment with the region and the mask as its
  ``mask_mod``, merged by the returned log-sum-exp (forward only on the CPU).
* ``auto``: the parts plan where it applies (decoding too: each cached key is read once, by
  its segment), else ``sdpa`` for small inputs and ``chunked`` above.

Keys come from the caller unrotated (a KV cache keeps them so); each segment's rotated keys
are memoised in the cache per (position map, frequency state), so a decoding step rotates
only its new keys unless the frequencies changed. A length-dependent encoding under the
``"query"`` length rule splits every segment by the queries that share frequencies.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from posenc.attention.blocks import default_block_rows
from posenc.attention.cache import KVCache
from posenc.attention.context import AttentionContext
from posenc.attention.plans.segments import segment_parts, segment_parts_apply
from posenc.attention.rows import compute_dtype, expand_heads
from posenc.encoding.protocols import RotaryEncoding
from posenc.encoding.resolve import Hooks
from posenc.segments.base import (
    PositionMap,
    Region,
    Segment,
    SegmentedRotary,
    check_segments,
)
from posenc.softmax.query_scale import scale_queries

__all__ = ["Rotated", "rotate_keys_on_read", "segment_rows", "segmented_attention"]


IDENTITY = Segment("all", Region())


@dataclass
class Rotated:
    """One segment's region with its rotated queries and keys."""

    region: Region
    q: Tensor  # (batch, heads, q_len, head_dim)
    k: Tensor  # (batch, kv_heads, k_len, head_dim)


def _tables(
    encoding: RotaryEncoding,
    positions: Tensor,
    dtype: torch.dtype,
    *,
    update: bool,
    length: int | None,
) -> Any:
    if length is not None:  # the frequencies of that length, the module's state untouched
        return encoding.rotary_tables(positions, dtype, update=False, length=length)
    return encoding.rotary_tables(positions, dtype, update=update)


def _state(encoding: RotaryEncoding, length: int | None) -> Hashable:
    """A token that changes whenever the frequencies a segment rotates with change."""
    if length is not None:
        return ("length", encoding.frequency_length(length))
    return encoding.rebuilds


def per_query_lengths(encoding: RotaryEncoding) -> bool:
    """True when the encoding's frequencies follow each query's own length (the ``"query"``
    rule of a length-dependent scaling)."""
    return encoding.depends_on_length and encoding.length_rule == "query"


def _length_groups(encoding: RotaryEncoding, q_pos: Tensor) -> list[tuple[int, int, int]]:
    """``(length, first, stop)``: runs of query positions ``[first, stop)`` whose own lengths
    ``p + 1`` give one set of frequencies (one host read of the positions)."""
    values = sorted({math.floor(p) for p in q_pos.detach().flatten().tolist()})
    groups: list[tuple[int, int, int]] = []
    for p in values:
        state = encoding.frequency_length(p + 1)
        if groups and encoding.frequency_length(groups[-1][0]) == state:
            length, first, _ = groups[-1]
            groups[-1] = (length, first, p + 1)
        else:
            groups.append((p + 1, p, p + 1))
    return groups


def _by_length(segments: tuple[Segment, ...], groups: list[tuple[int, int, int]]) -> list[Segment]:
    """Each segment once per group of queries sharing frequencies, restricted to them."""
    if len(groups) == 1:
        return [replace(s, length=groups[0][0]) for s in segments]
    return [
        replace(
            s,
            name=f"{s.name}@{length}",
            region=replace(s.region, q_from=first, q_below=stop),
            length=length,
        )
        for s in segments
        for length, first, stop in groups
    ]


class _Rotation:
    """One forward's rotations of one encoding at the segments' positions: the tables per
    position map (shared by the layers through the context), every key rotated once per key
    map (from the cache's memo), and query rows rotated when a block asks for them."""

    def __init__(
        self,
        q: Tensor,
        k: Tensor,
        *,
        encoding: RotaryEncoding,
        context: AttentionContext,
        cache: KVCache | None,
        memoise: bool,
    ) -> None:
        self.q, self.k, self.encoding, self.context, self.cache = q, k, encoding, context, cache
        self.memoise = memoise
        self.keys: dict[tuple[PositionMap, int | None], Tensor] = {}

    def tables(
        self, name: str, positions: Tensor, position_map: PositionMap, length: int | None
    ) -> Any:
        """The encoding's tables for ``position_map(positions)`` (memoised per forward). The
        first call at the current frequencies updates a length-dependent encoding from the
        queries' true positions (once per forward)."""
        encoding, context = self.encoding, self.context
        dtype, device, ident = self.q.dtype, self.q.device, id(encoding)
        if length is None:
            context.cached(
                (ident, "rotary", dtype, device),
                lambda: _tables(encoding, context.q_pos, dtype, update=True, length=None),
            )
        if name == "q" and position_map.is_identity and length is None:
            return context.memo[(ident, "rotary", dtype, device)]
        key = (ident, "segment", name, position_map, length, positions.shape[-1], dtype, device)
        return context.cached(
            key,
            lambda: _tables(encoding, position_map(positions), dtype, update=False, length=length),
        )

    def rotated_keys(self, k_map: PositionMap, length: int | None) -> Tensor:
        """Every key rotated at ``k_map`` (new keys only, from a cache's memo)."""
        if (k_map, length) in self.keys:
            return self.keys[(k_map, length)]
        k, context = self.k, self.context
        empty_q = self.q[..., :0, :]
        empty_tables = self.tables("q", context.q_pos[..., :0], PositionMap(const=0), length)

        def rotate_from(start: int) -> Tensor:
            tables = self.tables(f"k{start}", context.k_pos[..., start:], k_map, length)
            return self.encoding.rotate_qk(empty_q, k[..., start:, :], empty_tables, tables)[1]

        grad = torch.is_grad_enabled() and (self.q.requires_grad or k.requires_grad)
        if self.cache is None:
            rotated = rotate_from(0)
        else:
            key: Hashable = (id(self.encoding), k_map, _state(self.encoding, length))
            rotated = self.cache.rotated_keys(key, rotate_from, memoise=self.memoise and not grad)
        self.keys[(k_map, length)] = rotated
        return rotated

    def query_rows(self, q_map: PositionMap, length: int | None, start: int, stop: int) -> Tensor:
        """Query rows ``start … stop − 1`` rotated at ``q_map``."""
        context = self.context
        tables = self.tables("q", context.q_pos, q_map, length)
        rows = _slice_tables(tables, start, stop)
        empty_tables = self.tables("k", context.k_pos[..., :0], PositionMap(const=0), length)
        q_rows = self.q[..., start:stop, :]
        rotated: Tensor = self.encoding.rotate_qk(q_rows, self.k[..., :0, :], rows, empty_tables)[0]
        return rotated


def _slice_tables(tables: Any, start: int, stop: int) -> Any:
    """Rows ``start … stop − 1`` of rotary tables (tensors with the sequence at dim -2)."""
    if isinstance(tables, Tensor):
        return tables[..., start:stop, :]
    return tuple(_slice_tables(t, start, stop) for t in tables)


@dataclass
class Segmented:
    """One segment of a forward: its region, every key rotated at its key positions, and
    its queries rotated on demand (all rows, or one block's)."""

    region: Region
    k: Tensor
    segment: Segment
    rotation: _Rotation

    def rows(self, start: int, stop: int) -> Tensor:
        return self.rotation.query_rows(self.segment.q_map, self.segment.length, start, stop)

    @property
    def query_requires_grad(self) -> bool:
        """True when the unrotated queries require a gradient."""
        return self.rotation.q.requires_grad

    def rotated(self) -> Rotated:
        """All queries rotated (the reference, blocks and flex paths)."""
        return Rotated(self.region, self.rows(0, self.rotation.q.shape[-2]), self.k)


def rotate_keys_on_read(
    q: Tensor,
    k: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    cache: KVCache | None,
) -> tuple[Tensor, Tensor]:
    """q at its positions and every key at its own, rotated with the current frequencies (the
    read of an unrotated cache; the memo keeps a step from rotating old keys again while the
    frequencies stay)."""
    assert hooks.rotary is not None
    rotation = _Rotation(q, k, encoding=hooks.rotary, context=context, cache=cache, memoise=True)
    keys = rotation.rotated_keys(IDENTITY.k_map, None)
    return rotation.query_rows(IDENTITY.q_map, None, 0, q.shape[-2]), keys


def _rotate_segments(
    q: Tensor,
    k: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    cache: KVCache | None,
) -> list[Segmented]:
    encoding = hooks.rotary
    assert encoding is not None
    scale = None if hooks.segments is None else hooks.segments.query_scale(context.q_pos)
    if scale is not None:  # log-n: one factor per query row
        q = scale_queries(q, scale)
    segments: list[Segment] = [IDENTITY]
    if hooks.segments is not None:
        method = hooks.segments
        own = method.segments()
        if not (isinstance(method, SegmentedRotary) and method.checked(own)):
            check_segments(own, type(method).__name__)  # a hook that bypassed the build
        segments = list(own)
    memoise = True
    if per_query_lengths(encoding):
        groups = context.cached(
            (id(encoding), "length-groups"), lambda: _length_groups(encoding, context.q_pos)
        )
        segments = _by_length(tuple(segments), groups)
        memoise = len(groups) == 1
    rotation = _Rotation(q, k, encoding=encoding, context=context, cache=cache, memoise=memoise)
    return [
        Segmented(s.region, rotation.rotated_keys(s.k_map, s.length), s, rotation) for s in segments
    ]


def segment_rows(
    rotated: list[Rotated],
    v: Tensor,
    *,
    q_pos: Tensor,
    k_pos: Tensor,
    allowed: Tensor | None,
    scale: float,
    dropout_p: float,
) -> Tensor:
    """Attention of some query rows over some keys: each segment's scores where its region
    holds, the mask, one softmax (the reference; positions and ``allowed`` of these rows and
    keys; ``rotated`` sliced to them). Rows that see no key are zero."""
    out_dtype = rotated[0].q.dtype
    cdt = compute_dtype(out_dtype)
    heads = rotated[0].q.shape[1]
    q_grid, k_grid = q_pos[..., :, None], k_pos[..., None, :]
    scores: Tensor | None = None
    inside_any: Tensor | None = None
    for part in rotated:
        k_s = expand_heads(part.k, heads).to(cdt)
        s = part.q.to(cdt) @ k_s.transpose(-1, -2)  # (batch, heads, rows, keys)
        inside = part.region.contains(q_grid, k_grid)
        inside = inside.unsqueeze(-3) if inside.dim() == 3 else inside  # (batch, 1, rows, keys)
        scores = s if scores is None else torch.where(inside, s, scores)
        inside_any = inside if inside_any is None else inside_any | inside
    assert scores is not None and inside_any is not None
    visible = inside_any if allowed is None else inside_any & allowed
    scores = (scores * scale).masked_fill(~visible, torch.finfo(cdt).min)
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    out = probs @ expand_heads(v, heads).to(cdt)
    out = out.masked_fill(~visible.any(dim=-1, keepdim=True), 0.0)
    return out.to(out_dtype)


def segmented_attention(
    name: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
    cache: KVCache | None = None,
    block_size: int | None = None,
    structured: bool = True,
    compile: bool = True,
) -> Tensor:
    """Attention of unrotated ``q`` over unrotated ``k`` (all keys) and ``v`` with the
    encoding's segments, by backend ``name`` (``"sdpa"``, ``"chunked"``, ``"flex"`` or
    ``"auto"``); see the module docstring. ``structured=False`` keeps ``chunked`` off the
    flash-parts plan (generic blocks)."""
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    segmented = _rotate_segments(q, k, hooks=hooks, context=context, cache=cache)
    mask = context.mask
    if name == "auto":  # the flash-parts plan where it applies: each key read once a segment
        from posenc.attention.backends import SMALL_SCORES

        small = mask.q_len * mask.k_len <= SMALL_SCORES
        parts = structured and segment_parts_apply(q, context, dropout_p)
        name = "sdpa" if small and not parts else "chunked"
    if structured and name == "chunked" and segment_parts_apply(q, context, dropout_p):
        return segment_parts(segmented, v, context=context, scale=scale, block_size=block_size)
    rotated = [s.rotated() for s in segmented]  # every query row rotated per segment
    if name == "sdpa":
        allowed = mask.block(0, mask.q_len, 0, mask.k_len, heads=q.shape[1])
        return segment_rows(
            rotated,
            v,
            q_pos=context.q_pos,
            k_pos=context.k_pos,
            allowed=allowed,
            scale=scale,
            dropout_p=dropout_p,
        )
    if name == "flex":
        from posenc.attention.segmented_flex import flex_segments

        return flex_segments(rotated, v, context=context, scale=scale, compile=compile)
    return _blocked(
        rotated, v, context=context, scale=scale, dropout_p=dropout_p, block_size=block_size
    )


# ---- chunked: generic blocks -------------------------------------------------------------


def _blocked(
    rotated: list[Rotated],
    v: Tensor,
    *,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
    block_size: int | None,
) -> Tensor:
    mask = context.mask
    first = rotated[0]
    batch, heads, q_len, _ = first.q.shape
    rows = block_size or default_block_rows(batch, heads * len(rotated), first.k.shape[-2])
    grad = (
        torch.is_grad_enabled()
        and q_len > rows
        and (v.requires_grad or any(r.q.requires_grad or r.k.requires_grad for r in rotated))
    )
    outs = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        end = mask.key_end(stop)
        if end == 0:
            outs.append(first.q.new_zeros(batch, heads, stop - start, v.shape[-1]))
            continue
        regions = [r.region for r in rotated]

        def step(
            v_: Tensor,
            *tensors: Tensor,
            start: int = start,
            stop: int = stop,
            end: int = end,
            regions: list[Region] = regions,
        ) -> Tensor:
            parts = [
                Rotated(region, tensors[2 * i], tensors[2 * i + 1])
                for i, region in enumerate(regions)
            ]
            return segment_rows(
                parts,
                v_,
                q_pos=context.q_pos[..., start:stop],
                k_pos=context.k_pos[..., :end],
                allowed=mask.block(start, stop, 0, end, heads=heads),
                scale=scale,
                dropout_p=dropout_p,
            )

        args = [v[:, :, :end]]
        for r in rotated:
            args += [r.q[:, :, start:stop], r.k[:, :, :end]]
        outs.append(checkpoint(step, *args, use_reentrant=False) if grad else step(*args))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

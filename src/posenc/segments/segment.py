"""A segment of a segment method: the (query, key) pairs it holds and where it puts them.

:class:`Region` says which pairs a segment holds, by structure only; two :class:`PositionMap` s
give the positions its query and key are rotated at; :class:`Segment` ties them together.
:func:`check_segments` refuses segments that overlap or leave a query without its own key, and
:func:`pair_positions` lays the segments out on a grid of pairs (for plots and tests). The
methods built from them: :mod:`posenc.segments.base`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import check_int

__all__ = ["PositionMap", "Region", "Segment", "check_segments", "pair_positions"]


def _check_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _whole(value: float) -> bool:
    return float(value).is_integer()


@dataclass(frozen=True)
class PositionMap:
    """Where a segment puts a token: a position ``p`` ↦ the position it is rotated at.

    .. math::

        p' = \\min(a \\cdot t(p) + b,\\ \\mathrm{cap}), \\qquad
        t(p) = \\lfloor p / \\mathrm{div} \\rfloor,\\ p \\bmod \\mathrm{mod}\\ \\text{or}\\ p,

    or the constant ``const`` for every token. The default is the identity.

    Args:
        div: floor-divide by this (Self-Extend's group size), ≥ 1.
        mod: take the remainder modulo this (Dual Chunk Attention's chunk), ≥ 1.
        scale: ``a`` (Leaky ReRoPE's ``1/k``), > 0.
        shift: ``b``.
        cap: upper bound of the result (DCA's successive-chunk clamp), or None.
        const: every token at this position (ReRoPE's far query), or None.

    Integer positions stay integer when every number is whole (exact rotation angles);
    otherwise the result is float64.

    Example::

        >>> PositionMap(div=4, shift=6)(torch.arange(10))
        tensor([6, 6, 6, 6, 7, 7, 7, 7, 8, 8])
    """

    div: int | None = None
    mod: int | None = None
    scale: float = 1.0
    shift: float = 0.0
    cap: float | None = None
    const: float | None = None

    def __post_init__(self) -> None:
        for name in ("div", "mod"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_int(name, getattr(self, name), low=1))
        if self.div is not None and self.mod is not None:
            raise ValueError("a PositionMap takes div or mod, not both")
        if _check_number("scale", self.scale) <= 0:
            raise ValueError(f"scale must be > 0, got {self.scale!r}")
        _check_number("shift", self.shift)
        if self.cap is not None:
            _check_number("cap", self.cap)
        if self.const is not None:
            _check_number("const", self.const)

    @property
    def is_identity(self) -> bool:
        """True when ``p' = p``."""
        return self == PositionMap()

    @property
    def whole(self) -> bool:
        """True when every number of the map is whole (integer positions stay integer)."""
        numbers = [self.scale, self.shift, self.cap, self.const]
        return all(n is None or _whole(n) for n in numbers)

    def __call__(self, positions: Tensor) -> Tensor:
        """The mapped positions, same shape (integer when ``positions`` and the map are)."""
        exact = not positions.is_floating_point() and self.whole
        if self.const is not None:
            dtype = positions.dtype if exact else torch.float64
            return torch.full_like(positions, self.const, dtype=dtype)
        p = positions if exact else positions.to(torch.float64)
        if self.div is not None:
            p = torch.div(p, self.div, rounding_mode="floor")
        elif self.mod is not None:
            p = torch.remainder(p, self.mod)
        if self.scale != 1.0:
            p = p * (int(self.scale) if exact else self.scale)
        if self.shift != 0.0:
            p = p + (int(self.shift) if exact else self.shift)
        if self.cap is not None:
            p = p.clamp(max=int(self.cap) if exact else self.cap)
        return p

    def __repr__(self) -> str:
        if self.const is not None:
            return f"PositionMap(const={self.const:g})"
        parts = [
            f"{name}={value!r}"
            for name, value, default in (
                ("div", self.div, None),
                ("mod", self.mod, None),
                ("scale", self.scale, 1.0),
                ("shift", self.shift, 0.0),
                ("cap", self.cap, None),
            )
            if value != default
        ]
        return f"PositionMap({', '.join(parts)})"


@dataclass(frozen=True)
class Region:
    """The (query, key) pairs of a segment, by structure.

    A pair with query position ``p`` and key position ``r`` belongs to the region when

    .. math::
        \\mathrm{lo} \\le c(p) - c(r) < \\mathrm{hi} \\quad\\text{and}\\quad
        r < \\mathrm{key\\_below},

    with ``c(x) = x`` (a band of distances) or ``c(x) = ⌊x / chunk⌋`` (a band of chunk
    indices); a missing bound is no bound.

    Args:
        lo, hi: the band, integers with ``lo < hi`` (None: unbounded).
        chunk: chunk length for a band of chunk indices (Dual Chunk Attention), or None.
        key_below: only keys at positions below this (attention sinks), or None.
        q_from, q_below: only queries at positions in ``[q_from, q_below)`` (None:
            unbounded): a group of queries that share frequencies under the ``"query"``
            length rule of a length-dependent scaling.

    Example::

        >>> Region(lo=0, hi=4).contains(torch.tensor([5]), torch.tensor([0, 2, 5]))
        tensor([False,  True,  True])
    """

    lo: int | None = None
    hi: int | None = None
    chunk: int | None = None
    key_below: int | None = None
    q_from: int | None = None
    q_below: int | None = None

    def __post_init__(self) -> None:
        for name in ("lo", "hi", "q_from", "q_below"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_int(name, getattr(self, name)))
        for name in ("chunk", "key_below"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_int(name, getattr(self, name), low=1))
        if self.lo is not None and self.hi is not None and self.lo >= self.hi:
            raise ValueError(f"lo must be < hi; got lo={self.lo}, hi={self.hi}")
        if self.q_from is not None and self.q_below is not None and self.q_from >= self.q_below:
            raise ValueError(
                f"q_from must be < q_below; got q_from={self.q_from}, q_below={self.q_below}"
            )

    def coordinate(self, positions: Tensor) -> Tensor:
        """``c(x)``: the positions, or their chunk indices."""
        if self.chunk is None:
            return positions
        return torch.div(positions, self.chunk, rounding_mode="floor")

    def contains(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Whether each pair lies in the region (broadcast ``q_pos`` against ``k_pos``)."""
        gap = self.coordinate(q_pos) - self.coordinate(k_pos)
        inside = torch.ones_like(gap, dtype=torch.bool)
        if self.lo is not None:
            inside = inside & (gap >= self.lo)
        if self.hi is not None:
            inside = inside & (gap < self.hi)
        if self.key_below is not None:
            inside = inside & (k_pos < self.key_below)
        if self.q_from is not None:
            inside = inside & (q_pos >= self.q_from)
        if self.q_below is not None:
            inside = inside & (q_pos < self.q_below)
        return inside

    def key_interval(self, q_pos: Tensor) -> tuple[Tensor, Tensor]:
        """``(start, stop)``: the keys at positions ``0 … p`` the region holds for a query at
        each integer position ``p`` of ``q_pos``, as the half-open ``[start, stop)`` (empty
        when ``stop ≤ start``). A region holds one interval of keys per query: a band of
        distances or of chunk indices, cut by ``key_below``."""
        unit = 1 if self.chunk is None else self.chunk
        base = self.coordinate(q_pos)
        start = torch.zeros_like(q_pos) if self.hi is None else unit * (base - self.hi + 1)
        stop = q_pos + 1 if self.lo is None else unit * (base - self.lo + 1)
        start, stop = start.clamp(min=0), torch.minimum(stop, q_pos + 1)
        if self.key_below is not None:
            stop = stop.clamp(max=self.key_below)
        queries = torch.ones_like(q_pos, dtype=torch.bool)
        if self.q_from is not None:
            queries &= q_pos >= self.q_from
        if self.q_below is not None:
            queries &= q_pos < self.q_below
        return start, torch.where(queries, stop, 0)

    def seen_later(self, k_pos: Tensor, q_min: Tensor | float) -> Tensor:
        """Keys some query at a position ``≥ q_min`` (broadcast against ``k_pos``) may still
        pair with in this region; a rolling KV cache drops the keys no region keeps. The gap
        grows with the query, so only an upper bound ``hi`` releases a key, and
        ``key_below`` keeps only the keys under it."""
        keep = torch.ones_like(k_pos, dtype=torch.bool)
        if self.q_below is not None:  # only queries before q_below: none after them
            keep = keep & (torch.as_tensor(q_min, device=k_pos.device) < self.q_below)
        if self.hi is not None:
            q = torch.as_tensor(q_min, device=k_pos.device)
            keep = (self.coordinate(q) - self.coordinate(k_pos)) < self.hi
        if self.key_below is not None:
            keep = keep & (k_pos < self.key_below)
        return keep

    def key_range(self, q_first: int, q_last: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """Key positions of the region for queries at positions ``q_first … q_last``
        (integers): ``(candidate, whole)``, half-open ranges of keys some query of the range
        may pair with, and of keys every query of it pairs with (possibly empty)."""
        rows_first, rows_last = q_first, q_last
        if self.q_from is not None:
            q_first = max(q_first, self.q_from)
        if self.q_below is not None:
            q_last = min(q_last, self.q_below - 1)
        if q_last < q_first:
            return (0, 0), (0, 0)
        partial = (q_first, q_last) != (rows_first, rows_last)  # some rows are not the region's
        lo = -math.inf if self.lo is None else self.lo
        hi = math.inf if self.hi is None else self.hi
        if self.chunk is None:
            start, stop = q_first - hi + 1, q_last - lo + 1
            whole = (q_last - hi + 1, q_first - lo + 1)
        else:
            c, first, last = self.chunk, q_first // self.chunk, q_last // self.chunk
            start, stop = c * (first - hi + 1), c * (last - lo + 1)
            whole = (c * (last - hi + 1), c * (first - lo + 1))
        cap = math.inf if self.key_below is None else self.key_below

        def clip(a: float, b: float) -> tuple[int, int]:
            a, b = max(0, a), min(cap, b)
            if not b > a:
                return 0, 0
            return int(a), int(min(b, 2**62))

        return clip(start, stop), (0, 0) if partial else clip(*whole)


@dataclass(frozen=True)
class Segment:
    """One segment: its pairs and where it puts their query and key.

    Args:
        name: what the method calls it ("neighbor", "group", "intra", ...).
        region: the pairs (:class:`Region`).
        q_map, k_map: the positions the query and the key are rotated at
            (:class:`PositionMap`).
        length: rotate with the frequencies of this sequence length (a length-dependent
            scaling under the ``"query"`` rule), or None: the encoding's current ones.
    """

    name: str
    region: Region
    q_map: PositionMap = PositionMap()
    k_map: PositionMap = PositionMap()
    length: int | None = None


def pair_positions(
    segments: tuple[Segment, ...], q_pos: Tensor, k_pos: Tensor
) -> tuple[Tensor, Tensor]:
    """Which segment each pair that causal attention scores lies in, and the distance it is
    rotated by.

    The queries are the last ``q_len`` of the ``k_len`` keys (attention's causal order,
    bottom-right aligned): query ``i`` sees key ``j`` when ``j ≤ k_len − q_len + i`` and a
    segment's region holds their positions. The order is by index, as attention's, so two
    tokens at one position still see only backwards.

    Args:
        segments: a method's :meth:`SegmentedRotary.segments`.
        q_pos, k_pos: positions of the queries and keys, ``(q_len,)`` and ``(k_len,)`` or
            per row ``(batch, q_len)`` and ``(batch, k_len)``; ``q_len ≤ k_len``.

    Returns:
        ``(index, distance)``, both ``(q_len, k_len)`` (``(batch, q_len, k_len)`` per row):
        the segment index (−1 where no segment holds the pair or the key comes after the
        query) and ``f_s(p_i) − g_s(p_j)`` in float64 (NaN where hidden). For plots and tests;
        attention never builds it.

    Raises:
        ValueError: naming ``q_pos``/``k_pos`` when their shapes do not fit.

    Example::

        >>> far = Segment("far", Region(lo=2), PositionMap(const=2), PositionMap(const=0))
        >>> segs = (Segment("near", Region(hi=2)), far)
        >>> pair_positions(segs, torch.arange(4), torch.arange(4))[1][3]
        tensor([2., 2., 1., 0.], dtype=torch.float64)
    """
    if q_pos.dim() not in (1, 2) or k_pos.dim() != q_pos.dim():
        raise ValueError(
            "q_pos and k_pos must both be (seq,) or both (batch, seq); got shapes "
            f"{tuple(q_pos.shape)} and {tuple(k_pos.shape)}"
        )
    if q_pos.dim() == 2 and q_pos.shape[0] != k_pos.shape[0]:
        raise ValueError(
            f"q_pos and k_pos must have one batch; got {q_pos.shape[0]} and {k_pos.shape[0]} rows"
        )
    q_len, k_len = q_pos.shape[-1], k_pos.shape[-1]
    if q_len > k_len:
        raise ValueError(
            f"q_pos must not be longer than k_pos (the queries are the last keys); got {q_len} "
            f"queries and {k_len} keys"
        )
    q_grid, k_grid = q_pos[..., :, None], k_pos[..., None, :]  # (..., q, 1), (..., 1, k)
    shape = (*q_pos.shape[:-1], q_len, k_len)
    index = torch.full(shape, -1, dtype=torch.long, device=q_pos.device)
    distance = torch.full(shape, float("nan"), dtype=torch.float64, device=q_pos.device)
    rows = torch.arange(q_len, device=q_pos.device)[:, None] + (k_len - q_len)
    causal = torch.arange(k_len, device=q_pos.device)[None, :] <= rows  # (q, k), by index
    for number, segment in enumerate(segments):
        inside = segment.region.contains(q_grid, k_grid) & causal
        gap = segment.q_map(q_grid).to(torch.float64) - segment.k_map(k_grid).to(torch.float64)
        index = torch.where(inside, number, index)
        distance = torch.where(inside, gap, distance)
    return index, distance


def check_segments(segments: object, owner: str = "segments") -> None:
    """Refuse segments whose regions overlap on a causal pair, or that leave a query without
    its own key (the pairs in no segment are hidden, so such a query could see nothing).

    Each region holds an interval of keys per query position (:meth:`Region.key_interval`),
    and the intervals repeat (shifted) with the query once it is past every bound of the
    regions (the widest band, plus the largest ``key_below``/``q_from``/``q_below``), with the
    chunk lengths' least common multiple as period: checking the query positions up to the
    bounds plus two periods checks them all. A checked tuple is remembered: attention checks
    a tuple that its method did not build and check at construction at the cost of a hash.

    Args:
        segments: a tuple of :class:`Segment`.
        owner: what the messages name (the method's class).

    Raises:
        ValueError: naming ``owner``, the two overlapping segments and a pair they share, or
            the first query position whose own key no segment holds.
    """
    if not isinstance(segments, tuple) or not segments:
        raise ValueError(f"{owner}: the segments must be a non-empty tuple of Segment")
    for segment in segments:
        if not isinstance(segment, Segment):
            raise ValueError(
                f"{owner}: the segments must be Segment objects, got {type(segment).__name__}"
            )
    _check_partition(segments, owner)


@functools.lru_cache(maxsize=64)
def _check_partition(segments: tuple[Segment, ...], owner: str) -> None:
    regions = [segment.region for segment in segments]
    period, span, edge = 1, 0, 0
    for region in regions:
        unit = region.chunk or 1
        period = math.lcm(period, unit)
        span = max(span, unit * (abs(region.lo or 0) + abs(region.hi or 0) + 1))
        edge = max(edge, *(abs(x or 0) for x in (region.key_below, region.q_from, region.q_below)))
    count = span + edge + 1 + 2 * period
    if count > 1 << 22:
        raise ValueError(
            f"{owner}: the regions' bounds and chunk lengths are too large to check ({count} "
            "query positions); use smaller windows or one chunk length"
        )
    p = torch.arange(count, dtype=torch.int64)
    intervals = [region.key_interval(p) for region in regions]
    for a in range(len(regions)):
        for b in range(a + 1, len(regions)):
            (start_a, stop_a), (start_b, stop_b) = intervals[a], intervals[b]
            first = torch.maximum(start_a, start_b)
            both = first < torch.minimum(stop_a, stop_b)
            if bool(both.any()):
                q = int(both.nonzero()[0, 0])
                raise ValueError(
                    f"{owner}: segments {segments[a].name!r} and {segments[b].name!r} overlap "
                    f"(both hold the query at position {q} with the key at {int(first[q])}); "
                    "regions must be disjoint"
                )
    own = torch.zeros_like(p, dtype=torch.bool)
    for start, stop in intervals:
        own |= (start <= p) & (p < stop)
    if not bool(own.all()):
        q = int((~own).nonzero()[0, 0])
        raise ValueError(
            f"{owner}: no segment holds the query at position {q} with its own key (distance "
            "0); every query must see itself in exactly one segment"
        )

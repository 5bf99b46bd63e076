"""Segments: (query, key) pairs positioned by where the pair lies.

A training-free long-context method (Self-Extend, Dual Chunk Attention, ReRoPE, LM-Infinite,
attention sinks) splits the visible (query, key) pairs into a few disjoint **segments**; in each
segment the query and the key are rotated at positions of their own, given by two
:class:`PositionMap` s of the tokens' positions, and the pair's score is

.. math::

    s_{ij} = \\mathrm{scale}\\cdot \\big(R(f_s(p_i))\\, q_i\\big)^{\\top}
        \\big(R(g_s(p_j))\\, k_j\\big)
        \\quad \\text{for the segment } s \\text{ whose region holds } (p_i, p_j),

one softmax over all of them (pairs in no segment are hidden). A :class:`Region` says which
pairs a segment holds, by structure only (a band of distances or of chunk indices, keys below a
position), so that the attention backends know which keys a block of queries needs in each
segment without an L×L tensor (:mod:`posenc.attention.segmented`).

:class:`SegmentedRotary` is the base of the methods: it wraps any one-axis rotary encoding
(RoPE with any scaling, xPos), delegates the rotary hooks to it and adds the ``segments()``
hook. Attention then keeps the keys of its KV cache unrotated and rotates them per segment
when it reads them. The segments themselves (:class:`Region`, :class:`PositionMap`,
:class:`Segment`, :func:`check_segments`, :func:`pair_positions`) are defined in
:mod:`posenc.segments.segment` and re-exported here.
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc._validate import check_int
from posenc.encoding.protocols import RotaryEncoding, SegmentEncoding
from posenc.encoding.resolve import hooks_of
from posenc.segments.segment import (
    PositionMap,
    Region,
    Segment,
    check_segments,
    pair_positions,
)

__all__ = [
    "PositionMap",
    "Region",
    "Segment",
    "SegmentedRotary",
    "check_segments",
    "log_scale",
    "pair_positions",
]


def log_scale(positions: Tensor, base_length: int) -> Tensor:
    """The log-n query scale ``max(1, log(p + 1) / log(base_length))`` (ReRoPE, Self-Extend).

    Multiplies the query (so the logits) of a token at position ``p``; 1 inside the trained
    length ``base_length``, and 1 at negative positions (padding at -1, -5: never ``-inf`` or
    NaN, which would reach real tokens through the next layer). Float64. Also Qwen-1's
    log-n (:meth:`posenc.attention.QueryScale.logn`).

    Raises:
        ValueError: naming ``base_length`` unless it is an integer ≥ 2 (``log(1) = 0``
            divides).
    """
    base_length = check_int("base_length", base_length, low=2)
    p = positions.to(torch.float64)
    return (torch.log((p + 1.0).clamp(min=1.0)) / math.log(base_length)).clamp(min=1.0)


class SegmentedRotary(SegmentEncoding):
    """Base of the segment methods: a one-axis rotary encoding whose pairs are positioned by
    segments (see the module docstring).

    Subclasses set their settings in ``__init__`` (after ``super().__init__(rotary)``) and
    implement :meth:`build_segments` (and :meth:`query_scale` for a log-n scale); the segments
    are built and checked once, when the outermost ``__init__`` returns (overlapping regions,
    or a query whose own key lies in no segment, raise ``ValueError`` there). The rotary hooks
    are the wrapped encoding's. Settings are fixed at construction: build a new method to
    change them. The encoding reads one position axis, serves causal attention only, and
    needs a KV cache that keeps keys unrotated.

    Args:
        rotary: a one-axis rotary encoding (e.g. :class:`~posenc.rotary.RotaryEmbedding`
            with any scaling).
        log_scale_base: the pre-training length of a log-n query scale
            (:func:`log_scale`: every query times ``max(1, ln(p + 1) / ln(base))``), or
            None (off); ≥ 2.

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> class Capped(SegmentedRotary):  # true distances below 4, every farther key at 4
        ...     def __init__(self, rotary, *, window: int) -> None:
        ...         super().__init__(rotary)
        ...         self.window = window
        ...     def build_segments(self) -> tuple[Segment, ...]:
        ...         far = Segment("far", Region(lo=self.window), PositionMap(const=self.window),
        ...                       PositionMap(const=0))
        ...         return (Segment("near", Region(hi=self.window)), far)
        >>> [s.name for s in Capped(RotaryEmbedding(8), window=4).segments()]
        ['near', 'far']
    """

    shared_across_layers: ClassVar[bool] = True
    #: The segment methods are defined for causal (decoder) attention.
    causal_only: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap each subclass's ``__init__`` so that the segments are built and checked once
        the outermost ``__init__`` (the constructed class's) has set every setting."""
        super().__init_subclass__(**kwargs)
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: SegmentedRotary, *args: Any, **kw: Any) -> None:
            depth = self.__dict__.get("_init_depth", 0)
            object.__setattr__(self, "_init_depth", depth + 1)
            try:
                init(self, *args, **kw)
            finally:
                object.__setattr__(self, "_init_depth", depth)
            if depth == 0:
                self._freeze()

        cls.__init__ = __init__  # type: ignore[method-assign]

    def __init__(self, rotary: RotaryEncoding, *, log_scale_base: int | None = None) -> None:
        super().__init__()
        if log_scale_base is not None:
            log_scale_base = check_int("log_scale_base", log_scale_base, low=2)  # ln(b) divides
        self.log_scale_base = log_scale_base
        if isinstance(rotary, SegmentedRotary):
            raise ValueError("rotary is already a segment method; wrap the rotary encoding")
        try:
            hooks = hooks_of(rotary)
        except ValueError as error:
            raise ValueError(f"rotary must be a rotary encoding (RoPE, xPos): {error}") from None
        if not hooks.rotary or hooks.logit_terms or hooks.additive:
            raise ValueError(
                f"rotary must be a rotary encoding (RoPE, xPos); got {type(rotary).__name__}"
            )
        if hooks.num_axes != 1:
            raise ValueError(
                f"rotary reads {hooks.num_axes} position axes; segment methods are defined on "
                "one axis"
            )
        if hooks.position_transform:
            raise ValueError("rotary must not randomize positions under a segment method")
        assert hooks.rotary is not None
        self.rotary = hooks.rotary
        self.head_dim = hooks.rotary.head_dim

    # ---- the segments hook ------------------------------------------------------------------

    def build_segments(self) -> tuple[Segment, ...]:
        """The method's segments from its settings: disjoint regions, each query's own key in
        one of them; pairs in none are hidden. Subclasses implement it; it runs once, after
        construction."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement build_segments() (a segment method's "
            "segments from its settings)"
        )

    def _freeze(self) -> None:
        """Build and check the segments once: a method's settings are fixed at construction (a
        compiled graph reads the same objects every call)."""
        segments = self.build_segments()
        check_segments(segments, type(self).__name__)
        self._segments = segments

    def checked(self, segments: object) -> bool:
        """True when ``segments`` is the tuple built and checked at construction (attention
        checks any other tuple a ``segments()`` hook returns, :func:`check_segments`)."""
        return segments is self.__dict__.get("_segments")

    def segments(self) -> tuple[Segment, ...]:
        """The method's segments (the segments hook)."""
        if "_segments" not in self.__dict__:  # an __init__ that bypassed the wrapper
            self._freeze()
        segments: tuple[Segment, ...] = self.__dict__["_segments"]
        return segments

    def query_scale(self, positions: Tensor) -> Tensor | None:
        """A per-query multiplier of the logits (the log-n scale of ``log_scale_base``),
        float64 of the positions' shape, or None."""
        if self.log_scale_base is None:
            return None
        return log_scale(positions, self.log_scale_base)

    def keeps(self, k_pos: Tensor, q_min: Tensor | float) -> Tensor:
        """Keys that a query at a position ``≥ q_min`` may still see (a rolling KV cache
        evicts the rest)."""
        keep = torch.zeros_like(k_pos, dtype=torch.bool)
        for segment in self.segments():
            keep = keep | segment.region.seen_later(k_pos, q_min)
        return keep

    # ---- the rotary hooks, delegated --------------------------------------------------------

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> Any:
        return self.rotary.rotary_tables(positions, dtype, update=update, length=length)

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_tables: Any, k_tables: Any, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        return self.rotary.rotate_qk(q, k, q_tables, k_tables, inplace=inplace)

    @property
    def depends_on_length(self) -> bool:
        return self.rotary.depends_on_length

    @property
    def length_rule(self) -> str:
        """The wrapped encoding's length rule (``"forward"`` or ``"query"``)."""
        return self.rotary.length_rule

    @property
    def rebuilds(self) -> int:
        """The wrapped encoding's frequency changes (a token of its state)."""
        return self.rotary.rebuilds

    def frequency_length(self, seq_len: int) -> int | None:
        """The wrapped encoding's :meth:`~posenc.rotary.RotaryEmbedding.frequency_length`."""
        return self.rotary.frequency_length(seq_len)

    def validate_positions(self, positions: Tensor, name: str) -> None:
        self.rotary.validate_positions(positions, name)

    def extra_repr(self) -> str:
        return ", ".join(f"{s.name}: {s.region}" for s in self.segments())

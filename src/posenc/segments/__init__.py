"""Long context without retraining: (query, key) pairs positioned by where the pair lies.

A method splits the visible pairs into segments, each rotating its queries and keys at
positions of its own (:mod:`posenc.segments.base`); attention merges the segments' scores into
one softmax on every backend and keeps its KV cache unrotated
(:mod:`posenc.attention.segmented`).

* :class:`SelfExtend`: neighbor window at true positions, grouped positions beyond it.
* :class:`DualChunk`: Dual Chunk Attention's intra, successive and inter-chunk positions.
* :class:`ReRoPE`: distances capped at a window (or slowed beyond it: Leaky ReRoPE).
* :class:`LMInfinite`: a Λ-shaped window with the first tokens at a capped distance.
* :class:`AttentionSinks`: StreamingLLM's sinks and recent window, positions inside the cache.
* :class:`Segment`, :class:`Region`, :class:`PositionMap`, :class:`SegmentedRotary`: how a
  method is described (a new one is a subclass with a ``build_segments()`` method).
"""

from __future__ import annotations

from posenc.segments.base import (
    PositionMap,
    Region,
    Segment,
    SegmentedRotary,
    check_segments,
    log_scale,
    pair_positions,
)
from posenc.segments.dual_chunk import DualChunk
from posenc.segments.rerope import ReRoPE
from posenc.segments.self_extend import SelfExtend
from posenc.segments.window import AttentionSinks, LMInfinite

#: Settings of each registered method (by registry name) that show its segments on a few dozen
#: tokens: its defaults are sized for a model pre-trained on thousands of positions, where a
#: short input is plain RoPE. Figures and the property checks use them.
ILLUSTRATIVE: dict[str, dict[str, int]] = {
    "self_extend": {"window": 16, "group": 4},
    "dual_chunk": {"chunk_size": 24, "local_window": 8},
    "rerope": {"window": 16},
    "lm_infinite": {"local_window": 16, "global_tokens": 4},
    "sinks": {"sinks": 4, "window": 16},
}

__all__ = [
    "ILLUSTRATIVE",
    "AttentionSinks",
    "DualChunk",
    "LMInfinite",
    "PositionMap",
    "ReRoPE",
    "Region",
    "Segment",
    "SegmentedRotary",
    "SelfExtend",
    "check_segments",
    "log_scale",
    "pair_positions",
]

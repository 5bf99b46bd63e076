"""Softmax transforms around any encoding: soft-capping, learned sinks, stick-breaking
weights and the per-position query temperature.
"""

from __future__ import annotations

from posenc.softmax.query_scale import (
    QueryScale,
    QueryScaleMode,
    check_chunk_and_scale,
    scale_queries,
)
from posenc.softmax.sinks import LearnedSinks
from posenc.softmax.softcap import GEMMA2_ATTN_SOFTCAP, SoftCap, tanh_softcap
from posenc.softmax.stick_breaking import (
    StickBreaking,
    stick_breaking_weights,
)

__all__ = [
    "GEMMA2_ATTN_SOFTCAP",
    "LearnedSinks",
    "QueryScale",
    "QueryScaleMode",
    "SoftCap",
    "StickBreaking",
    "check_chunk_and_scale",
    "scale_queries",
    "stick_breaking_weights",
    "tanh_softcap",
]

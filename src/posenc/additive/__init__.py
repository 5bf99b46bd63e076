"""Additive encodings: ``x + P(positions)``, added to the token embeddings.

Every module here is an :class:`posenc.base.AdditiveEncoding` with
``forward(positions) -> (..., seq, dim)`` for positions ``(seq,)`` or ``(batch, seq)``.
"""

from __future__ import annotations

from posenc.additive.learned import LearnedPositionalEmbedding, ResizeMode, resize_table
from posenc.additive.sinusoidal import (
    ScaledSinusoidalEncoding,
    SinusoidalEncoding,
    SinusoidalLayout,
    sinusoidal_encoding,
    sinusoidal_inv_freq,
)

__all__ = [
    "LearnedPositionalEmbedding",
    "ResizeMode",
    "ScaledSinusoidalEncoding",
    "SinusoidalEncoding",
    "SinusoidalLayout",
    "resize_table",
    "sinusoidal_encoding",
    "sinusoidal_inv_freq",
]

"""Additive encodings: ``x + P(positions)``, added to the token embeddings.

Every module here is an :class:`posenc.encoding.protocols.AdditiveEncoding` with
``forward(positions) -> (..., seq, dim)`` for positions ``(seq,)`` or ``(batch, seq)``.
"""

from __future__ import annotations

from posenc.additive.cape import CAPE, cape_augment
from posenc.additive.complex_order import (
    ComplexOrderEmbedding,
    complex_order_embedding,
    complex_order_real_view,
)
from posenc.additive.fourier import (
    FourierOrder,
    GaussianFourierFeatures,
    LearnableFourierFeatures,
    fourier_features,
)
from posenc.additive.learned import LearnedPositionalEmbedding, ResizeMode, resize_table
from posenc.additive.learned_grid import (
    FactorizedLearned,
    GridResampleMode,
    LearnedGrid,
    resample_grid_table,
)
from posenc.additive.sinusoidal import (
    ScaledSinusoidalEncoding,
    SinusoidalEncoding,
    SinusoidalLayout,
    sinusoidal_encoding,
    sinusoidal_inv_freq,
)
from posenc.additive.sinusoidal_grid import (
    SinusoidalGrid,
    SinusoidalGridLayout,
    sinusoidal_grid,
    sinusoidal_grid_encoding,
)
from posenc.additive.sinusoidal_nd import (
    Sinusoidal2D,
    Sinusoidal2DLayout,
    sinusoidal_2d,
    sinusoidal_2d_encoding,
)

__all__ = [
    "CAPE",
    "ComplexOrderEmbedding",
    "FactorizedLearned",
    "FourierOrder",
    "GaussianFourierFeatures",
    "GridResampleMode",
    "LearnableFourierFeatures",
    "LearnedGrid",
    "LearnedPositionalEmbedding",
    "ResizeMode",
    "ScaledSinusoidalEncoding",
    "Sinusoidal2D",
    "Sinusoidal2DLayout",
    "SinusoidalEncoding",
    "SinusoidalGrid",
    "SinusoidalGridLayout",
    "SinusoidalLayout",
    "cape_augment",
    "complex_order_embedding",
    "complex_order_real_view",
    "fourier_features",
    "resample_grid_table",
    "resize_table",
    "sinusoidal_2d",
    "sinusoidal_2d_encoding",
    "sinusoidal_encoding",
    "sinusoidal_grid",
    "sinusoidal_grid_encoding",
    "sinusoidal_inv_freq",
]

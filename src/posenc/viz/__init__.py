"""Figures of encodings (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

from posenc.viz.encodings import (
    FIGURES,
    default_scalings,
    plot_bias,
    plot_encoding,
    plot_equivariance,
    plot_figure,
    plot_hope_decay,
    plot_rope_decay,
    plot_rope_decay_scalings,
    plot_rope_scaling_scores,
    plot_sinusoidal,
    plot_wavelengths,
    plot_xpos,
    rope_decay_curves,
    rope_wavelengths,
)

__all__ = [
    "FIGURES",
    "default_scalings",
    "plot_bias",
    "plot_encoding",
    "plot_equivariance",
    "plot_figure",
    "plot_hope_decay",
    "plot_rope_decay",
    "plot_rope_decay_scalings",
    "plot_rope_scaling_scores",
    "plot_sinusoidal",
    "plot_wavelengths",
    "plot_xpos",
    "rope_decay_curves",
    "rope_wavelengths",
]

"""Scores readers: they read complete rows of all heads' scores and return new ones
(CoPE, DAPE/CAPE).
"""

from __future__ import annotations

from posenc.scores.cope import CoPE, CoPEInterpolation, cope_bias, cope_positions
from posenc.scores.dape import DapeBias, dape_scores

__all__ = ["CoPE", "CoPEInterpolation", "DapeBias", "cope_bias", "cope_positions", "dape_scores"]

"""Batches of rows padded on either side, for the tests that padding leaves real tokens be."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def padded_rows(
    rows: Sequence[torch.Tensor], width: int, sides: Sequence[str], fill: float = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions, real)`` of ``rows`` in ``width`` columns: row ``b`` on the left
    (``sides[b] == "right"``: padding on its right) or on the right, the rest ``fill``; ``real``
    is True on the rows' own columns. The positions take the rows' dtype."""
    positions = torch.full((len(rows), width), fill, dtype=rows[0].dtype)
    real = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, (row, side) in enumerate(zip(rows, sides, strict=True)):
        start = 0 if side == "right" else width - len(row)
        positions[b, start : start + len(row)] = row
        real[b, start : start + len(row)] = True
    return positions, real

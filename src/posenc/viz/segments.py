"""Figures of the segment methods: where each (query, key) pair lies and how far apart it is
rotated (:func:`posenc.segments.pair_positions`)."""

from __future__ import annotations

from typing import Any

import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from posenc.viz.base import new_figure

__all__ = ["plot_segments"]


def plot_segments(encoding: Any, length: int = 64, title: str | None = None) -> Figure:
    """Two panels over ``length`` causal pairs: the segment of each pair (hidden pairs
    white) and the distance it is rotated by, ``f_s(i) − g_s(j)``, against the true ``i − j``.
    """
    from posenc.segments import pair_positions

    segments = encoding.segments()
    positions = torch.arange(length)
    index, distance = pair_positions(segments, positions, positions)
    fig = new_figure(figsize=(10, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"][: len(segments)]
    shown = index.double().masked_fill(index < 0, float("nan"))
    left.imshow(shown.numpy(), cmap=ListedColormap(colors), vmin=-0.5, vmax=len(segments) - 0.5)
    left.set(xlabel="key j", ylabel="query i", title="segment of each pair (white: hidden)")
    left.legend(
        handles=[Patch(color=c, label=s.name) for c, s in zip(colors, segments, strict=True)],
        loc="upper right",
        fontsize=8,
    )
    image = right.imshow(distance.numpy(), cmap="viridis")
    right.set(xlabel="key j", ylabel="query i", title="distance rotated by, f(i) − g(j)")
    fig.colorbar(image, ax=right, label="rotated distance")
    fig.suptitle(title or type(encoding).__name__)
    return fig

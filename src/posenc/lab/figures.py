"""Figures of lab results; each function takes result rows and returns a matplotlib Figure."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "accuracy_vs_length",
    "extension_curves",
    "loss_vs_length",
    "passkey_heatmaps",
    "vit_accuracy",
]

Row = dict[str, Any]


def _figure(**kwargs: Any) -> Figure:
    from posenc.viz import _figure as make

    return make(**kwargs)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def loss_vs_length(rows: Sequence[Row]) -> Figure:
    """Perplexity against evaluation length / training length, one line per encoding.

    Rows: ``experiment == "extrapolate"`` with ``encoding, train_len, eval_len, ppl``;
    undefined points (learned past its table) are left out of the line.
    """
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row.get("experiment") == "extrapolate" and _finite(row.get("ppl")):
            series[row["encoding"]].append((row["eval_len"] / row["train_len"], row["ppl"]))
    fig = _figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for name, points in series.items():
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", label=name)
    ax.axvline(1.0, color="gray", lw=0.8, ls=":")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="evaluation length / training length",
        ylabel="perplexity (bytes)",
        title="train short, test long",
    )
    ax.legend()
    return fig


def extension_curves(rows: Sequence[Row]) -> Figure:
    """Perplexity against evaluation length per RoPE scaling, before and after fine-tuning."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row.get("experiment") == "extend" and _finite(row.get("ppl")):
            series[(row["method"], row["stage"])].append((row["eval_len"], row["ppl"]))
    fig = _figure(figsize=(8, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, stage in zip(axes, ("no_ft", "ft"), strict=True):
        for (method, s), points in sorted(series.items()):
            if s == stage:
                xs, ys = zip(*sorted(points), strict=True)
                ax.plot(xs, ys, marker="o", label=method)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="evaluation length",
            title="no fine-tuning" if stage == "no_ft" else "after fine-tuning",
        )
    axes[0].set_ylabel("perplexity (bytes)")
    axes[0].legend(fontsize=8)
    return fig


def passkey_heatmaps(rows: Sequence[Row]) -> Figure:
    """Passkey accuracy over (depth, context length), one panel per method and stage."""
    panels: dict[tuple[str, str], dict[tuple[float, int], float]] = defaultdict(dict)
    for row in rows:
        if row.get("experiment") == "passkey":
            key = (row["method"], row.get("stage", ""))
            panels[key][(row["depth"], row["context_len"])] = row["accuracy"]
    count = max(len(panels), 1)
    columns = min(count, 4)
    fig = _figure(figsize=(3.2 * columns, 2.8 * math.ceil(count / columns)), layout="constrained")
    for index, ((method, stage), cells) in enumerate(sorted(panels.items())):
        ax = fig.add_subplot(math.ceil(count / columns), columns, index + 1)
        depths = sorted({d for d, _ in cells})
        lengths = sorted({n for _, n in cells})
        grid = [[cells.get((d, n), float("nan")) for n in lengths] for d in depths]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:.2f}" for d in depths], fontsize=7)
        ax.set(title=f"{method} ({stage})", xlabel="context length", ylabel="depth")
        fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def accuracy_vs_length(rows: Sequence[Row]) -> Figure:
    """Sequence accuracy against test length per task; dashed lines are randomized positions."""
    tasks: dict[str, dict[tuple[str, bool], list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in rows:
        if row.get("experiment") == "tasks":
            key = (row["encoding"], bool(row["randomized"]))
            tasks[row["task"]][key].append((row["length"], row["seq_acc"]))
    count = max(len(tasks), 1)
    columns = min(count, 3)
    fig = _figure(figsize=(4.2 * columns, 3.2 * math.ceil(count / columns)), layout="constrained")
    for index, (task, series) in enumerate(sorted(tasks.items())):
        ax = fig.add_subplot(math.ceil(count / columns), columns, index + 1)
        for (encoding, randomized), points in sorted(series.items()):
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(
                xs,
                ys,
                marker=".",
                ls="--" if randomized else "-",
                label=f"{encoding}{' (rand)' if randomized else ''}",
            )
        ax.set(title=task, xlabel="test length", ylabel="exact-match accuracy", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    return fig


def vit_accuracy(rows: Sequence[Row]) -> Figure:
    """Test accuracy of the digits ViT per positional encoding: mean over seeds, each seed a dot."""
    by_encoding: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("experiment") == "vit":
            by_encoding[row["encoding"]].append(row["accuracy"])
    fig = _figure(figsize=(6, 3.4), layout="constrained")
    ax = fig.add_subplot()
    names = list(by_encoding)
    means = [sum(v) / len(v) for v in by_encoding.values()]
    ax.bar(names, means, color="tab:blue", alpha=0.6)
    for index, values in enumerate(by_encoding.values()):
        ax.plot([index] * len(values), values, "k.", ms=6)
    if means:
        low = min(min(v) for v in by_encoding.values())
        ax.set_ylim(max(0.0, low - 0.1), 1.0)
    ax.set(
        ylabel="test accuracy (bar: mean, dots: seeds)",
        title="ViT on sklearn digits (8x8, 2x2 patches)",
    )
    return fig

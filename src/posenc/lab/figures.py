"""Figures of lab results, each a function returning a matplotlib Figure.

The result figures take result rows (``results.csv``); several seeds of one cell are drawn as
their mean with ± one sample std as error bars (heatmaps show the mean). :func:`training_curves`
takes the ``metrics.jsonl`` records of each run.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from posenc.lab.tables import seed_means
from posenc.viz_base import (
    encoding_color,
    label_line_ends,
    log_ticks,
    new_figure,
    set_log_ticks,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "accuracy_vs_length",
    "encoding_color",
    "extension_curves",
    "loss_vs_length",
    "new_figure",
    "passkey_heatmaps",
    "separation_over_time",
    "temporal_link_precision",
    "training_curves",
    "vit_accuracy",
]

Row = dict[str, Any]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _mean_line(ax: Axes, points: Sequence[tuple[float, float]], **style: Any) -> None:
    """Plot the mean of ``y`` at each ``x`` (the seeds of one cell), with ± one sample std as
    error bars where a cell has more than one seed. The mean is one labelled ``Line2D`` (so
    its colour and label can be read back); the error bars are drawn apart, unlabelled."""
    by_x: dict[float, list[float]] = defaultdict(list)
    for x, y in points:
        by_x[x].append(y)
    xs = sorted(by_x)
    means = [statistics.fmean(by_x[x]) for x in xs]
    stds = [statistics.stdev(by_x[x]) if len(by_x[x]) > 1 else 0.0 for x in xs]
    (line,) = ax.plot(xs, means, **style)
    if any(stds):
        ax.errorbar(xs, means, yerr=stds, fmt="none", capsize=2, color=line.get_color())


def _times(value: float) -> str:
    """A length multiplier as a tick label: ``1×``, ``1.25×``, ``8×``."""
    return f"{value:g}×"


def loss_vs_length(rows: Sequence[Row]) -> Figure:
    """Perplexity against evaluation length / training length, one line per encoding.

    Rows: ``experiment == "extrapolate"`` with ``encoding, train_len, eval_len, ppl``;
    undefined points (learned past its table) are left out of the line.
    """
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row.get("experiment") == "extrapolate" and _finite(row.get("ppl")):
            series[row["encoding"]].append((row["eval_len"] / row["train_len"], row["ppl"]))
    fig = new_figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for name, points in series.items():
        _mean_line(ax, points, marker="o", label=name, color=encoding_color(name))
    ax.axvline(1.0, color="gray", lw=0.8, ls=":")
    ax.set(
        xlabel="evaluation length / training length",
        ylabel="perplexity (bytes)",
        title="train short, test long",
    )
    multipliers = sorted({x for points in series.values() for x, _ in points})
    if multipliers:
        set_log_ticks(ax, "x", multipliers, _times)
        set_log_ticks(ax, "y")
        label_line_ends(ax)
    return fig


_STAGE_TITLES = {"no_ft": "no fine-tuning", "zero": "no fine-tuning", "ft": "after fine-tuning"}


def extension_curves(rows: Sequence[Row]) -> Figure:
    """Perplexity against evaluation length per RoPE scaling, one panel per stage (before and
    after fine-tuning)."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row.get("experiment") == "extend" and _finite(row.get("ppl")):
            series[(row["method"], row["stage"])].append((row["eval_len"], row["ppl"]))
    stages = list(dict.fromkeys(stage for _, stage in series)) or ["no_ft"]
    fig = new_figure(figsize=(4 * max(len(stages), 2), 4.2), layout="constrained")
    axes = fig.subplots(1, len(stages), sharey=True, squeeze=False)[0]
    lengths = sorted({x for points in series.values() for x, _ in points})
    ppl = [y for points in series.values() for _, y in points]
    for ax, stage in zip(axes, stages, strict=True):
        for (method, s), points in sorted(series.items()):
            if s == stage:  # one colour per method on every panel and page
                _mean_line(ax, points, marker="o", label=method, color=encoding_color(method))
        ax.set(xlabel="evaluation length", title=_STAGE_TITLES.get(stage, stage))
        if lengths:
            set_log_ticks(ax, "x", lengths)
            ax.tick_params(axis="x", labelrotation=45 if len(lengths) > 5 else 0)
            set_log_ticks(ax, "y", log_ticks(min(ppl), max(ppl)))
        if ax.has_data():
            ax.legend(fontsize=8)
    axes[0].set_ylabel("perplexity (bytes)")
    return fig


def passkey_heatmaps(rows: Sequence[Row]) -> Figure:
    """Passkey accuracy over (depth, context length), one panel per method and stage; each
    cell is the mean over seeds."""
    seeds: dict[tuple[str, str], dict[tuple[float, int], list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in rows:
        if row.get("experiment") == "passkey" and _finite(row.get("accuracy")):
            key = (row["method"], row.get("stage") or "")
            seeds[key][(row["depth"], row["context_len"])].append(row["accuracy"])
    panels = {
        key: {cell: statistics.fmean(values) for cell, values in cells.items()}
        for key, cells in seeds.items()
    }
    count = max(len(panels), 1)
    columns = min(count, 4)
    size = (3.2 * columns, 2.8 * math.ceil(count / columns))
    fig = new_figure(figsize=size, layout="constrained")
    for index, ((method, stage), cells) in enumerate(sorted(panels.items())):
        ax = fig.add_subplot(math.ceil(count / columns), columns, index + 1)
        depths = sorted({d for d, _ in cells})
        lengths = sorted({n for _, n in cells})
        grid = [[cells.get((d, n), float("nan")) for n in lengths] for d in depths]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:.2f}" for d in depths], fontsize=7)
        ax.set(title=f"{method} ({stage})", xlabel="context length", ylabel="depth")
        fig.colorbar(image, ax=ax, shrink=0.8, label="passkey accuracy")
    return fig


def accuracy_vs_length(rows: Sequence[Row]) -> Figure:
    """Sequence accuracy against test length per task (mean over seeds); dashed lines are
    randomized positions."""
    tasks: dict[str, dict[tuple[str, bool], list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in rows:
        if row.get("experiment") == "tasks" and _finite(row.get("seq_acc")):
            key = (row["encoding"], bool(row["randomized"]))
            tasks[row["task"]][key].append((row["length"], row["seq_acc"]))
    count = max(len(tasks), 1)
    columns = min(count, 3)
    size = (4.2 * columns, 3.2 * math.ceil(count / columns))
    fig = new_figure(figsize=size, layout="constrained")
    for index, (task, series) in enumerate(sorted(tasks.items())):
        ax = fig.add_subplot(math.ceil(count / columns), columns, index + 1)
        for (encoding, randomized), points in sorted(series.items()):
            _mean_line(
                ax,
                points,
                marker=".",
                ls="--" if randomized else "-",
                color=encoding_color(encoding),
                label=f"{encoding}{' (rand)' if randomized else ''}",
            )
        ax.set(title=task, xlabel="test length", ylabel="exact-match accuracy", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    return fig


def encoding_bars(
    rows: Sequence[Row], experiment: str, value: str, ylabel: str, title: str, *, unit: bool
) -> Figure:
    """``value`` per encoding: a bar at the mean over seeds, a dot per seed (a seed's rows,
    e.g. its folds, averaged first). ``unit``: the value lies in [0, 1] (accuracy)."""
    finite = [r for r in rows if r.get("experiment") == experiment and _finite(r.get(value))]
    by_encoding: dict[str, list[float]] = defaultdict(list)
    for mean in seed_means(finite, (value,)):
        by_encoding[mean["encoding"]].append(mean[value])
    fig = new_figure(figsize=(6, 3.4), layout="constrained")
    ax = fig.add_subplot()
    names = list(by_encoding)
    means = [sum(v) / len(v) for v in by_encoding.values()]
    ax.bar(names, means, color=[encoding_color(name) for name in names], alpha=0.6)
    for index, values in enumerate(by_encoding.values()):
        ax.plot([index] * len(values), values, "k.", ms=6)
    if means and unit:
        low = min(min(v) for v in by_encoding.values())
        ax.set_ylim(max(0.0, low - 0.1), 1.0)
    ax.set(ylabel=f"{ylabel} (bar: mean, dots: seeds)", title=title)
    return fig


def vit_accuracy(rows: Sequence[Row]) -> Figure:
    """Test accuracy of the digits ViT per positional encoding: mean over seeds, each seed a dot."""
    title = "ViT on sklearn digits (8x8, 2x2 patches)"
    return encoding_bars(rows, "vit", "accuracy", "test accuracy", title, unit=True)


def csl_accuracy(rows: Sequence[Row]) -> Figure:
    """CSL test accuracy per graph encoding (each seed's folds averaged)."""
    title = "CSL: 10 classes of 4-regular graphs (chance 0.1)"
    return encoding_bars(rows, "csl", "test_accuracy", "test accuracy", title, unit=True)


def triangles_error(rows: Sequence[Row]) -> Figure:
    """Triangle counting: test MAE over the constant predictor's, per graph encoding."""
    fig = encoding_bars(
        rows, "triangles", "relative_mae", "MAE / constant MAE",
        "Triangles in 3-regular graphs (1 = no better than a constant)", unit=False,
    )  # fmt: skip
    fig.axes[0].axhline(1.0, color="tab:red", lw=1, ls="--")
    return fig


def temporal_link_precision(rows: Sequence[Row]) -> Figure:
    """Test AP per encoding and negative sampling, one panel per dataset: bars the mean over
    seeds, dots the seeds (``temporal_links`` rows)."""
    cells: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.get("experiment") == "temporal_links" and _finite(row.get("ap")):
            cells[row["dataset"]][(row["encoding"], row["negatives"])].append(row["ap"])
    fig = new_figure(figsize=(5.2 * max(len(cells), 1), 3.6), layout="constrained")
    for index, (dataset, cell) in enumerate(cells.items()):
        ax = fig.add_subplot(1, len(cells), index + 1)
        encodings = list(dict.fromkeys(encoding for encoding, _ in cell))
        negatives = list(dict.fromkeys(strategy for _, strategy in cell))
        width = 0.8 / len(negatives)
        for n, strategy in enumerate(negatives):
            for e, encoding in enumerate(encodings):
                values = cell.get((encoding, strategy), [])
                if not values:
                    continue
                x = e + (n - (len(negatives) - 1) / 2) * width
                label = strategy if e == 0 else None
                ax.bar(x, statistics.fmean(values), width, color=f"C{n}", alpha=0.6, label=label)
                ax.plot([x] * len(values), values, "k.", ms=4)
        ax.set_xticks(range(len(encodings)), encodings)
        ax.axhline(0.5, color="gray", lw=0.8, ls=":")
        ax.set(title=dataset, ylabel="test AP (bar: mean, dots: seeds)", ylim=(0.4, 1.0))
        ax.legend(title="negatives", fontsize=7)
    return fig


def separation_over_time(traces: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """How well the encodings follow the drifting communities, batch by batch: separation
    (same minus cross-community cosine similarity) against time, one line per encoding (the
    mean over its seeds), the test part shaded.

    Args:
        traces: run name (``"lstep/seed0"``) -> its ``trace.json`` records
            (``{"split", "time", "separation"}``, one per evaluation batch).
    """
    by_encoding: dict[str, list[tuple[float, float]]] = defaultdict(list)
    test_start = math.inf
    for name, records in traces.items():
        for record in records:
            by_encoding[_without_seed(name)].append((record["time"], record["separation"]))
            if record["split"] == "test":
                test_start = min(test_start, record["time"])
    fig = new_figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for encoding, points in sorted(by_encoding.items()):
        _mean_line(ax, points, marker=".", label=encoding, color=encoding_color(encoding))
    if math.isfinite(test_start):
        ax.axvspan(test_start, max(t for p in by_encoding.values() for t, _ in p), alpha=0.1)
    ax.set(
        xlabel="time (validation, then test: shaded)",
        ylabel="community separation of the encodings",
        title="drifting communities: do the encodings follow them?",
    )
    ax.legend(fontsize=7)
    return fig


def _without_seed(name: str) -> str:
    """``"rope/seed1"`` -> ``"rope"``: the seeds of one configuration share a line style."""
    parts = [part for part in name.split("/") if not re.fullmatch(r"seed\d+", part)]
    return "/".join(parts) or name


def _run_styles(keys: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Colour and line style per run configuration: the colour of its encoding (the last part
    of ``"dataset/encoding"``), and a different line style for each configuration that shares
    an encoding with an earlier one."""
    colour = {key: encoding_color(key.rsplit("/", 1)[-1]) for key in keys}
    styles = ("-", "--", ":", "-.")
    seen: dict[str, int] = defaultdict(int)
    style = {}
    for key in keys:
        style[key] = styles[seen[colour[key]] % len(styles)]
        seen[colour[key]] += 1
    return colour, style


def training_curves(curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """Training loss against step for each run, and the first evaluation metric the runs
    logged (validation loss, test accuracy) against step in a second panel.

    Args:
        curves: run name (its folder under ``runs/``, such as ``"rope/seed0"``) -> its
            ``metrics.jsonl`` records (:func:`posenc.lab.run.read_metrics`). The seeds of
            one configuration (``.../seed<n>``) share a colour and one legend entry.
    """
    train: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
    evaluated: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
    metric = next(
        (
            name
            for records in curves.values()
            for record in records
            if record.get("kind") == "eval"
            for name, value in (record.get("metrics") or {}).items()
            if _finite(value)
        ),
        None,
    )
    for name, records in sorted(curves.items()):
        key = _without_seed(name)
        steps = [
            (r["step"], r["loss"])
            for r in records
            if r.get("kind") == "train" and _finite(r.get("loss"))
        ]
        if steps:
            train[key].append(steps)
        values = [
            (r["step"], r["metrics"][metric])
            for r in records
            if r.get("kind") == "eval" and metric and _finite((r.get("metrics") or {}).get(metric))
        ]
        if values:
            evaluated[key].append(values)
    keys = list(dict.fromkeys([*train, *evaluated]))
    colour, style = _run_styles(keys)
    panels = [("training loss", train)] + ([(metric, evaluated)] if evaluated else [])
    fig = new_figure(figsize=(10, 4.2), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    handles: dict[str, Any] = {}
    for ax, (label, series) in zip(axes, panels, strict=True):
        for key, runs in series.items():
            for points in runs:
                xs, ys = zip(*sorted(points), strict=True)
                (handles[key],) = ax.plot(xs, ys, color=colour[key], ls=style[key], lw=1)
        ax.set(xlabel="step", ylabel=label, title=label)
    if handles:
        fig.legend(
            [handles[key] for key in keys if key in handles],
            [key for key in keys if key in handles],
            loc="outside right upper",
            fontsize=7,
            ncols=1 + len(handles) // 24,
        )
    return fig

"""What the lab's figures share: each encoding's colour, mean lines over seeds, bars per
encoding, log ticks at the evaluated lengths, the one x axis of every loss-against-length
figure (multiples of the training length ``T``: :func:`set_length_multiple_axis`), and the
training curves of every run.

Each experiment's result figures live with it (its :class:`~posenc.lab.report.Section`), each
a function of result rows (``results.csv``) returning a matplotlib ``Figure``, drawn with
these helpers: several seeds of one cell as their mean with ± one sample std as error bars
(:func:`mean_line`), or a bar at the mean with a dot per seed (:func:`encoding_bars`).
:func:`training_curves` takes the ``metrics.jsonl`` records of each run; the report draws it
for every page.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from posenc.lab.tables import seed_means
from posenc.viz.base import (
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
    "LENGTH_MULTIPLE_LABEL",
    "encoding_bars",
    "encoding_color",
    "finite",
    "label_line_ends",
    "log_ticks",
    "mean_line",
    "new_figure",
    "set_length_multiple_axis",
    "set_log_ticks",
    "times",
    "training_curves",
    "without_seed",
]

Row = dict[str, Any]

#: The x label of every figure of a metric against evaluation length: the demo's perplexity
#: and context-extension figures sit side by side and read the same axis.
LENGTH_MULTIPLE_LABEL = "evaluation length (multiple of the training length T)"


def times(value: float) -> str:
    """A length multiple as a tick label: ``1×``, ``1.25×``, ``8×``."""
    return f"{value:g}×"


def set_length_multiple_axis(ax: Axes, multiples: Sequence[float]) -> None:
    """Log x axis of evaluation length / training length: ticks at ``multiples`` labelled
    ``1×, 2×, 4×…``, :data:`LENGTH_MULTIPLE_LABEL` as its label, a dotted line at ``1×``."""
    ax.axvline(1.0, color="gray", lw=0.8, ls=":")
    set_log_ticks(ax, "x", multiples, times)
    ax.set_xlabel(LENGTH_MULTIPLE_LABEL)


def finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (undefined cells are ``None`` or NaN)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def mean_line(ax: Axes, points: Sequence[tuple[float, float]], **style: Any) -> None:
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


def encoding_bars(
    rows: Sequence[Row], experiment: str, value: str, ylabel: str, title: str, *, unit: bool
) -> Figure:
    """``value`` per encoding: a bar at the mean over seeds, a dot per seed (a seed's rows,
    e.g. its folds, averaged first). ``unit``: the value lies in [0, 1] (accuracy)."""
    defined = [r for r in rows if r.get("experiment") == experiment and finite(r.get(value))]
    by_encoding: dict[str, list[float]] = defaultdict(list)
    for mean in seed_means(defined, (value,)):
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


def without_seed(name: str) -> str:
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
            if finite(value)
        ),
        None,
    )
    for name, records in sorted(curves.items()):
        key = without_seed(name)
        steps = [
            (r["step"], r["loss"])
            for r in records
            if r.get("kind") == "train" and finite(r.get("loss"))
        ]
        if steps:
            train[key].append(steps)
        values = [
            (r["step"], r["metrics"][metric])
            for r in records
            if r.get("kind") == "eval" and metric and finite((r.get("metrics") or {}).get(metric))
        ]
        if values:
            evaluated[key].append(values)
    keys = list(dict.fromkeys([*train, *evaluated]))
    colour, style = _run_styles(keys)
    panels = [("training loss (cross-entropy, nats)", train)] + (
        [(metric, evaluated)] if evaluated else []
    )
    fig = new_figure(figsize=(10, 4.2), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    handles: dict[str, Any] = {}
    for ax, (label, series) in zip(axes, panels, strict=True):
        for key, runs in series.items():
            for points in runs:
                xs, ys = zip(*sorted(points), strict=True)
                (handles[key],) = ax.plot(xs, ys, color=colour[key], ls=style[key], lw=1)
        ax.set(xlabel="step", ylabel=label, title=label)
    fig.suptitle("one line per run; the seeds of one configuration share its colour", fontsize=9)
    if handles:
        fig.legend(
            [handles[key] for key in keys if key in handles],
            [key for key in keys if key in handles],
            loc="outside right upper",
            fontsize=7,
            ncols=1 + len(handles) // 24,
        )
    return fig

"""The atlas: one table and one figure per signal domain, from rows of one shape.

The audio, video and VLA experiments write rows with

* ``experiment`` (the domain), ``encoding`` (the name the table shows; an experiment that
  compares token layouts too adds ``layout``), ``seed``;
* ``condition`` (an integer, the test condition's order: 0 = as trained, then further from
  the training data) and ``condition_label`` (what the column says, e.g. ``"2 s"``);
* ``in_distribution`` (True for the trained condition) and ``accuracy``.

:func:`atlas_table` pivots them (encoding × condition, mean ± std over seeds) and
:func:`atlas_figure` draws the same numbers: one panel per test condition (small multiples
on one accuracy axis), one row per encoding, a dot at the mean and a bar of ± one sample std
over the seeds, no line joining the conditions (they are categories, not a continuum); the
caption under the panels says what the dot and the bar are and over how many seeds. Each
domain's :func:`atlas_section` shows both in the report (:mod:`posenc.lab.report`);
``tools/atlas_figures.py`` draws docs/img/'s figures with :func:`draw_atlas` from the tables
of docs/results.md §9.
"""

from __future__ import annotations

import functools
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posenc.lab.claims import Claim, Control, difference_at
from posenc.lab.runner import Section
from posenc.lab.tables import Table, pivot, seed_note, text_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "AtlasSeries",
    "AtlasSummary",
    "accuracy_gap",
    "atlas_figure",
    "atlas_pivot",
    "atlas_section",
    "atlas_summary",
    "atlas_table",
    "atlas_tables",
    "condition_labels",
    "draw_atlas",
]

Row = dict[str, Any]


def _index(rows: Sequence[Row]) -> list[str]:
    return ["layout", "encoding"] if any("layout" in row for row in rows) else ["encoding"]


def condition_labels(rows: Sequence[Row]) -> dict[int, str]:
    """Condition order → its label (the trained one marked)."""
    labels: dict[int, str] = {}
    for row in rows:
        label = str(row["condition_label"])
        labels[int(row["condition"])] = label + (" (trained)" if row["in_distribution"] else "")
    return labels


def atlas_pivot(rows: Sequence[Row], experiment: str) -> tuple[list[str], list[list[str]]]:
    """``(header, body)`` of ``experiment``'s rows: accuracy per encoding (and layout) and
    test condition, mean ± std over seeds."""
    selected = [row for row in rows if row.get("experiment") == experiment]
    if not selected:
        return [], []
    labels = condition_labels(selected)
    return pivot(
        selected, _index(selected), "condition", "accuracy", digits=3, label=lambda c: labels[c]
    )


def atlas_table(rows: Sequence[Row], experiment: str, title: str) -> str:
    """The pivot as text, titled, with how many seeds each cell summarizes."""
    header, body = atlas_pivot(rows, experiment)
    if not header:
        return ""
    selected = [row for row in rows if row.get("experiment") == experiment]
    return f"{title}; accuracy, {seed_note(selected)}\n" + text_table(header, body)


def accuracy_gap(
    name: str,
    experiment: str,
    text: str,
    paper: str,
    published: str,
    where: dict[str, Any],
    better: dict[str, Any],
    worse: dict[str, Any],
) -> Claim:
    """A published finding's direction as a claim on atlas rows: ``accuracy`` of ``better``
    minus ``worse`` at ``where`` (a test condition), paired by seed, ≥ 0. The papers measure
    benchmarks not on this machine; the threshold is the finding's direction, set before any
    run, and the verdict is ``undecided`` when the seeds' spread cannot tell. Comparative:
    decided against ``worse`` (its encoding, the baseline the paper names) directly."""
    return Claim(
        name=name,
        text=text,
        paper=paper,
        published=published,
        experiment=experiment,
        statistic=difference_at(experiment, where, "accuracy", better, worse),
        threshold=0.0,
        direction=">=",
        control=Control(str(worse.get("encoding", worse))),
    )


def atlas_tables(experiment: str, heading: str, rows: Sequence[Row]) -> list[Table]:
    """The report's table of ``experiment``'s rows (:func:`atlas_pivot`), captioned."""
    header, body = atlas_pivot(rows, experiment)
    return [(f"{heading}; accuracy, {seed_note(rows)}", header, body)] if header else []


def atlas_section(experiment: str, heading: str) -> Section:
    """The report's section of one domain: its table and ``<experiment>.png``
    (:func:`atlas_figure`), under ``heading``."""
    figure = functools.partial(_figure_of, experiment, heading)
    tables = functools.partial(atlas_tables, experiment, heading)
    return Section(heading, tables, {f"{experiment}.png": figure})


def _figure_of(experiment: str, heading: str, rows: Sequence[Row]) -> Figure:
    return atlas_figure(rows, experiment, heading)


@dataclass(frozen=True)
class AtlasSeries:
    """One row of the atlas figure: an encoding (under a layout) and its accuracy per condition.

    Args:
        encoding: the encoding's name (its colour, :func:`~posenc.viz.base.encoding_color`).
        label: what the row says (the table's name, e.g. ``"frames · rope"``).
        points: condition → ``(mean, std, seeds)``: the mean accuracy, its sample std over the
            seeds (0 for one seed) and how many seeds.
        group: the layout (numbering) it runs under; consecutive rows of one group are drawn
            together, a thin line between groups.
    """

    encoding: str
    label: str
    points: Mapping[int, tuple[float, float, int]]
    group: str = ""


@dataclass(frozen=True)
class AtlasSummary:
    """What the atlas figure draws: the conditions (order → label) and one series per row."""

    conditions: Mapping[int, str]
    series: tuple[AtlasSeries, ...]


def atlas_summary(rows: Sequence[Row], experiment: str) -> AtlasSummary:
    """``experiment``'s rows as an :class:`AtlasSummary`: per encoding (and layout) and
    condition, the mean accuracy and its sample std over seeds (n − 1; as the table).

    Raises:
        ValueError: when no row belongs to ``experiment``.
    """
    selected = [row for row in rows if row.get("experiment") == experiment]
    if not selected:
        raise ValueError(f"no rows of experiment {experiment!r} to draw")
    labels = condition_labels(selected)
    grouped: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in selected:
        key = (str(row.get("layout", "")), str(row["encoding"]))
        grouped[key][int(row["condition"])].append(float(row["accuracy"]))
    series = []
    for (layout, encoding), by_condition in grouped.items():
        points = {
            condition: (
                statistics.fmean(values),
                statistics.stdev(values) if len(values) > 1 else 0.0,
                len(values),
            )
            for condition, values in sorted(by_condition.items())
        }
        label = f"{layout} · {encoding}" if layout else encoding
        series.append(AtlasSeries(encoding, label, points, layout))
    return AtlasSummary(dict(sorted(labels.items())), tuple(series))


def _seed_words(counts: set[int]) -> str:
    low, high = min(counts), max(counts)
    return f"{low} seed" + ("s" if high > 1 else "") if low == high else f"{low}–{high} seeds"


def draw_atlas(
    summary: AtlasSummary,
    title: str,
    *,
    baselines: Mapping[int, float] | None = None,
    baseline_label: str = "baseline",
) -> Figure:
    """Small multiples of accuracy: one panel per test condition, one row per series.

    Each cell is a dot at the mean with a bar of ± one sample std over seeds, in the
    encoding's colour; nothing joins the conditions (categories, not a continuum). All
    panels share the accuracy axis, so a row read left to right is how an encoding fares as
    the test moves away from training. The caption under the panels defines the dot and the
    bar and gives the number of seeds; ``baselines`` (condition → accuracy) draws a dashed
    line per panel, named ``baseline_label`` in the caption.

    Raises:
        ValueError: when the summary has no series or a baseline names no condition.
    """
    from posenc.lab.figures import encoding_color, new_figure

    if not summary.series:
        raise ValueError("summary has no series to draw")
    conditions = list(summary.conditions)
    unknown = sorted(set(baselines or {}) - set(conditions))
    if unknown:
        raise ValueError(f"baselines name conditions {unknown}; the conditions are {conditions}")
    rows = len(summary.series)
    label_width = max(len(s.label) for s in summary.series)
    size = (1.0 + 0.065 * label_width + 2.3 * len(conditions), 1.5 + 0.3 * rows)
    fig = new_figure(figsize=size, layout="constrained")
    axes = fig.subplots(1, len(conditions), sharex=True, sharey=True, squeeze=False)[0]
    ys = list(range(rows))
    lows, highs = [], []
    for ax, condition in zip(axes, conditions, strict=True):
        for y, series in zip(ys, summary.series, strict=True):
            if condition not in series.points:
                continue
            mean, std, _ = series.points[condition]
            color = encoding_color(series.encoding)
            ax.errorbar(
                [mean], [y], xerr=[std], fmt="o", ms=5, color=color, ecolor=color,
                elinewidth=1.6, capsize=3, label=series.label,
            )  # fmt: skip
            lows.append(mean - std)
            highs.append(mean + std)
        if baselines and condition in baselines:
            ax.axvline(baselines[condition], color="0.35", lw=1.0, ls="--")
            lows.append(baselines[condition])
        for y in ys[1:]:
            if summary.series[y].group != summary.series[y - 1].group:
                ax.axhline(y - 0.5, color="0.6", lw=0.6)
        ax.set_title(summary.conditions[condition], fontsize=9)
        ax.grid(axis="x", color="0.9", lw=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=8)
    low, high = min(lows), max(highs)
    pad = 0.05 * (high - low) if high > low else 0.05
    axes[0].set_xlim(low - pad, high + pad)
    axes[0].set_yticks(ys, [s.label for s in summary.series])
    axes[0].set_ylim(rows - 0.5, -0.5)  # the first series on top, as in the table
    for ax in axes:
        ax.set_xlabel("accuracy", fontsize=8)
    counts = {n for s in summary.series for _, _, n in s.points.values()}
    caption = f"dot: mean over {_seed_words(counts)}; bar: ± 1 sample std over the seeds"
    if any(n == 1 for n in counts):
        caption += " (none for one seed)"
    if baselines:
        values = set(baselines.values())
        same = f" ({values.pop():g})" if len(values) == 1 else ""
        caption += f"; dashed line: {baseline_label}{same}"
    fig.suptitle(title, fontsize=10)
    fig.supxlabel(caption, fontsize=8, color="0.25")
    return fig


def atlas_figure(rows: Sequence[Row], experiment: str, title: str) -> Figure:
    """``experiment``'s rows drawn by :func:`draw_atlas`: a panel per test condition (the
    trained one first), a row per encoding (and layout), dots at the mean over seeds with
    ± one sample std as bars, the caption saying so."""
    return draw_atlas(atlas_summary(rows, experiment), title)

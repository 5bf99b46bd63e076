"""The atlas: one table and one figure per signal domain, from rows of one shape.

The audio, video and VLA experiments write rows with

* ``experiment`` (the domain), ``encoding`` (the name the table shows; an experiment that
  compares token layouts too adds ``layout``), ``seed``;
* ``condition`` (an integer, the test condition's order: 0 = as trained, then further from
  the training data) and ``condition_label`` (what the column says, e.g. ``"2 s"``);
* ``in_distribution`` (True for the trained condition) and ``accuracy``.

:func:`atlas_table` pivots them (encoding × condition, mean ± std over seeds) and
:func:`atlas_figure` draws accuracy against the condition, one line per encoding, the
seeds' spread shaded; each domain's :func:`atlas_section` shows both in the report
(:mod:`posenc.lab.report`).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from posenc.lab.claims import Claim, Control, difference_at
from posenc.lab.runner import Section
from posenc.lab.tables import Table, pivot, seed_note, text_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "accuracy_gap",
    "atlas_figure",
    "atlas_pivot",
    "atlas_section",
    "atlas_table",
    "atlas_tables",
    "condition_labels",
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


def atlas_figure(rows: Sequence[Row], experiment: str, title: str) -> Figure:
    """Accuracy against the test condition, one line per encoding: the mean over seeds, the
    range of the seeds shaded; the trained condition is the first column. An experiment that
    compares layouts gets one panel per layout (the same y axis)."""
    from posenc.lab.figures import encoding_color, new_figure

    selected = [row for row in rows if row.get("experiment") == experiment]
    labels = condition_labels(selected)
    conditions = sorted(labels)
    layouts = list(dict.fromkeys(str(row.get("layout", "")) for row in selected))
    panels = len(layouts)
    size = (4.2 * panels + (1.4 if panels > 1 else 3.2), 3.8)
    fig = new_figure(figsize=size, layout="constrained")
    axes = fig.subplots(1, panels, sharey=True, squeeze=False)[0]
    for ax, layout in zip(axes, layouts, strict=True):
        series: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for row in selected:
            if str(row.get("layout", "")) == layout:
                series[str(row["encoding"])][int(row["condition"])].append(float(row["accuracy"]))
        for name, by_condition in series.items():
            xs = [c for c in conditions if by_condition.get(c)]
            means = [sum(by_condition[c]) / len(by_condition[c]) for c in xs]
            color = encoding_color(name)
            ax.plot(xs, means, "-", marker="o", ms=4, color=color, label=name)
            low = [min(by_condition[c]) for c in xs]
            high = [max(by_condition[c]) for c in xs]
            ax.fill_between(xs, low, high, color=color, alpha=0.12, lw=0)
        ax.set_xticks(conditions, [labels[c] for c in conditions], fontsize=7, rotation=15)
        ax.set_title(layout or title, fontsize=9)
        if panels == 1:  # many encodings: the legend beside the panel, off the lines
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        else:
            ax.legend(fontsize=7)
    axes[0].set_ylabel("accuracy (line: mean, band: seeds)")
    if layouts != [""]:
        fig.suptitle(title)
    return fig

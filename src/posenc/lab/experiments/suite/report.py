"""The suite's report: its table lines, text and HTML tables, HELMET's note and ``suite.png``.

Rows of a trained model read as their encoding (``+rand`` for randomized positions), a
zero-shot method or DroPE on rope's weights as ``rope→<method>``, another test distribution
as `` @<name>``; a task run with non-default parameters (``task_params``) is named with them,
``state_tracking (group=parity)``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from posenc.lab.data.ruler import NEEDLE_TASKS
from posenc.lab.figures import (
    encoding_color,
    finite,
    mean_line,
    new_figure,
    set_length_multiple_axis,
    times,
)
from posenc.lab.tables import Table, complete_rows, pivot, seed_note, text_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "format_suite_table",
    "needle_note",
    "score_vs_multiple",
    "suite_rows",
    "suite_tables",
    "task_label",
    "variant",
]

Row = dict[str, Any]


def task_label(rows: Sequence[Row], task: str) -> str:
    """``task``, with the parameters its rows were run with when not the defaults
    (``state_tracking (group=parity)``)."""
    for row in rows:
        if row.get("task") == task and row.get("task_params") not in (None, "", "{}"):
            params = json.loads(row["task_params"])
            return f"{task} ({', '.join(f'{k}={v}' for k, v in params.items())})"
    return task


def variant(row: Row) -> str:
    """The table's line: the encoding, ``+rand`` when randomized, ``rope→<method>`` for a
    zero-shot method on rope's weights, `` @<name>`` on a test distribution of
    ``test_params``."""
    if row.get("method") not in (None, "", "rope"):
        name = f"rope→{row['method']}"
    else:
        name = f"{row['encoding']}{'+rand' if row.get('randomized') else ''}"
    test_set = row.get("test_set") or "train"
    return name if test_set == "train" else f"{name} @{test_set}"


def suite_rows(rows: Sequence[Row]) -> list[Row]:
    return [{**r, "variant": variant(r)} for r in rows if r.get("experiment") == "suite"]


def format_suite_table(rows: Sequence[Row], metric: str = "seq_acc") -> str:
    """Per task: ``metric`` with encodings down and multiples of ``L`` across (mean ± std over
    seeds), and the needle-retrieval note where it applies."""
    selected = suite_rows(rows)
    lines = [f"{metric} by multiple of the training length L; {seed_note(selected)}"]
    for task in dict.fromkeys(r["task"] for r in selected):
        cells = [r for r in selected if r["task"] == task]
        header, body = pivot(cells, ["variant"], "multiple", metric, label=times)
        label = f"{task_label(cells, task)} (L={cells[0]['train_length']})"
        lines += ["", text_table([label, *header[1:]], body)]
    lines += ["", *needle_note(rows)]
    return "\n".join(lines).rstrip()


def needle_note(rows: Sequence[Row]) -> list[str]:
    """HELMET's caveat when the rows' tasks are all needle retrieval (or a note naming the
    needle tasks when they are mixed with others)."""
    tasks = {r["task"] for r in rows if r.get("experiment") == "suite"}
    needles = sorted(t for t in tasks if t in NEEDLE_TASKS)
    if not needles:
        return []
    caveat = (
        "needle retrieval does not predict downstream long-context results (HELMET, "
        "https://arxiv.org/abs/2410.02694)"
    )
    if len(needles) == len(tasks):
        return [f"These results rest on needle retrieval alone ({', '.join(needles)}): {caveat}."]
    return [f"The {', '.join(needles)} rows are needle retrieval: {caveat}."]


def suite_tables(rows: Sequence[Row]) -> list[Table]:
    """The report's tables: per task, exact match and token accuracy by multiple of ``L``."""
    rows = complete_rows(suite_rows(rows), ["task", "encoding", "multiple"])
    tables = []
    for task in dict.fromkeys(row["task"] for row in rows):
        cells = [row for row in rows if row["task"] == task]
        note = " Needle retrieval only (HELMET)." if task in NEEDLE_TASKS else ""
        for metric, what in (("seq_acc", "exact match"), ("token_acc", "token accuracy")):
            header, body = pivot(cells, ["variant"], "multiple", metric, digits=2, label=times)
            caption = (
                f"{task_label(cells, task)}: {what} by multiple of L = {cells[0]['train_length']} "
                f"({seed_note(cells)}).{note}"
            )
            tables.append((caption, header, body))
    return tables


def score_vs_multiple(rows: Sequence[Row]) -> Figure:
    """Exact-match accuracy against the multiple of ``L``, one panel per task (mean over
    seeds); dashed lines are randomized positions, dotted ones zero-shot methods on rope,
    dash-dotted ones other test distributions."""
    tasks: dict[str, dict[tuple[str, bool], list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in suite_rows(rows):
        if finite(row.get("seq_acc")):
            key = (row["variant"], bool(row["randomized"]))
            tasks[row["task"]][key].append((row["multiple"], row["seq_acc"]))
    count = max(len(tasks), 1)
    columns = min(count, 4)
    fig = new_figure(
        figsize=(4.4 * columns, 3.0 * math.ceil(count / columns)), layout="constrained"
    )
    for index, (task, series) in enumerate(sorted(tasks.items())):
        ax = fig.add_subplot(math.ceil(count / columns), columns, index + 1)
        for (variant, randomized), points in sorted(series.items()):
            name, _, test_set = variant.partition(" @")
            style = "-." if test_set else (":" if name.startswith("rope→") else "-")
            mean_line(
                ax,
                points,
                marker=".",
                ls="--" if randomized else style,
                color=encoding_color(name.split("→")[-1].removesuffix("+rand")),
                label=variant,
            )
        set_length_multiple_axis(ax, sorted({m for pts in series.values() for m, _ in pts}))
        title = task_label(rows, task) + (" (needle only)" if task in NEEDLE_TASKS else "")
        ax.set(title=title, ylabel="exact match", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    return fig

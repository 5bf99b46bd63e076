"""What the extend experiment shows of its rows: the terminal tables, and the report's sections
of ``extend`` rows (perplexity by method, stage and length; ``extension.png``) and of
``passkey`` rows (accuracy by context length; ``passkey.png``, one heatmap of depth ×
length per method and stage). ``longctx`` writes rows of both kinds and shows them alike.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from posenc.lab.figures import (
    encoding_color,
    finite,
    log_ticks,
    mean_line,
    new_figure,
    set_length_multiple_axis,
    set_log_ticks,
)
from posenc.lab.findings import extension_findings
from posenc.lab.runner import Section
from posenc.lab.tables import (
    Table,
    complete_rows,
    depth_means,
    length_label,
    pivot,
    seed_note,
    text_table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["SECTIONS", "extension_curves", "format_extend_tables", "passkey_heatmaps"]

Row = dict[str, Any]


def format_extend_tables(rows: Sequence[Row]) -> str:
    """Perplexity by (method, stage) and evaluation length, then passkey accuracy (mean over
    depths) by context length; mean ± std over seeds."""
    lines: list[str] = []
    extend = [r for r in rows if r.get("experiment") == "extend"]
    if extend:
        lines.append(
            f"perplexity (bytes); RoPE trained at T={extend[0]['train_len']}; {seed_note(extend)}"
        )
        header, body = pivot(extend, ["method", "stage"], "eval_len", "ppl", label=length_label)
        lines.append(text_table(header, body))
    passkey = [r for r in rows if r.get("experiment") == "passkey"]
    if passkey:
        lines.append("passkey accuracy (mean over depths per seed)")
        header, body = pivot(
            depth_means(passkey),
            ["method", "stage"],
            "context_len",
            "accuracy",
            digits=2,
            label=length_label,
        )
        lines.append(text_table(header, body))
    return "\n".join(lines)


def _extend_tables(rows: Sequence[Row]) -> list[Table]:
    """The report's perplexity table: (method, stage) × evaluation length."""
    rows = complete_rows(rows, ["method", "stage", "eval_len"])
    if not rows:
        return []
    header, body = pivot(rows, ["method", "stage"], "eval_len", "ppl", label=length_label)
    caption = f"Perplexity (bytes) by evaluation length, per scaling and stage; {seed_note(rows)}."
    return [(caption, header, body)]


def _passkey_tables(rows: Sequence[Row]) -> list[Table]:
    """The report's passkey table: (method, stage) × context length, per seed the mean over
    depths first."""
    rows = complete_rows(rows, ["method", "context_len"])
    means = depth_means(rows)  # per seed the mean over depths, then mean ± std over seeds
    if not means:
        return []
    header, body = pivot(
        means, ["method", "stage"], "context_len", "accuracy", digits=2, label=length_label
    )
    caption = f"Passkey accuracy by context length (mean over depths per seed); {seed_note(rows)}."
    return [(caption, header, body)]


_STAGE_TITLES = {"no_ft": "no fine-tuning", "zero": "no fine-tuning", "ft": "after fine-tuning"}


def extension_curves(rows: Sequence[Row]) -> Figure:
    """Perplexity against evaluation length per RoPE scaling, one panel per stage (before and
    after fine-tuning). The x axis is the evaluation length as a multiple of the training
    length ``T`` (``1×, 2×, 4×…``), as in the extrapolation figure beside it; each method has
    its own colour (:func:`~posenc.viz.base.encoding_color`), none an encoding's but ``rope``.

    Rows: ``experiment == "extend"`` with ``method, stage, train_len, eval_len, ppl``.
    """
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    trained: dict[int, None] = {}
    for row in rows:
        if row.get("experiment") == "extend" and finite(row.get("ppl")):
            point = (row["eval_len"] / row["train_len"], row["ppl"])
            series[(row["method"], row["stage"])].append(point)
            trained[row["train_len"]] = None
    stages = list(dict.fromkeys(stage for _, stage in series)) or ["no_ft"]
    fig = new_figure(figsize=(4 * max(len(stages), 2), 4.2), layout="constrained")
    axes = fig.subplots(1, len(stages), sharey=True, squeeze=False)[0]
    multiples = sorted({x for points in series.values() for x, _ in points})
    ppl = [y for points in series.values() for _, y in points]
    for ax, stage in zip(axes, stages, strict=True):
        for (method, s), points in sorted(series.items()):
            if s == stage:  # one colour per method on every panel and page
                mean_line(ax, points, marker="o", label=method, color=encoding_color(method))
        ax.set(title=_STAGE_TITLES.get(stage, stage))
        if multiples:
            set_length_multiple_axis(ax, multiples)
            ax.tick_params(axis="x", labelrotation=45 if len(multiples) > 5 else 0)
            set_log_ticks(ax, "y", log_ticks(min(ppl), max(ppl)))
        if ax.has_data():
            ax.legend(fontsize=8, title="method")
    axes[0].set_ylabel("perplexity (bytes; mean ± std over seeds)")
    at = f" trained at T = {', '.join(map(str, trained))} bytes" if trained else ""
    fig.suptitle(f"Context extension of RoPE models{at}: perplexity per method")
    return fig


def passkey_heatmaps(rows: Sequence[Row]) -> Figure:
    """Passkey accuracy over (depth, context length), one panel per method and stage; each
    cell is the mean over seeds."""
    seeds: dict[tuple[str, str], dict[tuple[float, int], list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in rows:
        if row.get("experiment") == "passkey" and finite(row.get("accuracy")):
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


#: The report's sections of ``extend`` and ``passkey`` rows (``longctx`` writes both kinds too).
SECTIONS = (
    Section(
        "RoPE context extension",
        _extend_tables,
        {"extension.png": extension_curves},
        rows="extend",  # named, so that longctx's page shows its extend rows too
        findings=extension_findings,
    ),
    Section(
        "Passkey retrieval", _passkey_tables, {"passkey.png": passkey_heatmaps}, rows="passkey"
    ),
)

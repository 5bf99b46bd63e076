"""Pivot tables of result rows over seeds: one cell per (index, column), mean ± std.

The experiments' printed tables and the report's tables are both built here, from
:func:`posenc.lab.claims.aggregate` (sample std over seeds; ``–`` where a cell is undefined,
such as a learned table past ``T``). A table of the report is a :data:`Table`, ``(caption,
header, body)``; each experiment's :class:`~posenc.lab.report.Section` makes its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from posenc.lab.claims import aggregate, format_mean_std

__all__ = [
    "Pivot",
    "Table",
    "complete_rows",
    "depth_means",
    "has_column",
    "length_label",
    "per_encoding_table",
    "pivot",
    "seed_means",
    "seed_note",
    "text_table",
    "with_variant",
]

Row = dict[str, Any]
Pivot = tuple[list[str], list[list[str]]]
#: A table of the report: ``(caption, header, body)``, every cell a string.
Table = tuple[str, list[str], list[list[str]]]


def pivot(
    rows: Sequence[Row],
    index: Sequence[str],
    column: str,
    value: str,
    *,
    digits: int = 3,
    label: Callable[[Any], str] = str,
    extra: Sequence[tuple[str, str, int]] = (),
) -> Pivot:
    """``(header, body)``: one line per distinct ``index`` (first appearance), one column per
    distinct ``column`` value (sorted) holding ``value`` as mean ± std over seeds, then the
    ``extra`` columns ``(title, value, digits)`` averaged over the line's rows."""
    columns = sorted({row[column] for row in rows})
    cells = {
        (*(group[k] for k in index), group[column]): group
        for group in aggregate(rows, [*index, column], value)
    }
    header = [*index, *(label(c) for c in columns), *(title for title, _, _ in extra)]
    body = []
    for key in dict.fromkeys(tuple(row[k] for k in index) for row in rows):
        line = [str(part) for part in key]
        for c in columns:
            group = cells.get((*key, c))
            line.append(
                "–" if group is None else format_mean_std(group["mean"], group["std"], digits)
            )
        mine = [row for row in rows if tuple(row[k] for k in index) == key]
        for _, name, places in extra:
            (summary,) = aggregate(mine, [], name)
            line.append("–" if summary["mean"] is None else f"{summary['mean']:.{places}f}")
        body.append(line)
    return header, body


def text_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the first left-aligned, the rest right-aligned."""
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]

    def fmt(line: Sequence[str]) -> str:
        first = f"{line[0]:<{widths[0]}}"
        return "  ".join(
            [first, *(f"{cell:>{w}}" for cell, w in zip(line[1:], widths[1:], strict=True))]
        )

    return "\n".join(fmt(line) for line in [header, *body])


def seed_means(rows: Sequence[Row], values: Sequence[str]) -> list[Row]:
    """One row per (encoding, seed), in order of first appearance: each of ``values``
    averaged over that seed's rows (its folds); ``None`` when a row's cell is missing."""
    groups: dict[tuple[Any, Any], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.get("encoding"), row.get("seed")), []).append(row)
    means = []
    for (encoding, seed), group in groups.items():
        mean: Row = {"encoding": encoding, "seed": seed}
        for value in values:
            cells = [float(r[value]) for r in group if r.get(value) not in (None, "")]
            mean[value] = sum(cells) / len(cells) if len(cells) == len(group) else None
        means.append(mean)
    return means


def seed_note(rows: Sequence[Row]) -> str:
    """``"1 seed"`` or ``"3 seeds, mean ± std"``: what a table's cells summarize."""
    count = len({row.get("seed") or 0 for row in rows})
    return f"{count} seed{'s' if count != 1 else ''}" + (", mean ± std" if count > 1 else "")


def length_label(n: Any) -> str:
    """A length column's title: ``L=n``."""
    return f"L={n}"


def depth_means(rows: Sequence[Row], value: str = "accuracy") -> list[Row]:
    """Passkey rows as one row per (method, stage, context length, seed) holding the mean of
    ``value`` over depths: averaged per seed first, so a table's std is across seeds."""
    keys = ("method", "stage", "context_len", "seed")
    per_seed: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        if isinstance(row.get(value), (int, float)):
            key = tuple(row.get(k) or (0 if k == "seed" else "") for k in keys)
            per_seed.setdefault(key, []).append(float(row[value]))
    return [
        {**dict(zip(keys, key, strict=True)), value: sum(values) / len(values)}
        for key, values in per_seed.items()
    ]


def with_variant(rows: Sequence[Row]) -> list[Row]:
    """Task rows with a ``variant`` column: the encoding, ``+rand`` when its positions were
    randomized."""
    return [
        {**row, "variant": f"{row['encoding']}{'+rand' if row.get('randomized') else ''}"}
        for row in rows
    ]


def complete_rows(rows: Sequence[Row], keys: Sequence[str]) -> list[Row]:
    """The rows holding every key (a row missing one cannot be placed in a pivot)."""
    return [row for row in rows if all(row.get(k) not in (None, "") for k in keys)]


def has_column(rows: Sequence[Row], column: str) -> bool:
    """Whether any row holds a value in ``column``."""
    return any(row.get(column) not in (None, "") for row in rows)


def per_encoding_table(
    rows: Sequence[Row], caption: str, values: Sequence[tuple[str, str, int]]
) -> list[Table]:
    """One line per encoding: the seeds, then each ``(title, column, digits)`` as mean ± std
    over seeds, the first also as min–max; no table when no row has an encoding or a value."""
    rows = complete_rows(rows, ["encoding"])
    values = [value for value in values if has_column(rows, value[1])]
    if not rows or not values:
        return []
    stats = [
        {g["encoding"]: g for g in aggregate(rows, ["encoding"], column)} for _, column, _ in values
    ]
    header = ["encoding", "seeds", values[0][0], "min–max", *(title for title, _, _ in values[1:])]
    body = []
    for encoding, first in stats[0].items():
        places = values[0][2]
        spread = (
            "–" if first["min"] is None else f"{first['min']:.{places}f}–{first['max']:.{places}f}"
        )
        cells = [
            format_mean_std(table[encoding]["mean"], table[encoding]["std"], digits)
            for table, (_, _, digits) in zip(stats, values, strict=True)
        ]
        body.append([str(encoding), str(first["n"]), cells[0], spread, *cells[1:]])
    return [(f"{caption}; {seed_note(rows)}.", header, body)]

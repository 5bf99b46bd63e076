"""What the longctx experiment prints of its rows: ``extend``'s tables (perplexity, passkey by
length), then passkey accuracy by depth for the windowed methods, each cell marked when its
key lies outside the window. The report shows its rows with ``extend``'s sections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posenc.lab.experiments.extend.report import format_extend_tables
from posenc.lab.tables import pivot, text_table

__all__ = ["WINDOWED", "format_longctx_tables"]

Row = dict[str, Any]

#: Methods whose queries see only a window and the first tokens (the rest is dropped).
WINDOWED = ("lm_infinite", "sinks")


def format_longctx_tables(rows: Sequence[Row]) -> str:
    """``extend``'s tables (perplexity, passkey by length), then passkey accuracy by depth for
    the windowed methods with each cell's key distance."""
    lines = [format_extend_tables(rows)]
    windowed = [
        {**r, "at": f"{r['method']} L={r['context_len']}"}
        for r in rows
        if r.get("experiment") == "passkey" and r.get("method") in WINDOWED
    ]
    if windowed:
        lines.append("passkey accuracy by depth, windowed methods (* = key outside the window)")
        header, body = pivot(windowed, ["at"], "depth", "accuracy", digits=2, label="d={}".format)
        outside = {(r["at"], r["depth"]) for r in windowed if r.get("key_in_window") is False}
        depths = sorted({r["depth"] for r in windowed})
        for line in body:
            for index, depth in enumerate(depths, start=1):
                line[index] += "*" if (line[0], depth) in outside else ""
        lines.append(text_table(header, body))
    return "\n".join(lines)

"""The report page's HTML pieces: escaped text with its links, numbers, mean ± std cells,
tables, embedded PNG figures and the page's style sheet (:mod:`posenc.lab.report`)."""

from __future__ import annotations

import base64
import html
import io
import math
import re
from typing import Any

from posenc.lab.tables import Table

__all__ = [
    "MARKS",
    "STYLE",
    "format_number",
    "html_table",
    "linked_text",
    "pivot_cell",
    "png_bytes",
    "png_figure",
    "raw_cell",
]

STYLE = """
* { box-sizing: border-box; }
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1100px;
       color: #222; line-height: 1.4; }
h2 { border-bottom: 1px solid #ddd; margin-top: 2em; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: 0.4em 0 1.4em; font-size: 0.85em; max-width: 100%; }
caption { caption-side: top; text-align: left; padding: 0.3em 0; color: #444; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
.num, .std { white-space: nowrap; } .std { color: #666; font-size: 0.9em; }
table.claims { width: 100%; }
table.claims :is(td, th), table.config :is(td, th) { text-align: left; }
table.config td:first-child { white-space: nowrap; }
table.claims small { color: #555; }
td.holds { background: #e3f4e1; } td.fails { background: #fbe2e0; }
td.undefined { background: #f1f1f1; } td.verdict { white-space: nowrap; font-weight: 600; }
td.undecided { background: #fdf3d0; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.85em; }
img { max-width: 100%; height: auto; }
code { background: #f4f4f4; padding: 1px 4px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; }
details { margin: 0.4em 0; } summary { cursor: pointer; }
.scroll { overflow-x: auto; max-width: 100%; }
ul.findings li { margin: 0.3em 0; }
table.raw { font-size: 0.75em; } table.raw td, table.raw th { white-space: nowrap; }
"""

MARKS = {
    "holds": "✔ holds",
    "fails": "✘ fails",
    "undecided": "? undecided",
    "undefined": "– undefined",
}
_URL = re.compile(r"https?://[^\s<>\"]+[^\s<>\".,;:)]")


# --- cells -----------------------------------------------------------------------------------


def linked_text(value: Any) -> str:
    """Escaped text with its URLs as links."""
    escaped = html.escape("" if value is None else str(value))
    return _URL.sub(lambda m: f'<a href="{m.group(0)}">{m.group(0)}</a>', escaped)


def format_number(value: Any, spec: str = ".4g") -> str:
    """A number as text (not escaped); ``–`` for ``None`` and NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None else str(value)
    return "–" if math.isnan(value) else format(value, spec)


def raw_cell(value: Any) -> str:
    text = (
        format_number(value) if isinstance(value, float) else ("" if value is None else str(value))
    )
    return html.escape(text)


def pivot_cell(text: str) -> str:
    """``"3.210 ± 0.050"`` as the mean and a lighter std, free to wrap between the two."""
    mean, sep, std = text.partition(" ± ")
    cell = f"<span class='num'>{html.escape(mean)}</span>"
    return cell + (f" <span class='std'>± {html.escape(std)}</span>" if sep else "")


def html_table(table: Table, css: str = "pivot") -> str:
    """A pivot table (``css="pivot"``: cells are mean ± std) or a table of text."""
    caption, header, body = table
    cell = pivot_cell if css == "pivot" else linked_text
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    lines = "".join(
        "<tr>" + "".join(f"<td>{cell(c)}</td>" for c in line) + "</tr>" for line in body
    )
    return (
        f"<table class='{css}'><caption>{html.escape(caption)}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{lines}</tbody></table>"
    )


def png_figure(png: bytes, name: str, caption: str) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return (
        f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{encoded}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def png_bytes(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()

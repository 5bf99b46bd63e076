"""``posenc report RUN_DIR``: a self-contained HTML page of a run's results.

The page holds one section per experiment found in ``results.csv``: a table of the rows and
the figures of :mod:`posenc.lab.figures`, embedded as base64 PNG so the file stands alone.
The figures are also written as PNG files under ``RUN_DIR/figures/``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from posenc.lab import figures
from posenc.lab.results import read_results_csv
from posenc.lab.run import atomic_write_text

__all__ = ["write_report"]

Row = dict[str, Any]

# Experiment name -> (section title, figure functions with their file names).
_SECTIONS: dict[str, tuple[str, list[tuple[str, Callable[[Sequence[Row]], Any]]]]] = {
    "extrapolate": ("Train short, test long", [("loss_vs_length.png", figures.loss_vs_length)]),
    "extend": ("RoPE context extension", [("extension.png", figures.extension_curves)]),
    "passkey": ("Passkey retrieval", [("passkey.png", figures.passkey_heatmaps)]),
    "tasks": ("Length generalization tasks", [("tasks.png", figures.accuracy_vs_length)]),
    "vit": ("ViT on digits", [("vit.png", figures.vit_accuracy)]),
}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; } code { background: #f4f4f4; padding: 1px 4px; }
table.claims td { text-align: left; vertical-align: top; max-width: 28em; }
"""


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.4g}"
    return html.escape("" if value is None else str(value))


def _table(rows: Sequence[Row]) -> str:
    columns: list[str] = []
    for row in rows:
        columns += [k for k, v in row.items() if k not in columns and k != "experiment"]
    # Drop columns that are empty for every row of this experiment.
    columns = [c for c in columns if any(row.get(c) not in (None, "") for row in rows)]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row.get(c))}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


_MARKS = {"holds": "✔ holds", "fails": "✘ fails", "undefined": "– undefined"}


def _claims_section(records: Sequence[Row]) -> list[str]:
    """The seed claims first: verdict, claim, measured (mean ± std over seeds), threshold,
    and the paper's number."""
    if not records:
        return []
    head = "".join(
        f"<th>{name}</th>" for name in ("verdict", "claim", "measured", "needs", "published")
    )
    body = []
    for r in records:
        measured = "–" if r["value"] is None else f"{r['value']:.4g}"
        if r["value"] is not None and r["std"] is not None:
            measured += f" ± {r['std']:.2g}"
        if r["seeds"]:
            measured += f" ({r['seeds']} seed{'s' if r['seeds'] > 1 else ''})"
        cells = [
            _MARKS.get(r["status"], r["status"]),
            f"{html.escape(r['text'])}<br><small>{html.escape(r['paper'])}</small>",
            measured,
            f"{html.escape(r['direction'])} {r['threshold']:g}",
            html.escape(r["published"]),
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    held = sum(r["status"] == "holds" for r in records)
    return [
        f"<h2>Claims: {held} of {len(records)} hold</h2>",
        f"<table class='claims'><tr>{head}</tr>{''.join(body)}</table>",
    ]


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def write_report(run_dir: str | Path, *, title: str | None = None) -> Path:
    """Write ``RUN_DIR/report.html`` (and ``RUN_DIR/figures/*.png``) from ``results.csv``.

    Raises:
        ValueError: naming ``run_dir`` when it holds no ``results.csv``.
    """
    folder = Path(run_dir)
    csv_path = folder / "results.csv"
    if not csv_path.is_file():
        raise ValueError(f"run_dir {folder} has no results.csv; run an experiment into it first")
    rows = read_results_csv(csv_path)
    parts = [f"<h1>{html.escape(title or f'posenc run: {folder.name}')}</h1>"]
    claims_path = folder / "claims.json"
    if claims_path.is_file():
        parts += _claims_section(json.loads(claims_path.read_text(encoding="utf-8")))
    config_path = folder / "config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text())
        pretty = html.escape(json.dumps(config, indent=2))
        parts.append(f"<details><summary>configuration</summary><pre>{pretty}</pre></details>")
    parts.append(
        f"<p>torch {html.escape(torch.__version__)} on {html.escape(platform.platform())}; "
        f"{len(rows)} result rows from <code>results.csv</code>.</p>"
    )
    figure_dir = folder / "figures"
    figure_dir.mkdir(exist_ok=True)
    # Known experiments with their figures first, then any other experiment's rows.
    others = dict.fromkeys(str(row.get("experiment")) for row in rows if row.get("experiment"))
    sections = {**_SECTIONS, **{name: (name, []) for name in others if name not in _SECTIONS}}
    for experiment, (heading, makers) in sections.items():
        selected = [row for row in rows if row.get("experiment") == experiment]
        if not selected:
            continue
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        for filename, make in makers:
            png = _png(make(selected))
            (figure_dir / filename).write_bytes(png)
            encoded = base64.b64encode(png).decode("ascii")
            parts.append(f'<img alt="{filename}" src="data:image/png;base64,{encoded}">')
        parts.append(_table(selected))
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title or folder.name)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(parts)}</body></html>"
    )
    target = folder / "report.html"
    atomic_write_text(target, page)
    return target

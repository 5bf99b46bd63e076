"""The report page: its sections and :func:`write_report` (:mod:`posenc.lab.report`)."""

from __future__ import annotations

import html
import json
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from posenc.lab.figures import training_curves
from posenc.lab.findings import ATLAS, ATLAS_SECTION, Reader, data_and_model, findings
from posenc.lab.gather import RunFolder, gather, labelled_rows
from posenc.lab.report.claims import claims_section
from posenc.lab.report.markup import (
    STYLE,
    format_number,
    html_table,
    png_bytes,
    png_figure,
    raw_cell,
)
from posenc.lab.results import Row
from posenc.lab.run import atomic_write_text, read_json, read_metrics
from posenc.lab.tables import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Section", "ShowsRows", "write_report"]


@dataclass(frozen=True)
class Section:
    """What the report shows of one kind of rows: a heading, its tables and its figures.

    Attributes:
        heading: the section's title on the page.
        tables: rows -> the page's tables of them (:data:`posenc.lab.tables.Table`: caption,
            header, body); None = the rows are shown raw only.
        figures: file name under ``figures/`` -> rows -> a matplotlib ``Figure``.
        rows: the ``experiment`` column of the rows it shows; None = the experiment's name
            (an experiment writing rows of two kinds, as ``extend`` writes ``passkey`` rows
            beside its own, has a section for each).
        findings: rows -> what they say, as plain sentences with their margins (the page's
            lead, :func:`posenc.lab.findings.findings`); None = nothing in words.
        atlas: whether these rows answer the atlas's question for one signal, so that the
            page shows the cross-signal atlas in brief beside them.

    The functions get only the rows of that kind (of every run the page gathers) and must be
    module-level, as the experiment's are.
    """

    heading: str
    tables: Callable[[Sequence[Row]], list[Table]] | None = None
    figures: Mapping[str, Callable[[Sequence[Row]], Figure]] = field(default_factory=dict)
    rows: str | None = None
    findings: Reader | None = None
    atlas: bool = False


class ShowsRows(Protocol):
    """What the page needs of an experiment (:class:`~posenc.lab.runner.Experiment` is one):
    its sections by the ``experiment`` column of the rows each shows."""

    def section_rows(self) -> Mapping[str, Section]: ...


# --- sections ---------------------------------------------------------------------------------


def _training_curves(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Run name (its folder under ``runs/``) -> its metrics records, for every run logged."""
    runs = folder / "runs"
    curves = {}
    for path in sorted(runs.rglob("metrics.jsonl")) if runs.is_dir() else []:
        records = read_metrics(path.parent)
        if records:
            curves[path.parent.relative_to(runs).as_posix()] = records
    return curves


def _checks_section(folder: Path) -> list[str]:
    """The property checks of ``posenc demo``: their table (``checks.json``) and figures."""
    checks = folder / "checks"
    pngs = sorted(checks.glob("*.png")) if checks.is_dir() else []
    parts = [png_figure(p.read_bytes(), p.name, f"checks/{p.name}") for p in pngs]
    summary = checks / "checks.json"
    if summary.is_file():
        results = read_json(summary).get("checks", [])
        body = [
            [
                "✔" if r.get("passed") else "✘",
                str(r.get("name", "")),
                format_number(r.get("value"), ".3g"),
                f"{r.get('direction', '')} {format_number(r.get('bound'), 'g')}",
                str(r.get("detail", "")),
            ]
            for r in results
        ]
        passed = sum(bool(r.get("passed")) for r in results)
        caption = f"{passed} of {len(results)} property checks pass (checks/checks.json)."
        header = ["", "check", "measured", "needs", "detail"]
        parts.insert(0, html_table((caption, header, body), "config"))
    return (["<h3>Property checks</h3>", *parts]) if parts else []


def _environment() -> list[list[str]]:
    lines = [
        ["python", f"{platform.python_version()} ({platform.python_implementation()})"],
        ["torch", torch.__version__ + (" (CUDA available)" if torch.cuda.is_available() else "")],
    ]
    for package in ("posenc", "numba", "numpy", "matplotlib"):
        try:
            lines.append([package, metadata.version(package)])
        except metadata.PackageNotFoundError:
            continue
    lines.append(["platform", platform.platform()])
    lines.append(["CPUs", str(os.cpu_count())])
    return lines


def _config_rows(config: dict[str, Any]) -> list[list[str]]:
    return [
        [str(key), value if isinstance(value, str) else json.dumps(value)]
        for key, value in config.items()
    ]


def _raw_rows(experiment: str, rows: Sequence[Row]) -> str:
    columns = list(dict.fromkeys(k for row in rows for k in row if k != "experiment"))
    columns = [c for c in columns if any(row.get(c) not in (None, "") for row in rows)]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{raw_cell(row.get(c))}</td>" for c in columns) + "</tr>"
        for row in rows
    )
    return (
        f"<details><summary>{html.escape(experiment)}: {len(rows)} rows × {len(columns)} "
        f"columns</summary><div class='scroll'><table class='raw'><thead><tr>{head}</tr>"
        f"</thead><tbody>{body}</tbody></table></div></details>"
    )


def _runs_section(runs: Sequence[RunFolder]) -> list[str]:
    """Which folder holds which claims and rows: the page's sources, when it gathers several."""
    if len(runs) < 2:
        return []
    body = []
    for run in runs:
        verdicts = ", ".join(f"{c.get('name')}: {c.get('status')}" for c in run.claims)
        files = [
            f for f in ("results.csv", "claims.json", "config.json") if (run.path / f).is_file()
        ]
        body.append(
            [
                f"{run.label}/",
                ", ".join(run.experiments),
                str(len(run.rows)),
                f"{len(run.claims)}" + (f" ({verdicts})" if verdicts else ""),
                ", ".join(f"{run.label}/{f}" for f in files),
            ]
        )
    caption = (
        f"This page gathers {len(runs)} runs; each claim's numbers are in the results.csv of "
        "the run that judged it."
    )
    header = ["run", "experiments", "rows", "claims", "files"]
    return ["<h2 id='runs'>Runs</h2>", html_table((caption, header, body), "config")]


def _findings_section(
    rows: Sequence[Row], curves: Mapping[str, Any], sections: Mapping[str, Section]
) -> list[str]:
    """The page's lead: what the numbers say, one sentence per item."""
    readers = {kind: section.findings for kind, section in sections.items() if section.findings}
    sentences = findings(rows, curves, readers)
    if not sentences:
        return []
    items = "".join(f"<li>{html.escape(sentence)}</li>" for sentence in sentences)
    return ["<h2 id='findings'>Findings</h2>", f"<ul class='findings'>{items}</ul>"]


def _data_section(runs: Sequence[RunFolder]) -> list[str]:
    """The data, the model and its training of each run, in words."""
    parts = []
    for run in runs:
        corpus_file = run.path / "data.json"
        corpus = read_json(corpus_file) if corpus_file.is_file() else None
        lines = data_and_model(run.config or {}, run.rows, corpus)
        if lines:
            where = "this run" if run.label == "." else f"{run.label}/"
            caption = f"{where} (from {'' if run.label == '.' else run.label + '/'}config.json)"
            parts.append(
                html_table((caption, ["", "described"], [list(line) for line in lines]), "config")
            )
    return (["<h2 id='data'>Data and model</h2>", *parts]) if parts else []


#: docs/results.md's heading anchor of the atlas (GitHub's slug of "## 9. Which encoding ...")
_ATLAS_ANCHOR = "#9-which-encoding-for-which-signal-the-atlas-audio-video-vla-images-in-4-5"


def _results_doc(folder: Path) -> str | None:
    """A link from ``folder`` to docs/results.md when this code runs from a checkout."""
    docs = Path(__file__).resolve().parents[4] / "docs" / "results.md"
    if not docs.is_file():
        return None
    return Path(os.path.relpath(docs, folder.resolve())).as_posix() + _ATLAS_ANCHOR


def _atlas_section(folder: Path) -> list[str]:
    """The cross-signal atlas in brief, with a link to its measurements."""
    link = _results_doc(folder)
    where = html.escape(ATLAS_SECTION)
    cited = f"<a href='{html.escape(link)}'>{where}</a>" if link else f"<code>{where}</code>"
    body = [[entry.signal, entry.answer, entry.margin, entry.section] for entry in ATLAS]
    caption = "Which encoding for which signal, as measured by the lab at small scale."
    table = (caption, ["signal", "encoding", "the numbers", "docs/results.md"], body)
    return [
        "<h2 id='atlas'>Which encoding for which signal</h2>",
        f"<p>This page answers it for text past its training length; the lab's other "
        f"experiments answer it for other signals. The measurements, figures and verdicts: "
        f"{cited} (the posenc repository).</p>",
        html_table(table, "config"),
    ]


def _sections(experiments: Sequence[ShowsRows]) -> dict[str, Section]:
    """The section of each kind of rows, in the order of ``experiments``; the first to claim
    a kind keeps it (``extend`` and ``longctx`` share one section of their rows)."""
    found: dict[str, Section] = {}
    for experiment in experiments:
        for kind, section in experiment.section_rows().items():
            found.setdefault(kind, section)
    return found


def write_report(
    run_dir: str | Path,
    *,
    title: str | None = None,
    runs: Sequence[str | Path] | None = None,
    experiments: Sequence[ShowsRows] = (),
) -> Path:
    """Write ``RUN_DIR/report.html`` (and ``RUN_DIR/figures/*.png``) from the runs' rows.

    ``runs``: the run folders the page gathers (:func:`posenc.lab.gather.gather`); ``None``
    = ``run_dir`` when it holds a ``results.csv`` and each sub-folder of it that holds one.
    ``experiments``: the experiments whose sections (:class:`Section`) the page shows, the
    first to claim a kind of rows keeping it (``posenc report`` passes the registry's,
    :data:`posenc.lab.experiments.EXPERIMENTS`); rows of a kind no section shows get a heading
    of their own name and their raw rows.

    Raises:
        ValueError: naming ``run_dir`` when it holds no run (no ``results.csv`` in it or its
            sub-folders), or naming ``runs`` when one of them holds no ``results.csv``.
    """
    folder = Path(run_dir)
    gathered = gather(folder, runs)
    if not gathered:
        raise ValueError(
            f"run_dir {folder} has no results.csv (nor a sub-folder holding one); run an "
            "experiment into it first"
        )
    folder.mkdir(parents=True, exist_ok=True)
    # a windowed or gated model's rows named apart from a plain one's (its ``schedule``)
    rows = labelled_rows([row for run in gathered for row in run.rows])
    # Kinds of rows with a section first, in the experiments' order, then any other kind's.
    sections = _sections(experiments)
    names = dict.fromkeys(str(row["experiment"]) for row in rows if row.get("experiment"))
    kinds = [name for name in sections if name in names]
    kinds += [name for name in names if name not in sections]
    selected = {name: [row for row in rows if row.get("experiment") == name] for name in names}

    def heading(name: str) -> str:
        return html.escape(sections[name].heading if name in sections else name)

    curves = {
        name if run.label == "." else f"{run.label}/{name}": records
        for run in gathered
        for name, records in _training_curves(run.path).items()
    }
    lead = _findings_section(rows, curves, sections)
    data = _data_section(gathered)
    atlas = _atlas_section(folder) if any(sections[n].atlas for n in kinds if n in sections) else []
    records = [record for run in gathered for record in run.claims]
    claims = claims_section(records)
    sources = _runs_section(gathered)
    links = ["tables", "figures", "configuration", "environment", "raw"]
    shown = [
        name
        for name, section in (
            ("findings", lead),
            ("data", data),
            ("atlas", atlas),
            ("claims", claims),
            ("runs", sources),
        )
        if section
    ]
    titles = {"raw": "raw rows", "data": "data and model", "atlas": "atlas"}
    nav = "".join(f"<a href='#{link}'>{titles.get(link, link)}</a>" for link in shown + links)
    page = [f"<h1>{html.escape(title or f'posenc run: {folder.name}')}</h1><nav>{nav}</nav>"]
    page += lead
    page += data
    page += atlas
    page += claims
    page += sources

    page.append("<h2 id='tables'>Tables</h2>")
    for name in kinds:
        tabulate = sections[name].tables if name in sections else None
        tables = tabulate(selected[name]) if tabulate is not None else []
        page.append(f"<h3>{heading(name)}</h3>")
        page += [html_table(table) for table in tables] or [
            "<p>No summary table for this experiment; its rows are under raw rows.</p>"
        ]

    page.append("<h2 id='figures'>Figures</h2>")
    figure_dir = folder / "figures"
    figure_dir.mkdir(exist_ok=True)
    for name in kinds:
        makers = sections[name].figures if name in sections else {}
        for filename, draw in makers.items():
            png = png_bytes(draw(selected[name]))
            (figure_dir / filename).write_bytes(png)
            page.append(png_figure(png, filename, f"{heading(name)} (figures/{filename})"))
    if curves:
        png = png_bytes(training_curves(curves))
        (figure_dir / "training_curves.png").write_bytes(png)
        page.append("<h3>Training curves</h3>")
        caption = f"{len(curves)} runs from runs/**/metrics.jsonl (figures/training_curves.png)"
        page.append(png_figure(png, "training_curves.png", caption))
    page += _checks_section(folder)

    page.append("<h2 id='configuration'>Configuration</h2>")
    for run in gathered:
        where = "config.json" if run.label == "." else f"{run.label}/config.json"
        if run.config is not None:
            table = (where, ["field", "value"], _config_rows(run.config))
            page.append(html_table(table, "config"))
        else:
            page.append(f"<p>No {html.escape(where)}.</p>")
    page.append("<h2 id='environment'>Environment</h2>")
    environment = ("Where this page was written.", ["package", "version"], _environment())
    page.append(html_table(environment, "config"))

    files = ", ".join(
        f"<code>{html.escape('' if run.label == '.' else run.label + '/')}results.csv</code>"
        for run in gathered
    )
    page.append(f"<h2 id='raw'>Raw rows</h2><p>{len(rows)} rows of {files}.</p>")
    page += [_raw_rows(name, selected[name]) for name in kinds]
    document = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title or folder.name)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(page)}</body></html>"
    )
    target = folder / "report.html"
    atomic_write_text(target, document)
    return target

"""``posenc report RUN_DIR``: the self-contained HTML page a person reads about a run.

The page, top to bottom:

0. what the numbers say, before any table: the findings in plain sentences with their margins
   over seeds, and whether training converged (:func:`posenc.lab.findings.findings`); the
   data and model of each run described in words (:func:`posenc.lab.findings.data_and_model`,
   the corpus as ``data.json`` records it); and, for a page of text-extrapolation rows, the
   cross-signal atlas in brief (:data:`posenc.lab.findings.ATLAS`) with a link to
   docs/results.md §9;
1. the claims (``claims.json``, judged by :mod:`posenc.lab.runner`): verdict, the measured
   mean ± std over seeds, the threshold and the paper's published number;
2. the tables: per kind of rows (their ``experiment`` column), the tables of the
   :class:`Section` one of the experiments the caller passes declares for them (pivots of
   :func:`posenc.lab.tables.pivot`: encoding × length, mean ± std over seeds);
3. the figures: the sections' result figures, the training curves of every
   ``runs/**/metrics.jsonl`` (:func:`posenc.lab.figures.training_curves`), and the
   property-check figures that ``posenc demo`` writes to ``RUN_DIR/checks/``;
4. the configuration (``config.json``) and the environment the page was written in;
5. the raw rows of ``results.csv``, collapsed.

A page may gather several runs (:mod:`posenc.lab.gather`): by default ``RUN_DIR`` itself and
each sub-folder holding a ``results.csv`` (``posenc demo``'s ``OUT`` and ``OUT/extension``),
or the run folders given as ``runs``. Their rows are pooled into the tables and figures,
their claims listed together, and a table of the runs says which folder holds each claim's
numbers; each run's configuration is shown under its folder's name.

Images are embedded as base64 PNG so the file stands alone; the result figures are also
written to ``RUN_DIR/figures/``. Tables wrap to the page width; only the raw rows scroll.

The page knows an experiment only as :class:`ShowsRows` (its sections by kind of rows): the
caller that knows the experiments passes them (the runner its own experiment, ``posenc report``
and the demo every experiment of the registry, :mod:`posenc.lab.experiments`), so this module
sits below the runner and the registry rather than reading them.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import platform
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from posenc.lab.claims import LEARNED_LOSS_FRACTION, is_fact
from posenc.lab.figures import training_curves
from posenc.lab.findings import ATLAS, ATLAS_SECTION, Reader, data_and_model, findings
from posenc.lab.gather import RunFolder, gather, labelled_rows
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


_STYLE = """
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

_MARKS = {
    "holds": "✔ holds",
    "fails": "✘ fails",
    "undecided": "? undecided",
    "undefined": "– undefined",
}
_URL = re.compile(r"https?://[^\s<>\"]+[^\s<>\".,;:)]")


# --- cells -----------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Escaped text with its URLs as links."""
    escaped = html.escape("" if value is None else str(value))
    return _URL.sub(lambda m: f'<a href="{m.group(0)}">{m.group(0)}</a>', escaped)


def _number(value: Any, spec: str = ".4g") -> str:
    """A number as text (not escaped); ``–`` for ``None`` and NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None else str(value)
    return "–" if math.isnan(value) else format(value, spec)


def _raw_cell(value: Any) -> str:
    text = _number(value) if isinstance(value, float) else ("" if value is None else str(value))
    return html.escape(text)


def _pivot_cell(text: str) -> str:
    """``"3.210 ± 0.050"`` as the mean and a lighter std, free to wrap between the two."""
    mean, sep, std = text.partition(" ± ")
    cell = f"<span class='num'>{html.escape(mean)}</span>"
    return cell + (f" <span class='std'>± {html.escape(std)}</span>" if sep else "")


def _html_table(table: Table, css: str = "pivot") -> str:
    """A pivot table (``css="pivot"``: cells are mean ± std) or a table of text."""
    caption, header, body = table
    cell = _pivot_cell if css == "pivot" else _text
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    lines = "".join(
        "<tr>" + "".join(f"<td>{cell(c)}</td>" for c in line) + "</tr>" for line in body
    )
    return (
        f"<table class='{css}'><caption>{html.escape(caption)}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{lines}</tbody></table>"
    )


# --- sections --------------------------------------------------------------------------------


def _weighed(r: Row) -> str:
    """``margin +0.0007 within noise 0.0843 over seeds``: what the verdict weighed; empty for
    records written before verdicts had a margin."""
    margin, noise = r.get("margin"), r.get("noise")
    if margin is None:
        return ""
    text = f"margin {margin:+.3g}"
    if noise is None:
        return f"{text}, noise unknown (one seed, no spread)"
    side = "within" if -noise <= margin < noise else "beyond"
    over = {"seeds": "over seeds", "windows": "over evaluation windows"}.get(
        str(r.get("spread")), ""
    )
    return f"{text} {side} noise {noise:.3g} {over}".rstrip()


def _claims_rows(records: Sequence[Row]) -> str:
    """The table body: verdict, claim and paper, measured (mean ± std over seeds, n, the margin
    and the noise it was weighed against), threshold, why (the reason and the control),
    published."""
    body = []
    for r in records:
        measured = html.escape(_number(r.get("value")))
        if r.get("value") is not None and r.get("std") is not None:
            measured += f" ± {html.escape(_number(r['std'], '.2g'))}"
        if r.get("seeds"):
            measured += f" ({r['seeds']} seed{'s' if r['seeds'] > 1 else ''})"
        if _weighed(r):
            measured += f"<br>{html.escape(_weighed(r))}"
        if r.get("detail"):
            measured += f"<br><small>{_text(r['detail'])}</small>"
        why = _text(r.get("reason") or "")
        if r.get("control"):
            why += f"<br><small>control: {_text(r['control'])}</small>"
        status = str(r.get("status"))
        cells = [
            f"<td class='verdict {html.escape(status)}'>{_MARKS.get(status, _text(status))}</td>",
            f"<td>{_text(r.get('text'))}<br><small>{_text(r.get('paper'))}</small></td>",
            f"<td>{measured}</td>",
            f"<td class='num'>{html.escape(str(r.get('direction', '')))} "
            f"{html.escape(_number(r.get('threshold'), 'g'))}</td>",
            f"<td>{why}</td>",
            f"<td>{_text(r.get('published'))}</td>",
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(
        f"<th>{name}</th>" for name in ("verdict", "claim", "measured", "needs", "why", "published")
    )
    return f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"


def _claims_section(records: Sequence[Row]) -> list[str]:
    """The claims, each with its verdict and why (:func:`_claims_rows`), counted without the
    facts; then the facts (true by definition) in their own small table, never counted."""
    if not records:
        return []
    claims = [r for r in records if not is_fact(r)]
    facts = [r for r in records if is_fact(r)]
    counts = {s: sum(r.get("status") == s for r in claims) for s in _MARKS}
    lines = [
        f"<h2 id='claims'>Claims: {counts['holds']} of {len(claims)} hold</h2>",
        f"<p>{counts['fails']} fail, {counts['undecided']} undecided, {counts['undefined']} "
        "undefined. The margin is how far the mean clears the threshold (positive: the claim's "
        "side); the noise is a one-sided 95 % bound on the mean's error, Student's t times "
        "the standard error over seeds, or with one seed 1.645 times that over evaluation "
        "windows. A claim holds when the margin is at least the noise, fails when it is below "
        "minus the noise, and is undecided in between or when one seed gives no spread; "
        "undefined when the rows cannot decide. Then two gates, said in the column why: a "
        "claim holds only if its control (NoPE or the baseline the paper names), run in the "
        "same experiment, fails the same test (a control that passes too, or was not run, "
        "leaves it undecided), and only if the models it reads learned their data (eval loss "
        f"at the training length at most {LEARNED_LOSS_FRACTION:g} of the context-free "
        "unigram loss). The paper's number is on the right.</p>",
    ]
    if claims:
        lines.append(f"<table class='claims'>{_claims_rows(claims)}</table>")
    if facts:
        lines += [
            f"<h3 id='facts'>Facts ({len(facts)}, true by definition, not counted above)</h3>",
            f"<table class='claims facts'>{_claims_rows(facts)}</table>",
        ]
    return lines


def _image(png: bytes, name: str, caption: str) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return (
        f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{encoded}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


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
    parts = [_image(p.read_bytes(), p.name, f"checks/{p.name}") for p in pngs]
    summary = checks / "checks.json"
    if summary.is_file():
        results = read_json(summary).get("checks", [])
        body = [
            [
                "✔" if r.get("passed") else "✘",
                str(r.get("name", "")),
                _number(r.get("value"), ".3g"),
                f"{r.get('direction', '')} {_number(r.get('bound'), 'g')}",
                str(r.get("detail", "")),
            ]
            for r in results
        ]
        passed = sum(bool(r.get("passed")) for r in results)
        caption = f"{passed} of {len(results)} property checks pass (checks/checks.json)."
        header = ["", "check", "measured", "needs", "detail"]
        parts.insert(0, _html_table((caption, header, body), "config"))
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
        "<tr>" + "".join(f"<td>{_raw_cell(row.get(c))}</td>" for c in columns) + "</tr>"
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
    return ["<h2 id='runs'>Runs</h2>", _html_table((caption, header, body), "config")]


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
                _html_table((caption, ["", "described"], [list(line) for line in lines]), "config")
            )
    return (["<h2 id='data'>Data and model</h2>", *parts]) if parts else []


#: docs/results.md's heading anchor of the atlas (GitHub's slug of "## 9. Which encoding ...")
_ATLAS_ANCHOR = "#9-which-encoding-for-which-signal-the-atlas-audio-video-vla-images-in-4-5"


def _results_doc(folder: Path) -> str | None:
    """A link from ``folder`` to docs/results.md when this code runs from a checkout."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "results.md"
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
        _html_table(table, "config"),
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
    claims = _claims_section(records)
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
        page += [_html_table(table) for table in tables] or [
            "<p>No summary table for this experiment; its rows are under raw rows.</p>"
        ]

    page.append("<h2 id='figures'>Figures</h2>")
    figure_dir = folder / "figures"
    figure_dir.mkdir(exist_ok=True)
    for name in kinds:
        makers = sections[name].figures if name in sections else {}
        for filename, draw in makers.items():
            png = _png(draw(selected[name]))
            (figure_dir / filename).write_bytes(png)
            page.append(_image(png, filename, f"{heading(name)} (figures/{filename})"))
    if curves:
        png = _png(training_curves(curves))
        (figure_dir / "training_curves.png").write_bytes(png)
        page.append("<h3>Training curves</h3>")
        caption = f"{len(curves)} runs from runs/**/metrics.jsonl (figures/training_curves.png)"
        page.append(_image(png, "training_curves.png", caption))
    page += _checks_section(folder)

    page.append("<h2 id='configuration'>Configuration</h2>")
    for run in gathered:
        where = "config.json" if run.label == "." else f"{run.label}/config.json"
        if run.config is not None:
            table = (where, ["field", "value"], _config_rows(run.config))
            page.append(_html_table(table, "config"))
        else:
            page.append(f"<p>No {html.escape(where)}.</p>")
    page.append("<h2 id='environment'>Environment</h2>")
    environment = ("Where this page was written.", ["package", "version"], _environment())
    page.append(_html_table(environment, "config"))

    files = ", ".join(
        f"<code>{html.escape('' if run.label == '.' else run.label + '/')}results.csv</code>"
        for run in gathered
    )
    page.append(f"<h2 id='raw'>Raw rows</h2><p>{len(rows)} rows of {files}.</p>")
    page += [_raw_rows(name, selected[name]) for name in kinds]
    document = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title or folder.name)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(page)}</body></html>"
    )
    target = folder / "report.html"
    atomic_write_text(target, document)
    return target

"""Several run folders read as one: what ``posenc report`` shows of a folder of runs.

A *run folder* is one that holds ``results.csv``; beside it the runner leaves ``claims.json``
(the verdicts), ``config.json`` (what ran) and ``runs/**/metrics.jsonl`` (training curves).
A report may cover several: ``posenc demo`` leaves the extrapolation run in ``OUT`` and the
context extension of its RoPE model in ``OUT/extension``, and one page shows both. By
default (:func:`find_runs`) a report gathers its folder, when it is a run, and each of its
immediate sub-folders that is one, so ``posenc report OUT`` on the demo's folder, or on a
folder of lab runs (``out/extrapolate``, ``out/extend``, ...), covers them all.

Gathered rows are pooled: rows of one experiment from two runs meet in the same tables
(several seeds run into several folders make one mean ± std); each claim stays with the run
that judged it (:attr:`RunFolder.claims`).

Example::

    for run in gather("out/demo"):
        print(run.label, len(run.rows), [c["status"] for c in run.claims])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.lab.results import read_results_csv
from posenc.lab.run import read_json

__all__ = [
    "LABELLED_COLUMNS",
    "RunFolder",
    "find_runs",
    "gather",
    "labelled_rows",
    "missing_column",
]

Row = dict[str, Any]


@dataclass(frozen=True)
class RunFolder:
    """One run of a report.

    Attributes:
        label: where it is: its path relative to the report's folder (``"."`` for the folder
            itself, ``"extension"`` for a sub-folder), or the path as given when outside it.
        path: the run folder.
        rows: its ``results.csv``.
        claims: its ``claims.json`` records (empty when it has none).
        config: its ``config.json`` (``None`` when it has none).
    """

    label: str
    path: Path
    rows: list[Row]
    claims: list[Row]
    config: dict[str, Any] | None

    @property
    def experiments(self) -> list[str]:
        """The ``experiment`` names of its rows, in order of first appearance."""
        return list(dict.fromkeys(str(r["experiment"]) for r in self.rows if r.get("experiment")))


def find_runs(folder: str | Path) -> list[Path]:
    """``folder`` if it holds ``results.csv``, then each immediate sub-folder that holds one,
    by name: the runs a report of ``folder`` gathers by default."""
    root = Path(folder)
    children = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [p for p in (root, *children) if (p / "results.csv").is_file()]


def _label(folder: Path, run: Path) -> str:
    try:
        return run.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:  # outside the report's folder
        return str(run)


def _read_json(path: Path) -> Any:
    return read_json(path) if path.is_file() else None


def gather(folder: str | Path, runs: Sequence[str | Path] | None = None) -> list[RunFolder]:
    """Read the runs of a report written in ``folder``: ``runs`` (run folders, anywhere) or,
    when ``None``, those :func:`find_runs` finds in ``folder``.

    Raises:
        ValueError: naming ``runs`` when one of them holds no ``results.csv`` or two are the
            same folder, or when it is given empty.
    """
    root = Path(folder)
    if runs is None:
        paths = find_runs(root)
    else:
        paths = [Path(run) for run in runs]
        if not paths:
            raise ValueError("runs must name at least one run folder (or be None: find them)")
        missing = [str(p) for p in paths if not (p / "results.csv").is_file()]
        if missing:
            raise ValueError(f"runs: {', '.join(missing)} hold no results.csv")
        resolved = [p.resolve() for p in paths]
        if len(set(resolved)) != len(resolved):
            raise ValueError(f"runs names one folder twice: {[str(p) for p in paths]}")
    gathered = []
    for path in paths:
        claims = _read_json(path / "claims.json")
        gathered.append(
            RunFolder(
                label=_label(root, path),
                path=path,
                rows=read_results_csv(path / "results.csv"),
                claims=list(claims) if isinstance(claims, list) else [],
                config=_read_json(path / "config.json"),
            )
        )
    return gathered


#: The columns naming what a row measured, which :func:`labelled_rows` extends with the model's
#: per-layer options.
LABELLED_COLUMNS = ("encoding", "method")


def labelled_rows(rows: Sequence[Row]) -> list[Row]:
    """``rows`` with each one's ``schedule`` (the model's per-layer options,
    :meth:`~posenc.lab.config.ModelArgs.label`) folded into its ``encoding`` or ``method``:
    ``"rope"`` of an RNoPE-SWA run reads ``"rope [rnope_swa+w64]"``, so the page's tables and
    figures never pool it with a plain RoPE run. Rows without a ``schedule`` are unchanged.

    Example::

        >>> labelled_rows([{"encoding": "rope", "schedule": "gate"}, {"encoding": "rope"}])
        [{'encoding': 'rope [gate]', 'schedule': 'gate'}, {'encoding': 'rope'}]
    """
    labelled = []
    for row in rows:
        schedule = row.get("schedule")
        if schedule:
            row = {
                key: f"{value} [{schedule}]" if key in LABELLED_COLUMNS else value
                for key, value in row.items()
            }
        labelled.append(row)
    return labelled


def missing_column(runs: Sequence[RunFolder], column: object) -> ValueError | None:
    """The error to raise when a report of ``runs`` asked their rows for ``column`` (a
    ``KeyError``) and some ``results.csv`` lacks it: naming those files and the column.
    ``None`` when every row has it (then the ``KeyError`` is no fault of the files).
    """
    if not isinstance(column, str):
        return None
    lacking = [
        str(run.path / "results.csv") for run in runs if any(column not in row for row in run.rows)
    ]
    if not lacking:
        return None
    return ValueError(
        f"{', '.join(lacking)}: missing column {column!r}, which the report's tables and "
        "figures of these rows need (a results file edited, or written by something else)"
    )

"""Result rows of lab experiments: one CSV per run folder, written atomically.

Every experiment produces rows (dicts) with an ``experiment`` column and its own fields;
:func:`write_results_csv` writes the union of columns, :func:`read_results_csv` reads them
back with numbers parsed, so reports and figures work from the file alone.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from posenc.lab.config import RunnerArgs, flat_record, sections
from posenc.lab.run import atomic_write_text, check_writable_folder, read_json

__all__ = [
    "check_out_dir",
    "merge_rows",
    "prepare_out_dir",
    "read_results_csv",
    "write_results_csv",
]

#: Config fields that only change how a run executes, not what it computes: the ``runner``
#: section's (:class:`~posenc.lab.config.RunnerArgs`).
EXECUTION_FIELDS = tuple(f.name for f in dataclasses.fields(RunnerArgs))

Row = dict[str, Any]


_HELD_LOCKS: dict[Path, Any] = {}


def _lock(folder: Path) -> None:
    """Hold an exclusive lock on ``folder/.lock`` until this process exits.

    Two processes writing one run folder would mix their checkpoints and results; the second
    gets a ``ValueError`` instead. The operating system releases the lock when the holder
    dies, so a killed run never leaves a stale lock. (No locking where ``fcntl`` is missing.)
    """
    key = folder.resolve()
    if key in _HELD_LOCKS:
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return
    handle = open(key / ".lock", "a+")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise ValueError(
            f"out folder {folder} is in use by another running experiment; wait for it or "
            "choose another folder"
        ) from None
    _HELD_LOCKS[key] = handle


def check_out_dir(out: str | Path, experiment: str, config: Any) -> None:
    """Refuse ``out`` when it holds runs of another configuration, or when it is a file or a
    folder this user cannot write (:func:`~posenc.lab.run.check_writable_folder`); read-only.

    ``config`` is the experiment's dataclass. A folder is bound to its ``config.json`` once a
    run has written a file under ``out/runs/``: then a ``config.json`` differing in a field
    other than :data:`EXECUTION_FIELDS` raises ``ValueError`` naming the folder and the field
    (a section's as ``'train.steps'``), so that a resumed command never mixes two
    experiments' results. A flat ``config.json`` (every field at the top, as configs without
    sections write it) is read with each field in its section
    (:func:`~posenc.lab.config.flat_record`). A folder whose runs hold no file computed
    nothing with its ``config.json`` (a start that failed before the first run wrote
    anything), so another configuration may take it over.
    """
    folder = check_writable_folder("out", out)
    saved = folder / "config.json"
    if not saved.is_file() or not _holds_runs(folder):
        return
    kind = type(config)
    current = flat_record(kind, _config_record(experiment, config))
    try:
        previous = flat_record(kind, read_json(saved))
    except ValueError as error:
        raise ValueError(
            f"{saved} is not a config of this experiment's layout ({error}); choose another folder"
        ) from None
    # a section field added after the folder was written reads as its default there
    previous = {**_section_defaults(kind), **previous}
    for key in sorted(set(previous) | set(current)):
        if key.rpartition(".")[2] in EXECUTION_FIELDS:
            continue
        if previous.get(key) != current.get(key):
            raise ValueError(
                f"out folder {folder} holds a run with a different {key!r} "
                f"({previous.get(key)!r} != {current.get(key)!r}); choose another folder"
            )


def prepare_out_dir(out: str | Path, experiment: str, config: Any) -> Path:
    """Create ``out``, lock it and write ``out/config.json``; refuse a folder holding runs of
    another configuration (:func:`check_out_dir`).

    The folder is locked for the life of this process (a second process gets a
    ``ValueError``). :func:`~posenc.lab.runner.run_experiment` calls this only after the
    config and the experiment's ``prepare`` passed, so a start that fails leaves no
    ``config.json`` behind.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    _lock(folder)
    check_out_dir(folder, experiment, config)
    atomic_write_text(
        folder / "config.json", json.dumps(_config_record(experiment, config), indent=2)
    )
    return folder


def _config_record(experiment: str, config: Any) -> dict[str, Any]:
    """What ``config.json`` holds: the experiment's name and the config's fields, as JSON
    reads them back (tuples become lists)."""
    record: dict[str, Any] = json.loads(
        json.dumps({"experiment": experiment, **dataclasses.asdict(config)})
    )
    return record


def _section_defaults(kind: type) -> dict[str, Any]:
    """The defaults of the fields of config class ``kind``'s sections as ``config.json``
    records them (``{"model.window": None, "model.nope_layers": [], ...}``): what a record
    written before a field existed means by leaving it out."""
    defaults: dict[str, Any] = {}
    for name, section in sections(kind).items():
        for f in dataclasses.fields(section):
            if f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            else:
                continue
            defaults[f"{name}.{f.name}"] = json.loads(json.dumps(value))
    return defaults


def _holds_runs(folder: Path) -> bool:
    """Whether a run wrote any file under ``folder/runs`` (stops at the first one)."""
    runs = folder / "runs"
    return runs.is_dir() and any(path.is_file() for path in runs.rglob("*"))


def write_results_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` to ``path`` (columns: union in first-seen order), atomically."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _format(row.get(key)) for key in columns})
    target = Path(path)
    atomic_write_text(target, buffer.getvalue())
    return target


def _format(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    return value


def _parse(text: str) -> Any:
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


#: The columns every results file has: which experiment's rows each row is.
REQUIRED_COLUMNS = ("experiment",)


def read_results_csv(path: str | Path) -> list[Row]:
    """Rows of a results CSV with numbers and booleans parsed (empty cells are ``None``).

    Raises:
        ValueError: naming the file when it lacks a column of :data:`REQUIRED_COLUMNS`
            (listing the missing ones and those it has), holds no rows (only a header, or
            nothing), or has a row with more cells than the header or no ``experiment``: a
            file edited or written by something else, which a report would otherwise show as
            if it were results.
    """
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        raw = list(reader)
        columns = list(reader.fieldnames or [])
    missing = [column for column in REQUIRED_COLUMNS if column not in columns]
    if missing:
        raise ValueError(
            f"{path} is not a results file of the lab: missing column(s) "
            f"{', '.join(missing)} (its columns: {', '.join(columns) or 'none'})"
        )
    if not raw:
        raise ValueError(f"{path} holds no rows (only a header): no results to read")
    for number, row in enumerate(raw, start=1):
        if None in row:  # DictReader's key for cells beyond the header
            raise ValueError(
                f"{path}, row {number}: more cells than the header's {len(columns)} columns"
            )
        if not row["experiment"]:
            raise ValueError(f"{path}, row {number}: no experiment")
    return [{k: _parse(v) for k, v in row.items()} for row in raw]


def merge_rows(existing: Iterable[Row], new: Iterable[Row], key: Sequence[str]) -> list[Row]:
    """Rows of ``existing`` replaced or extended by ``new``, matching on the ``key`` columns."""
    merged: dict[tuple[Any, ...], Row] = {}
    for row in [*existing, *new]:
        merged[tuple(row.get(k) for k in key)] = dict(row)
    return list(merged.values())

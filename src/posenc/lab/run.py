"""Run-folder input and output shared by the lab: atomic writes, the metrics log, config guards.

Every file of a run folder is written atomically (a temporary file in the same folder,
``fsync``, then ``os.replace``, then ``fsync`` of the folder), so a kill at any point leaves
the previous version readable and never a half-written one; the file gets the mode a plain
``open`` would give it (``0o666`` less the user's umask), not the temporary file's
owner-only one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import IO, Any

import torch

__all__ = [
    "MetricsLog",
    "as_json",
    "atomic_torch_save",
    "atomic_write_text",
    "check_run_dir",
    "check_writable_folder",
    "read_json",
    "read_metrics",
    "torch_threads",
]


def check_writable_folder(name: str, path: str | Path) -> Path:
    """``path`` as a folder this process can write in: an existing folder, or one that can be
    created (the nearest existing folder above it is one, and writable); creates nothing.

    Raises:
        ValueError: naming ``name`` (the option or argument) when ``path``, or a part of it,
            is a file, or when the folder it would be written in does not let this user write.
    """
    folder = Path(path)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        inside = "" if existing == folder else f", so {folder} cannot be a folder"
        raise ValueError(f"{name}: {existing} is a file, not a folder{inside}; give a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(
            f"{name}: cannot write in {existing} (permission denied); give a folder you can "
            "write in"
        )
    return folder


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not supported on every platform / file system
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``os.umask`` alone
    sets it: reading it that way briefly changes it for every thread)."""
    with (
        contextlib.suppress(OSError, ValueError),
        open("/proc/self/status", encoding="ascii") as status,
    ):
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_write(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file owner-only (0o600); give it the mode open() would give
        # (0o666 less the umask), as figures written by open() have
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return target


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file and ``os.replace``."""
    return _atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_torch_save(obj: object, path: str | Path) -> Path:
    """``torch.save(obj, path)`` via a temporary file: ``path`` is never half-written."""
    return _atomic_write(path, lambda handle: torch.save(obj, handle))


def read_json(path: str | Path) -> Any:
    """The JSON document in ``path``: what every JSON file of a run folder is read through, so
    that a file cut short or edited by hand is refused naming it.

    Raises:
        ValueError: naming ``path`` and where its JSON breaks off (a truncated or edited
            file: restore it, or delete it to have the runner compute it again).
        FileNotFoundError: when there is no such file.
    """
    target = Path(path)
    text = target.read_bytes()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{target} is not valid JSON ({error.msg}: line {error.lineno} column "
            f"{error.colno}): the file was cut short or edited; restore it, or delete it so "
            "that it is computed again"
        ) from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{target} is not valid JSON (not UTF-8 text: {error.reason})") from None


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl`` (a torn last line, from a kill, is skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def as_json(obj: object) -> Any:
    """Plain JSON data (dataclasses as dicts, unknown objects as repr)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        obj = asdict(obj)
    return json.loads(json.dumps(obj, sort_keys=True, default=repr))


def _first_difference(old: Any, new: Any, prefix: str = "") -> str | None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            found = _first_difference(old.get(key), new.get(key), f"{prefix}{key}.")
            if found:
                return found
        return None
    return None if old == new else f"{prefix.rstrip('.')}: {old!r} there, {new!r} now"


class MetricsLog:
    """Append-only metrics.jsonl written by rank 0 (no-op on other ranks)."""

    def __init__(self, path: Path, active: bool) -> None:
        self.path, self.active = path, active

    def truncate(self, step: int) -> None:
        """Keep the records at or before ``step`` (rewritten atomically if anything drops)."""
        if not self.active or not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = []
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                if json.loads(line)["step"] <= step:
                    kept.append(line)
        if kept != lines:
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def append(self, record: dict[str, Any]) -> None:
        if self.active:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    def sync(self) -> None:
        if self.active and self.path.exists():
            with self.path.open("rb+") as handle:
                os.fsync(handle.fileno())


#: Fields the recorded configs gained after run folders were written without them, each with
#: the value such a run had in effect: a folder that lacks one resumes rather than reading as
#: another experiment (``ModelConfig``'s image fields, which a text model never reads).
ADDED_FIELDS: dict[tuple[str, str], Any] = {
    ("model", "grid"): None,
    ("model", "patch_size"): None,
    ("model", "in_channels"): 3,
}


def _with_added_fields(stored: Any, expected: dict[str, Any]) -> Any:
    """``stored`` with each :data:`ADDED_FIELDS` entry it lacks filled in where ``expected``
    has that field at that value (a copy)."""
    if not isinstance(stored, dict):
        return stored
    filled = dict(stored)
    for (section, name), value in ADDED_FIELDS.items():
        inner, now = filled.get(section), expected.get(section)
        if (
            isinstance(inner, dict)
            and isinstance(now, dict)
            and name not in inner
            and name in now
            and now[name] == value
        ):
            filled[section] = {**inner, name: value}
    return filled


def check_run_dir(run_dir: Path, expected: dict[str, Any]) -> None:
    """Refuse ``run_dir`` when its ``config.json`` records another experiment than
    ``expected`` (a config written before :data:`ADDED_FIELDS` existed still matches)."""
    path = run_dir / "config.json"
    if path.exists():
        stored = _with_added_fields(read_json(path), expected)
        difference = _first_difference(stored, expected)
        if difference is not None:
            raise ValueError(
                f"run_dir {str(run_dir)!r} holds a different experiment ({difference}); "
                "use another run_dir or delete this one"
            )


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads (``None``: unchanged), then restore.

    Small models on a shared 2-core machine run far faster on one thread; every experiment
    takes a ``threads`` setting and applies it through this.
    """
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)

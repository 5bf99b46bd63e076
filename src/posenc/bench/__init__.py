"""Side-by-side benchmarks: ``posenc bench SUITE`` (scripts in ``benchmarks/`` call these too).

Rules every suite follows: one torch thread unless it says otherwise; candidates run in
interleaved rounds (the order rotates each round) so that drift of a shared machine hits all
alike; each candidate's figure is the median over rounds of its time divided by the
baseline's time in the same round; the machine and versions are printed with the results.
Memory is the peak resident-set growth of a fresh process (:func:`peak_memory`).
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posenc.bench.targets import Target, annotate, unmeasured

__all__ = [
    "Timing",
    "compare",
    "format_suites",
    "format_table",
    "machine",
    "peak_memory",
    "run_suites",
]


@dataclass(frozen=True)
class Timing:
    """One candidate: median seconds per call and median ratio to the baseline."""

    name: str
    seconds: float
    ratio: float
    rounds: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "ratio": self.ratio,
            "rounds": self.rounds,
        }


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    try:  # the fast extra's kernels (posenc.rotary.kernels) depend on it
        from importlib.metadata import version

        info["numba"] = version("numba")
    except Exception:  # PackageNotFoundError: not installed
        pass
    return info


Suite = Callable[[], list[dict[str, Any]]]


def run_suites(
    suites: Mapping[str, Suite], chosen: list[str] | None, *, threads: int | None = None
) -> dict[str, Any]:
    """Run the ``chosen`` suites (all by default) at ``threads`` torch threads (``None``:
    the suites set their own) and return ``{"machine": machine(), suite: rows}``; torch's
    thread count is restored afterwards."""
    names = chosen or list(suites)
    unknown = sorted(set(names) - set(suites))
    if unknown:
        raise ValueError(f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(suites)}")
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(f"threads must be a positive integer (>= 1) or None, got {threads!r}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        result: dict[str, Any] = {"machine": machine()}
        for name in names:
            result[name] = suites[name]()
        return result
    finally:
        torch.set_num_threads(previous)


def format_suites(
    result: dict[str, Any],
    columns: Mapping[str, list[tuple[str, str, str]]],
    *,
    bench: str | None = None,
    targets: Sequence[Target] = (),
) -> str:
    """The machine line of a :func:`run_suites` result, then one table per suite.

    A suite with rows that measure one of ``targets`` (those of ``posenc bench`` ``bench``,
    :mod:`posenc.bench.targets`) gets a last column, ``target``: each such row's figure, goal
    and met or missed; the other suites print as they would without targets. A target of a
    suite that no row measures is named under its table."""
    info = result["machine"]
    head = (
        f"{info['cpu']}, {info['cores']} cores, torch {info['torch']}, python {info['python']}, "
        f"{info['threads']} thread(s)"
    )
    if "numba" in info:
        head += f", numba {info['numba']}"
    lines = [head]
    for suite, rows in result.items():
        if suite == "machine":
            continue
        suite_columns, missing = columns[suite], []
        if bench is not None:
            cells = annotate(rows, bench, suite, targets)
            if any(cells):
                rows = [{**row, "target": cell} for row, cell in zip(rows, cells, strict=True)]
                suite_columns = [*suite_columns, ("target", "target", "")]
            missing = unmeasured(rows, bench, suite, targets)
        lines += ["", f"## {suite}", format_table(rows, suite_columns), *missing]
    return "\n".join(lines)


def compare(
    candidates: Mapping[str, Callable[[], object]],
    baseline: str,
    *,
    rounds: int = 5,
    warmup: int = 1,
) -> list[Timing]:
    """Time each candidate in interleaved rounds; ratios are to ``baseline`` per round.

    Args:
        candidates: name → a call that does one unit of work (the baseline among them).
        baseline: the name whose time divides the others' in each round.
        rounds: timed rounds (the order of candidates rotates by one each round).
        warmup: untimed calls of each candidate first.
    """
    if baseline not in candidates:
        raise ValueError(f"baseline {baseline!r} is not among the candidates")
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            start = time.perf_counter()
            candidates[name]()
            times[name].append(time.perf_counter() - start)
    base = times[baseline]
    return [
        Timing(
            name,
            statistics.median(times[name]),
            statistics.median(t / b for t, b in zip(times[name], base, strict=True)),
            rounds,
        )
        for name in names
    ]


def _peak_worker(target: Callable[..., Any], args: tuple[Any, ...], queue: Any) -> None:
    try:
        queue.put(("ok", target(*args)))
    except BaseException as error:  # report, never hang the parent
        queue.put(("error", f"{type(error).__name__}: {error}"))


def peak_memory(target: Callable[..., Any], *args: Any, timeout: float = 3600.0) -> Any:
    """Run ``target(*args)`` in a fresh (spawned) process and return its result.

    ``target`` measures itself with :func:`rss_peak_bytes` before and after the work, so a
    fresh process keeps one measurement's peak from hiding another's. Raises
    ``RuntimeError`` with the child's error message if it failed.
    """
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_peak_worker, args=(target, args, queue))
    process.start()
    try:
        status, value = queue.get(timeout=timeout)
    finally:
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
    if status != "ok":
        raise RuntimeError(value)
    return value


def rss_peak_bytes() -> int:
    """Peak resident set size of this process so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def format_table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """A plain-text table: ``columns`` are ``(key, header, format)``."""
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        cells.append(
            [
                "-" if row.get(key) is None else format(row[key], fmt) if fmt else str(row[key])
                for key, _, fmt in columns
            ]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Timing", "compare", "format_table", "machine", "peak_memory"]


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
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


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

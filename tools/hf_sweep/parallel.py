"""The sweep's families checked in worker processes, each family on its own deadline.

:func:`run_parallel` hands one family at a time to ``jobs`` worker processes. The workers are
forked from a fork server that imported the modules they need once (the sweep's: its own and
``transformers``' modeling code; spawned workers import them each, where there is no fork
server). Each worker sets one torch thread and checks family after family, with
``torch.manual_seed(0)`` before each as the serial sweep does, so that a family's result does
not depend on which worker ran it or what ran before. The results come back in the order of
``families``. A check that raises is recorded for its family; a worker that dies (a crash in
native code, out of memory) or runs one family past ``timeout`` seconds is ended, its family
recorded with the reason (``could not build`` in the sweep) and a fresh worker takes the next
family: no family is lost.

Plain :mod:`multiprocessing` rather than :mod:`concurrent.futures`: a process pool can neither
end the one worker that hangs nor say which family a dead worker held (it breaks the whole
pool), and both are what this runner is for.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import TypeVar

import torch

__all__ = ["run_parallel"]

R = TypeVar("R")


def _serve(
    conn: Connection,
    check: Callable[[str, torch.dtype], R],
    dtype: torch.dtype,
    preload: Sequence[str],
) -> None:
    """A worker: one torch thread, the ``preload`` modules (already there when the fork server
    imported them), then for each family received (until ``None``) ``(result, None,
    seconds)``, or ``(None, error, seconds)`` when the check raised."""
    torch.set_num_threads(1)
    for name in preload:
        importlib.import_module(name)
    conn.send("ready")
    while (family := conn.recv()) is not None:
        torch.manual_seed(0)
        start = time.perf_counter()
        try:
            result = check(family, dtype)
        except Exception as err:  # a bug of the check: recorded for the family, worker lives
            text = re.sub(r"\s+", " ", f"{type(err).__name__}: {err}")[:300]
            conn.send((None, text, time.perf_counter() - start))
        else:
            conn.send((result, None, time.perf_counter() - start))


def _context(preload: Sequence[str]) -> SpawnContext | ForkServerContext:
    """Workers forked from a fresh fork server that imported ``preload`` once (a process that
    ran no torch threads: safe to fork), else spawned (where there is no fork server)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))  # used by a server not started yet
    return context


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    family: str | None = None  # the family it checks; None while it starts
    started: float = 0.0  # when it was given ``family`` (perf_counter)


def run_parallel(
    families: Sequence[str],
    check: Callable[[str, torch.dtype], R],
    failed: Callable[[str, str], R],
    *,
    jobs: int,
    timeout: float,
    dtype: torch.dtype = torch.float32,
    preload: Sequence[str] = (),
    on_result: Callable[[int, R, float], None] | None = None,
) -> list[R]:
    """``check(family, dtype)`` for each of ``families`` in ``jobs`` worker processes.

    Args:
        families: the families, in the order of the results (no repeats).
        check: a module-level function (the workers are spawned: they import it by name).
        failed: the result of a family whose check raised, whose worker died or ran past
            ``timeout``, given the reason.
        jobs: worker processes (at most one per family).
        timeout: seconds one family may take in its worker before the worker is ended.
        dtype: passed to ``check``.
        preload: modules every worker needs, imported before its first family (not in a
            family's time or ``timeout``): once in the fork server that forks the workers,
            where there is one and it is not running yet, else in each worker.
        on_result: called as each family finishes, with its index in ``families``, its result
            and the seconds it took.

    Returns:
        The results, in the order of ``families``.

    Raises:
        ValueError: ``jobs`` < 1, ``timeout`` ≤ 0 or a family repeated.
        RuntimeError: a worker died before it took a family (its imports failed).
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    index = {family: i for i, family in enumerate(families)}
    if len(index) != len(families):
        raise ValueError(f"families must not repeat, got {list(families)}")
    context = _context(preload)
    todo = list(reversed(families))  # popped from the end: in the order given
    results: dict[int, R] = {}

    def start() -> _Worker:
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve, args=(child, check, dtype, tuple(preload)), daemon=True
        )
        process.start()
        child.close()
        return _Worker(process, parent)

    def record(family: str, result: R, seconds: float) -> None:
        results[index[family]] = result
        if on_result is not None:
            on_result(index[family], result, seconds)

    def give(worker: _Worker) -> _Worker | None:
        """The next family to ``worker``; None (the worker stopped) when none is left."""
        worker.family = todo.pop() if todo else None
        worker.started = time.perf_counter()
        # a broken pipe: it died, which its exit code says at the next step
        with contextlib.suppress(BrokenPipeError):
            worker.conn.send(worker.family)
        if worker.family is None:
            worker.process.join(timeout=10)
            return None
        return worker

    def replace(worker: _Worker, reason: str) -> _Worker:
        """Record the worker's family as failed, end the worker and start a fresh one."""
        assert worker.family is not None
        seconds = time.perf_counter() - worker.started
        worker.process.kill()
        worker.process.join()
        worker.conn.close()
        record(worker.family, failed(worker.family, reason), seconds)
        return start()

    def step(worker: _Worker) -> _Worker | None:
        """What became of ``worker`` since the last wait: itself, a fresh one, or None."""
        message = None
        # EOF: it died, which its exit code below says
        with contextlib.suppress(EOFError):
            if worker.conn.poll():
                message = worker.conn.recv()
        if message is not None:
            if worker.family is not None:  # else: "ready"
                result, error, seconds = message
                if error is not None:
                    result = failed(worker.family, f"check raised {error}")
                record(worker.family, result, seconds)
            return give(worker)
        if not worker.process.is_alive():
            code = worker.process.exitcode
            if worker.family is None:
                raise RuntimeError(f"a sweep worker died while starting (exit code {code})")
            return replace(worker, f"worker died (exit code {code})")
        if worker.family is not None and time.perf_counter() - worker.started > timeout:
            return replace(worker, f"timed out after {timeout:g} s")
        return worker

    workers = [start() for _ in range(min(jobs, len(families)))]
    try:
        while workers:
            deadlines = [w.started + timeout for w in workers if w.family is not None]
            left = min(deadlines) - time.perf_counter() if deadlines else None
            wait(
                [w.conn for w in workers] + [w.process.sentinel for w in workers],
                timeout=None if left is None else max(0.0, left),
            )
            workers = [w for w in map(step, workers) if w is not None]
    finally:
        for worker in workers:
            worker.process.kill()
            worker.process.join()
    return [results[i] for i in range(len(families))]

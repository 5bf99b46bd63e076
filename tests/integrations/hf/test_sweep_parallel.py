"""The sweep's parallel runner (tools/hf_sweep/parallel.py) on stand-in checks, without
transformers: results in the order given, and a family whose check crashes its worker, hangs
or raises is recorded with the reason, never lost. (That the parallel sweep gives the serial
results on real families: test_sweep.py.)"""

from __future__ import annotations

import os
import time

import pytest
import torch

from tools.hf_sweep.parallel import run_parallel


def misbehave(family: str, dtype: torch.dtype) -> tuple[str, str]:
    """A check (module level: spawned workers import it by name): "crash" ends its worker,
    "hang" never returns, "raise" raises; any other family is fine."""
    if family == "crash":
        os._exit(3)
    if family == "hang":
        time.sleep(600)
    if family == "raise":
        raise RuntimeError("boom")
    return family, f"ok in {dtype}"


def failed(family: str, reason: str) -> tuple[str, str]:
    return family, reason


def test_a_family_that_crashes_hangs_or_raises_is_recorded_in_order() -> None:
    families = ["a", "crash", "b", "hang", "c", "raise", "d"]
    seen: list[int] = []
    results = run_parallel(
        families,
        misbehave,
        failed,
        jobs=2,
        timeout=2.0,
        dtype=torch.float64,
        on_result=lambda i, result, seconds: seen.append(i),
    )
    assert results == [
        ("a", "ok in torch.float64"),
        ("crash", "worker died (exit code 3)"),
        ("b", "ok in torch.float64"),
        ("hang", "timed out after 2 s"),
        ("c", "ok in torch.float64"),
        ("raise", "check raised RuntimeError: boom"),
        ("d", "ok in torch.float64"),
    ]
    assert sorted(seen) == list(range(len(families)))


@pytest.mark.parametrize(
    ("jobs", "timeout", "families", "message"),
    [
        (0, 1.0, ["a"], "jobs must be >= 1, got 0"),
        (2, 0.0, ["a"], "timeout must be > 0 seconds, got 0.0"),
        (2, 1.0, ["a", "a"], "families must not repeat"),
    ],
)
def test_bad_arguments_are_refused(
    jobs: int, timeout: float, families: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run_parallel(families, misbehave, failed, jobs=jobs, timeout=timeout)

"""``posenc check``'s sequence checks: how they run (the numbers are asserted in test_cli)."""

from __future__ import annotations

import pytest
import torch

import posenc.checks.encodings as checks


def test_checks_run_on_one_thread_and_restore_the_thread_count(monkeypatch) -> None:
    seen: list[int] = []

    def record(name: str) -> checks.CheckResult:
        seen.append(torch.get_num_threads())
        raise RuntimeError("stop")  # the kv-cache rows come after the cheap ones

    monkeypatch.setattr(checks, "_kv_cache", record)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="stop"):
            checks.run_checks()
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)

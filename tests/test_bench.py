"""posenc.bench's shared runner: suite selection, thread restore, the printed tables."""

from __future__ import annotations

import pytest
import torch

from posenc.bench import format_suites, run_suites


def test_run_suites_runs_the_chosen_and_restores_threads() -> None:
    seen: list[int] = []

    def suite_a() -> list[dict]:
        seen.append(torch.get_num_threads())
        return [{"name": "x", "ratio": 1.5}]

    suites = {"a": suite_a, "b": lambda: [{"name": "never", "ratio": 0.0}]}
    before = torch.get_num_threads()
    result = run_suites(suites, ["a"], threads=1)
    assert seen == [1]
    assert set(result) == {"machine", "a"}
    assert torch.get_num_threads() == before
    text = format_suites(result, {"a": [("name", "case", ""), ("ratio", "× base", ".2f")]})
    assert text.splitlines()[2:] == ["## a", "case  × base", "----  ------", "x     1.50  "]


def test_run_suites_names_unknown_suites() -> None:
    with pytest.raises(ValueError, match=r"unknown suite.*nope.*choose from a"):
        run_suites({"a": list}, ["nope"])


def test_relative_suite_times_every_method_in_both_modes_against_the_bare_module() -> None:
    from posenc.bench.attention import RELATIVE, relative

    rows = relative(seq=16, heads=2, head_dim=8, rounds=1)
    names = ("bare SDPA module", *RELATIVE)
    assert [(r["mode"], r["name"]) for r in rows] == [
        (mode, name) for mode in ("forward", "train step") for name in names
    ]
    assert all(r["ratio"] == 1.0 for r in rows if r["name"] == "bare SDPA module")
    assert all(r["seconds"] > 0 for r in rows)


def test_longctx_suites_time_every_method_against_their_baselines() -> None:
    from posenc.bench.longctx import METHODS, decode, forward

    rows = forward(seq=32, heads=2, head_dim=8, rounds=1)
    assert [r["name"] for r in rows] == ["rope", *METHODS]
    assert rows[0]["ratio"] == 1.0 and all(r["seq"] == 32 for r in rows)
    steps = decode(cache_len=16, heads=2, head_dim=8, layers=2, rounds=1)
    assert [r["name"] for r in steps] == [
        "rope, rotated cache",
        "rope, unrotated cache",
        "rope, unrotated, frequencies changed",
        "self_extend",
        "dual_chunk",
    ]
    assert steps[0]["ratio"] == 1.0


def test_linear_suite_times_linear_against_softmax_at_each_length() -> None:
    from posenc.bench.linear import forward

    rows = forward(seqs=(16, 32), heads=2, head_dim=8, rounds=1)
    assert [(r["seq"], r["name"]) for r in rows] == [
        (seq, name) for seq in (16, 32) for name in ("softmax rope", "linear rope")
    ]
    assert all(r["ratio"] == 1.0 for r in rows if r["name"] == "softmax rope")
    assert all(r["seconds"] > 0 for r in rows)

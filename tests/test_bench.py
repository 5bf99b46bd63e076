"""posenc.bench's shared runner: suite selection, thread restore, the printed tables."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.bench import format_suites, run_suites
from posenc.bench.targets import TARGETS, Target, annotate, evaluate, unmeasured


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


# --- targets: posenc.bench.targets ----------------------------------------------------------


def _target(**changes: object) -> Target:
    fields: dict[str, Any] = {
        "name": "t",
        "measures": "something",
        "comparison": "<=",
        "goal": 1.1,
        "unit": "×",
        "label": "clone",
        "command": "posenc bench rope",
        "bench": "rope",
        "suite": "forward",
        "match": {"name": "fast"},
    }
    fields.update(changes)
    return Target(**fields)


def test_target_prints_figure_goal_and_verdict() -> None:
    assert _target().describe(1.25) == "1.25× clone  (goal ≤ 1.1×: missed)"
    assert _target().describe(1.04) == "1.04× clone  (goal ≤ 1.1×: met)"
    memory = _target(comparison="<", goal=1, unit=" GiB", label="")
    assert memory.describe(1.01) == "1.01 GiB  (goal < 1 GiB: missed)"
    assert memory.describe(0.393) == "0.39 GiB  (goal < 1 GiB: met)"


@pytest.mark.parametrize(
    ("comparison", "figure", "met"),
    [
        ("<=", 0.8, True),
        ("<=", 0.8000001, False),
        ("<", 0.8, False),
        ("<", 0.7999999, True),
        (">=", 0.8, True),
        (">=", 0.7999999, False),
        (">", 0.8, False),
        (">", 0.8000001, True),
        ("<=", float("nan"), False),
        ("<=", float("-inf"), False),
        (">=", float("inf"), False),
    ],
)
def test_target_met_at_and_around_the_goal(comparison: str, figure: float, met: bool) -> None:
    assert _target(comparison=comparison, goal=0.8).met(figure) is met


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"comparison": "=="}, r"comparison must be one of <=, <, >=, >, got '=='"),
        ({"goal": 0}, r"goal must be a finite number > 0, got 0"),
        ({"goal": float("inf")}, r"goal must be a finite number > 0"),
        ({"goal": True}, r"goal must be a finite number > 0, got True"),
        ({"suite": None}, r"bench and suite must be given together"),
        ({"match": {}}, r"needs match fields"),
        ({"faster": True}, r"faster=True needs a baseline row"),
    ],
)
def test_target_refuses_bad_fields(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _target(**changes)


def test_target_met_refuses_a_non_number() -> None:
    with pytest.raises(TypeError, match="figure must be a real number, got str"):
        _target().met("1.0")  # type: ignore[arg-type]


def _rope_rows() -> list[dict[str, Any]]:
    rows = []
    for threads, scale in ((1, 1.0), (2, 2.0)):
        for dtype in ("float32", "bfloat16"):
            for name, ratio in (
                ("copy_ floor", 1.0),
                ("clone", 5.0),
                ("HF end to end", 30.0),
                ("numba q+k inplace", 0.75),
                ("RotaryEmbedding.forward (auto)", 6.25),
                ("attention step (auto)", 1.5),
            ):
                ratio = ratio if name == "copy_ floor" else ratio * scale
                rows.append({"threads": threads, "dtype": dtype, "name": name, "ratio": ratio})
    return rows


def test_annotate_maps_each_rope_target_to_its_row_and_group() -> None:
    rows = _rope_rows()
    cells = dict(
        ((row["threads"], row["dtype"], row["name"]), cell)
        for row, cell in zip(rows, annotate(rows, "rope", "forward", TARGETS), strict=True)
    )
    assert cells[(1, "float32", "numba q+k inplace")] == "0.75× copy_ floor  (goal ≤ 0.8×: met)"
    assert cells[(2, "float32", "numba q+k inplace")] == (
        "1.50× copy_ floor  (goal ≤ 0.8×: missed)"
    )
    # Ratios to clone of the same threads and dtype (12.5 / 10 at two threads).
    assert cells[(2, "float32", "RotaryEmbedding.forward (auto)")] == (
        "1.25× clone  (goal ≤ 1.1×: missed)"
    )
    assert cells[(1, "bfloat16", "RotaryEmbedding.forward (auto)")] == (
        "1.25× bf16 clone  (goal ≤ 1.2×: missed)"
    )
    assert cells[(1, "float32", "attention step (auto)")] == (
        "20.00× faster than HF  (goal ≥ 15×: met)"
    )
    # No target: bf16's in place and HF step, the floor, clone, HF.
    assert cells[(1, "bfloat16", "numba q+k inplace")] == ""
    assert cells[(1, "bfloat16", "attention step (auto)")] == ""
    assert all(cells[(t, d, n)] == "" for t, d, n in cells if n in ("copy_ floor", "clone"))
    # The same rows under another bench or suite measure nothing.
    assert set(annotate(rows, "attention", "forward", TARGETS)) == {""}
    assert set(annotate(rows, "rope", "backward", TARGETS)) == {""}


def test_annotate_says_when_a_target_row_has_no_figure() -> None:
    rows = [{"name": "RotaryEmbedding.forward (auto)", "dtype": "float32", "ratio": 6.0}]
    assert annotate(rows, "rope", "forward", TARGETS) == ["no figure  (goal ≤ 1.1×)"]


def test_format_suites_adds_the_target_column_only_where_a_row_has_a_target() -> None:
    result = {
        "machine": {"cpu": "cpu", "cores": 2, "torch": "2", "python": "3", "threads": 1},
        "lm": [
            {"name": "nope", "tokens_per_s": 1000.0, "vs_nope": 1.0},
            {"name": "shaw", "tokens_per_s": 670.0, "vs_nope": 0.67},
            {"name": "t5", "tokens_per_s": 910.0, "vs_nope": 0.91},
        ],
        "module": [{"name": "nope", "seconds": 0.5, "ratio": 1.25}],
    }
    columns = {
        "lm": [("name", "encoding", ""), ("vs_nope", "× NoPE", ".2f")],
        "module": [("name", "module", ""), ("ratio", "× bare", ".2f")],
    }
    text = format_suites(result, columns, bench="attention", targets=TARGETS)
    plain = format_suites(result, columns)
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[2:8] == [
        "## lm",
        "encoding  × NoPE  target",
        "--------  ------  " + "-" * len("0.67× NoPE tokens/s  (goal ≥ 0.85×: missed)"),
        "nope      1.00",
        "shaw      0.67    0.67× NoPE tokens/s  (goal ≥ 0.85×: missed)",
        "t5        0.91    0.91× NoPE tokens/s  (goal ≥ 0.9×: met)",
    ]
    # A suite without a target prints as it does without targets.
    assert text.split("## module")[1] == plain.split("## module")[1]
    assert plain.splitlines()[3] == "encoding  × NoPE"


def test_a_target_no_row_measures_is_named_under_its_table() -> None:
    result: dict[str, Any] = {
        "machine": {"cpu": "cpu", "cores": 2, "torch": "2", "python": "3", "threads": 1},
        "lm": [
            {"name": "nope", "vs_nope": 1.0},
            {"name": "t5", "vs_nope": 0.95},
        ],
    }
    text = format_suites(
        result, {"lm": [("name", "encoding", "")]}, bench="attention", targets=TARGETS
    )
    assert text.splitlines()[-2:] == [
        "lm-shaw (goal ≥ 0.85×): not measured, no row with name='shaw'",
        "lm-xl (goal ≥ 0.85×): not measured, no row with name='xl'",
    ]
    assert unmeasured(result["lm"], "rope", "lm", TARGETS) == []


def test_evaluate_lists_each_measured_target_for_json() -> None:
    result = {
        "machine": {},
        "rope_like": [],
        "memory": [
            {"encoding": "t5", "seq": 16384, "backend": "auto", "peak_gib": 0.08},
            {"encoding": "t5", "seq": 65536, "backend": "auto", "peak_gib": 1.01},
        ],
        "lm": [{"name": "xl", "tokens_per_s": 630.0, "vs_nope": 0.63}],
    }
    assert evaluate(result, "attention", TARGETS) == [
        {
            "target": "lm-xl",
            "goal": "≥ 0.85×",
            "figure": 0.63,
            "met": False,
            "row": {"name": "xl"},
        },
        {
            "target": "t5-memory-64k",
            "goal": "< 1 GiB",
            "figure": 1.01,
            "met": False,
            "row": {"encoding": "t5", "seq": 65536},
        },
    ]
    assert evaluate(result, "rope", TARGETS) == []


def test_targets_name_real_suites_and_unique_names() -> None:
    from posenc.bench import attention, rope
    from posenc.cli import BENCH_SUITES

    names = [target.name for target in TARGETS]
    assert len(names) == len(set(names))
    modules = {"rope": rope.SUITES, "attention": attention.SUITES}
    for target in TARGETS:
        if target.bench is not None:
            assert target.suite in modules[target.bench]
            assert target.suite in BENCH_SUITES[target.bench]
            assert target.command.startswith(f"posenc bench {target.bench} --only {target.suite}")
    lm_names = inspect.signature(attention.lm).parameters["names"].default
    assert {"shaw", "xl", "t5"} <= set(lm_names)
    assert 65536 in inspect.signature(attention.memory).parameters["lengths"].default


def _goals_table() -> list[list[str]]:
    text = (Path(__file__).parents[1] / "docs" / "performance.md").read_text()
    section = text.split("\n## Goals\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "| target | goal | latest figure | taken | command | met |"
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows[1:]]


def test_performance_doc_goals_table_matches_targets() -> None:
    rows = _goals_table()
    assert [row[0] for row in rows] == [target.measures for target in TARGETS]
    for row, target in zip(rows, TARGETS, strict=True):
        _, goal, figure, _, command, verdict = row
        assert goal == target.goal_text, target.name
        assert command.strip("`") == target.command, target.name
        if figure == "not measured":
            assert verdict == "not measured", target.name
            continue
        number = re.match(r"[0-9.]+", figure)
        assert number is not None, (target.name, figure)
        assert figure.startswith(f"{number.group()}{target.unit} {target.label}".rstrip())
        expected = "met" if target.met(float(number.group())) else "missed"
        assert verdict == expected, target.name


def test_cli_bench_prints_targets_beside_figures_and_in_json(monkeypatch, capsys) -> None:
    from posenc.bench import attention
    from posenc.cli import main

    result = {
        "machine": {"cpu": "cpu", "cores": 2, "torch": "2", "python": "3", "threads": 1},
        "lm": [
            {"name": "nope", "tokens_per_s": 1000.0, "vs_nope": 1.0},
            {"name": "t5", "tokens_per_s": 870.0, "vs_nope": 0.87},
        ],
    }
    monkeypatch.setattr(attention, "run", lambda suites, threads: result)  # no timing
    assert main(["bench", "attention", "--only", "lm"]) == 0
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert lines[-4:] == [
        "nope      1000      1.000",
        "t5        870       0.870   0.87× NoPE tokens/s  (goal ≥ 0.9×: missed)",
        "lm-shaw (goal ≥ 0.85×): not measured, no row with name='shaw'",
        "lm-xl (goal ≥ 0.85×): not measured, no row with name='xl'",
    ]
    assert main(["bench", "attention", "--only", "lm", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["lm"] == result["lm"]
    assert printed["targets"] == [
        {"target": "lm-t5", "goal": "≥ 0.9×", "figure": 0.87, "met": False, "row": {"name": "t5"}}
    ]

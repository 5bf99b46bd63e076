"""Tests of posenc.lab.experiments.suite: the tiny config end to end (rows at every multiple of
L, the needle note, the figure), resume, and config checks naming the field."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from posenc.lab.experiments import EXPERIMENTS
from posenc.lab.experiments.suite import (
    FAMILIES,
    TINY,
    SuiteConfig,
    format_suite_table,
    needle_note,
    run_suite,
    score_vs_multiple,
)
from posenc.lab.results import read_results_csv


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("suite")
    return out, run_suite(TINY, out, echo=None)


def test_rows_cover_every_task_encoding_and_multiple(
    tiny_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    out, rows = tiny_run
    keys = {(r["task"], r["encoding"], r["multiple"], r["length"]) for r in rows}
    assert keys == {
        (task, encoding, m, round(m * length))
        for task, length in (("niah_single", 24), ("state_tracking", 4))
        for encoding in ("nope", "rope")
        for m in (1.0, 2.0)
    }
    assert len(rows) == len(keys)
    assert all(r["experiment"] == "suite" for r in rows)
    assert {r["task"]: r["needle_only"] for r in rows} == {
        "niah_single": True,
        "state_tracking": False,
    }
    assert {r["task"]: r["family"] for r in rows} == {
        "niah_single": "ruler",
        "state_tracking": "state",
    }
    assert all(0 <= r["seq_acc"] <= r["token_acc"] + 1e-12 <= 1 + 1e-12 for r in rows)
    saved = read_results_csv(out / "results.csv")
    assert [(r["task"], r["length"]) for r in saved] == [(r["task"], r["length"]) for r in rows]
    assert (out / "figures" / "suite.png").is_file()
    assert "Needle retrieval only (HELMET)" in (out / "report.html").read_text()


def test_resume_returns_the_same_rows(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = tiny_run
    again = run_suite(TINY, out, echo=None)
    assert [(r["task"], r["encoding"], r["length"], r["seq_acc"]) for r in again] == [
        (r["task"], r["encoding"], r["length"], r["seq_acc"]) for r in rows
    ]


def test_table_and_needle_note(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    _, rows = tiny_run
    table = format_suite_table(rows)
    assert "niah_single (L=24)" in table and "2×" in table
    assert needle_note(rows) == [
        "The niah_single rows are needle retrieval: needle retrieval does not predict "
        "downstream long-context results (HELMET, https://arxiv.org/abs/2410.02694)."
    ]
    only = [r for r in rows if r["task"] == "niah_single"]
    assert needle_note(only)[0].startswith("These results rest on needle retrieval alone")
    assert needle_note([r for r in rows if r["task"] == "state_tracking"]) == []
    score_vs_multiple(rows)
    # a task run with parameters other than its defaults is named with them
    assert "state_tracking (group=s3) (L=4)" in table
    assert "niah_single (L=24)" in table


def test_lengths_follow_the_multipliers() -> None:
    config = dataclasses.replace(TINY, multipliers=(1.0, 2.0, 4.0, 8.0))
    assert config.lengths("niah_single") == ((24, 24), (48, 96, 192))
    assert config.lengths("state_tracking") == ((4, 4), (8, 16, 32))
    default = SuiteConfig(family="state", encodings=("rope",))
    assert default.task_names == ("state_tracking",)
    assert default.lengths("state_tracking") == ((4, 16), (32, 64, 128))


def test_registered_and_families_name_tasks() -> None:
    assert EXPERIMENTS["suite"].config is SuiteConfig
    from posenc.lab.data.tasks import TASKS

    assert all(task in TASKS for tasks in FAMILIES.values() for task in tasks)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"family": "nope"}, "family"),
        ({"tasks": ("unknown",)}, "tasks"),
        ({"multipliers": (0.5, 2.0)}, "multipliers"),
        ({"train_length": {"copy": 4}}, "train_length"),
        ({"train_length": {"niah_single": 0}}, "train_length"),
        ({"train_length": {"niah_single": 5}}, "niah_single"),  # shorter than its needle
        ({"encodings": ("no_such_encoding",)}, "encodings"),
    ],
)
def test_bad_config_raises_naming_the_field(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **changes)


def test_zero_shot_methods_score_ropes_weights_at_the_test_sizes(tmp_path: Path) -> None:
    config = dataclasses.replace(
        TINY,
        tasks=("niah_single",),
        encodings=("rope",),
        train_length={"niah_single": 24},
        task_params={},
        zero_shot=("yarn", "self_extend"),
    )
    rows = run_suite(config, tmp_path / "zero_shot", echo=None)
    methods = [(r["method"], r["length"]) for r in rows]
    assert methods == [("rope", 24), ("rope", 48), ("yarn", 48), ("self_extend", 48)]
    yarn = next(r for r in rows if r["method"] == "yarn")
    assert '"type": "yarn"' in yarn["pos_kwargs"]
    assert 0 <= yarn["seq_acc"] <= yarn["token_acc"] <= 1
    assert "rope→yarn" in format_suite_table(rows)
    # the methods only read rope's weights: rope's own rows are those of a run without them
    plain = run_suite(dataclasses.replace(config, zero_shot=()), tmp_path / "plain", echo=None)
    assert [(r["length"], r["token_acc"], r["seq_acc"]) for r in plain] == [
        (r["length"], r["token_acc"], r["seq_acc"]) for r in rows if r["method"] == "rope"
    ]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"zero_shot": ("yarn",), "encodings": ("nope",)}, "zero_shot"),
        ({"zero_shot": ("rope",)}, "zero_shot"),
        ({"zero_shot": ("warp",)}, "method"),
    ],
)
def test_bad_zero_shot_raises_naming_it(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **changes)


def test_test_params_score_the_trained_model_on_other_distributions(tmp_path: Path) -> None:
    config = dataclasses.replace(
        TINY,
        tasks=("flip_flop",),
        encodings=("rope",),
        train_length={"flip_flop": 6},
        task_params={},
        test_params={"flip_flop": {"same": {"p": 0.8}, "sparse": {"p": 0.98}}},
    )
    assert config.test_source("flip_flop", "sparse").params["p"] == 0.98
    rows = run_suite(config, tmp_path, echo=None)
    by_set = {
        name: [(r["length"], r["token_acc"], r["seq_acc"]) for r in rows if r["test_set"] == name]
        for name in ("train", "same", "sparse")
    }
    assert [length for length, _, _ in by_set["sparse"]] == [6, 12]
    assert by_set["same"] == by_set["train"]  # the training distribution, scored again
    assert "rope @sparse" in format_suite_table(rows)
    assert SuiteConfig(family="flip_flop").test_params["flip_flop"] == {
        "sparse": {"p": 0.98},
        "dense": {"p": 0.1},
    }


@pytest.mark.parametrize(
    ("test_params", "match"),
    [
        ({"nope": {}}, "test_params"),
        ({"niah_single": {"train": {}}}, "test_params"),
        ({"niah_single": {"big": {"key_vocab": 64}}}, "vocabulary"),
        ({"niah_single": {"bad": {"haystack": "sand"}}}, "haystack"),
    ],
)
def test_bad_test_params_raise_naming_them(test_params: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, test_params=test_params)

"""Tests of posenc.lab.experiments.generalize: a tiny ``tasks`` experiment end to end, resume,
config checks, and that randomized evaluation is deterministic and really feeds randomized
positions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from posenc.lab.batch import derive_seed
from posenc.lab.config import ModelArgs, RunnerArgs, TrainArgs, replace_fields
from posenc.lab.data.tasks import make_task
from posenc.lab.experiments import generalize
from posenc.lab.experiments.generalize import (
    TasksConfig,
    evaluate_task,
    format_tasks_table,
    run_tasks,
)
from posenc.lab.results import read_results_csv
from posenc.models import DecoderLM, ModelConfig
from posenc.positions import randomized_positions

TINY = TasksConfig(
    tasks=("copy", "counting"),
    encodings=("rope", "learned"),
    randomized=(False, True),
    eval_examples=6,
    task_params={
        "copy": {"train_lengths": [1, 4], "test_lengths": [6, 8]},
        "counting": {"train_lengths": [2, 4], "test_lengths": [6]},
    },
    model=ModelArgs(dim=32, depth=2, num_heads=4),
    train=TrainArgs(steps=20, batch_size=8, lr=1e-3, warmup_steps=5),
    runner=RunnerArgs(progress=False),
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("tasks")
    return out, run_tasks(TINY, out, echo=None)


def test_tiny_run_rows_and_files(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = tiny_run
    expected = {
        (task, encoding, randomized, length)
        for task, lengths in (("copy", (4, 6, 8)), ("counting", (4, 6)))
        for encoding in TINY.encodings
        for randomized in TINY.randomized
        for length in lengths
    }
    keys = [(r["task"], r["encoding"], r["randomized"], r["length"]) for r in rows]
    assert len(keys) == len(set(keys)) and set(keys) == expected
    for row in rows:
        assert row["experiment"] == "tasks"
        assert 0.0 <= row["token_acc"] <= 1.0 and 0.0 <= row["seq_acc"] <= 1.0
        assert row["split"] == ("train" if row["length"] == row["train_len_max"] else "test")
        limit = TINY.max_position(row["task"]) if row["randomized"] else None
        assert row["max_position"] == limit
    for name in ("config.json", "results.csv", "report.html"):
        assert (out / name).is_file(), name
    assert json.loads((out / "config.json").read_text())["experiment"] == "tasks"
    assert len(list((out / "runs").glob("*/seed0/eval.json"))) == 8
    saved = read_results_csv(out / "results.csv")
    assert [(r["task"], r["encoding"], r["randomized"], r["length"]) for r in saved] == keys
    table = format_tasks_table(rows)
    assert "learned+rand" in table and "copy" in table and "counting" in table


def test_resume_trains_nothing(
    tiny_run: tuple[Path, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, rows = tiny_run

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished experiment must not train again")

    monkeypatch.setattr(generalize, "train", fail)
    assert run_tasks(TINY, out, echo=None) == rows
    # threads/workers/progress only change how it runs, so they do not count as a mismatch
    assert run_tasks(replace_fields(TINY, threads=2, workers=2), out, echo=None) == rows


def test_config_mismatch_raises(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, _ = tiny_run
    with pytest.raises(ValueError, match="steps"):
        run_tasks(replace_fields(TINY, steps=21), out, echo=None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tasks", ()),
        ("tasks", ("copy", "copy")),
        ("tasks", ("juggling",)),
        ("encodings", ("bogus",)),
        ("randomized", ()),
        ("randomized", (1,)),
        ("dim", 0),
        ("dim", 30),
        ("steps", 0),
        ("eval_examples", 0),
        ("lr", 0.0),
        ("threads", 0),
        ("workers", 0),
        ("random_max_length", 3),
        ("task_params", {"sort": {}}),
        ("task_params", {"copy": {"alphabet_size": 99}}),
        ("pos_kwargs", {"alibi": {}}),
    ],
)
def test_config_rejects_bad_fields(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        replace_fields(TINY, **{field: value})


def test_model_covers_positions() -> None:
    source = TINY.source("copy")
    longest = source.max_seq_len()
    assert TINY.model_config("copy", "learned", False).max_seq_len == longest
    assert TINY.model_config("copy", "learned", True).max_seq_len == 4 * longest
    assert TINY.train_config("copy", True).randomize_positions == 4 * longest
    assert TINY.train_config("copy", False).randomize_positions is None


class _Spy(nn.Module):
    """Wraps a model and records the positions it is called with."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.calls: list[tuple[Tensor, Tensor | None]] = []
        self.masks: list[Tensor | None] = []

    def forward(self, tokens: Tensor, positions: Tensor | None, **kwargs: Any) -> Tensor:
        self.calls.append((tokens, positions))
        self.masks.append(kwargs.get("key_padding_mask"))
        return self.model(tokens, positions, **kwargs)


def test_randomized_evaluation_is_deterministic_and_uses_positions() -> None:
    source = make_task("reverse", seed=0)
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=source.vocab_size, dim=32, depth=2, num_heads=4, pos="rope")
    spy = _Spy(DecoderLM(config))
    first = evaluate_task(spy, source, 16, examples=5, max_position=200, seed=3)
    assert evaluate_task(spy, source, 16, examples=5, max_position=200, seed=3) == first
    (tokens, positions), (_, positions_again) = spy.calls
    assert positions is not None and positions_again is not None
    torch.testing.assert_close(positions, positions_again)
    assert positions.shape == tokens.shape
    assert bool((positions.diff(dim=-1) > 0).all())
    assert 0 <= positions.min() <= positions.max() < 200
    assert not torch.equal(positions, torch.arange(tokens.shape[1]).expand_as(positions))
    # The same weights give different logits with randomized and with default positions.
    with torch.no_grad():
        randomized = spy.model(tokens, positions)
        plain = spy.model(tokens, None)
    assert not torch.allclose(randomized, plain)
    evaluate_task(spy, source, 16, examples=5)
    assert spy.calls[-1][1] is None  # plain evaluation feeds 0 .. T - 1


def test_randomized_evaluation_of_padded_rows_gives_their_unpadded_positions() -> None:
    # counting's rows of one length differ in token count, so its test batch is right-padded;
    # each row's real tokens get the positions an unpadded row of their count gets from the
    # same seed (randomized_positions on arange rows), not a draw sized for the padded width.
    source = make_task("counting", seed=0)
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=source.vocab_size, dim=32, depth=2, num_heads=4, pos="rope")
    spy = _Spy(DecoderLM(config))
    evaluate_task(spy, source, 6, examples=6, max_position=200, seed=3)
    ((tokens, positions),), (mask,) = spy.calls, spy.masks
    assert positions is not None and mask is not None
    counts = mask.sum(-1).tolist()
    assert len(set(counts)) > 1  # padded: the test means something
    key = derive_seed("tasks-eval-positions", 3, "counting", 6, 0)
    for row, count in enumerate(counts):
        generator = torch.Generator().manual_seed(key)
        want = randomized_positions(count, 200, batch=6, generator=generator)[row]
        torch.testing.assert_close(positions[row, :count], want, rtol=0, atol=0)
        pad = torch.arange(count, tokens.shape[1])  # padding keeps 0 .. T - 1
        torch.testing.assert_close(positions[row, count:], pad, rtol=0, atol=0)


def test_randomized_evaluation_of_unpadded_rows_is_the_earlier_draw() -> None:
    # No padding (reverse): bit for bit the positions evaluation drew before padding was
    # taken into account, so the unpadded tasks' numbers are unchanged.
    source = make_task("reverse", seed=0)
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=source.vocab_size, dim=32, depth=2, num_heads=4, pos="rope")
    spy = _Spy(DecoderLM(config))
    evaluate_task(spy, source, 16, examples=5, max_position=200, seed=3)
    ((tokens, positions),), (mask,) = spy.calls, spy.masks
    assert mask is None
    key = derive_seed("tasks-eval-positions", 3, "reverse", 16, 0)
    generator = torch.Generator().manual_seed(key)
    want = randomized_positions(tokens.shape[1], 200, batch=5, generator=generator)
    torch.testing.assert_close(positions, want, rtol=0, atol=0)

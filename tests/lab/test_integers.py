"""Integer settings of the lab: a numpy integer (a seed or a size read off an array) or a 0-d
integer tensor is stored as the Python int it holds, so the configs holding it write plain
JSON (``config.json`` refuses or silently reprs a numpy integer); bool and floats get the shared
message of :func:`posenc._validate.check_int`, naming the setting."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from posenc.lab.claims import noise_quantile
from posenc.lab.config import DataArgs, EpochArgs, ModelArgs, RunnerArgs, TrainArgs, check_seeds
from posenc.lab.data.audio import keyword_frequency_track
from posenc.lab.data.scenes import make_scenes
from posenc.lab.data.tasks import make_task
from posenc.lab.experiments.csl import CslConfig
from posenc.lab.experiments.vla import VlaConfig
from posenc.lab.run import as_json
from posenc.lab.train.config import TrainConfig

SHARED = r"must be .*: an int, numpy integer or 0-d integer tensor; got"

#: ``(what, make(n), fields)``: a config built with the integer ``n`` in ``fields``.
CONFIGS: list[tuple[str, Callable[[Any], Any], tuple[str, ...]]] = [
    ("ModelArgs", lambda n: ModelArgs(dim=8, num_heads=2, depth=n), ("depth",)),
    ("TrainArgs", lambda n: TrainArgs(seeds=(n,), steps=n, warmup_steps=n), ("seeds", "steps")),
    ("EpochArgs", lambda n: EpochArgs(seeds=(0, n), epochs=n, batch_size=n), ("epochs",)),
    (
        "DataArgs",
        lambda n: DataArgs(corpus_bytes=n, split_seed=n, train_len=n),
        ("corpus_bytes", "split_seed", "train_len"),
    ),
    ("RunnerArgs", lambda n: RunnerArgs(workers=n, threads=n), ("workers", "threads")),
    (
        "TrainConfig",
        lambda n: TrainConfig(steps=n, seed=n, log_every=n, randomize_positions=n),
        ("steps", "seed", "log_every", "randomize_positions"),
    ),
    ("VlaConfig", lambda n: VlaConfig(history=n), ("history",)),
    ("CslConfig", lambda n: CslConfig(folds=(0, n)), ("folds",)),
]
IDS = [what for what, _, _ in CONFIGS]


def _ints(value: object) -> list[object]:
    return list(value) if isinstance(value, tuple) else [value]


@pytest.mark.parametrize("value", [np.int64(3), torch.tensor(3)], ids=["np.int64", "tensor"])
@pytest.mark.parametrize(("what", "make", "names"), CONFIGS, ids=IDS)
def test_configs_store_integral_scalars_as_ints_and_write_json(
    what: str, make: Callable[[Any], Any], names: tuple[str, ...], value: object
) -> None:
    config, expected = make(value), make(3)
    assert config == expected
    for name in names:
        stored = _ints(getattr(config, name))
        assert all(type(x) is int for x in stored), (name, stored)
    record = dataclasses.asdict(config)
    assert json.dumps(record, sort_keys=True) == json.dumps(
        dataclasses.asdict(expected), sort_keys=True
    )
    assert as_json(config) == as_json(expected)  # no repr of a numpy integer in config.json


@pytest.mark.parametrize("value", [True, 2.5], ids=["bool", "float"])
@pytest.mark.parametrize(("what", "make", "names"), CONFIGS, ids=IDS)
def test_configs_refuse_bool_and_float_with_the_shared_message(
    what: str, make: Callable[[Any], Any], names: tuple[str, ...], value: object
) -> None:
    with pytest.raises(ValueError, match=SHARED):
        make(value)


#: ``(what, call(n))``: lab functions whose integer argument ``n`` is read through check_int.
CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("check_seeds", lambda n: check_seeds((0, n))),
    ("noise_quantile.df", noise_quantile),
    ("keyword_frequency_track.label", keyword_frequency_track),
    ("make_task.params", lambda n: dict(make_task("copy", alphabet_size=n).params)),
    ("make_scenes.history", lambda n: make_scenes(2, seed=0, history=n).frames()),
]


@pytest.mark.parametrize("value", [np.int64(3), torch.tensor(3)], ids=["np.int64", "tensor"])
@pytest.mark.parametrize(("what", "call"), CALLS, ids=[w for w, _ in CALLS])
def test_functions_read_integral_scalars(
    what: str, call: Callable[[Any], Any], value: object
) -> None:
    expected, got = call(3), call(value)
    if isinstance(expected, torch.Tensor):
        assert_close(got, expected, rtol=0, atol=0)
    else:
        assert got == expected
        json.dumps(got)  # plain ints, no numpy integer
        leaves = got.values() if isinstance(got, dict) else _ints(got)
        assert all(type(x) in (int, float, bool) for x in leaves), got


@pytest.mark.parametrize("value", [True, 2.5], ids=["bool", "float"])
@pytest.mark.parametrize(("what", "call"), CALLS, ids=[w for w, _ in CALLS])
def test_functions_refuse_bool_and_float_with_the_shared_message(
    what: str, call: Callable[[Any], Any], value: object
) -> None:
    with pytest.raises(ValueError, match=SHARED):
        call(value)


@pytest.mark.parametrize("value", [np.int64(16), torch.tensor(16)], ids=["np.int64", "tensor"])
def test_resolution_test_sides_are_stored_as_ints(value: object) -> None:
    from posenc.lab.experiments.resolution import ResolutionConfig

    config = ResolutionConfig(test_sides=(8, value))  # type: ignore[arg-type]
    assert config.test_sides == (8, 16)
    assert all(type(side) is int for side in config.test_sides)
    assert as_json(config) == as_json(ResolutionConfig(test_sides=(8, 16)))


@pytest.mark.parametrize("value", [True, 16.0], ids=["bool", "float"])
def test_resolution_test_sides_refuse_bool_and_float(value: object) -> None:
    from posenc.lab.experiments.resolution import ResolutionConfig

    with pytest.raises(ValueError, match=r"^test_sides " + SHARED):
        ResolutionConfig(test_sides=(8, value))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [np.int64(2), torch.tensor(2)], ids=["np.int64", "tensor"])
def test_camera_views_read_an_integral_views(value: object) -> None:
    from posenc.lab.data.scenes import camera_views

    images = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    got = camera_views(images, value)  # type: ignore[arg-type]
    assert_close(got, camera_views(images, 2), rtol=0, atol=0)


@pytest.mark.parametrize("value", [True, 2.5], ids=["bool", "float"])
def test_camera_views_refuse_bool_and_float_views(value: object) -> None:
    from posenc.lab.data.scenes import camera_views

    with pytest.raises(ValueError, match=r"^views " + SHARED):
        camera_views(torch.zeros(1, 3, 4, 4), value)  # type: ignore[arg-type]

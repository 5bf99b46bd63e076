"""The shared pieces of the signal experiments: the token transformer, its config and
training loop, and the atlas table (its figure: tests/lab/test_atlas.py)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.lab.atlas import atlas_pivot, atlas_table, condition_labels
from posenc.lab.config import expand_flat_options, from_record, replace_fields
from posenc.lab.experiments.audio import AudioConfig
from posenc.lab.experiments.video import VideoConfig
from posenc.lab.experiments.vla import VlaConfig
from posenc.lab.results import check_out_dir
from posenc.lab.signal_models import (
    SignalRunConfig,
    SignalTransformer,
    accuracy_in_batches,
    fit_signal_model,
)
from posenc.positions import grid_positions
from posenc.registry import ModelDims


def _model(encoding: str, grid: tuple[int, ...] = (2, 3, 4)) -> SignalTransformer:
    torch.manual_seed(0)
    config = replace_fields(SignalRunConfig(), encodings=(encoding,), dim=48)
    return config.transformer(encoding, grid, math.prod(grid))


def test_without_an_encoding_the_transformer_is_permutation_equivariant() -> None:
    model = _model("none").eval()
    x = torch.randn(2, 24, 48)
    order = torch.randperm(24)
    positions = torch.arange(24)  # one axis: "none" reads none, the context checks one
    assert model.num_axes == 1
    assert_close(model(x, positions)[:, order], model(x[:, order], positions))


@pytest.mark.parametrize("encoding", ["rope_axial", "sinusoidal_grid", "mrope"])
def test_a_grid_encoding_reads_three_axes_and_breaks_the_symmetry(encoding: str) -> None:
    model = _model(encoding).eval()
    assert model.num_axes == 3
    x = torch.randn(2, 24, 48)
    order = torch.randperm(24, generator=torch.Generator().manual_seed(1))
    positions = grid_positions(2, 3, 4)
    permuted = model(x[:, order], positions)
    assert not torch.allclose(model(x, positions)[:, order], permuted, atol=1e-4)
    # moving each token's position with it restores the output: positions, not indices, count
    assert_close(model(x[:, order], positions[:, order]), model(x, positions)[:, order])


def test_pos_kwargs_for_none_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="pos_kwargs must be empty"):
        SignalTransformer("none", ModelDims(48, 4), pos_kwargs={"base": 10})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("encodings", ()),
        ("encodings", ("rope", "rope")),
        ("seeds", ()),
        ("dim", 0),
        ("num_heads", 5),
        ("lr", -1.0),
        ("weight_decay", float("nan")),
        ("warmup_steps", -1),
        ("pos_kwargs", {"rope": {"base": 10}}),
    ],
)
def test_bad_config_fields_are_named(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"encodings": ("none",), field: value}
    with pytest.raises(ValueError, match=field):
        replace_fields(SignalRunConfig(), **kwargs)


def test_fit_lowers_the_loss_of_a_learnable_task_and_accuracy_counts_every_entry() -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 4)
    targets = (x[:, 0] > 0).long()
    net = nn.Linear(4, 2)

    def loss_of(index: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(net(x[index]), targets[index])

    before = float(loss_of(torch.arange(256)).detach())
    config = replace_fields(SignalRunConfig(), epochs=5, batch_size=32, lr=0.05, warmup_steps=2)
    summary = fit_signal_model(net, loss_of, 256, config.train, torch.Generator().manual_seed(0))
    assert summary["train_loss"] < 0.5 * before
    assert accuracy_in_batches(lambda i: net(x[i]), targets, batch_size=100) > 0.9
    # (N, k) targets: every entry counts once
    pairs = torch.tensor([[0, 1], [1, 1]])
    logits = torch.tensor([[[5.0, 0.0], [5.0, 0.0]], [[0.0, 5.0], [0.0, 5.0]]])
    assert accuracy_in_batches(lambda i: logits[i], pairs) == 0.75


def _rows() -> list[dict[str, Any]]:
    rows = []
    for seed, (a, b) in enumerate([(0.9, 0.5), (0.8, 0.7)]):
        for condition, value in enumerate((a, b)):
            rows.append(
                {
                    "experiment": "video",
                    "encoding": "rope_axial",
                    "seed": seed,
                    "condition": condition,
                    "condition_label": ["F", "2F"][condition],
                    "in_distribution": condition == 0,
                    "accuracy": value,
                }
            )
    return rows


def test_atlas_pivot_gives_mean_and_std_per_condition_with_the_trained_one_marked() -> None:
    rows = _rows()
    assert condition_labels(rows) == {0: "F (trained)", 1: "2F"}
    header, body = atlas_pivot(rows, "video")
    assert header == ["encoding", "F (trained)", "2F"]
    assert body[0][0] == "rope_axial"
    assert body[0][1].startswith("0.850 ± 0.071")  # std over seeds (n − 1)
    assert body[0][2].startswith("0.600 ± 0.141")
    assert atlas_pivot(rows, "audio") == ([], [])
    assert "2 seeds" in atlas_table(rows, "video", "moving digits")


def _flat(config: SignalRunConfig) -> dict[str, Any]:
    """``config`` as a config.json written before its model and training were sections."""
    record = dataclasses.asdict(config)
    return json.loads(json.dumps({**record.pop("model"), **record.pop("train"), **record}))


@pytest.mark.parametrize("cls", [AudioConfig, VideoConfig, VlaConfig])
def test_flat_records_and_options_reach_the_sections(cls: type[SignalRunConfig]) -> None:
    config = replace_fields(cls(), seeds=(0,), dim=48, num_heads=2, epochs=2, weight_decay=0.1)
    assert (config.model.dim, config.train.epochs, config.train.weight_decay) == (48, 2, 0.1)
    assert from_record(cls, _flat(config)) == config
    assert from_record(cls, json.loads(json.dumps(dataclasses.asdict(config)))) == config
    options = ["--dim", "32", "--epochs=2", "--no-progress", "--data-seed", "1"]
    assert expand_flat_options(cls, options) == [
        "--model.dim",
        "32",
        "--train.epochs=2",
        "--runner.no-progress",
        "--data-seed",
        "1",
    ]


def test_an_out_folder_of_a_flat_config_resumes_and_refuses_another(tmp_path: Path) -> None:
    config = replace_fields(VlaConfig(), seeds=(0,), dim=32, num_heads=2, encodings=("rope",))
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "eval.json").write_text("[]")
    (tmp_path / "config.json").write_text(json.dumps({"experiment": "vla", **_flat(config)}))
    check_out_dir(tmp_path, "vla", config)
    with pytest.raises(ValueError, match=r"'train\.epochs'"):
        check_out_dir(tmp_path, "vla", replace_fields(config, epochs=3))

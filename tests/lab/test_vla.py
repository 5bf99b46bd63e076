"""The VLA experiment: a tiny sweep end to end, resuming, config errors naming the field, and
the positions each encoding reads under each numbering, trained and beyond."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.lab.config import RunnerArgs, replace_fields
from posenc.lab.data.scenes import camera_views, image_patches, make_scenes
from posenc.lab.experiments import get_experiment
from posenc.lab.experiments.vla import (
    VlaConfig,
    VlaModel,
    _execute,
    _split,
    format_vla_table,
    pairs,
    run_vla,
)
from posenc.lab.runner import Run
from posenc.registry import ModelDims, build_encoding

TINY: dict[str, Any] = {
    "encodings": ("none", "rope", "mrope", "rope_axial"),
    "seeds": (0,),
    "dim": 24,
    "num_heads": 1,
    "depth": 1,
    "epochs": 1,
    "train_size": 24,
    "test_size": 8,
    "batch_size": 8,
    "runner": RunnerArgs(progress=False),
}


def test_registered() -> None:
    assert get_experiment("vla").config is VlaConfig


def test_tiny_sweep_writes_rows_and_resumes(tmp_path: Path) -> None:
    config = replace_fields(VlaConfig(), **TINY)
    assert pairs(config) == [
        ("flat", "none"),
        ("flat", "rope"),
        ("qwen2_vl", "mrope"),
        ("qwen2_vl", "rope_axial"),
        ("action_axis", "rope_axial"),
    ]
    rows = run_vla(config, tmp_path, echo=None)
    assert len(rows) == 5 * 4
    for row in rows:
        assert row["experiment"] == "vla" and row["seed"] == 0
        assert row["in_distribution"] == (row["condition"] == 0)
        assert 0.0 <= row["chunk_accuracy"] <= row["accuracy"] <= 1.0
    labels = [row["condition_label"] for row in rows[:4]]
    assert labels == ["G4", "G6", "instr +4", "both"]
    assert [(r["grid"], r["instruction_length"]) for r in rows[:4]] == [
        (4, 4),
        (6, 4),
        (4, 8),
        (6, 8),
    ]
    # the baseline: the share of stay slots in each condition's test set
    assert rows[0]["stay_accuracy"] > 0.5 and rows[1]["stay_accuracy"] < rows[0]["stay_accuracy"]
    table = format_vla_table(rows)
    assert "'always stay' baseline: G4" in table and "whole-chunk exact match" in table
    assert "action_axis" in table and "rope_axial" in table
    finished = tmp_path / "runs" / "qwen2_vl" / "mrope" / "seed0" / "eval.json"
    stamp = finished.stat().st_mtime_ns
    said: list[str] = []
    again = run_vla(config, tmp_path, echo=said.append)
    assert again == json.loads(json.dumps(rows))
    assert finished.stat().st_mtime_ns == stamp
    assert not any("done" in line for line in said)  # nothing ran again


def test_a_run_is_a_function_of_config_and_seed(tmp_path: Path) -> None:
    config = replace_fields(VlaConfig(), **TINY)
    run = Run("qwen2_vl/mrope/seed0", {"layout": "qwen2_vl", "encoding": "mrope", "seed": 0})
    first = _execute(config, run, tmp_path)
    assert _execute(config, run, tmp_path) == first
    other = _execute(config, Run(run.name, {**run.params, "seed": 1}), tmp_path)
    assert [r["train_loss"] for r in other] != [r["train_loss"] for r in first]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"layouts": ("flat", "diagonal")}, "layouts"),
        ({"test_grid": 4}, "test_grid"),
        ({"test_instruction_length": 4}, "test_instruction_length"),
        ({"instruction_length": 3, "test_instruction_length": 6}, "instruction_length"),
        ({"action_length": 8}, "action_length"),
        ({"views": 5}, "views"),
        ({"views": 2, "layouts": ("flat", "max_plus_one")}, "max_plus_one"),
        ({"train_size": 0}, "train_size"),
        ({"history": -1}, "history"),
        ({"history": 1.5}, "history"),
        ({"history": True}, "history"),
        ({"encodings": ("alibi",), "layouts": ("qwen2_vl",)}, "encodings"),
        ({"dim": 32, "num_heads": 2}, "encodings"),  # head_dim 16: no 3-axis axial split
    ],
)
def test_config_errors_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        replace_fields(VlaConfig(), **{**TINY, **changes})


def _positions_seen(
    config: VlaConfig, layout: str, encoding: str, grid: int, length: int
) -> Tensor:
    """The positions the transformer of ``encoding`` gets on a batch of test scenes."""
    model = VlaModel(config, encoding, layout)
    split = _split(config, layout, model.transformer.num_axes, 2, grid, length, seed=0)
    seen: list[Tensor] = []
    forward = model.transformer.forward

    def spy(x: Tensor, positions: Tensor, **kwargs: Any) -> Tensor:
        seen.append(positions)
        assert x.shape[1] == positions.shape[-1]  # one position per token
        return forward(x, positions, **kwargs)

    model.transformer.forward = spy  # type: ignore[method-assign]
    logits = model(split.patches, split.words, split.positions, split.kinds)
    assert logits.shape == (2, config.slots, 5)
    return seen[0]


def test_mrope_reads_t_h_w_of_the_patches_and_the_larger_grid_extends_them() -> None:
    config = replace_fields(VlaConfig(), **TINY)
    trained = _positions_seen(config, "qwen2_vl", "mrope", 4, 4)
    larger = _positions_seen(config, "qwen2_vl", "mrope", 6, 4)
    assert trained.shape == (3, 16 + 4 + 10) and larger.shape == (3, 36 + 4 + 10)
    rows, cols = torch.arange(6).repeat_interleave(6), torch.arange(6).repeat(6)
    assert_close(larger[:, :36], torch.stack([torch.zeros(36, dtype=torch.long), rows, cols]))
    # the trained grid's patches keep their (t, h, w) on the larger grid
    inside = (rows < 4) & (cols < 4)
    assert_close(larger[:, :36][:, inside], trained[:, :16])
    # the text continues at max(h, w) + 1 = G on every axis: it moves with the grid
    assert trained[:, 16].tolist() == [4, 4, 4] and larger[:, 36].tolist() == [6, 6, 6]


def test_flat_rope_numbers_everything_in_one_axis() -> None:
    config = replace_fields(VlaConfig(), **TINY)
    trained = _positions_seen(config, "flat", "rope", 4, 4)
    longer = _positions_seen(config, "flat", "rope", 4, 8)
    assert_close(trained, torch.arange(30))
    assert_close(longer, torch.arange(34))  # the action slots move by the 4 filler words


def test_action_axis_gives_rope_axial_four_axes() -> None:
    config = replace_fields(VlaConfig(), **TINY)
    model = VlaModel(config, "rope_axial", "action_axis")
    assert model.transformer.num_axes == 4
    seen = _positions_seen(config, "action_axis", "rope_axial", 4, 8)
    assert seen.shape == (4, 16 + 8 + 10)
    assert seen[3, -10:].tolist() == list(range(1, 11)) and not seen[3, :-10].any()
    assert seen[:3, -10:].unique().tolist() == [4 + 8]  # the slots share (t, h, w) after the text


def test_views_add_image_blocks() -> None:
    config = replace_fields(
        VlaConfig(), **{**TINY, "views": 2, "encodings": ("mrope",), "layouts": ("qwen2_vl",)}
    )
    seen = _positions_seen(config, "qwen2_vl", "mrope", 4, 4)
    assert seen.shape == (3, 2 * 16 + 1 + 4 + 10)
    assert seen[:, 17].tolist() == [5, 5, 5]  # view 1 starts after view 0 and the marker
    assert seen[:, 33].tolist() == [9, 9, 9]  # the instruction after view 1


HISTORY: dict[str, Any] = {**TINY, "history": 2, "encodings": ("rope", "mrope")}


def test_history_run_writes_rows_and_no_history_rows_are_unchanged(tmp_path: Path) -> None:
    config = replace_fields(VlaConfig(), **{**HISTORY, "layouts": ("flat", "qwen2_vl")})
    assert config.frames == 3 and config.max_seq_len() == 3 * 36 + 8 + 10
    rows = run_vla(config, tmp_path, echo=None)
    assert [(r["layout"], r["encoding"]) for r in rows[::4]] == [
        ("flat", "rope"),
        ("qwen2_vl", "mrope"),
    ]
    assert all(r["history"] == 2 for r in rows) and len(rows) == 2 * 4
    assert "(2 previous frames)" in format_vla_table(rows)
    plain = _execute(
        replace_fields(VlaConfig(), **TINY),
        Run("r", {"layout": "flat", "encoding": "rope", "seed": 0}),
        tmp_path,
    )
    assert "history" not in plain[0]
    # a folder written before the field existed (no "history" in config.json) resumes
    old = tmp_path / "old"
    run_vla(
        replace_fields(VlaConfig(), **{**TINY, "encodings": ("rope",), "layouts": ("flat",)}),
        old,
        echo=None,
    )
    record = json.loads((old / "config.json").read_text())
    assert record.pop("history") is None
    (old / "config.json").write_text(json.dumps(record))
    run_vla(
        replace_fields(VlaConfig(), **{**TINY, "encodings": ("rope",), "layouts": ("flat",)}),
        old,
        echo=None,
    )


def test_history_frames_are_numbered_frame_major() -> None:
    config = replace_fields(VlaConfig(), **HISTORY)
    split = _split(config, "qwen2_vl", 3, 2, 4, 4, seed=0)
    frames = 3
    assert split.patches.shape == (2, 1, frames * 16, 27)
    # the last block of 16 patches is the current frame, the scenes' images
    scenes = make_scenes(2, 4, seed=0, action_length=config.slots, history=2)
    assert_close(split.patches[:, 0, -16:], image_patches(scenes.images))
    assert_close(split.patches[:, 0, :16], image_patches(scenes.history[:, 0]))
    qwen = _positions_seen(config, "qwen2_vl", "mrope", 4, 4)
    assert qwen.shape == (3, frames * 16 + 4 + 10)
    rows, cols = torch.arange(4).repeat_interleave(4), torch.arange(4).repeat(4)
    for frame in range(frames):
        block = qwen[:, frame * 16 : (frame + 1) * 16]
        assert_close(block, torch.stack([torch.full((16,), frame), rows, cols]))
    assert qwen[:, 48].tolist() == [4, 4, 4]  # the text at max(frames, G) = G: as one frame
    flat = _positions_seen(config, "flat", "rope", 4, 4)
    assert_close(flat, torch.arange(frames * 16 + 4 + 10))  # the frames follow each other


def test_history_with_views_keeps_each_views_frames_together() -> None:
    config = replace_fields(VlaConfig(), **{**HISTORY, "views": 2})
    split = _split(config, "qwen2_vl", 3, 2, 4, 4, seed=0)
    scenes = make_scenes(2, 4, seed=0, action_length=config.slots, history=2)
    views = camera_views(scenes.frames().flatten(0, 1), 2).unflatten(0, (2, 3))
    assert split.patches.shape == (2, 2, 3 * 16, 27)
    assert_close(split.patches[:, 1, 16:32], image_patches(views[:, 1, 1]))


def _rotary(model: VlaModel) -> Any:
    """The model's rotary encoding (the first module that rotates q and k)."""
    return next(m for m in model.modules() if hasattr(m, "rotate_qk"))


def test_rope_base_reaches_every_rotary_encoding_and_pos_kwargs_override_it() -> None:
    config = replace_fields(
        VlaConfig(), **{**TINY, "rope_base": 7.0, "pos_kwargs": {"mrope": {"base": 50.0}}}
    )
    assert float(_rotary(VlaModel(config, "rope", "flat")).base) == 7.0
    dims = ModelDims(dim=24, num_heads=1, max_seq_len=config.max_seq_len(), grid=(1, 4, 4))
    for layout, encoding, base in [("qwen2_vl", "rope_axial", 7.0), ("qwen2_vl", "mrope", 50.0)]:
        built = _rotary(VlaModel(config, encoding, layout))
        expected: Any = build_encoding(encoding, dims, {"base": base})
        default: Any = build_encoding(encoding, dims)
        assert_close(built.frequencies, expected.frequencies)
        assert not torch.equal(expected.frequencies, default.frequencies)
    with pytest.raises(ValueError, match="rope_base"):
        replace_fields(VlaConfig(), **{**TINY, "rope_base": 0.0})

"""The video experiment: rows of the atlas schema end to end, resuming, config errors naming
the field, the positions each encoding reads, and the learned tables interpolated to a new
grid."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.additive.learned_grid import FactorizedLearned
from posenc.lab.config import RunnerArgs, replace_fields
from posenc.lab.data.moving_digits import NUM_CLASSES, make_moving_digits, tubelets
from posenc.lab.experiments import video
from posenc.lab.experiments.video import (
    VideoClassifier,
    VideoConfig,
    conditions,
    encoding_positions,
    resample_factorized,
    run_video,
)
from posenc.positions import grid_positions

TINY: dict[str, Any] = {
    "seeds": (0,),
    "dim": 24,
    "num_heads": 1,
    "depth": 1,
    "epochs": 1,
    "batch_size": 128,
    "warmup_steps": 2,
    "frames": 4,
    "time_patch": 2,
    "canvas": 12,
    "test_canvas": 16,
    "train_repeats": 1,
    "test_size": 40,
    "runner": RunnerArgs(progress=False),
}
ENCODINGS = ("rope_axial", "learned_factorized", "none")


def _tiny(**overrides: Any) -> VideoConfig:
    return replace_fields(VideoConfig(), **{**TINY, "encodings": ENCODINGS, **overrides})


def test_a_tiny_sweep_writes_atlas_rows_with_the_positions_of_each_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, list[Any]] = {}
    forward = VideoClassifier.forward

    def spy(self: VideoClassifier, tokens: torch.Tensor, positions: torch.Tensor) -> Any:
        seen.setdefault(self.transformer.encoding_name, []).append((tokens.shape, positions))
        return forward(self, tokens, positions)

    monkeypatch.setattr(VideoClassifier, "forward", spy)
    config = _tiny()
    rows = run_video(config, tmp_path, echo=None)
    assert len(rows) == len(ENCODINGS) * 4
    for row in rows:
        assert row["experiment"] == "video"
        assert row["in_distribution"] == (row["condition"] == 0)
        assert 0.0 <= row["accuracy"] <= 1.0
    labels = [row["condition_label"] for row in rows if row["encoding"] == "none"]
    assert labels == ["F=4", "2F=8", "4F=16", "canvas 16"]
    assert {row["tokens"] for row in rows} == {2 * 9, 4 * 9, 8 * 9, 2 * 16}
    assert (tmp_path / "results.csv").exists()

    # rope_axial read the (t, h, w) of the tubelets: the training grid, then each test grid
    grids = {tuple(positions.shape): positions for _, positions in seen["rope_axial"]}
    assert_close(grids[(3, 18)], grid_positions(2, 3, 3))
    assert_close(grids[(3, 72)], grid_positions(8, 3, 3))
    assert_close(grids[(3, 32)], grid_positions(2, 4, 4))
    for shape, positions in seen["rope_axial"]:
        assert shape[1] == positions.shape[1]  # one position per token
    # the learned tables were interpolated to each test grid (they index up to its size)
    assert {tuple(p.shape) for _, p in seen["learned_factorized"]} == set(grids)

    # resuming skips every finished run: nothing trains again, the rows are the same
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(video, "fit_signal_model", refuse)
    assert run_video(config, tmp_path, echo=None) == rows
    stored = json.loads((tmp_path / "runs" / "none" / "seed0" / "eval.json").read_text())
    assert stored == [row for row in rows if row["encoding"] == "none"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("frames", 3),
        ("frames", 0),
        ("canvas", 8),
        ("canvas", 14),
        ("test_canvas", 12),
        ("test_canvas", 18),
        ("time_patch", 0),
        ("train_repeats", 0),
        ("test_size", 0),
        ("v2pe_step", 0.0),
        ("videorope_spacing", -1.0),
        ("pos_kwargs", {"rope": {"base": 100.0}}),
    ],
)
def test_bad_fields_are_named(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        _tiny(**{field: value})


@pytest.mark.parametrize("encoding", ["rope", "sinusoidal", "learned"])
def test_an_encoding_reading_other_axes_is_refused_naming_encodings(encoding: str) -> None:
    with pytest.raises(ValueError, match=rf"encodings: '{encoding}'.*reads 1 position axes"):
        _tiny(encodings=(encoding,))


def test_a_bad_constructor_argument_is_refused_when_the_config_is_built() -> None:
    with pytest.raises(ValueError, match=r"pos_kwargs\['learned_factorized'\]"):
        _tiny(pos_kwargs={"learned_factorized": {"groups": [[0, 1]]}})


def test_the_conditions_extend_the_trained_clips() -> None:
    config = _tiny()
    assert [(c.frames, c.canvas) for c in conditions(config)] == [
        (4, 12),
        (8, 12),
        (16, 12),
        (4, 16),
    ]
    pixels = torch.randint(0, 17, (5, 64))
    digits = torch.arange(5)
    short = make_moving_digits(pixels, digits, 4, 12, seed=3)
    long = make_moving_digits(pixels, digits, 16, 12, seed=3)
    short_tokens, short_positions = tubelets(short.videos, 2, 4)
    long_tokens, long_positions = tubelets(long.videos, 2, 4)
    # t-major tokens: the longer clip's first tokens and positions are the trained clip's
    assert_close(long_tokens[:, : short_tokens.shape[1]], short_tokens)
    assert_close(long_positions[:, : short_positions.shape[1]], short_positions)
    for encoding in ("rope_axial", "mrope", "sinusoidal_grid"):
        trained = encoding_positions(encoding, (2, 3, 3), config)
        longer = encoding_positions(encoding, (8, 3, 3), config)
        assert_close(longer[:, :18], trained)
        assert int(longer[0].max()) == 7  # new time steps beyond the trained 0..1
    wider = encoding_positions("rope_axial", (2, 4, 4), config)
    assert int(wider[1].max()) == 3 and int(wider[2].max()) == 3  # rows and columns beyond 2


def test_a_token_sits_at_the_t_h_w_of_its_pixels() -> None:
    videos = torch.zeros(1, 4, 12, 12)
    videos[0, 3, 9, 5] = 1.0  # frame 3, row 9, column 5: tubelet (1, 2, 1)
    tokens, _ = tubelets(videos, 2, 4)
    positions = encoding_positions("rope_axial", (2, 3, 3), _tiny())
    (token,) = tokens[0].abs().sum(-1).nonzero()[:, 0].tolist()
    assert positions[:, token].tolist() == [1, 2, 1]


def test_videorope_reads_the_diagonal_layout_and_v2pe_fractional_steps() -> None:
    config = _tiny(encodings=("videorope", "v2pe"), videorope_spacing=2.0, v2pe_step=0.25)
    ids = encoding_positions("videorope", (2, 3, 3), config)
    t, h, w = grid_positions(2, 3, 3).double()
    time = 2.0 * t  # δ per frame
    expected = torch.stack((time, time + h - 1, time + w - 1)).float()  # centred: ⌊(3−1)/2⌋ = 1
    assert_close(ids, expected)
    steps = encoding_positions("v2pe", (2, 3, 3), config)
    assert_close(steps, 0.25 * torch.arange(18, dtype=torch.float32))
    assert encoding_positions("none", (2, 3, 3), config).shape == (18,)


def test_resampling_the_tables_interpolates_time_and_space() -> None:
    table = FactorizedLearned((2, 3, 3), dim=4, groups=((1, 2), (0,)))
    with torch.no_grad():
        table.tables[0].fill_(0.5)  # a constant space table stays constant
        table.tables[1].copy_(torch.tensor([[0.0], [1.0]]).expand(2, 4))  # time: a ramp
    resized = resample_factorized(table, (8, 4, 4))
    assert resized.size == (8, 4, 4) and table.size == (2, 3, 3)
    assert resized.tables[0].shape == (16, 4) and resized.tables[1].shape == (8, 4)
    assert_close(resized.tables[0], torch.full((16, 4), 0.5))
    ramp = resized.tables[1][:, 0].detach()
    assert bool((ramp[1:] >= ramp[:-1]).all())  # still increasing, within the trained values
    assert float(ramp[0]) == 0.0 and float(ramp[-1]) == 1.0
    assert_close(resample_factorized(table, (2, 3, 3)).tables[1], table.tables[1])
    with pytest.raises(ValueError, match="size"):
        resample_factorized(table, (8, 4))


def test_the_classifier_moves_to_a_new_grid_without_changing_itself() -> None:
    config = _tiny()
    torch.manual_seed(0)
    model = VideoClassifier(config, "learned_factorized").eval()
    moved = model.at_grid((8, 3, 3))
    assert moved is not model
    assert model.transformer.additive.size == (2, 3, 3)  # type: ignore[union-attr]
    tokens = torch.randn(2, 72, 32)
    logits = moved(tokens, encoding_positions("learned_factorized", (8, 3, 3), config))
    assert logits.shape == (2, NUM_CLASSES)
    rope = VideoClassifier(config, "rope_axial")
    assert rope.at_grid((8, 3, 3)) is rope  # nothing finite to move
    assert math.prod(config.grid) == 18


def test_rope_base_reaches_every_rotary_encoding_and_pos_kwargs_override_it() -> None:
    from posenc.rotary import MultiAxisRotary, RotaryEmbedding

    config = replace_fields(
        VideoConfig(),
        **{**TINY, "dim": 48, "num_heads": 2},
        encodings=("mrope", "videorope", "v2pe", "rope_axial"),
        rope_base=7.0,
        pos_kwargs={"rope_axial": {"base": 50.0}},
    )

    def rotary(encoding: str) -> torch.nn.Module:
        model = config.transformer(encoding, config.grid, 64)
        return next(m for m in model.modules() if isinstance(m, (MultiAxisRotary, RotaryEmbedding)))

    for encoding in ("mrope", "videorope"):
        inv_freq = rotary(encoding).frequencies.abs().amax(1)  # type: ignore[operator]
        assert_close(float(inv_freq.min()), 7.0 ** (-22 / 24))  # head_dim 24: 12 pairs
    assert rotary("v2pe").base == 7.0
    expected = MultiAxisRotary.axial(24, 3, base=50.0).frequencies
    assert_close(rotary("rope_axial").frequencies, expected)

"""The audio experiment: rows of the atlas schema end to end, resume, config errors naming
the field, the positions each encoding reads and how a trained table meets a longer clip."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.lab.config import RunnerArgs, replace_fields
from posenc.lab.data.audio import FREQ_BINS, AudioDataset, make_audio_dataset
from posenc.lab.experiments.audio import (
    EXPERIMENT,
    AudioConfig,
    adapt_to_grid,
    layouts_of,
    prepare_audio,
    run_audio,
    span_accuracies,
    token_positions,
    tokenize,
)
from posenc.lab.runner import run_experiment

# Clips of 24 and 48 frames (the shortest that hold a keyword, and twice that).
TINY = replace_fields(
    AudioConfig(),
    encodings=("none", "rope", "learned", "learned_2d", "learned_factorized", "rope_axial"),
    seeds=(0,),
    durations_s=(0.384, 0.768),
    train_clips=24,
    test_clips=8,
    dim=16,
    depth=1,
    num_heads=2,
    epochs=1,
    batch_size=8,
    warmup_steps=1,
    runner=RunnerArgs(progress=False),
)
SCHEMA = {"experiment", "encoding", "seed", "condition", "condition_label", "in_distribution"}


def test_rows_schema_and_resume(tmp_path):
    rows = run_audio(TINY, tmp_path, echo=None)
    assert [(r["layout"], r["encoding"], r["condition"]) for r in rows[:6]] == [
        ("frames", "none", 0),
        ("frames", "none", 1),
        ("frames", "rope", 0),
        ("frames", "rope", 1),
        ("frames", "learned", 0),
        ("frames", "learned", 1),
    ]
    assert len(rows) == 2 * (3 + 4)  # frames: none, rope, learned; patches: none + three
    for row in rows:
        assert SCHEMA | {"accuracy", "layout"} <= set(row)
        assert row["experiment"] == "audio" and row["seed"] == 0
        assert row["in_distribution"] is (row["condition"] == 0)
        assert row["condition_label"] == ("0.384 s", "0.768 s")[row["condition"]]
        assert 0.0 <= row["accuracy"] <= 1.0
        expected = {"frames": (12, 24), "patches": (24, 48)}[row["layout"]]
        assert row["tokens"] == expected[row["condition"]]  # 2 frames/token; 8×16 patches
    for row in rows:  # the keyword within the trained frames or beyond them
        if row["condition"] == 0:
            assert "clips_beyond_span" not in row
            assert row["accuracy_trained_span"] == row["accuracy"]
            continue
        # a 24-frame keyword fits the 24 trained frames only at onset 0 (1 of 25 onsets)
        beyond = row["clips_beyond_span"]
        assert 0 < beyond <= TINY.test_clips
        inside = TINY.test_clips - beyond
        assert ("accuracy_trained_span" in row) is (inside > 0)
        mixed = row.get("accuracy_trained_span", 0.0) * inside
        mixed += row["accuracy_beyond_span"] * beyond
        assert row["accuracy"] == pytest.approx(mixed / TINY.test_clips)
    adaptations = {(r["encoding"], r["condition"]): r["adaptation"] for r in rows}
    assert adaptations[("learned", 1)] == "interpolated"
    assert adaptations[("learned_2d", 1)] == "resampled"
    assert adaptations[("learned_factorized", 1)] == "interpolated"
    assert adaptations[("rope_axial", 1)] == "extrapolated"
    assert adaptations[("none", 1)] == "none" and adaptations[("rope", 0)] == "trained"
    assert "0.768 s" in EXPERIMENT.table(rows)

    finished = sorted(p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("eval.json"))
    assert len(finished) == 7

    def refuse(*args):
        raise AssertionError("a finished run was executed again")

    resumed = dataclasses.replace(EXPERIMENT, execute=refuse)
    assert run_experiment(resumed, TINY, tmp_path, echo=None) == rows
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("eval.json")) == finished


def test_runs_are_deterministic(tmp_path):
    config = replace_fields(TINY, encodings=("rope_axial",), layouts=("patches",))
    first = run_audio(config, tmp_path / "a", echo=None)
    assert run_audio(config, tmp_path / "b", echo=None) == first


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"layouts": ("spectrum",)}, "layouts"),
        ({"durations_s": (0.768, 0.384)}, "durations_s"),
        ({"durations_s": (0.2,)}, "duration_s"),
        ({"frames_per_token": 5}, "frames_per_token"),
        ({"patch_frames": 16}, "patch_frames"),
        ({"patch_bins": 24}, "patch_bins"),
        ({"train_clips": 0}, "train_clips"),
        ({"snr_db": 90.0}, "snr_db"),
        ({"encodings": ("rope",), "layouts": ("patches",)}, "encodings"),
        ({"encodings": ("nope_such",)}, "encodings"),
        ({"seeds": ()}, "seeds"),
    ],
)
def test_config_errors_name_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        replace_fields(TINY, **change)


def test_encoding_fixed_to_the_trained_grid_is_refused():
    config = replace_fields(TINY, encodings=("rope_2d",), layouts=("patches",))
    with pytest.raises(ValueError, match=r"encodings: 'rope_2d' on patches cannot meet"):
        prepare_audio(config)


def test_layouts_follow_the_registry():
    assert layouts_of("none") == ("frames", "patches")
    assert layouts_of("alibi") == ("frames",) and layouts_of("sinusoidal") == ("frames",)
    assert layouts_of("rope_axial") == ("patches",) and layouts_of("learned_2d") == ("patches",)


def test_patch_positions_are_their_time_and_frequency_cells():
    frames, bins = 48, FREQ_BINS
    # each value names its frame and bin, so a token shows which cell it came from
    spectrogram = (torch.arange(frames)[:, None] * 1000 + torch.arange(bins)).float()[None]
    tokens = tokenize(spectrogram, TINY, "patches")[0]  # (seq, 8 · 16)
    grid = TINY.grid("patches", 1)
    assert grid == (6, 8)
    positions = token_positions(2, grid)
    first = tokens.min(-1).values  # each patch's first frame and bin
    assert torch.equal(positions[0], (first // 1000).long() // TINY.patch_frames)
    assert torch.equal(positions[1], (first % 1000).long() // TINY.patch_bins)
    # the longer clip's positions extend the trained ones: the first T·F tokens are the same
    trained = token_positions(2, TINY.grid("patches", 0))
    assert torch.equal(positions[:, : trained.shape[1]], trained)
    assert positions[0].max() == 5 > trained[0].max() == 2
    assert torch.equal(token_positions(1, TINY.grid("frames", 1)), torch.arange(24))
    with pytest.raises(ValueError, match="num_axes"):
        token_positions(3, grid)


def test_frame_tokens_are_consecutive_frames():
    data = make_audio_dataset(2, 0.384, seed=1)
    tokens = tokenize(data.spectrograms, TINY, "frames")
    assert tokens.shape == (2, 12, 2 * FREQ_BINS)
    assert torch.equal(tokens[:, 3, FREQ_BINS:], data.spectrograms[:, 7])


@pytest.mark.parametrize("encoding", ["learned", "learned_2d", "learned_factorized", "rope"])
def test_tables_meet_the_longer_grid(encoding):
    layout = layouts_of(encoding)[0]
    model = TINY.classifier(encoding, layout)
    long = TINY.grid(layout, 1)
    table = model.body.additive
    before = None if table is None else [p.detach().clone() for p in table.parameters()]
    how = adapt_to_grid(model, long)
    tokens = torch.randn(2, long[0] * (long[1] if len(long) > 1 else 1), model.embed.in_features)
    assert model(tokens, token_positions(model.body.num_axes, long)).shape == (2, 8)
    if encoding == "rope":
        assert how == "extrapolated"
        return
    assert table is not None and before is not None
    after = [p.detach() for p in table.parameters()]
    if encoding == "learned_factorized":
        assert how == "interpolated"
        time, frequency = after
        assert time.shape[0] == long[0] == 2 * before[0].shape[0]
        assert torch.equal(frequency, before[1])  # the frequency axis is not longer
        # linear, align_corners=False: the ends are kept, new rows average neighbours
        assert torch.allclose(time[0], before[0][0]) and torch.allclose(time[-1], before[0][-1])
        assert torch.allclose(time[2], 0.75 * before[0][1] + 0.25 * before[0][0])
    else:
        assert how == ("resampled" if encoding == "learned_2d" else "interpolated")
        assert after[0].shape[0] == 2 * before[0].shape[0]


class _ReadsLabel(torch.nn.Module):
    """Predicts the class written in each clip's first token value."""

    def forward(self, tokens, positions):
        return torch.nn.functional.one_hot(tokens[:, 0, 0].long(), 8).float()


def test_span_accuracies_split_seen_from_new_positions():
    # trained clips: 24 frames, so only a keyword at onset 0 lies within the trained span
    onsets = torch.tensor([0, 0, 0, 5, 10, 24])
    labels = torch.tensor([1, 2, 3, 4, 5, 6])
    predicted = torch.tensor([1, 2, 0, 4, 0, 0])  # 2 of 3 inside right, 1 of 3 beyond
    test = AudioDataset(torch.zeros(6, 48, FREQ_BINS), labels, onsets)
    tokens = predicted.float()[:, None, None]
    spans = span_accuracies(_ReadsLabel(), tokens, torch.arange(1), test, TINY)
    assert spans == {
        "accuracy": 0.5,
        "accuracy_trained_span": pytest.approx(2 / 3),
        "accuracy_beyond_span": pytest.approx(1 / 3),
        "clips_beyond_span": 3,
    }

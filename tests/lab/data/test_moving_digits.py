"""Moving digits: seeded clips, the digit translated (and bounced) frame by frame, labels
that carry digit and direction, prefixes of longer clips, tubelets and their positions."""

from __future__ import annotations

import pytest
import torch

from posenc.lab.data.moving_digits import (
    DIRECTIONS,
    NUM_CLASSES,
    NUM_DIRECTIONS,
    bounce,
    make_moving_digits,
    tubelets,
)


def _digits(count: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    """Random 8×8 'digits' of intensities 1..16 (never blank, so every pixel is visible)."""
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randint(1, 17, (count, 64), generator=generator)
    return pixels, torch.arange(count) % 10


def _reference_corner(start: int, velocity: int, t: int, limit: int) -> int:
    """The corner after ``t`` moves, walking pixel by pixel and turning at the edges."""
    position, direction = start, 1 if velocity > 0 else -1 if velocity < 0 else 0
    for _ in range(t * abs(velocity)):
        if not 0 <= position + direction <= limit:
            direction = -direction
        position += direction
    return position


def test_seeded_and_distinct() -> None:
    pixels, labels = _digits()
    one = make_moving_digits(pixels, labels, frames=6, seed=3)
    assert torch.equal(one.videos, make_moving_digits(pixels, labels, frames=6, seed=3).videos)
    assert not torch.equal(one.videos, make_moving_digits(pixels, labels, frames=6, seed=4).videos)
    assert one.videos.shape == (24, 6, 16, 16) and one.videos.dtype == torch.float32


@pytest.mark.parametrize(("canvas", "step", "frames"), [(16, 1, 12), (11, 2, 9), (9, 1, 5)])
def test_each_frame_is_the_digit_at_its_bounced_corner(canvas: int, step: int, frames: int) -> None:
    pixels, labels = _digits()
    clips = make_moving_digits(pixels, labels, frames=frames, canvas=canvas, step=step, seed=1)
    limit = canvas - 8
    digit_images = pixels.float().reshape(-1, 8, 8) / 16
    for clip in range(pixels.shape[0]):
        dr, dc = DIRECTIONS[int(clips.directions[clip])]
        r0, c0 = clips.corners[clip, 0].tolist()
        for t in range(frames):
            r = _reference_corner(r0, dr * step, t, limit)
            c = _reference_corner(c0, dc * step, t, limit)
            expected = torch.zeros(canvas, canvas)
            expected[r : r + 8, c : c + 8] = digit_images[clip]
            assert torch.equal(clips.videos[clip, t], expected), (clip, t)
        # The first move is the labelled one: no bounce between frames 0 and 1.
        assert torch.equal(
            clips.corners[clip, 1] - clips.corners[clip, 0], torch.tensor([dr, dc]) * step
        )


def test_labels_carry_digit_and_direction() -> None:
    pixels, labels = _digits(400)
    clips = make_moving_digits(pixels, labels, frames=4, seed=0)
    assert torch.equal(clips.labels // NUM_DIRECTIONS, labels)
    assert torch.equal(clips.labels % NUM_DIRECTIONS, clips.directions)
    assert set(clips.labels.tolist()) == set(range(NUM_CLASSES))  # 400 clips reach all 40


def test_longer_clips_and_larger_canvas_extend_the_short_one() -> None:
    pixels, labels = _digits()
    short = make_moving_digits(pixels, labels, frames=4, seed=2)
    for frames in (8, 16):
        longer = make_moving_digits(pixels, labels, frames=frames, seed=2)
        assert torch.equal(longer.videos[:, :4], short.videos)
        assert torch.equal(longer.labels, short.labels)
    larger = make_moving_digits(pixels, labels, frames=4, canvas=32, seed=2)
    assert larger.videos.shape == (24, 4, 32, 32)
    assert torch.equal(larger.labels, short.labels)


def test_bounce_folds_onto_the_range() -> None:
    assert bounce(torch.arange(-2, 9), 3).tolist() == [2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]
    with pytest.raises(ValueError, match="limit"):
        bounce(torch.arange(3), 0)


def test_tubelets_reassemble_at_their_positions() -> None:
    pixels, labels = _digits(3)
    videos = make_moving_digits(pixels, labels, frames=8, canvas=12, seed=0).videos
    tokens, positions = tubelets(videos, time_patch=2, patch_size=4)
    assert tokens.shape == (3, 4 * 3 * 3, 2 * 4 * 4) and positions.shape == (3, 36)
    rebuilt = torch.full_like(videos, float("nan"))
    for k, (t, h, w) in enumerate(positions.t().tolist()):
        block = tokens[:, k].reshape(3, 2, 4, 4)
        rebuilt[:, 2 * t : 2 * t + 2, 4 * h : 4 * h + 4, 4 * w : 4 * w + 4] = block
    assert torch.equal(rebuilt, videos)  # every pixel once, from the token at its position
    assert positions[:, 0].tolist() == [0, 0, 0] and positions[:, 1].tolist() == [0, 0, 1]
    assert positions[:, 9].tolist() == [1, 0, 0]  # t-major, then row-major


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"canvas": 8}, "canvas"),
        ({"canvas": 9, "step": 2}, "canvas"),
        ({"frames": 1}, "frames"),
        ({"step": 0}, "step"),
        ({"pixels": torch.zeros(2, 63, dtype=torch.long)}, "pixels"),
        ({"pixels": torch.full((2, 64), 17)}, "pixels"),
        ({"labels": torch.zeros(3, dtype=torch.long)}, "labels"),
        ({"labels": torch.tensor([0, 10])}, "labels"),
    ],
)
def test_bad_clip_arguments_are_named(kwargs: dict[str, object], name: str) -> None:
    arguments: dict[str, object] = {
        "pixels": torch.zeros(2, 64, dtype=torch.long),
        "labels": torch.tensor([0, 1]),
        "frames": 4,
        "canvas": 16,
    } | kwargs
    with pytest.raises(ValueError, match=name):
        make_moving_digits(**arguments)  # type: ignore[arg-type]


def test_bad_tubelet_arguments_are_named() -> None:
    videos = torch.zeros(2, 6, 16, 16)
    with pytest.raises(ValueError, match="time_patch"):
        tubelets(videos, time_patch=4, patch_size=4)
    with pytest.raises(ValueError, match="patch_size"):
        tubelets(videos, time_patch=2, patch_size=5)
    with pytest.raises(ValueError, match="videos"):
        tubelets(videos[0], time_patch=2, patch_size=4)

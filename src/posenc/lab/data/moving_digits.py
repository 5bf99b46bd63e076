"""Moving digits: short videos of one 8×8 digit sliding over a blank canvas, for video tasks.

Each clip is ``frames`` frames of a ``canvas × canvas`` image, blank (0) except for one
sklearn digit (:mod:`posenc.lab.data.digits`, intensities 0..16 scaled to ``[0, 1]``) whose
top-left corner moves ``step`` pixels per frame in one of four directions (:data:`DIRECTIONS`:
right, left, down, up) and **bounces** off the canvas edges, so the digit always stays whole.
Along the moving axis the corner follows a triangle wave over ``[0, L]``, ``L = canvas − 8``:

.. math:: u = p_0 + v\\,t, \\quad m = u \\bmod 2L, \\quad p_t = m \\text{ if } m \\le L
    \\text{ else } 2L - m

The label needs appearance and motion: ``label = digit · 4 + direction`` (40 classes). The
start is drawn so that the first move goes in the labelled direction (no bounce between
frames 0 and 1), hence the direction is readable from any clip.

Clips are a pure function of ``(pixels, seed)``: the direction and the start (as a fraction
of the free range) are drawn independently of ``frames`` and ``canvas``, so a clip of ``2F``
or ``4F`` frames begins with the ``F``-frame clip of the same seed, and a larger canvas keeps
each clip's digit and direction. :func:`tubelets` cuts videos into ``t × p × p`` tokens with
their ``(t, h, w)`` grid positions (:func:`~posenc.positions.grid_positions`), the layout 3D
encodings and M-RoPE read.

Example::

    >>> pixels = torch.full((3, 64), 16)
    >>> clips = make_moving_digits(pixels, torch.tensor([0, 1, 2]), frames=4, canvas=16)
    >>> clips.videos.shape, clips.labels // NUM_DIRECTIONS
    (torch.Size([3, 4, 16, 16]), tensor([0, 1, 2]))
    >>> tokens, positions = tubelets(clips.videos, time_patch=2, patch_size=4)
    >>> tokens.shape, positions.shape
    (torch.Size([3, 32, 32]), torch.Size([3, 32]))
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.lab.batch import derive_seed
from posenc.lab.data.digits import IMAGE_SIZE, LEVELS
from posenc.lab.data.digits import NUM_CLASSES as NUM_DIGITS
from posenc.positions import grid_positions

__all__ = [
    "DIRECTIONS",
    "NUM_CLASSES",
    "NUM_DIRECTIONS",
    "MovingDigits",
    "bounce",
    "make_moving_digits",
    "tubelets",
]

#: ``(row, column)`` unit velocity of each direction: right, left, down, up.
DIRECTIONS: tuple[tuple[int, int], ...] = ((0, 1), (0, -1), (1, 0), (-1, 0))
NUM_DIRECTIONS = len(DIRECTIONS)
NUM_CLASSES = NUM_DIGITS * NUM_DIRECTIONS  # label = digit · NUM_DIRECTIONS + direction


@dataclass(frozen=True)
class MovingDigits:
    """Clips and what made them.

    Attributes:
        videos: ``(clips, frames, canvas, canvas)`` float32 in ``[0, 1]``, background 0.
        labels: ``(clips,)`` int64, ``digit · NUM_DIRECTIONS + direction``.
        digits: ``(clips,)`` the digit class of each clip (the input ``labels``).
        directions: ``(clips,)`` index into :data:`DIRECTIONS`.
        corners: ``(clips, frames, 2)`` the digit's top-left ``(row, column)`` per frame.
    """

    videos: Tensor
    labels: Tensor
    digits: Tensor
    directions: Tensor
    corners: Tensor


def bounce(unfolded: Tensor, limit: int) -> Tensor:
    """Fold free positions onto ``[0, limit]`` by reflecting off both ends (triangle wave).

    ``limit`` ≥ 1. Example::

        >>> bounce(torch.arange(-2, 9), 3).tolist()
        [2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]
    """
    limit = check_positive_int("limit", limit)
    folded = unfolded.remainder(2 * limit)
    return torch.where(folded <= limit, folded, 2 * limit - folded)


def make_moving_digits(
    pixels: Tensor,
    labels: Tensor,
    frames: int,
    canvas: int = 16,
    *,
    step: int = 1,
    seed: int = 0,
) -> MovingDigits:
    """One clip per digit image: the digit moving ``step`` pixels per frame, bouncing.

    The clip's direction and start are drawn from ``seed`` alone (not from ``frames`` or
    ``canvas``): the start along the moving axis lies in ``[0, L − step]`` for a positive
    velocity and ``[step, L]`` for a negative one, the other axis anywhere in ``[0, L]``.

    Args:
        pixels: ``(clips, 64)`` digit intensities 0..16 (:func:`~posenc.lab.data.digits.\
load_digits_splits`).
        labels: ``(clips,)`` their digit classes 0..9.
        frames: frames per clip (≥ 2, so the motion is visible).
        canvas: side of the square canvas (≥ ``8 + step``, room for one move).
        step: pixels moved per frame (≥ 1).
        seed: the draw of directions and starts.

    Returns:
        :class:`MovingDigits`.

    Raises:
        ValueError: naming the argument that is out of range or of the wrong shape.
    """
    if pixels.ndim != 2 or pixels.shape[1] != IMAGE_SIZE * IMAGE_SIZE:
        raise ValueError(
            f"pixels must be (clips, {IMAGE_SIZE * IMAGE_SIZE}), got {tuple(pixels.shape)}"
        )
    if pixels.numel() and (int(pixels.min()) < 0 or int(pixels.max()) > LEVELS - 1):
        raise ValueError(f"pixels must be intensities in [0, {LEVELS - 1}]")
    if labels.shape != (pixels.shape[0],):
        raise ValueError(
            f"labels must be ({pixels.shape[0]},), one per image, got {tuple(labels.shape)}"
        )
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= NUM_DIGITS):
        raise ValueError(f"labels must be digit classes in [0, {NUM_DIGITS})")
    frames = check_positive_int("frames", frames)
    if frames < 2:
        raise ValueError(f"frames must be >= 2 so that the digit moves, got {frames}")
    step = check_positive_int("step", step)
    canvas = check_positive_int("canvas", canvas)
    if canvas < IMAGE_SIZE + step:
        raise ValueError(
            f"canvas must be >= {IMAGE_SIZE + step} (the {IMAGE_SIZE}-pixel digit plus one "
            f"step of {step}), got {canvas}"
        )
    clips = pixels.shape[0]
    generator = torch.Generator().manual_seed(derive_seed("moving_digits", seed))
    directions = torch.randint(NUM_DIRECTIONS, (clips,), generator=generator)
    fractions = torch.rand(clips, 2, generator=generator)  # start as a share of the free range
    velocity = torch.tensor(DIRECTIONS)[directions] * step  # (clips, 2)

    limit = canvas - IMAGE_SIZE
    moving = velocity != 0
    # Moving axis: [0, L − step] forward, [step, L] backward; still axis: [0, L].
    low = torch.where(velocity < 0, step, 0)
    span = torch.where(moving, limit - step + 1, limit + 1)
    start = low + (fractions * span).long().clamp(max=span - 1)  # (clips, 2)
    times = torch.arange(frames)
    corners = bounce(start[:, None, :] + velocity[:, None, :] * times[None, :, None], limit)

    # Paste each digit at its corners: canvas index = corner + offset inside the digit.
    digits = pixels.to(torch.float32).reshape(clips, IMAGE_SIZE, IMAGE_SIZE) / (LEVELS - 1)
    offsets = torch.arange(IMAGE_SIZE)
    rows = corners[..., 0, None] + offsets  # (clips, frames, 8)
    cols = corners[..., 1, None] + offsets
    videos = torch.zeros(clips, frames, canvas, canvas)
    clip_index = torch.arange(clips)[:, None, None, None]
    frame_index = times[None, :, None, None]
    videos[clip_index, frame_index, rows[..., :, None], cols[..., None, :]] = digits[:, None]
    return MovingDigits(
        videos=videos,
        labels=labels.to(torch.long) * NUM_DIRECTIONS + directions,
        digits=labels.to(torch.long),
        directions=directions,
        corners=corners,
    )


def tubelets(videos: Tensor, time_patch: int, patch_size: int) -> tuple[Tensor, Tensor]:
    """Cut videos into non-overlapping ``time_patch × patch_size × patch_size`` tokens.

    Tokens run ``t``-major, then row-major over the patch grid; inside a token the pixels are
    flattened in ``(t, h, w)`` order. Position ``k`` is the ``(t, h, w)`` index of token ``k``
    on the ``(T/τ, H/p, W/p)`` grid (:func:`~posenc.positions.grid_positions`).

    Shape:
        videos ``(clips, T, H, W)`` → tokens ``(clips, (T/τ)·(H/p)·(W/p), τ·p·p)`` and
        positions ``(3, (T/τ)·(H/p)·(W/p))`` int64.

    Raises:
        ValueError: naming ``videos``, ``time_patch`` or ``patch_size`` when the shape is not
            4-D or a patch size does not divide its axes.
    """
    if videos.ndim != 4:
        raise ValueError(f"videos must be (clips, frames, height, width), got {videos.shape}")
    time_patch = check_positive_int("time_patch", time_patch)
    patch_size = check_positive_int("patch_size", patch_size)
    clips, frames, height, width = videos.shape
    if frames % time_patch:
        raise ValueError(f"time_patch={time_patch} must divide the {frames} frames")
    if height % patch_size or width % patch_size:
        raise ValueError(f"patch_size={patch_size} must divide the {height}×{width} frames")
    grid = (frames // time_patch, height // patch_size, width // patch_size)
    blocks = videos.reshape(
        clips, grid[0], time_patch, grid[1], patch_size, grid[2], patch_size
    ).permute(0, 1, 3, 5, 2, 4, 6)  # (clips, T/τ, H/p, W/p, τ, p, p)
    tokens = blocks.reshape(clips, grid[0] * grid[1] * grid[2], time_patch * patch_size**2)
    return tokens, grid_positions(*grid, device=videos.device)

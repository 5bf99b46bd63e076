"""Position ids of interleaved text, image and video tokens for M-RoPE (Qwen2-VL, 2.5-VL, 3-VL).

M-RoPE (Wang et al. 2024, Qwen2-VL, https://arxiv.org/abs/2409.12191, §2.1) gives every token
three position ids ``(t, h, w)``. The rule, per sequence, over runs of equal modality:

* a **text** run of ``n`` tokens starting at the running position ``p``: all three axes read
  ``p, p + 1, …, p + n − 1``; then ``p += n``;
* a **vision** run with feature grid ``(T, H, W)`` and spatial merge size ``M`` (the language
  model sees ``T × H/M × W/M`` tokens, ``t``-major, then row-major): token ``(i, r, c)`` gets
  ``(p + ⌊i·Δ⌋, p + r, p + c)``; then ``p += max(H, W) / M``. ``Δ = 1`` for Qwen2-VL and
  Qwen3-VL; Qwen2.5-VL spaces video frames in absolute time, ``Δ = tokens_per_second ·
  second_per_grid_t`` (images keep ``Δ = 1``), so equal time spans get equal position
  spans whatever the frame rate;
* Qwen3-VL feeds each video frame as its own run (its processor puts a timestamp between
  frames): a video of ``T`` frames is ``T`` grids ``(1, H, W)``, consumed one per run.

Padding (``attention_mask`` 0) is skipped and its position ids left at 0; each sequence's
``delta = max(position) + 1 − (unpadded length)`` is what a KV cache adds to the plain token
count when decoding: the next token after a cache of length ``L`` sits at ``L + delta`` on all
three axes (i.e. at ``max + 1``).

This is transformers **5.23**'s ``get_rope_index``; earlier releases (4.x) and vLLM 0.33
start the text after a video at ``max(t, h, w) + 1`` of the block, which differs whenever the
video's temporal extent exceeds its spatial one. Tested against transformers' own functions
on mixed batches with left and right padding (when installed).

Kept out of :mod:`posenc.positions` (the one-axis builders) to keep both modules small.
VideoRoPE's diagonal layout and V2PE's fractional visual steps (float ids) are in
:mod:`posenc.positions.multimodal_layouts`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.positions.sequence import check_padding_mask

__all__ = [
    "IMAGE",
    "RUN_KINDS",
    "TEXT",
    "VIDEO",
    "MRopeVersion",
    "check_grid_thw",
    "check_grids",
    "mrope_position_ids",
    "sequence_position_ids",
    "type_runs",
    "vision_position_ids",
]

#: Token types of ``token_types`` (transformers' ``mm_token_type_ids``).
TEXT, IMAGE, VIDEO = 0, 1, 2
MRopeVersion = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
_VERSIONS: tuple[str, ...] = get_args(MRopeVersion)


def check_grid_thw(
    grid_thw: Tensor | Sequence[int], spatial_merge_size: int
) -> tuple[int, int, int, int]:
    """One vision run's ``(t, h, w)`` and merge size, checked: three sizes >= 1, height and
    width multiples of ``spatial_merge_size``; ``ValueError`` naming the argument."""
    if isinstance(grid_thw, Tensor):
        grid_thw = grid_thw.tolist()
    if len(grid_thw) != 3:
        raise ValueError(f"grid_thw must be (t, h, w), got {list(grid_thw)}")
    t, h, w = (_grid_size(f"grid_thw[{i}]", n) for i, n in enumerate(grid_thw))
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    if h % merge or w % merge:
        raise ValueError(
            f"grid_thw height and width must be multiples of spatial_merge_size ({merge}), "
            f"got {(t, h, w)}"
        )
    return t, h, w, merge


def vision_position_ids(
    start: int, grid_thw: Sequence[int], *, spatial_merge_size: int = 1, interval: float = 1.0
) -> Tensor:
    """``(3, T·H/M·W/M)`` position ids of one vision run starting at ``start``.

    Token ``(i, r, c)`` (``t``-major, then row-major) gets ``(start + ⌊i·interval⌋, start + r,
    start + c)``.

    Example::

        >>> vision_position_ids(5, (2, 4, 4), spatial_merge_size=2).tolist()[0]
        [5, 5, 5, 5, 6, 6, 6, 6]
    """
    t, h, w, merge = check_grid_thw(grid_thw, spatial_merge_size)
    times = (torch.arange(t) * interval).long() + start  # floor after the multiply
    rows = torch.arange(h // merge) + start
    cols = torch.arange(w // merge) + start
    grid = torch.meshgrid(times, rows, cols, indexing="ij")
    return torch.stack(grid).reshape(3, -1)


def type_runs(types: list[int]) -> list[tuple[int, int]]:
    """``(type, length)`` of each run of equal token type."""
    return [(kind, len(list(group))) for kind, group in itertools.groupby(types)]


def mrope_position_ids(
    token_types: Tensor,
    image_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
    video_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
    *,
    attention_mask: Tensor | None = None,
    spatial_merge_size: int = 2,
    version: MRopeVersion = "qwen2_vl",
    tokens_per_second: float = 2.0,
    second_per_grid_ts: Sequence[float] | Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """M-RoPE position ids ``(3, batch, seq)`` and decode deltas ``(batch, 1)``.

    Args:
        token_types: ``(batch, seq)`` of :data:`TEXT` (0), :data:`IMAGE` (1), :data:`VIDEO` (2).
        image_grid_thw: ``(num_images, 3)`` feature grids, in the order the image runs appear
            (row by row of the batch).
        video_grid_thw: ``(num_videos, 3)`` likewise for video runs (Qwen3-VL: whole videos,
            split here into frames, one run per frame).
        attention_mask: ``(batch, seq)``, bool or 0/1, 0 on padding (left or right); None =
            no padding.
        spatial_merge_size: ``M``, patches merged per side before the language model (2 in
            every Qwen-VL).
        version: ``"qwen2_vl"``, ``"qwen2_5_vl"`` (absolute video time) or ``"qwen3_vl"``.
        tokens_per_second: Qwen2.5-VL's ``vision_config.tokens_per_second``.
        second_per_grid_ts: Qwen2.5-VL's seconds per temporal grid step of each video
            (``temporal_patch_size / fps``); None = 1 s each.

    Returns:
        ``(position_ids, deltas)``: int64 ``(3, batch, seq)`` (padding 0) and ``(batch, 1)``.

    Raises:
        ValueError: naming the argument: wrong shapes or types, an ``attention_mask`` that is
            not 0/1 or bool, a run without a grid, grids left over, a run whose length
            differs from its grid's token count.
    """
    check_in_choices("version", version, _VERSIONS)
    check_positive_float("tokens_per_second", tokens_per_second)
    if not isinstance(token_types, Tensor) or token_types.dim() != 2:
        raise ValueError("token_types must be a (batch, seq) tensor of 0 text, 1 image, 2 video")
    types = token_types.long().cpu()
    if types.numel() and not bool(((types >= 0) & (types <= 2)).all()):
        raise ValueError("token_types must hold 0 (text), 1 (image) or 2 (video) only")
    real = (
        None
        if attention_mask is None
        else check_padding_mask(attention_mask, "attention_mask", tuple(types.shape)).cpu()
    )
    images = check_grids("image_grid_thw", image_grid_thw)
    videos = check_grids("video_grid_thw", video_grid_thw)
    seconds = (
        [1.0] * len(videos) if second_per_grid_ts is None else list(map(float, second_per_grid_ts))
    )
    if len(seconds) != len(videos):
        raise ValueError(
            f"second_per_grid_ts must hold one value per video ({len(videos)}), got {len(seconds)}"
        )
    if version == "qwen3_vl":  # one grid (and run) per frame
        videos = [(1, h, w) for t, h, w in videos for _ in range(t)]
        seconds = [1.0] * len(videos)
    # each run of a type takes the next grid of that type (and, for videos, its seconds)
    queues: dict[int, list[tuple[tuple[int, int, int], float]]] = {
        IMAGE: [(grid, 1.0) for grid in images],
        VIDEO: list(zip(videos, seconds, strict=True)),
    }
    batch, seq = types.shape
    position_ids = torch.zeros(3, batch, seq, dtype=torch.long)
    deltas = torch.zeros(batch, 1, dtype=torch.long)
    for row in range(batch):
        keep = torch.ones(seq, dtype=torch.bool) if real is None else real[row]
        pieces, position = [], 0
        for kind, length in type_runs(types[row][keep].tolist()):
            if kind == TEXT:
                pieces.append((torch.arange(length) + position).expand(3, length))
                position += length
                continue
            name = "image_grid_thw" if kind == IMAGE else "video_grid_thw"
            if not queues[kind]:
                raise ValueError(f"{name} has fewer grids than the sequence has runs of that type")
            grid, second = queues[kind].pop(0)
            absolute_time = kind == VIDEO and version == "qwen2_5_vl"
            interval = tokens_per_second * second if absolute_time else 1.0
            ids = vision_position_ids(
                position, grid, spatial_merge_size=spatial_merge_size, interval=interval
            )
            if ids.shape[1] != length:
                frames = (
                    " (qwen3_vl numbers each video frame as its own run: frames separated by "
                    "text, their timestamps, as its processor writes them)"
                    if kind == VIDEO and version == "qwen3_vl"
                    else ""
                )
                raise ValueError(
                    f"a run of {length} tokens (row {row}) does not match its {name} entry "
                    f"{grid}, which gives {ids.shape[1]} tokens at spatial_merge_size "
                    f"{spatial_merge_size}{frames}"
                )
            pieces.append(ids)
            position += max(grid[1], grid[2]) // spatial_merge_size
        if pieces:
            ids = torch.cat(pieces, dim=1)
            position_ids[:, row, keep] = ids
            deltas[row, 0] = int(ids.max()) + 1 - ids.shape[1]
    for kind, name in ((IMAGE, "image_grid_thw"), (VIDEO, "video_grid_thw")):
        if queues[kind]:
            raise ValueError(f"{name} has {len(queues[kind])} grid(s) left over after every run")
    return position_ids.to(token_types.device), deltas.to(token_types.device)


def check_grids(
    name: str, grids: Tensor | Sequence[Sequence[int]] | None
) -> list[tuple[int, int, int]]:
    if grids is None:
        return []
    rows = grids.tolist() if isinstance(grids, Tensor) else [list(g) for g in grids]
    out = []
    for index, grid in enumerate(rows):
        if len(grid) != 3:
            raise ValueError(f"{name}[{index}] must be (t, h, w), got {grid}")
        t, h, w = (_grid_size(f"{name}[{index}]", n) for n in grid)
        out.append((t, h, w))
    return out


def _grid_size(name: str, value: object) -> int:
    """A grid size: a whole number >= 1 (an int, or a float or 0-d tensor holding one);
    ``ValueError`` naming ``name`` otherwise (a fractional size is not truncated)."""
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must hold whole numbers >= 1 (t, h, w), got {value!r}")
    return value


#: Kinds of run :func:`sequence_position_ids` takes.
RUN_KINDS = ("text", "action", "image", "video")


def sequence_position_ids(
    runs: Sequence[tuple[str, Any]],
    *,
    spatial_merge_size: int = 2,
    version: MRopeVersion = "qwen2_vl",
    tokens_per_second: float = 2.0,
    second_per_grid_ts: Sequence[float] | None = None,
    frame_separator: int | None = None,
) -> tuple[Tensor, Tensor]:
    """M-RoPE ids ``(3, seq)`` and the run kind of each token, for one sequence of runs.

    Runs: ``("text", n)``, ``("action", n)``, ``("image", (t, h, w))``, ``("video", (t, h,
    w))``. A vision-language-action sequence is ``[image | text | image (another camera) |
    text (instruction) | action (chunk)]``; a history of frames is a video run or one image
    run per frame. **Action tokens are numbered as text** (each a new position on all three
    axes, continuing from the running position): VLA models built on a Qwen-VL language model
    emit actions as ordinary tokens of its vocabulary, so the model's own rule numbers them
    (a chunk of ``k`` steps × ``d`` dimensions is ``k·d`` tokens). Each image run starts where
    the previous run ended (``max(h, w)/M`` after an image), so camera views do not share
    positions; two vision runs must be separated by a text token (a vision-end marker), as
    every Qwen-VL processor does, or their token types could not tell them apart.

    Qwen3-VL (``version="qwen3_vl"``) numbers each frame of a video as its own run: its
    processor writes a video of ``T`` frames as ``T`` frames each after its timestamp text
    (``<vision_end> <t seconds> <vision_start>`` between two frames), and transformers'
    ``get_rope_index`` splits ``video_grid_thw`` into one ``(1, h, w)`` grid per frame. A
    ``("video", (T, h, w))`` run with ``T > 1`` is laid out that way here: ``T`` frames with
    ``frame_separator`` text tokens between two of them (how many the tokenizer makes of
    the markers and the timestamp); the separators count as ``"text"`` in ``kinds``.

    Args:
        runs: the runs, in order.
        spatial_merge_size, version, tokens_per_second, second_per_grid_ts: as
            :func:`mrope_position_ids`.
        frame_separator: text tokens between two frames of a Qwen3-VL video (≥ 1); needed
            for a Qwen3-VL video run of more than one frame, unused otherwise.

    Returns:
        ``(ids, kinds)``: int64 ``(3, seq)`` and int64 ``(seq,)`` indexing :data:`RUN_KINDS`.

    Example::

        >>> ids, kinds = sequence_position_ids([("image", (1, 4, 4)), ("text", 3), ("action", 2)])
        >>> ids[0].tolist()
        [0, 0, 0, 0, 2, 3, 4, 5, 6]
    """
    types: list[int] = []
    kinds: list[int] = []
    images: list[tuple[int, int, int]] = []
    videos: list[tuple[int, int, int]] = []
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    check_in_choices("version", version, _VERSIONS)
    if frame_separator is not None:
        frame_separator = check_positive_int("frame_separator", frame_separator)
    for index, run in enumerate(runs):
        if not isinstance(run, (tuple, list)) or len(run) != 2 or run[0] not in RUN_KINDS:
            raise ValueError(
                f"runs[{index}] must be (kind, size) with kind one of {', '.join(RUN_KINDS)}, "
                f"got {run!r}"
            )
        kind, size = run
        if kind in ("text", "action"):
            count = check_positive_int(f"runs[{index}] length", size)
            token = TEXT
        else:
            grid = check_grids(f"runs[{index}]", [size])[0]
            (images if kind == "image" else videos).append(grid)
            count = grid[0] * (grid[1] // merge) * (grid[2] // merge)
            token = IMAGE if kind == "image" else VIDEO
            if types and types[-1] != TEXT:
                raise ValueError(
                    f"runs[{index}] follows another vision run directly: put a text token (a "
                    "vision-end marker) between them, as the Qwen-VL processors do"
                )
            if kind == "video" and version == "qwen3_vl" and grid[0] > 1:
                _add_frames(types, kinds, grid, merge, frame_separator, index)
                continue
        types += [token] * count
        kinds += [RUN_KINDS.index(kind)] * count
    ids, _ = mrope_position_ids(
        torch.tensor([types]),
        images or None,
        videos or None,
        spatial_merge_size=merge,
        version=version,
        tokens_per_second=tokens_per_second,
        second_per_grid_ts=second_per_grid_ts,
    )
    return ids[:, 0], torch.tensor(kinds)


def _add_frames(
    types: list[int],
    kinds: list[int],
    grid: tuple[int, int, int],
    merge: int,
    separator: int | None,
    index: int,
) -> None:
    """A Qwen3-VL video: its frames, ``separator`` text tokens between two of them."""
    frames, height, width = grid
    if separator is None:
        raise ValueError(
            f"frame_separator is needed: runs[{index}] is a video of {frames} frames, which "
            "Qwen3-VL numbers one frame per run, frames separated by text (each frame's "
            "timestamp and vision markers, as its processor writes them); give "
            "frame_separator, the number of text tokens between two frames, or give the "
            "frames as ('video', (1, h, w)) runs separated by ('text', n) runs"
        )
    per_frame = (height // merge) * (width // merge)
    for frame in range(frames):
        if frame:
            types += [TEXT] * separator
            kinds += [RUN_KINDS.index("text")] * separator
        types += [VIDEO] * per_frame
        kinds += [RUN_KINDS.index("video")] * per_frame

"""Qwen-Omni's time-aligned M-RoPE (TM-RoPE) position ids: text, audio, image and video, with a
video's audio interleaved by time.

TM-RoPE (Qwen2.5-Omni, Xu et al. 2025, https://arxiv.org/abs/2503.20215, §2.2; Qwen3-Omni,
https://arxiv.org/abs/2509.17765, §2) numbers a sequence's tokens on ``(t, h, w)`` as M-RoPE
does, with the temporal id an **absolute time**: ``ρ`` ids per second (``position_id_per_seconds``),
the rate the audio encoder emits tokens at, so an audio token and a video frame of the same
instant share a temporal id: 25 for Qwen2.5-Omni (40 ms), 13 for the released Qwen3-Omni
checkpoints (≈ 80 ms; transformers' config default of 25 is Qwen2.5-Omni's). With the running
position ``p`` (0 at the start), over the runs:

* **text** (markers included) and **audio** of ``n`` tokens: ``p, …, p + n − 1`` on all axes
  (an audio token per id: time and text share one axis);
* an **image** ``(T, H, W)`` (merge ``M``): patch ``(f, r, c)`` at ``(p + ρ f, p + r, p + c)``;
* a **video** with ``s`` seconds per temporal grid step: ``(p + ⌊ρ s f⌋, p + r, p + c)``
  (Qwen2.5-Omni floors; Qwen3-Omni keeps the fraction);

after an image, video or audio run the next token sits at ``max + 1``. Media runs carry their
markers (``<bos> … <eos>`` as the processors write them). A **video with its audio**
(``use_audio_in_video``) numbers both streams from the same ``p`` and interleaves them by time:
Qwen3-Omni token by token (video first on equal temporal ids), Qwen2.5-Omni in chunks of
``ρ · seconds_per_chunk`` ids (video chunk, then audio chunk), its two opening and two closing
markers sharing one position each. (transformers' ``use_audio_in_video`` holds for every video
of a batch; here each run says whether its video carries audio.)

This is transformers 5.23's ``Qwen2_5OmniThinker…get_rope_index`` /
``Qwen3OmniMoeThinker…get_rope_index``, tested against them on mixed sequences and padded
batches (videos' times computed as they do, in float32). Pair the ids with
:meth:`MultiAxisRotary.mrope <posenc.rotary.MultiAxisRotary.mrope>` (chunked sections for
Qwen2.5-Omni, interleaved for Qwen3-Omni, as their configs say).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.positions.multimodal import check_grid_thw

__all__ = ["OMNI_RUN_KINDS", "OmniVersion", "omni_position_ids"]

OmniVersion = Literal["qwen2_5_omni", "qwen3_omni"]
#: Kinds of run :func:`omni_position_ids` takes, and the token kinds it returns (indices).
OMNI_RUN_KINDS = ("text", "audio", "image", "video", "video_audio")
TEXT, AUDIO, IMAGE, VIDEO = 0, 1, 2, 3


def omni_position_ids(
    runs: Sequence[tuple[Any, ...]],
    *,
    version: OmniVersion = "qwen3_omni",
    spatial_merge_size: int = 2,
    position_id_per_seconds: float | None = None,
    seconds_per_chunk: float = 2.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """TM-RoPE ids ``(3, seq)`` of one sequence, each token's kind, and the decode delta.

    Runs (media runs include their opening and closing markers, as the processors write
    them):

    * ``("text", n)``: ``n`` text tokens;
    * ``("audio", n)``: ``<audio_bos>``, ``n`` audio tokens, ``<audio_eos>``;
    * ``("image", (t, h, w))``: ``<vision_bos>``, ``t·h·w/M²`` patches, ``<vision_eos>``;
    * ``("video", (t, h, w), s)``: likewise with ``s`` seconds per temporal grid step
      (``temporal_patch_size / fps``, transformers' ``second_per_grids``);
    * ``("video_audio", (t, h, w), s, n)``: ``<vision_bos> <audio_bos>``, the video's
      patches and its ``n`` audio tokens interleaved by time, ``<audio_eos> <vision_eos>``.

    ``n`` is the language model's audio token count (transformers derives it from the
    feature lengths: ``_get_feat_extract_output_lengths``).

    Args:
        runs: the runs, in order.
        version: ``"qwen3_omni"`` (float ids, token-by-token interleaving) or
            ``"qwen2_5_omni"`` (int ids, chunked interleaving).
        spatial_merge_size: ``M`` (2 in both).
        position_id_per_seconds: ``ρ`` (config ``position_id_per_seconds``); None = the
            released checkpoints' (13 for Qwen3-Omni, 25 for Qwen2.5-Omni).
        seconds_per_chunk: Qwen2.5-Omni's interleaving chunk (config ``seconds_per_chunk``).

    Returns:
        ``(ids, kinds, delta)``: float64 ``(3, seq)``; int64 ``(seq,)`` indexing ``("text",
        "audio", "image", "video")``; ``max(ids) + 1 − seq`` (a 0-d float64 tensor).

    Example::

        >>> ids, kinds, delta = omni_position_ids([("text", 2), ("audio", 3), ("text", 1)])
        >>> ids[0].tolist()
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    """
    check_in_choices("version", version, get_args(OmniVersion))
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    if position_id_per_seconds is None:
        position_id_per_seconds = 13.0 if version == "qwen3_omni" else 25.0
    rate = check_positive_float("position_id_per_seconds", position_id_per_seconds)
    chunk = check_positive_float("seconds_per_chunk", seconds_per_chunk)
    pieces: list[Tensor] = []  # (3, k) float64 pieces, in order; the last one sets the next p
    kinds: list[int] = []

    def text(count: int, *, same: bool = False) -> None:
        start = float(pieces[-1].max()) + 1 if pieces else 0.0
        values = torch.full((count,), start) if same else torch.arange(count) + start
        pieces.append(values.double().expand(3, count))
        kinds.extend([TEXT] * count)

    for index, run in enumerate(runs):
        kind = run[0] if isinstance(run, (tuple, list)) and run else None
        if kind not in OMNI_RUN_KINDS:
            raise ValueError(
                f"runs[{index}] must start with one of {', '.join(OMNI_RUN_KINDS)}, got {run!r}"
            )
        arity = {"text": 2, "audio": 2, "image": 2, "video": 3, "video_audio": 4}[kind]
        if len(run) != arity:
            raise ValueError(f"runs[{index}] ({kind}) must have {arity} entries, got {run!r}")
        if kind == "text":
            text(check_positive_int(f"runs[{index}] length", run[1]))
            continue
        if kind == "audio":
            count = check_positive_int(f"runs[{index}] audio tokens", run[1])
            text(1)
            pieces.append(_audio(pieces, count))
            kinds.extend([AUDIO] * count)
            text(1)
            continue
        grid = check_grid_thw(run[1], merge)
        seconds = 1.0  # an image's frames: one id step per second (transformers' "* 1")
        if kind != "image":
            seconds = check_positive_float(f"runs[{index}] seconds per grid", run[2])
        times = _video_times(grid[0], seconds, rate, floor=version == "qwen2_5_omni")
        if kind != "video_audio":
            text(1)
            pieces.append(_vision(pieces, grid, times))
            kinds.extend([IMAGE if kind == "image" else VIDEO] * pieces[-1].shape[1])
            text(1)
            continue
        count = check_positive_int(f"runs[{index}] audio tokens", run[3])
        shared = version == "qwen2_5_omni"  # its two markers share one position
        text(2, same=shared)
        video, audio = _vision(pieces, grid, times), _audio(pieces, count)
        if version == "qwen3_omni":
            order = _by_time(video[0], audio[0])
        else:  # chunks of int(ρ · seconds_per_chunk) ids from the streams' start
            start = float(pieces[-1].max()) + 1
            order = _by_chunks(video[0], audio[0], start, float(int(rate * chunk)))
        for stream, first, stop in order:
            pieces.append((video, audio)[stream][:, first:stop])
            kinds.extend([(VIDEO, AUDIO)[stream]] * (stop - first))
        text(2, same=shared)
    if not pieces:
        raise ValueError("runs must hold at least one token")
    ids = torch.cat(pieces, dim=1)
    return ids, torch.tensor(kinds), ids.max() + 1 - ids.shape[1]


def _audio(pieces: list[Tensor], count: int) -> Tensor:
    start = float(pieces[-1].max()) + 1 if pieces else 0.0
    return (torch.arange(count, dtype=torch.float64) + start).expand(3, count)


def _vision(pieces: list[Tensor], grid: tuple[int, int, int, int], times: Tensor) -> Tensor:
    """``(p + time_f, p + r, p + c)`` of a ``(T, H/M, W/M)`` block, ``p`` past the pieces."""
    start = float(pieces[-1].max()) + 1 if pieces else 0.0
    _, height, width, merge = grid
    f, r, c = torch.meshgrid(
        times,
        torch.arange(height // merge, dtype=torch.float64),
        torch.arange(width // merge, dtype=torch.float64),
        indexing="ij",
    )
    return torch.stack((f, r, c)).reshape(3, -1) + start


def _video_times(frames: int, seconds: float, rate: float, *, floor: bool) -> Tensor:
    """``ρ s f`` as transformers computes it (float32 products), floored for Qwen2.5-Omni."""
    times = torch.arange(frames) * torch.tensor(seconds, dtype=torch.float32) * rate
    return (times.long() if floor else times).double()


def _by_time(video: Tensor, audio: Tensor) -> list[tuple[int, int, int]]:
    """Qwen3-Omni: ``(stream, start, stop)`` slices merging two time rows, video first on
    ties; the rest of the unfinished stream last."""
    order, v, a = [], 0, 0
    while v < len(video) and a < len(audio):
        if video[v] <= audio[a]:
            order.append((0, v, v + 1))
            v += 1
        else:
            order.append((1, a, a + 1))
            a += 1
    if v < len(video):
        order.append((0, v, len(video)))
    if a < len(audio):
        order.append((1, a, len(audio)))
    return order


def _chunks(times: Tensor, start: float, size: float) -> list[tuple[int, int]]:
    """transformers' ``get_chunked_index``: a new chunk where ``time − start`` reaches the
    next multiple of ``size`` (one chunk per crossing token)."""
    bounds, first, current = [], 0, 1
    for i, value in enumerate(times.tolist()):
        if value - start >= current * size:
            bounds.append((first, i))
            first, current = i, current + 1
    return [*bounds, (first, len(times))]


def _by_chunks(
    video: Tensor, audio: Tensor, start: float, size: float
) -> list[tuple[int, int, int]]:
    """Qwen2.5-Omni: video chunk ``j`` then audio chunk ``j``, for every ``j``."""
    video_chunks, audio_chunks = _chunks(video, start, size), _chunks(audio, start, size)
    order = []
    for j in range(max(len(video_chunks), len(audio_chunks))):
        for stream, chunks in ((0, video_chunks), (1, audio_chunks)):
            if j < len(chunks):
                order.append((stream, *chunks[j]))
    return order

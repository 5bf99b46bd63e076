"""Float position ids of text, image and video tokens: VideoRoPE's and V2PE's layouts.

**VideoRoPE** (Wei et al. 2025, https://arxiv.org/abs/2502.05173, §3.3–3.4; reference
``get_t_scale_rope_index`` in Wiselnn570/VideoRoPE ``videorope-transformer/
modeling_videorope.py``, the same rule as ``get_input_t_scale_modify_positions`` in its
``videorope-vllm/rotary_embedding.py``) gives every token ``(t, h, w)`` ids for
:meth:`MultiAxisRotary.videorope <posenc.rotary.MultiAxisRotary.videorope>`. Per sequence,
over runs of equal modality, with the running position ``p`` (0 at the start):

* a **text** run of ``n`` tokens: all three axes read ``p, p + 1, …, p + n − 1``; ``p += n``;
* a **vision** run with feature grid ``(T, H, W)`` and merge size ``M`` (``T × H' × W'``
  tokens, ``H' = H/M``, ``W' = W/M``, frame-major then row-major): token ``(f, r, c)`` gets

  .. math:: t = p + δ f, \\quad h = t + r − ⌊(H'−1)/2⌋, \\quad w = t + c − ⌊(W'−1)/2⌋

  — the diagonal layout (DL: a frame's spatial ids centred on its time id, so frames and
  text lie along the diagonal ``t = h = w``) with adjustable temporal spacing (ATS: ``δ``
  per frame, the reference's ``scale_factor``, 2 in its training and evaluation scripts);
  then ``p = p + δ(T − 1) + 1``: the next text token follows the **last frame's time id**
  (the reference's ``llm_pos_ids_list[-1][0].max() + 1``), not the largest h or w.

A video alone (no text) is one vision run starting at 0: :func:`videorope_vision_ids`
``(0, (F, H, W), temporal_spacing=δ)`` gives its ``(3, F·H·W)`` ids, or
:func:`videorope_position_ids` with every token :data:`~posenc.positions.multimodal.VIDEO`.

**V2PE** (Ge et al. 2024, https://arxiv.org/abs/2412.09616, §3.2; reference
``get_rope_pos_id`` in OpenGVLab/V2PE ``internvl/v2pe_utils.py``) numbers tokens on one axis
for 1D RoPE: a text token's position is the previous one's ``+ 1``, a visual token's the
previous one's ``+ δ`` (``δ = rope_pos_id_stride / num_image_token``, drawn per image from
``{1, 1/2, …, 1/256}`` in training, fixed at inference), and after a visual run the running
position is rounded up (``ceil``), so text after an image continues at ``⌈last⌉ + 1``. See
:func:`v2pe_position_ids`; the positions feed :class:`~posenc.rotary.RotaryEmbedding`
(``(batch, seq)``) or, as three equal axes (``pos.expand(3, *pos.shape)``), M-RoPE.

Both return float64 ids (``δ`` may be fractional); padding (``attention_mask`` 0) is skipped
and left at 0, as :func:`posenc.positions.multimodal.mrope_position_ids` does.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.positions.multimodal import IMAGE, TEXT, VIDEO, check_grid_thw, check_grids, type_runs
from posenc.positions.sequence import check_padding_mask

__all__ = ["v2pe_position_ids", "videorope_position_ids", "videorope_vision_ids"]


def videorope_vision_ids(
    start: float,
    grid_thw: Sequence[int] | Tensor,
    *,
    spatial_merge_size: int = 1,
    temporal_spacing: float = 2.0,
) -> Tensor:
    """VideoRoPE's ``(3, T·H'·W')`` float64 ids of one vision run starting at ``start``.

    Token ``(f, r, c)`` (frame-major, then row-major) gets ``t = start + δ f``,
    ``h = t + r − ⌊(H'−1)/2⌋``, ``w = t + c − ⌊(W'−1)/2⌋`` (see the module).

    Args:
        start: the running position ``p`` (0 for a video alone).
        grid_thw: ``(T, H, W)``: frames and patch rows and columns.
        spatial_merge_size: ``M``, patches merged per side (``H' = H/M``).
        temporal_spacing: ``δ``, the time step between frames (> 0, finite).

    Example::

        >>> videorope_vision_ids(0, (2, 2, 3), temporal_spacing=2.0).tolist()[1]
        [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]
    """
    spacing = _positive_step("temporal_spacing", temporal_spacing)
    start = _finite("start", start)
    t, h, w, merge = check_grid_thw(grid_thw, spatial_merge_size)
    rows, cols = h // merge, w // merge
    f64 = torch.float64
    times = start + spacing * torch.arange(t, dtype=f64)
    row = torch.arange(rows, dtype=f64) - (rows - 1) // 2
    col = torch.arange(cols, dtype=f64) - (cols - 1) // 2
    grid_t, grid_r, grid_c = torch.meshgrid(times, row, col, indexing="ij")
    return torch.stack((grid_t, grid_t + grid_r, grid_t + grid_c)).reshape(3, -1)


def videorope_position_ids(
    token_types: Tensor,
    image_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
    video_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
    *,
    attention_mask: Tensor | None = None,
    spatial_merge_size: int = 2,
    temporal_spacing: float = 2.0,
) -> tuple[Tensor, Tensor]:
    """VideoRoPE position ids ``(3, batch, seq)`` and decode deltas ``(batch, 1)``, float64.

    Arguments as :func:`posenc.positions.multimodal.mrope_position_ids` (each vision run takes the
    next
    grid of its type, row by row of the batch); ``temporal_spacing`` is ``δ``. A
    ``(seq,)`` ``token_types`` gives ``(3, seq)`` ids and ``(1,)`` deltas. The next token
    after a sequence of ``L`` real tokens sits at ``L + delta`` on all three axes (last
    time id + 1): pass it explicitly when decoding after a video — a
    :class:`~posenc.attention.KVCache` continues at ``max + 1`` over all axes, which a frame's
    h or w ids can exceed.

    Example (a video of 2 frames of a 2 × 2 patch grid, no text: ``spatial_merge_size=1``)::

        >>> types = torch.full((8,), VIDEO)
        >>> ids, _ = videorope_position_ids(types, video_grid_thw=[(2, 2, 2)], spatial_merge_size=1)
        >>> ids[0].tolist()
        [0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0]

    Raises:
        ValueError: naming the argument: wrong shapes or token types, an ``attention_mask``
            that is not 0/1 or bool, a run without a grid, grids left over, a run whose
            length differs from its grid's token count, ``temporal_spacing`` not finite and
            > 0.
    """
    spacing = _positive_step("temporal_spacing", temporal_spacing)
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    types, keep_mask, squeeze = _types_and_mask(token_types, attention_mask)
    queues = {IMAGE: check_grids("image_grid_thw", image_grid_thw)}
    queues[VIDEO] = check_grids("video_grid_thw", video_grid_thw)
    batch, seq = types.shape
    ids = torch.zeros(3, batch, seq, dtype=torch.float64)
    deltas = torch.zeros(batch, 1, dtype=torch.float64)
    for row in range(batch):
        keep = keep_mask[row]
        pieces, position = [], 0.0
        for kind, length in type_runs(types[row][keep].tolist()):
            if kind == TEXT:
                pieces.append((torch.arange(length, dtype=torch.float64) + position).expand(3, -1))
                position += length
                continue
            name = "image_grid_thw" if kind == IMAGE else "video_grid_thw"
            if not queues[kind]:
                raise ValueError(f"{name} has fewer grids than the sequence has runs of that type")
            grid = queues[kind].pop(0)
            block = videorope_vision_ids(
                position, grid, spatial_merge_size=merge, temporal_spacing=spacing
            )
            if block.shape[1] != length:
                raise ValueError(
                    f"a run of {length} tokens (row {row}) does not match its {name} entry "
                    f"{grid}, which gives {block.shape[1]} tokens at spatial_merge_size {merge}"
                )
            pieces.append(block)
            position = float(block[0, -1]) + 1  # the last frame's time id + 1
        if pieces:
            row_ids = torch.cat(pieces, dim=1)
            ids[:, row, keep] = row_ids
            deltas[row, 0] = position - row_ids.shape[1]
    for kind, name in ((IMAGE, "image_grid_thw"), (VIDEO, "video_grid_thw")):
        if queues[kind]:
            raise ValueError(f"{name} has {len(queues[kind])} grid(s) left over after every run")
    device = token_types.device
    if squeeze:
        return ids[:, 0].to(device), deltas[0].to(device)
    return ids.to(device), deltas.to(device)


def v2pe_position_ids(
    token_types: Tensor,
    visual_step: float | Sequence[float],
    *,
    attention_mask: Tensor | None = None,
) -> Tensor:
    """V2PE's float64 positions, ``token_types``' shape ``(seq,)`` or ``(batch, seq)``.

    Each token sits at the previous one's position plus its step, 1 for text
    (:data:`~posenc.positions.multimodal.TEXT`) and ``δ`` for a visual token
    (:data:`~posenc.positions.multimodal.IMAGE` or :data:`~posenc.positions.multimodal.VIDEO`),
    starting from ``-1`` as the reference does; at the end of a visual run the position is
    rounded up, so text after it continues at ``⌈last⌉ + 1``. Each row is then shifted so
    that its first real token sits at 0: a sequence that starts with text is the
    reference's numbering; one that starts with a visual run (the reference never does:
    ``<img>`` precedes every image) is the reference's rule shifted by ``1 − δ``, so every
    difference of two positions, all that RoPE reads, is the rule's. With ``δ = 1`` the
    positions are ``arange(seq)``. Decoding after a visual run that ends
    at a fractional position continues at ``⌈last⌉ + 1``: pass the positions explicitly (a
    :class:`~posenc.attention.KVCache` continues at ``last + 1``).

    Args:
        token_types: 0 text, 1 image, 2 video.
        visual_step: ``δ`` (finite, > 0; a Python or NumPy number or a 0-d tensor),
            or one per visual run in order (a sequence or 1-D tensor, row by row of the
            batch: V2PE's training draws one per image).
        attention_mask: ``token_types``' shape, bool or 0/1, 0 on padding (skipped, left at
            0).

    Example::

        >>> v2pe_position_ids(torch.tensor([0, 0, 1, 1, 1, 0]), 0.25).tolist()
        [0.0, 1.0, 1.25, 1.5, 1.75, 3.0]
    """
    types, keep_mask, squeeze = _types_and_mask(token_types, attention_mask)
    per_run, steps = _visual_steps(visual_step)
    batch, seq = types.shape
    rows = [type_runs(types[row][keep_mask[row]].tolist()) for row in range(batch)]
    visual_runs = sum(kind != TEXT for runs in rows for kind, _ in runs)
    if per_run and len(steps) != visual_runs:
        raise ValueError(
            f"visual_step must hold one step per visual run ({visual_runs}), got {len(steps)}"
        )
    positions = torch.zeros(batch, seq, dtype=torch.float64)
    next_step = iter(steps if per_run else steps * visual_runs)
    for row, runs in enumerate(rows):
        values: list[float] = []
        running = -1.0  # the position the next step starts from (the reference's -1)
        for kind, length in runs:
            step = 1.0 if kind == TEXT else next(next_step)
            values += [running + step * (i + 1) for i in range(length)]
            running = values[-1]
            if kind != TEXT:  # rounded up (within 1e-9: 3 · (1/3) is 1, not 2)
                running = float(math.ceil(round(running, 9)))
        # the first token at 0 (a leading visual token would sit at δ − 1): one shift of the
        # row, so every difference of two positions is the reference's
        first = values[0] if values else 0.0
        row_values = torch.tensor(values, dtype=torch.float64) - first
        positions[row, keep_mask[row]] = row_values
    positions = positions.to(token_types.device)
    return positions[0] if squeeze else positions


def _types_and_mask(
    token_types: Tensor, attention_mask: Tensor | None
) -> tuple[Tensor, Tensor, bool]:
    """``(batch, seq)`` int64 types on the CPU, the boolean keep mask, and whether the input
    was one ``(seq,)`` sequence."""
    if not isinstance(token_types, Tensor) or token_types.dim() not in (1, 2):
        raise ValueError(
            "token_types must be a (seq,) or (batch, seq) tensor of 0 text, 1 image, 2 video"
        )
    if token_types.is_floating_point() or token_types.is_complex():
        raise ValueError(f"token_types must be an integer tensor, got {token_types.dtype}")
    squeeze = token_types.dim() == 1
    types = token_types.long().cpu()
    types = types[None] if squeeze else types
    if types.numel() and not bool(((types >= TEXT) & (types <= VIDEO)).all()):
        raise ValueError("token_types must hold 0 (text), 1 (image) or 2 (video) only")
    if attention_mask is None:
        return types, torch.ones(types.shape, dtype=torch.bool), squeeze
    shape = tuple(token_types.shape)
    mask = check_padding_mask(attention_mask, "attention_mask", shape).cpu()
    return types, mask[None] if squeeze else mask, squeeze


def _visual_steps(visual_step: object) -> tuple[bool, list[float]]:
    """``(per_run, steps)``: one ``δ`` (a real scalar: Python, NumPy or a
    0-d tensor) or a sequence (list, tuple, 1-D tensor or array) of them, each finite and > 0."""
    if isinstance(visual_step, Tensor) and visual_step.dim() == 0:
        visual_step = visual_step.item()
    elif hasattr(visual_step, "ndim") and getattr(visual_step, "ndim", None) == 0:
        visual_step = visual_step.item()  # type: ignore[attr-defined]  # a NumPy scalar
    if isinstance(visual_step, numbers.Real) and not isinstance(visual_step, bool):
        return False, [_positive_step("visual_step", visual_step)]
    if isinstance(visual_step, Tensor):
        visual_step = visual_step.tolist()
    if isinstance(visual_step, (str, bytes)) or not isinstance(visual_step, Iterable):
        raise ValueError(
            f"visual_step must be a finite number > 0 or one per visual run, got {visual_step!r}"
        )
    steps = list(visual_step)
    return True, [_positive_step(f"visual_step[{i}]", v) for i, v in enumerate(steps)]


def _positive_step(name: str, value: object) -> float:
    """``float(value)`` for a real number (NumPy's included) that is finite and > 0."""
    if hasattr(value, "ndim") and getattr(value, "ndim", None) == 0:
        value = value.item()  # type: ignore[attr-defined]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def _finite(name: str, value: object) -> float:
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)

"""Position ids of the multimodal RoPE study's layouts: spatial reset (MRoPE-I, MHRoPE,
IL-RoPE, OmniRoPE), MM-RoPE's scaled grid and CircleRoPE's ring.

Huang et al. 2025, "Revisiting Multimodal Positional Encoding in Vision–Language Models"
(https://arxiv.org/abs/2510.23095); reference JJJYmmm/Multimodal-RoPEs (``pos_design/``),
whose golden tensors (``tests/golden/qwen3vl_rope_hf4571.pt``) the tests load. Every layout
walks the sequence's runs of equal token type (:data:`~posenc.positions.multimodal.TEXT`,
``IMAGE``, ``VIDEO``) with a running position ``p`` (0 at the start):

* a **text** run of ``n`` tokens: all three axes read ``p, …, p + n − 1``; ``p += n``;
* a **vision** run with feature grid ``(T, H, W)``, merge size ``M`` (``T × H' × W'`` tokens,
  ``H' = H/M``, ``W' = W/M``, frame-major then row-major), token ``(f, r, c)``, temporal
  stride ``s``:

  - :func:`spatial_reset_position_ids`: ``(p + s f, r, c)`` — time continues the text, the
    spatial axes restart at 0 in every image (the study's *spatial reset*, IL-RoPE's and
    OmniGen2's OmniRoPE layout); then ``p += max(s (T − 1), H' − 1, W' − 1) + 1``;
  - :func:`mmrope_position_ids`: ``(p + s σ_t f, p + σ_h r, p + σ_w c)`` (MM-RoPE's
    ``position_scale`` σ; σ = 1 is Qwen-VL's M-RoPE); then ``p = max(ids) + 1``;
  - :func:`circlerope_position_ids`: each frame's grid is centred, placed on a ring
    (:class:`CircleProjection`) in the plane orthogonal to the text diagonal ``(1, 1, 1)``,
    shifted by ``p + s f`` on every axis; then ``p = max(ids) + 1``.

Videos are fed one frame per run by default, as Qwen3-VL's processor does (a timestamp between
frames; the reference splits ``video_grid_thw`` so): ``split_video_frames=False`` keeps a
video one run of ``T`` frames. Padding (``attention_mask`` 0) is skipped and left at 0; each
row's ``delta = max(ids) + 1 − (unpadded length)``, as transformers' ``get_rope_index``.
All ids are float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.positions.multimodal import (
    IMAGE,
    TEXT,
    VIDEO,
    check_grid_thw,
    check_grids,
    type_runs,
)
from posenc.positions.sequence import check_padding_mask

__all__ = [
    "CircleProjection",
    "circlerope_position_ids",
    "mmrope_position_ids",
    "spatial_reset_position_ids",
]

Grids = Tensor | Sequence[Sequence[int]] | None
#: A vision block's ids ``(3, T·H'·W')`` and the next running position, from ``(p, T, H', W')``.
Block = Callable[[float, int, int, int], tuple[Tensor, float]]


def _frame_grid(frames: int, rows: int, cols: int) -> tuple[Tensor, Tensor, Tensor]:
    """Frame, row and column index of every token of a ``(T, H', W')`` block, float64."""
    grid = torch.meshgrid(
        torch.arange(frames, dtype=torch.float64),
        torch.arange(rows, dtype=torch.float64),
        torch.arange(cols, dtype=torch.float64),
        indexing="ij",
    )
    f, r, c = (axis.reshape(-1) for axis in grid)
    return f, r, c


def spatial_reset_position_ids(
    token_types: Tensor,
    image_grid_thw: Grids = None,
    video_grid_thw: Grids = None,
    *,
    attention_mask: Tensor | None = None,
    spatial_merge_size: int = 2,
    temporal_stride: float = 1.0,
    split_video_frames: bool = True,
) -> tuple[Tensor, Tensor]:
    """Spatial-reset ids ``(3, batch, seq)`` and deltas ``(batch, 1)``, float64.

    Vision token ``(f, r, c)`` of a run starting at ``p`` gets ``(p + s f, r, c)``; the run
    then advances ``p`` by ``max(s (T−1), H'−1, W'−1) + 1`` (the first token after it, the
    vision-end marker, takes that position). The layout of MRoPE-I and MHRoPE with
    ``spatial_reset=True`` (reference ``get_mrope_interleave_index``), and of IL-RoPE and
    OmniRoPE (``get_omnirope_index``, OmniGen2's shifted layout): the same ids, with the
    frequency allocations of :meth:`MultiAxisRotary.mrope
    <posenc.rotary.MultiAxisRotary.mrope>` (interleaved: MRoPE-I, IL-RoPE; chunked:
    OmniRoPE) or :meth:`~posenc.rotary.MultiAxisRotary.mhrope`.

    Args:
        token_types: ``(batch, seq)`` or ``(seq,)`` of 0 text, 1 image, 2 video.
        image_grid_thw, video_grid_thw: ``(n, 3)`` grids in the order the runs appear.
        attention_mask: ``token_types``' shape, 0 on padding.
        spatial_merge_size: ``M``.
        temporal_stride: ``s`` > 0.
        split_video_frames: one run per video frame (Qwen3-VL; the reference), else one
            run per video.

    Example::

        >>> ids, delta = spatial_reset_position_ids(torch.tensor([0, 1, 1, 1, 1, 0]), [[1, 4, 4]])
        >>> ids[0].tolist(), ids[1].tolist()
        ([0.0, 1.0, 1.0, 1.0, 1.0, 3.0], [0.0, 0.0, 0.0, 1.0, 1.0, 3.0])
    """
    stride = check_positive_float("temporal_stride", temporal_stride)

    def block(p: float, frames: int, rows: int, cols: int) -> tuple[Tensor, float]:
        f, r, c = _frame_grid(frames, rows, cols)
        extent = max(stride * (frames - 1), rows - 1, cols - 1)
        return torch.stack((p + stride * f, r, c)), p + extent + 1

    return _walk(
        token_types, image_grid_thw, video_grid_thw, attention_mask,
        spatial_merge_size, split_video_frames, block,
    )  # fmt: skip


def mmrope_position_ids(
    token_types: Tensor,
    image_grid_thw: Grids = None,
    video_grid_thw: Grids = None,
    *,
    attention_mask: Tensor | None = None,
    spatial_merge_size: int = 2,
    temporal_stride: float = 1.0,
    position_scale: Sequence[float] = (1.0, 1.0, 1.0),
    split_video_frames: bool = True,
) -> tuple[Tensor, Tensor]:
    """MM-RoPE's scaled ids ``(3, batch, seq)`` and deltas ``(batch, 1)``, float64.

    Vision token ``(f, r, c)`` of a run at ``p`` gets ``(p + s σ_t f, p + σ_h r, p + σ_w c)``
    (Lumos-1, Yuan et al. 2025, https://arxiv.org/abs/2507.08801, §3.2: visual axes scaled
    so their span matches the text's; reference ``get_mmrope_index``), then ``p = max(ids) +
    1``. ``position_scale = (1, 1, 1)`` is Qwen3-VL's M-RoPE layout. Arguments as
    :func:`spatial_reset_position_ids`; ``position_scale`` ``(σ_t, σ_h, σ_w)``, each > 0.
    Pair with :meth:`MultiAxisRotary.mmrope <posenc.rotary.MultiAxisRotary.mmrope>`.

    Example::

        >>> ids, _ = mmrope_position_ids(torch.tensor([0, 1, 1, 1, 1, 0]), [[1, 4, 4]],
        ...                              position_scale=(1.0, 4.0, 4.0))
        >>> ids[1].tolist()
        [0.0, 1.0, 1.0, 5.0, 5.0, 6.0]
    """
    stride = check_positive_float("temporal_stride", temporal_stride)
    if len(position_scale) != 3:
        raise ValueError(f"position_scale must give (t, h, w) scales, got {position_scale!r}")
    scale_t, scale_h, scale_w = (
        check_positive_float(f"position_scale[{i}]", v) for i, v in enumerate(position_scale)
    )

    def block(p: float, frames: int, rows: int, cols: int) -> tuple[Tensor, float]:
        f, r, c = _frame_grid(frames, rows, cols)
        ids = torch.stack((f * (stride * scale_t), r * scale_h, c * scale_w)) + p
        return ids, float(ids.max()) + 1

    return _walk(
        token_types, image_grid_thw, video_grid_thw, attention_mask,
        spatial_merge_size, split_video_frames, block,
    )  # fmt: skip


@dataclass(frozen=True)
class CircleProjection:
    """CircleRoPE's projection of a frame's grid (Wang et al. 2025,
    https://arxiv.org/abs/2505.16416; reference ``_circle_projection`` in
    JJJYmmm/Multimodal-RoPEs ``pos_design/circlerope.py``, from lose4578/CircleRoPE).

    With the grid's coordinates ``(x, y, z) = (c, r, s f)`` (moved so each axis is centred on
    0 when ``move_to_origin``), a ``"circle"`` projection puts frame 0's tokens on a ring of
    radius ``R``: angle ``θ = α θ_norm + (1 − α) θ_index`` (``θ_norm``: ``atan2(y, x)``
    rescaled to ``[0, 2π]`` over the grid; ``θ_index = 2π k / (H'W')`` for the row-major
    index ``k``), ``(x, y) = (R cos θ, R sin θ)``; ``"no_circle"`` keeps ``(x, y)``. The
    plane ``(x, y)`` is then turned orthogonal to the text diagonal: with ``n = (1, 1, 1)/√3``,
    ``u = (−1, 1, 0)/√2`` and ``v = n × u``, a point goes to ``x u + y v`` (axes ``(w, h, t)``;
    ``z`` is dropped). ``mix`` (the reference's ``dff_rate``) blends in the ``"no_circle"``
    projection of the full grid: ``(1 − mix) · circle + mix · plain``. ``move_to_positive``
    (an offset ``o``) adds ``|min| + o`` to every coordinate. Each frame ``f`` is the ring
    of frame 0 (or, with ``mix``, its own plane) shifted by ``s f`` on all axes.

    Args:
        radius: ``R`` (any real; the reference's default −1), or ``"auto"`` / ``"auto-k"``:
            ``k · |max(coordinates)|``.
        alpha: ``α`` (the reference allows ``[0, 1]`` or −1).
        method: ``"circle"`` or ``"no_circle"``.
        move_to_origin: centre the grid first.
        move_to_positive: ``None`` (no shift) or the offset ``o`` (the reference's ``True``
            is 1, ``"auto"`` 0).
        mix: in ``[0, 1]`` (the reference's ``dff_rate``; ``True`` is 1).
    """

    radius: float | str = -1.0
    alpha: float = -1.0
    method: Literal["circle", "no_circle"] = "circle"
    move_to_origin: bool = False
    move_to_positive: float | None = None
    mix: float = 0.0

    def __post_init__(self) -> None:
        check_in_choices("method", self.method, ("circle", "no_circle"))
        if isinstance(self.radius, str):
            parts = self.radius.split("-")
            ok = parts[0] == "auto" and len(parts) <= 2
            if ok and len(parts) == 2:
                try:
                    float(parts[1])
                except ValueError:
                    ok = False
            if not ok:
                raise ValueError(
                    f"radius must be a number, 'auto' or 'auto-k', got {self.radius!r}"
                )
        elif not math.isfinite(float(self.radius)):
            raise ValueError(f"radius must be finite, got {self.radius!r}")
        if self.alpha != -1 and not 0 <= self.alpha <= 1:
            raise ValueError(
                f"alpha must be in [0, 1], or -1 (the reference's default), got {self.alpha}"
            )
        if not 0 <= float(self.mix) <= 1:
            raise ValueError(f"mix must be in [0, 1], got {self.mix}")
        if self.move_to_positive is not None and not math.isfinite(float(self.move_to_positive)):
            raise ValueError(
                f"move_to_positive must be None or a finite offset, got {self.move_to_positive!r}"
            )

    def project(self, frames: int, rows: int, cols: int, stride: float) -> Tensor:
        """The ``(3, T·H'·W')`` ``(t, h, w)`` offsets of a block (before the shift by ``p``)."""
        t = torch.arange(frames, dtype=torch.float64)[:, None, None] * stride
        h = torch.arange(rows, dtype=torch.float64)[None, :, None]
        w = torch.arange(cols, dtype=torch.float64)[None, None, :]
        shape = (frames, rows, cols)
        coords = torch.stack((w.expand(shape), h.expand(shape), t.expand(shape)))  # (3, T, H, W)
        if self.move_to_origin:
            low, high = coords.amin(dim=(1, 2, 3)), coords.amax(dim=(1, 2, 3))
            coords = coords - ((low + high) / 2)[:, None, None, None]
        projected = _rotate_to_text_plane(self._ring(coords) if self.method == "circle" else coords)
        if self.mix:
            projected = (1 - self.mix) * projected + self.mix * _rotate_to_text_plane(coords)
        if self.move_to_positive is not None:
            projected = projected + projected.min().abs() + self.move_to_positive
        # every frame is frame 0's projection (z is dropped), stacked along time
        ids = torch.stack((projected[2, 0], projected[1, 0], projected[0, 0])).reshape(3, -1)
        ids = ids.repeat(1, frames)  # (t, h, w) offsets
        steps = torch.arange(frames, dtype=torch.float64).repeat_interleave(rows * cols)
        return ids + steps * stride

    def _ring(self, coords: Tensor) -> Tensor:
        """Frame 0's points on the ring, ``(3, 1, H', W')``."""
        x, y, z = coords[0, 0], coords[1, 0], coords[2, 0]
        if isinstance(self.radius, str):
            factor = float(self.radius.split("-")[1]) if "-" in self.radius else 1.0
            radius = float(coords.max().abs()) * factor
        else:
            radius = float(self.radius)
        theta = torch.atan2(y, x)
        spread = theta.max() - theta.min()
        if spread > 0:
            theta = (theta - theta.min()) / spread * (2 * math.pi)
        index = torch.arange(x.numel(), dtype=torch.float64).reshape(x.shape)
        theta = self.alpha * theta + (1 - self.alpha) * (index / x.numel() * (2 * math.pi))
        return torch.stack((radius * theta.cos(), radius * theta.sin(), z))[:, None]


def _rotate_to_text_plane(coords: Tensor) -> Tensor:
    """``x u + y v`` for the orthonormal ``u, v`` of the plane orthogonal to ``(1, 1, 1)``."""
    n = torch.full((3,), 1 / math.sqrt(3), dtype=torch.float64)
    u = torch.tensor([-n[1].item(), n[0].item(), 0.0], dtype=torch.float64)
    u = u / u.norm()
    v = torch.linalg.cross(n, u)
    v = v / v.norm()
    return coords[0][None] * u.view(3, *([1] * (coords.dim() - 1))) + coords[1][None] * v.view(
        3, *([1] * (coords.dim() - 1))
    )


def circlerope_position_ids(
    token_types: Tensor,
    image_grid_thw: Grids = None,
    video_grid_thw: Grids = None,
    *,
    attention_mask: Tensor | None = None,
    spatial_merge_size: int = 2,
    temporal_stride: float = 1.0,
    projection: CircleProjection | None = None,
    split_video_frames: bool = True,
) -> tuple[Tensor, Tensor]:
    """CircleRoPE's ids ``(3, batch, seq)`` and deltas ``(batch, 1)``, float64.

    Vision tokens of a run at ``p`` get ``p +`` :meth:`CircleProjection.project` (a ring
    orthogonal to the text diagonal, so every image token is equally far from each text
    token: the cross-modal bias the paper removes), then ``p = max(ids) + 1`` (reference
    ``get_circlerope_index``, which extends the image-only method to video by stacking
    rings along time). Arguments as :func:`spatial_reset_position_ids`; ``projection``
    default ``CircleProjection()``. Frequencies: :meth:`MultiAxisRotary.mrope
    <posenc.rotary.MultiAxisRotary.mrope>` (chunked, [16, 24, 24] in the study). The
    projection drops the time coordinate, so every frame of a run gets frame 0's points
    (shifted by ``s f``); the reference computes runs of one frame only when ``mix > 0`` or
    ``method="no_circle"`` (its output is too long for more), which is what Qwen3-VL's
    frame-per-run videos give it.
    """
    stride = check_positive_float("temporal_stride", temporal_stride)
    circle = CircleProjection() if projection is None else projection
    if not isinstance(circle, CircleProjection):
        raise ValueError(f"projection must be a CircleProjection, got {type(circle).__name__}")

    def block(p: float, frames: int, rows: int, cols: int) -> tuple[Tensor, float]:
        ids = circle.project(frames, rows, cols, stride) + p
        return ids, float(ids.max()) + 1

    return _walk(
        token_types, image_grid_thw, video_grid_thw, attention_mask,
        spatial_merge_size, split_video_frames, block,
    )  # fmt: skip


def _walk(
    token_types: Tensor,
    image_grid_thw: Grids,
    video_grid_thw: Grids,
    attention_mask: Tensor | None,
    spatial_merge_size: int,
    split_video_frames: bool,
    block: Block,
) -> tuple[Tensor, Tensor]:
    """Number every row's runs: text consecutively, vision runs by ``block``."""
    if not isinstance(token_types, Tensor) or token_types.dim() not in (1, 2):
        raise ValueError("token_types must be a (seq,) or (batch, seq) tensor of 0/1/2")
    if token_types.is_floating_point() or token_types.is_complex():
        raise ValueError(f"token_types must be an integer tensor, got {token_types.dtype}")
    squeeze = token_types.dim() == 1
    types = token_types.long().cpu().reshape(-1, token_types.shape[-1])
    if types.numel() and not bool(((types >= TEXT) & (types <= VIDEO)).all()):
        raise ValueError("token_types must hold 0 (text), 1 (image) or 2 (video) only")
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    if attention_mask is None:
        keep = torch.ones(types.shape, dtype=torch.bool)
    else:
        mask = check_padding_mask(attention_mask, "attention_mask", tuple(token_types.shape))
        keep = mask.cpu().reshape(types.shape)
    videos = check_grids("video_grid_thw", video_grid_thw)
    if split_video_frames:
        videos = [(1, h, w) for t, h, w in videos for _ in range(t)]
    queues = {IMAGE: check_grids("image_grid_thw", image_grid_thw), VIDEO: videos}
    batch, seq = types.shape
    ids = torch.zeros(3, batch, seq, dtype=torch.float64)
    deltas = torch.zeros(batch, 1, dtype=torch.float64)
    for row in range(batch):
        pieces, p = [], 0.0
        for kind, length in type_runs(types[row][keep[row]].tolist()):
            if kind == TEXT:
                pieces.append((torch.arange(length, dtype=torch.float64) + p).expand(3, length))
                p += length
                continue
            name = "image_grid_thw" if kind == IMAGE else "video_grid_thw"
            if not queues[kind]:
                raise ValueError(f"{name} has fewer grids than the sequence has runs of that type")
            t, h, w, _ = check_grid_thw(queues[kind].pop(0), merge)
            if t * (h // merge) * (w // merge) != length:
                raise ValueError(
                    f"a run of {length} tokens (row {row}) does not match its {name} entry "
                    f"{(t, h, w)} at spatial_merge_size {merge}"
                )
            piece, p = block(p, t, h // merge, w // merge)
            pieces.append(piece)
        if pieces:
            row_ids = torch.cat(pieces, dim=1)
            ids[:, row, keep[row]] = row_ids
            deltas[row, 0] = float(row_ids.max()) + 1 - row_ids.shape[1]
    for kind, name in ((IMAGE, "image_grid_thw"), (VIDEO, "video_grid_thw")):
        if queues[kind]:
            raise ValueError(f"{name} has {len(queues[kind])} grid(s) left over after every run")
    device = token_types.device
    if squeeze:
        return ids[:, 0].to(device), deltas[0].to(device)
    return ids.to(device), deltas.to(device)

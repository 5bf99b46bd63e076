"""posenc's float64 reference arrays for a model config: the cos/sin tables, rotated q/k and
M-RoPE position ids that a correct port produces (:func:`reference_arrays`), from the config's
:class:`~posenc.verify.spec.RopeSpec`: tables ``A·cos φ``, ``A·sin φ`` of the float64 angles
``φ = m·θ'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.integrations.hf.rope_parameters import config_value
from posenc.positions.multimodal import mrope_position_ids
from posenc.verify.spec import (
    TABLE_LAYOUTS,
    Component,
    RopeSpec,
    TableLayout,
    mrope_version,
    rope_spec,
    spec_angles,
)

__all__ = ["mrope_ids", "reference_arrays", "rotate", "tables"]


def tables(
    spec: RopeSpec,
    positions: Tensor,
    layout: TableLayout | None = None,
    *,
    angles: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """float64 ``(A cos φ, A sin φ)`` of shape ``(seq, width)`` in ``layout`` (the spec's by
    default; ``pairs``: one column per pair); ``angles`` replaces :func:`spec_angles` (a bug
    class's reduced-precision angles)."""
    layout = spec.layout if layout is None else layout
    if layout not in TABLE_LAYOUTS:
        raise ValueError(f"layout must be one of {list(TABLE_LAYOUTS)}, got {layout!r}")
    angles = spec_angles(spec, positions) if angles is None else angles
    out = []
    for fn in (torch.cos, torch.sin):
        half = fn(angles) * spec.attention_factor
        if layout == "half":
            half = torch.cat((half, half), dim=-1)
        elif layout == "interleaved":
            half = half.repeat_interleave(2, dim=-1)
        out.append(half)
    return out[0], out[1]


def rotate(spec: RopeSpec, x: Tensor, positions: Tensor, *, angles: Tensor | None = None) -> Tensor:
    """``x`` rotated by the reference, in float64, channels in ``x``'s own order.

    Shape: ``x`` is ``(..., seq, head_dim)``; the spec's ``rotary_dim`` channels (leading, or
    trailing for DeepSeek-V4) rotate, the others pass through.
    """
    if x.shape[-1] != spec.head_dim or x.dim() < 2:
        raise ValueError(
            f"q and k must be (..., seq, head_dim={spec.head_dim}), got {tuple(x.shape)}"
        )
    x = x.to(torch.float64)
    cos, sin = tables(spec, positions, "pairs", angles=angles)  # (seq, pairs)
    if x.shape[-2] != cos.shape[0]:
        raise ValueError(f"q and k have {x.shape[-2]} positions, positions has {cos.shape[0]}")
    width = spec.rotary_dim
    if spec.trailing:
        passed, rotated = x[..., : spec.head_dim - width], x[..., spec.head_dim - width :]
    else:
        rotated, passed = x[..., :width], x[..., width:]
    if spec.layout == "half":
        a, b = rotated[..., : width // 2], rotated[..., width // 2 :]
    else:
        a, b = rotated[..., 0::2], rotated[..., 1::2]
    ra, rb = a * cos - b * sin, b * cos + a * sin
    if spec.layout == "half":
        rotated = torch.cat((ra, rb), dim=-1)
    else:
        rotated = torch.stack((ra, rb), dim=-1).flatten(-2)
    parts = (passed, rotated) if spec.trailing else (rotated, passed)
    return torch.cat(parts, dim=-1)


def mrope_ids(
    config: Any,
    token_types: Tensor,
    image_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
    video_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
) -> Tensor:
    """M-RoPE ``(3, seq)`` position ids of one sequence of token types (0 text, 1 image,
    2 video) and feature grids, as the config's model family builds them
    (:func:`~posenc.positions.multimodal.mrope_position_ids`: Qwen2-VL, Qwen2.5-VL with
    absolute video time, Qwen3-VL / Qwen3.5)."""
    version = mrope_version(config)
    vision = config_value(config, "vision_config") or {}
    merge = config_value(vision, "spatial_merge_size") or 2
    per_second = config_value(vision, "tokens_per_second") or 2.0
    if token_types.dim() == 1:
        token_types = token_types[None]
    if token_types.dim() != 2 or token_types.shape[0] != 1:
        raise ValueError(f"token_types must be (seq,) or (1, seq), got {tuple(token_types.shape)}")
    ids, _ = mrope_position_ids(
        token_types,
        image_grid_thw,
        video_grid_thw,
        spatial_merge_size=int(merge),
        version=version,  # type: ignore[arg-type]
        tokens_per_second=float(per_second),
    )
    return ids[:, 0]


def reference_arrays(
    config: Any,
    positions: Tensor | None = None,
    *,
    layer_type: str | None = None,
    layout: TableLayout | Literal["both"] | None = None,
    component: Component = "attention",
    q: Tensor | None = None,
    k: Tensor | None = None,
    token_types: Tensor | None = None,
    image_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
    video_grid_thw: Tensor | Sequence[Sequence[int]] | None = None,
) -> dict[str, Tensor]:
    """posenc's float64 reference arrays for ``config`` at ``positions``.

    Keys: ``positions``; ``cos`` and ``sin`` (``(seq, width)`` in ``layout``, the config's by
    default; ``layout="both"`` gives ``cos_half``, ``sin_half``, ``cos_interleaved`` and
    ``sin_interleaved`` instead); ``q_rotated`` / ``k_rotated`` when ``q`` / ``k`` are given
    (``(..., seq, head_dim)``); ``position_ids`` (``(3, seq)``, int64) when ``token_types``
    are given, which then also set the positions.

    Example::

        >>> ref = reference_arrays({"head_dim": 8, "rope_theta": 100.0}, torch.arange(3))
        >>> ref["cos"].shape, ref["cos"].dtype
        (torch.Size([3, 8]), torch.float64)
    """
    out: dict[str, Tensor] = {}
    if token_types is not None:
        ids = mrope_ids(config, token_types, image_grid_thw, video_grid_thw)
        out["position_ids"] = ids
        positions = ids if positions is None else positions
    if positions is None:
        raise ValueError("positions is required (or token_types, for M-RoPE position ids)")
    if (
        not isinstance(positions, Tensor)
        or (positions.is_floating_point() and not bool(torch.isfinite(positions).all()))
        or bool((positions < 0).any())
    ):
        raise ValueError("positions must be a finite non-negative tensor (seq,) or (3, seq)")
    seq_len = int(positions.max()) + 1 if positions.numel() else None
    spec = rope_spec(config, layer_type, component=component, seq_len=seq_len)
    out["positions"] = positions
    layouts = ("half", "interleaved") if layout == "both" else (layout,)
    for name in layouts:
        cos, sin = tables(spec, positions, name)  # type: ignore[arg-type]
        suffix = f"_{name}" if layout == "both" else ""
        out[f"cos{suffix}"], out[f"sin{suffix}"] = cos, sin
    for key, x in (("q_rotated", q), ("k_rotated", k)):
        if x is not None:
            out[key] = rotate(spec, x, positions)
    return out

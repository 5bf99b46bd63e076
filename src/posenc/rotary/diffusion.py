"""Diffusion and video RoPE: diffusers' axis-split conventions as
:class:`~posenc.rotary.MultiAxisRotary` presets (FLUX.1, FLUX.2, Wan 2.x, HunyuanVideo,
CogVideoX), with a scaling per axis (RIFLEx on time, DyPE on space).

These models cut each head into one consecutive channel block per position axis; block
``a`` (``axes_dim[a]`` channels, ``sum(axes_dim) = head_dim``) is a 1D RoPE of its own width
over axis ``a`` of the token's ids, pairs adjacent (diffusers' ``repeat_interleave_real`` and
``apply_rotary_emb(use_real_unbind_dim=-1)``: posenc's ``"interleaved"`` layout):

.. math::

    φ_{a, i} = \\mathrm{pos}_a \\, θ_{a, i}, \\qquad θ_{a, i} = b^{-2i / \\mathrm{axes\\_dim}_a},
    \\quad i < \\mathrm{axes\\_dim}_a / 2

=================  ==================  =======  ============================================
model              ``axes_dim``        ``b``    ids
=================  ==================  =======  ============================================
FLUX.1             16, 56, 56          1e4      ``(t, h, w)``: text 0, image ``(0, h, w)``
FLUX.2             32, 32, 32, 32      2000     ``(t, h, w, l)``: text ``(0, 0, 0, l)``
Wan 2.x            ``wan_axes_dim``    1e4      ``(t, h, w)`` grid (44, 42, 42 at d = 128)
HunyuanVideo       16, 56, 56          256      ``(t, h, w)`` grid
CogVideoX          d/4, 3d/8, 3d/8     1e4      ``(t, h, w)``, h and w spread over a crop
=================  ==================  =======  ============================================

Reference: diffusers 0.42.1 ``FluxPosEmbed``, ``Flux2PosEmbed``, ``WanRotaryPosEmbed``,
``HunyuanVideoRotaryPosEmbed``, ``get_3d_rotary_pos_embed`` (tables) and ``apply_rotary_emb``
(rotation), tested on whole tensors in float32 (diffusers' tables are float32; HunyuanVideo
and CogVideoX form their angles in float32 too). posenc forms the angles in float64 and
rounds once. :func:`diffusers_tables` gives the tables in diffusers' full-width form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.positions import grid_positions
from posenc.rotary.frequencies import check_rotary_dim, rope_inv_freq
from posenc.rotary.layouts import LAYOUTS, Layout
from posenc.rotary.multi_axis import MultiAxisRotary
from posenc.rotary.scaling import Scaling

__all__ = [
    "axes_frequencies",
    "cogvideox_axes_dim",
    "cogvideox_positions",
    "cogvideox_rotary",
    "diffusers_tables",
    "flux2_ids",
    "flux2_rotary",
    "flux_ids",
    "flux_rotary",
    "hunyuan_video_rotary",
    "qwen_image_rotary",
    "video_axes_rotary",
    "wan_axes_dim",
    "wan_rotary",
]

Scalings = Sequence[Scaling | None] | None


def _check_axes_dim(axes_dim: Sequence[int]) -> list[int]:
    if isinstance(axes_dim, (str, bytes)) or not isinstance(axes_dim, Sequence) or not axes_dim:
        raise ValueError(f"axes_dim must be a non-empty sequence of even ints, got {axes_dim!r}")
    return [check_rotary_dim(d, f"axes_dim[{i}]") for i, d in enumerate(axes_dim)]


def _check_scalings(scalings: Scalings, axes: int) -> list[Scaling | None]:
    if scalings is None:
        return [None] * axes
    scalings = list(scalings)
    if len(scalings) != axes:
        raise ValueError(
            f"scalings must give one Scaling or None per axis ({axes}), got {scalings}"
        )
    for index, scaling in enumerate(scalings):
        if scaling is not None and not isinstance(scaling, Scaling):
            raise ValueError(
                f"scalings[{index}] must be a Scaling or None, got {type(scaling).__name__}"
            )
        if scaling is not None and scaling.depends_on_length:
            raise ValueError(
                f"scalings[{index}] must be static (one table per axis), got a length-dependent "
                f"{type(scaling).__name__}"
            )
    return scalings


def axes_frequencies(
    axes_dim: Sequence[int], base: float = 10000.0, scalings: Scalings = None
) -> Tensor:
    """The ``(sum(axes_dim) / 2, axes)`` frequency matrix of an axis-split rotary: pairs
    ``[o_a, o_a + axes_dim[a]/2)`` read axis ``a`` with the 1D frequencies of width
    ``axes_dim[a]`` (``scalings[a].inv_freq(axes_dim[a], base)`` when given), float64 on the
    CPU.

    Example::

        >>> axes_frequencies([2, 4], base=100.0)
        tensor([[1.0000, 0.0000],
                [0.0000, 1.0000],
                [0.0000, 0.1000]], dtype=torch.float64)
    """
    dims = _check_axes_dim(axes_dim)
    base = check_positive_float("base", base)
    per_axis = _check_scalings(scalings, len(dims))
    freqs = torch.zeros(sum(dims) // 2, len(dims), dtype=torch.float64, device="cpu")
    start = 0
    for axis, (dim, scaling) in enumerate(zip(dims, per_axis, strict=True)):
        inv_freq = rope_inv_freq(dim, base) if scaling is None else scaling.inv_freq(dim, base)
        freqs[start : start + dim // 2, axis] = inv_freq.to("cpu", torch.float64)
        start += dim // 2
    return freqs


def video_axes_rotary(
    head_dim: int,
    axes_dim: Sequence[int],
    *,
    base: float = 10000.0,
    scalings: Scalings = None,
    layout: Layout = "interleaved",
) -> MultiAxisRotary:
    """An axis-split rotary (the module's formula) over ``len(axes_dim)`` axes, each with its
    own optional scaling (RIFLEx on time, DyPE or YaRN on space). ``sum(axes_dim) ≤
    head_dim`` (channels past it pass through). The scalings' attention factors ``A`` must
    agree (a :class:`~posenc.rotary.MultiAxisRotary` multiplies every pair by one ``A``): give
    an ``A ≠ 1`` scaling to every axis or to none.

    Example::

        >>> rope = video_axes_rotary(8, [4, 2, 2], base=100.0)
        >>> rope.frequencies.shape
        torch.Size([4, 3])
    """
    head_dim = check_positive_int("head_dim", head_dim)
    dims = _check_axes_dim(axes_dim)
    if sum(dims) > head_dim:
        raise ValueError(f"axes_dim must sum to at most head_dim ({head_dim}), got {dims}")
    check_in_choices("layout", layout, LAYOUTS)
    per_axis = _check_scalings(scalings, len(dims))
    factors = {1.0 if s is None else float(s.attention_factor) for s in per_axis}
    if len(factors) > 1:
        raise ValueError(
            f"scalings must share one attention factor (one A multiplies every pair), got "
            f"{sorted(factors)}: give an A != 1 scaling to every axis or to none"
        )
    freqs = axes_frequencies(dims, base, per_axis)
    return MultiAxisRotary(head_dim, freqs, layout=layout, attention_factor=factors.pop())


def flux_rotary(
    head_dim: int = 128,
    *,
    axes_dim: Sequence[int] = (16, 56, 56),
    base: float = 10000.0,
    scalings: Scalings = None,
) -> MultiAxisRotary:
    """FLUX.1 (diffusers ``FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])``) over
    :func:`flux_ids`."""
    return video_axes_rotary(head_dim, axes_dim, base=base, scalings=scalings)


def qwen_image_rotary(
    head_dim: int = 128,
    *,
    axes_dim: Sequence[int] = (16, 56, 56),
    base: float = 10000.0,
    scalings: Scalings = None,
) -> MultiAxisRotary:
    """Qwen-Image's MSRoPE (Wu et al. 2025, https://arxiv.org/abs/2508.02324, §2.3; diffusers
    ``QwenEmbedRope``): FLUX.1's allocation (one 1D RoPE per ``(frame, row, column)`` channel
    block, adjacent pairs) over :func:`posenc.positions.msrope.msrope_position_ids` (image
    centred, text on the diagonal)."""
    return video_axes_rotary(head_dim, axes_dim, base=base, scalings=scalings)


def flux2_rotary(
    head_dim: int = 128,
    *,
    axes_dim: Sequence[int] = (32, 32, 32, 32),
    base: float = 2000.0,
    scalings: Scalings = None,
) -> MultiAxisRotary:
    """FLUX.2 (diffusers ``Flux2PosEmbed(theta=2000, axes_dim=(32, 32, 32, 32))``) over
    :func:`flux2_ids`."""
    return video_axes_rotary(head_dim, axes_dim, base=base, scalings=scalings)


def hunyuan_video_rotary(
    head_dim: int = 128,
    *,
    axes_dim: Sequence[int] = (16, 56, 56),
    base: float = 256.0,
    scalings: Scalings = None,
) -> MultiAxisRotary:
    """HunyuanVideo (diffusers ``HunyuanVideoRotaryPosEmbed(rope_dim=[16, 56, 56],
    theta=256)``) over the ``(t, h, w)`` patch grid
    (:func:`posenc.positions.grid_positions`)."""
    return video_axes_rotary(head_dim, axes_dim, base=base, scalings=scalings)


def wan_axes_dim(head_dim: int) -> tuple[int, int, int]:
    """Wan's ``(t, h, w)`` split: ``h = w = 2⌊d/6⌋`` and time the rest (44, 42, 42 at 128).

    Example::

        >>> wan_axes_dim(128)
        (44, 42, 42)
    """
    head_dim = check_rotary_dim(head_dim, "head_dim")
    space = 2 * (head_dim // 6)
    if space == 0:
        raise ValueError(f"head_dim must be >= 6 for Wan's three axes, got {head_dim}")
    return head_dim - 2 * space, space, space


def wan_rotary(
    head_dim: int = 128, *, base: float = 10000.0, scalings: Scalings = None
) -> MultiAxisRotary:
    """Wan 2.x (diffusers ``WanRotaryPosEmbed``: :func:`wan_axes_dim`, θ 1e4) over the
    ``(t, h, w)`` patch grid (:func:`posenc.positions.grid_positions`)."""
    return video_axes_rotary(head_dim, wan_axes_dim(head_dim), base=base, scalings=scalings)


def cogvideox_axes_dim(head_dim: int) -> tuple[int, int, int]:
    """CogVideoX's ``(t, h, w)`` split ``(d/4, 3d/8, 3d/8)`` (``get_3d_rotary_pos_embed``'s
    ``d // 4, d // 8 * 3``); ``head_dim`` divisible by 16.

    Example::

        >>> cogvideox_axes_dim(64)
        (16, 24, 24)
    """
    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 16:
        raise ValueError(f"head_dim must be divisible by 16 for CogVideoX's split, got {head_dim}")
    return head_dim // 4, head_dim // 8 * 3, head_dim // 8 * 3


def cogvideox_rotary(
    head_dim: int = 64, *, base: float = 10000.0, scalings: Scalings = None
) -> MultiAxisRotary:
    """CogVideoX (diffusers ``get_3d_rotary_pos_embed``: :func:`cogvideox_axes_dim`, θ 1e4)
    over :func:`cogvideox_positions`."""
    return video_axes_rotary(head_dim, cogvideox_axes_dim(head_dim), base=base, scalings=scalings)


def flux_ids(text_len: int, height: int, width: int) -> Tensor:
    """FLUX.1's ids as posenc positions ``(3, text_len + height·width)``: the text tokens
    first, all 0, then the image patches ``(0, h, w)`` row-major (diffusers'
    ``cat((txt_ids, img_ids))`` transposed).

    Example::

        >>> flux_ids(1, 1, 2).tolist()
        [[0, 0, 0], [0, 0, 0], [0, 0, 1]]
    """
    text_len = _check_non_negative("text_len", text_len)
    image = grid_positions(1, height, width)
    return torch.cat((torch.zeros(3, text_len, dtype=image.dtype), image), dim=1)


def flux2_ids(text_len: int, height: int, width: int) -> Tensor:
    """FLUX.2's ids ``(t, h, w, l)`` as positions ``(4, text_len + height·width)``: text
    ``(0, 0, 0, l)``, then the image ``(0, h, w, 0)`` row-major (the order in which
    ``Flux2Transformer2DModel`` concatenates the two tables).

    Example::

        >>> flux2_ids(2, 1, 1).tolist()
        [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 1, 0]]
    """
    text_len = _check_non_negative("text_len", text_len)
    text = torch.zeros(4, text_len, dtype=torch.int64)
    text[3] = torch.arange(text_len)
    image = torch.cat((grid_positions(1, height, width), torch.zeros(1, height * width)), dim=0)
    return torch.cat((text, image.to(torch.int64)), dim=1)


def cogvideox_positions(
    grid_size: tuple[int, int],
    temporal_size: int,
    *,
    crops_coords: tuple[tuple[float, float], tuple[float, float]] | None = None,
    grid_type: Literal["linspace", "slice"] = "linspace",
) -> Tensor:
    """CogVideoX's ``(t, h, w)`` positions, float64 ``(3, T·H·W)`` row-major.

    ``"linspace"`` (CogVideoX 1.0): ``h_i = top + i (bottom (H-1)/H - top)/(H-1)`` (w likewise
    from ``left``/``right``; one point: ``top``), ``t = 0 … T-1``; ``crops_coords`` =
    ``((top, left), (bottom, right))``, default ``((0, 0), (H, W))`` (then integers).
    ``"slice"`` (CogVideoX 1.5): integer positions on every axis. As diffusers'
    ``get_3d_rotary_pos_embed`` grids, in float64.

    Example::

        >>> cogvideox_positions((2, 1), 1, crops_coords=((0, 0), (1, 1)))[1].tolist()
        [0.0, 0.5]
    """
    check_in_choices("grid_type", grid_type, ("linspace", "slice"))
    height, width = (check_positive_int(f"grid_size[{i}]", n) for i, n in enumerate(grid_size))
    frames = check_positive_int("temporal_size", temporal_size)
    t = torch.arange(frames, dtype=torch.float64)
    if grid_type == "slice":
        if crops_coords is not None:
            raise ValueError("crops_coords must be None with grid_type='slice' (integer grid)")
        h, w = torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64)
    else:
        (top, left), (bottom, right) = crops_coords or ((0, 0), (height, width))
        h = _spread(float(top), float(bottom), height)
        w = _spread(float(left), float(right), width)
    mesh = torch.meshgrid(t, h, w, indexing="ij")
    return torch.stack([m.reshape(-1) for m in mesh])


def _spread(start: float, stop: float, n: int) -> Tensor:
    """``linspace(start, stop (n-1)/n, n)`` in float64 (diffusers' crop grid)."""
    if n == 1:
        return torch.tensor([start], dtype=torch.float64)
    step = (stop * (n - 1) / n - start) / (n - 1)
    return start + step * torch.arange(n, dtype=torch.float64)


def diffusers_tables(
    rope: MultiAxisRotary, positions: Tensor, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """``rope``'s tables in diffusers' full-width form ``(seq, rotary_dim)``: each pair's
    ``A·cos φ`` and ``A·sin φ`` repeated for its two channels (interleaved layout) or the
    halves concatenated (half layout), phases in float64, rounded once to ``dtype``.

    Example::

        >>> cos, sin = diffusers_tables(flux_rotary(), flux_ids(2, 2, 2))
        >>> cos.shape
        torch.Size([6, 128])
    """
    if rope.per_head or rope.learnable:
        raise ValueError("rope must have fixed frequencies shared by the heads (diffusers' form)")
    if positions.dim() != 2:
        raise ValueError(f"positions must be (axes, seq), got shape {tuple(positions.shape)}")
    angles = rope.angles(positions)  # (seq, pairs), float64
    cos, sin = angles.cos() * rope.attention_factor, angles.sin() * rope.attention_factor
    if rope.layout == "interleaved":
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    else:
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    return cos.to(dtype), sin.to(dtype)


def _check_non_negative(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value

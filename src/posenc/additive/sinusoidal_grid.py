"""Sinusoidal encodings of grid coordinates in any number of axes (1D, 2D images, 3D video).

A token at coordinates ``(a_0, …, a_{N-1})`` (row and column; time, row and column) gets sines
and cosines of each coordinate. The implementations differ in the channel layout, so the
layout is an explicit argument; with ``F`` frequencies per axis, ``ω_k = base^(-k/F)``:

=========================  ===========================================================  =====
layout                     channels                                                     axes
=========================  ===========================================================  =====
``"mae"``                  ``[sin a₁ω | cos a₁ω | sin a₀ω | cos a₀ω]``, ``F = dim/4``:   2
                           MAE's ``get_2d_sincos_pos_embed`` (column first)
``"blocks"``               ``[sin a₀ω | cos a₀ω | sin a₁ω | cos a₁ω | …]``,              any
                           ``F = dim/(2N)``: timm's ``interleave_sin_cos=True``
``"timm"``                 ``[sin a₀ω | sin a₁ω | … | cos a₀ω | cos a₁ω | …]``,          any
                           ``F = dim/(2N)``: timm's ``build_sincos2d_pos_embed`` default
``"positional_encodings"`` per axis ``2F`` channels ``sin, cos, sin, cos, …`` of           any
                           ``F = ⌈dim/(2N)⌉`` (interleaved pairs), axes in order; the
                           package's ``PositionalEncoding1D/2D/3D``
``"factorized"``           ``Σ_a PE(a_a)``: the sum of 1D sinusoidal encodings            any
                           (:func:`~posenc.additive.sinusoidal_encoding`, interleaved,
                           ``dim`` channels each), ``PE_row(r) + PE_col(c)``
=========================  ===========================================================  =====

``"mae"``, ``"blocks"`` and ``"timm"`` need ``dim`` divisible by ``2N`` (``ValueError`` naming
``dim`` otherwise). ``"positional_encodings"`` follows that package's rule when ``2N`` does
not divide ``dim``: it computes ``2F·N ≥ dim`` channels and keeps the first ``dim`` (e.g.
``dim = 10`` in 2D: 12 computed, the last axis's last sin/cos pair dropped), so parity holds
for every ``dim``; the rule is the layout's definition, stated here, not a silent cut.
``"factorized"`` needs an even ``dim``. Every value is evaluated in float64 and rounded once.

:func:`sinusoidal_grid` builds the table of a whole grid (row-major, optional prefix tokens
such as CLS as leading zero rows, as MAE's ``cls_token=True``); :func:`sinusoidal_grid_encoding`
evaluates any coordinates, integer or fractional (a resized grid); :class:`SinusoidalGrid` is
the additive encoding that reads multi-axis positions ``(N, seq)`` or ``(N, batch, seq)``, so
each call may bring its own grid size (build them with :func:`posenc.positions.grid_positions`).

Papers: Vaswani et al. 2017, https://arxiv.org/abs/1706.03762 (the 1D formula); MAE, He et
al. 2021, https://arxiv.org/abs/2111.06377; ViT, Dosovitskiy et al. 2020,
https://arxiv.org/abs/2010.11929 (Appendix D.4). Tested against positional-encodings
(1D/2D/3D, any channel count), the MAE formula re-derived in numpy and timm (when installed).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from posenc._validate import (
    check_in_choices,
    check_non_negative_int,
    check_positive_float,
    check_positive_int,
)
from posenc.additive.sinusoidal import check_table_dtype, sinusoidal_float64, sinusoidal_inv_freq
from posenc.encoding.protocols import AdditiveEncoding
from posenc.positions import check_positions, grid_positions

__all__ = [
    "SinusoidalGrid",
    "SinusoidalGridLayout",
    "sinusoidal_grid",
    "sinusoidal_grid_encoding",
]

SinusoidalGridLayout = Literal["mae", "blocks", "timm", "positional_encodings", "factorized"]
_LAYOUTS: tuple[str, ...] = get_args(SinusoidalGridLayout)


def _frequencies(dim: int, axes: int, layout: str) -> int:
    """``F``, the frequencies per axis, after checking that ``dim`` suits ``layout``."""
    dim = check_positive_int("dim", dim)
    if layout == "mae" and axes != 2:
        raise ValueError(f"layout 'mae' encodes 2 axes (row, column); got {axes} axes")
    if layout == "positional_encodings":
        return math.ceil(dim / (2 * axes))
    if layout == "factorized":
        if dim % 2:
            raise ValueError(f"dim must be even for layout 'factorized', got {dim}")
        return dim // 2
    if dim % (2 * axes):
        raise ValueError(
            f"dim must be divisible by {2 * axes} (sin and cos of each of {axes} axes) for "
            f"layout {layout!r}, got {dim}; layout 'positional_encodings' takes any dim"
        )
    return dim // (2 * axes)


def sinusoidal_grid_encoding(
    coords: Tensor,
    dim: int,
    *,
    base: float = 10000.0,
    layout: SinusoidalGridLayout = "blocks",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    r"""Sinusoidal encoding of grid coordinates ``coords`` ``(N, *shape)`` → ``(*shape, dim)``.

    .. math::
        \omega_k = \text{base}^{-k/F}, \; k < F; \qquad
        \text{blocks: } [\sin a_0\omega \,|\, \cos a_0\omega \,|\, \sin a_1\omega \,|\,
        \cos a_1\omega \,|\, \dots]

    and the other layouts of the module docstring.

    Args:
        coords: axis ``a`` of every token along dimension 0, integer or floating (fractional
            coordinates are legal), finite.
        dim: channels (see the module docstring for what each layout accepts).
        base: frequency base (> 0), 10000 in every reference.
        layout: one of ``"mae"``, ``"blocks"`` (default), ``"timm"``,
            ``"positional_encodings"``, ``"factorized"``.
        dtype: floating dtype of the result (one rounding from float64).

    Example::

        >>> sinusoidal_grid_encoding(torch.tensor([[0, 1], [2, 0]]), dim=8).shape
        torch.Size([2, 8])
    """
    check_in_choices("layout", layout, _LAYOUTS)
    base = check_positive_float("base", base)
    check_table_dtype(dtype)
    if not isinstance(coords, Tensor) or coords.dim() < 1:
        raise ValueError("coords must be a tensor (axes, *shape) with at least one axis")
    if coords.dtype == torch.bool or coords.is_complex():
        raise ValueError(f"coords must be an integer or floating tensor, got {coords.dtype}")
    if coords.is_floating_point() and not bool(torch.isfinite(coords).all()):
        raise ValueError("coords must be finite")
    axes = coords.shape[0]
    if axes < 1:
        raise ValueError("coords must hold at least one axis (dimension 0 is the axis)")
    freqs = _frequencies(dim, axes, layout)
    device = torch.device("cpu") if coords.device.type == "mps" else coords.device  # no float64
    points = coords.to(device=device, dtype=torch.float64)
    if layout == "factorized":
        table = sum(sinusoidal_float64(points[a], dim, base, "interleaved") for a in range(axes))
        assert isinstance(table, Tensor)
        return table.to(coords.device, dtype)
    angles = points[..., None] * sinusoidal_inv_freq(2 * freqs, base, device=device)
    sin, cos = angles.sin(), angles.cos()  # (N, *shape, F)
    if layout == "mae":
        blocks = [sin[1], cos[1], sin[0], cos[0]]
    elif layout == "blocks":
        blocks = [half for a in range(axes) for half in (sin[a], cos[a])]
    elif layout == "timm":
        blocks = [*sin.unbind(0), *cos.unbind(0)]
    else:  # positional_encodings: interleaved pairs per axis, then the first dim channels
        pairs = torch.stack((sin, cos), dim=-1).flatten(-2)  # (N, *shape, 2F)
        blocks = list(pairs.unbind(0))
    table = torch.cat(blocks, dim=-1)[..., :dim]
    return table.to(coords.device, dtype)


def sinusoidal_grid(
    *sizes: int,
    dim: int,
    base: float = 10000.0,
    layout: SinusoidalGridLayout = "blocks",
    prefix_tokens: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The table of a whole grid of ``sizes``, one row per cell (row-major), after
    ``prefix_tokens`` zero rows (MAE's class token, ``cls_token=True``).

    Example::

        >>> sinusoidal_grid(2, 3, 4, dim=12).shape  # a 2-frame 3×4 video
        torch.Size([24, 12])
        >>> sinusoidal_grid(4, 4, dim=16, layout="mae", prefix_tokens=1).shape
        torch.Size([17, 16])
    """
    prefix_tokens = check_non_negative_int("prefix_tokens", prefix_tokens)
    coords = grid_positions(*sizes, device=device)
    table = sinusoidal_grid_encoding(coords, dim, base=base, layout=layout, dtype=dtype)
    prefix = table.new_zeros(prefix_tokens, table.shape[-1])
    return torch.cat((prefix, table))


class SinusoidalGrid(AdditiveEncoding):
    """Fixed sinusoidal encoding of multi-axis grid positions (any grid size per call).

    ``forward(positions)`` takes ``(num_axes, seq)`` or ``(num_axes, batch, seq)`` and returns
    :func:`sinusoidal_grid_encoding` of them, ``(seq, dim)`` or ``(batch, seq, dim)``. The
    module holds no tensors. Tokens without a grid position (a class token) are left out of
    the call and given their own embedding, as ViT and MAE do.

    Args:
        num_axes: ``N``, the grid's axes (2 for images, 3 for video).
        dim: channels (see the module docstring).
        base: frequency base (> 0).
        layout: see the module docstring; default ``"blocks"``.
        dtype: output dtype (default ``torch.get_default_dtype()`` at construction).

    Example::

        >>> pe = SinusoidalGrid(num_axes=3, dim=12)
        >>> pe(grid_positions(2, 3, 4)).shape
        torch.Size([24, 12])
    """

    def __init__(
        self,
        num_axes: int,
        dim: int,
        *,
        base: float = 10000.0,
        layout: SinusoidalGridLayout = "blocks",
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_axes = check_positive_int("num_axes", num_axes)
        check_in_choices("layout", layout, _LAYOUTS)
        _frequencies(dim, num_axes, layout)
        self.dim = dim
        self.base = check_positive_float("base", base)
        self.layout: SinusoidalGridLayout = layout
        self.dtype = check_table_dtype(torch.get_default_dtype() if dtype is None else dtype)

    def forward(self, positions: Tensor) -> Tensor:
        check_positions(positions, num_axes=self.num_axes)
        coords = positions if self.num_axes > 1 else positions.unsqueeze(0)
        return sinusoidal_grid_encoding(
            coords, self.dim, base=self.base, layout=self.layout, dtype=self.dtype
        )

    def extra_repr(self) -> str:
        return (
            f"num_axes={self.num_axes}, dim={self.dim}, base={self.base:g}, "
            f"layout={self.layout!r}, dtype={self.dtype}"
        )

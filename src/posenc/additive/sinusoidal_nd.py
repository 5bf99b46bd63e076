"""2D sinusoidal encodings for a grid of image patches (MAE / timm sin-cos layouts).

A patch at row ``r`` and column ``c`` of a ``height × width`` grid gets four blocks of
``dim / 4`` channels, ``sin(r ω)``, ``cos(r ω)``, ``sin(c ω)``, ``cos(c ω)`` with
``ω_k = base^(-k/(dim/4))``; the layouts differ only in the order of the blocks:

* ``"mae"`` (MAE ``get_2d_sincos_pos_embed``, also MoCo v3 and many ViT ports):
  ``[sin c | cos c | sin r | cos r]``: the first half encodes the *column* index (MAE's
  ``np.meshgrid(grid_w, grid_h)`` puts the column first although the variable is ``emb_h``);
* ``"timm"`` (timm ``build_sincos2d_pos_embed`` default): ``[sin r | sin c | cos r | cos c]``.

Tokens are numbered row-major, ``t = r · width + c``. :func:`sinusoidal_2d` builds the whole
``(height · width, dim)`` table; :class:`Sinusoidal2D` returns its rows for token indices, so
it plugs into a model's additive path where positions are token indices.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.additive.sinusoidal import check_table_dtype
from posenc.additive.sinusoidal_grid import sinusoidal_grid_encoding
from posenc.encoding.protocols import AdditiveEncoding
from posenc.positions import grid_coordinates

__all__ = [
    "Sinusoidal2D",
    "Sinusoidal2DLayout",
    "sinusoidal_2d",
    "sinusoidal_2d_encoding",
]

Sinusoidal2DLayout = Literal["mae", "timm"]
_LAYOUTS: tuple[str, ...] = get_args(Sinusoidal2DLayout)


def _check_dim(dim: object) -> int:
    dim = check_positive_int("dim", dim)
    assert isinstance(dim, int)
    if dim % 4 != 0:
        raise ValueError(
            f"dim must be divisible by 4 (sin and cos of the row and the column), got {dim}"
        )
    return dim


def sinusoidal_2d_encoding(
    rows: Tensor,
    cols: Tensor,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Sinusoidal2DLayout = "mae",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    r"""2D sin-cos encoding of (row, column) coordinates, evaluated in float64.

    .. math::
        \omega_k = \text{base}^{-k/(d/4)},\; k < d/4; \qquad
        \text{mae: } [\sin c\omega \,|\, \cos c\omega \,|\, \sin r\omega \,|\, \cos r\omega],
        \quad \text{timm: } [\sin r\omega \,|\, \sin c\omega \,|\, \cos r\omega \,|\,
        \cos c\omega]

    Papers: MAE, He et al. 2021, https://arxiv.org/abs/2111.06377 (``get_2d_sincos_pos_embed``,
    from MoCo v3, https://arxiv.org/abs/2104.02057); ViT, Dosovitskiy et al. 2020,
    https://arxiv.org/abs/2010.11929 (Appendix D.4, 2D embeddings). Tested against a float64
    re-derivation of MAE's numpy code and timm's ``build_sincos2d_pos_embed`` (when timm is
    installed). ``ω`` equals :func:`~posenc.additive.sinusoidal_inv_freq` ``(dim / 2)``.

    Args:
        rows, cols: coordinates of equal shape ``(*,)``, integer or floating (fractional
            coordinates are legal: resized grids).
        dim: channels (≥ 4, divisible by 4).
        base: frequency base (> 0), 10000 in MAE and timm (``temperature``).
        layout: ``"mae"`` or ``"timm"`` (see the module docstring).
        dtype: floating dtype of the result (one rounding from float64).

    Shape:
        rows, cols ``(*,)`` → ``(*, dim)``.

    Example::

        >>> r, c = torch.tensor([0, 1]), torch.tensor([2, 0])
        >>> sinusoidal_2d_encoding(r, c, dim=8).shape
        torch.Size([2, 8])
    """
    _check_dim(dim)
    check_in_choices("layout", layout, _LAYOUTS)
    for name, value in (("rows", rows), ("cols", cols)):
        if not isinstance(value, Tensor) or value.dtype == torch.bool or value.is_complex():
            raise ValueError(f"{name} must be an integer or floating tensor")
    if rows.shape != cols.shape:
        raise ValueError(
            f"rows and cols must have one shape; got {tuple(rows.shape)} and {tuple(cols.shape)}"
        )
    coords = torch.stack(torch.broadcast_tensors(rows, cols.to(rows.device)))
    return sinusoidal_grid_encoding(coords, dim, base=base, layout=layout, dtype=dtype)


def sinusoidal_2d(
    height: int,
    width: int,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Sinusoidal2DLayout = "mae",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The 2D sin-cos table of a ``height × width`` grid, one row per token (row-major).

    Row ``t`` encodes row ``t // width`` and column ``t % width`` by
    :func:`sinusoidal_2d_encoding` (MAE ``get_2d_sincos_pos_embed(dim, grid)`` for a square
    grid and ``layout="mae"``, without its class-token row; timm
    ``build_sincos2d_pos_embed([height, width], dim)`` for ``layout="timm"``).

    Args:
        height, width: grid size in patches (≥ 1 each).
        dim: channels (divisible by 4).
        base: frequency base (> 0).
        layout: ``"mae"`` (default) or ``"timm"``.
        dtype: floating dtype of the table.
        device: device of the table.

    Shape:
        Output: ``(height · width, dim)``.

    Example::

        >>> sinusoidal_2d(4, 4, dim=16).shape
        torch.Size([16, 16])
    """
    height = check_positive_int("height", height)
    width = check_positive_int("width", width)
    rows, cols = grid_coordinates(torch.arange(height * width, device=device), height, width)
    return sinusoidal_2d_encoding(rows, cols, dim, base=base, layout=layout, dtype=dtype)


class Sinusoidal2D(AdditiveEncoding):
    """Fixed 2D sin-cos encoding of a patch grid, looked up by row-major token index.

    ``forward(positions)`` maps token ``t`` to ``(t // width, t % width)`` and returns
    :func:`sinusoidal_2d_encoding` of it, i.e. row ``t`` of :func:`sinusoidal_2d`. The
    module holds no tensors.

    Papers: MAE, https://arxiv.org/abs/2111.06377; ViT, https://arxiv.org/abs/2010.11929.
    Tested against a float64 re-derivation of MAE's ``get_2d_sincos_pos_embed`` and timm's
    ``build_sincos2d_pos_embed``.

    Args:
        height, width: grid size in patches (≥ 1 each).
        dim: channels (divisible by 4).
        base: frequency base (> 0).
        layout: ``"mae"`` (default) or ``"timm"``.
        device: accepted for a uniform constructor signature (the output follows
            ``positions.device``).
        dtype: output dtype (default ``torch.get_default_dtype()`` at construction).

    Shape:
        positions ``(seq,)`` or ``(batch, seq)`` of token indices in ``[0, height · width)``
        → ``(seq, dim)`` or ``(batch, seq, dim)``.

    Example::

        >>> pe = Sinusoidal2D(4, 4, dim=16)
        >>> pe(torch.arange(16)).shape
        torch.Size([16, 16])
    """

    def __init__(
        self,
        height: int,
        width: int,
        dim: int,
        *,
        base: float = 10000.0,
        layout: Sinusoidal2DLayout = "mae",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.height = check_positive_int("height", height)
        self.width = check_positive_int("width", width)
        self.dim = _check_dim(dim)
        self.base = check_positive_float("base", base)
        check_in_choices("layout", layout, _LAYOUTS)
        self.layout: Sinusoidal2DLayout = layout
        self.dtype = check_table_dtype(torch.get_default_dtype() if dtype is None else dtype)

    def forward(self, positions: Tensor) -> Tensor:
        rows, cols = grid_coordinates(positions, self.height, self.width)
        return sinusoidal_2d_encoding(
            rows, cols, self.dim, base=self.base, layout=self.layout, dtype=self.dtype
        )

    def extra_repr(self) -> str:
        return (
            f"height={self.height}, width={self.width}, dim={self.dim}, base={self.base:g}, "
            f"layout={self.layout!r}, dtype={self.dtype}"
        )

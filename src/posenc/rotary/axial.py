"""2D axial RoPE for a grid of image patches (RoPE-ViT "axial", Heo et al. 2024).

Half of the rotary pairs of a head rotate by the column ``x = t mod W`` of a token, the other
half by its row ``y = ⌊t / W⌋`` (row-major token index ``t``), each with the frequencies of a
1D RoPE of half the width, so that the score of a query and a key depends on their positions
only through ``(Δx, Δy)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.encoding.protocols import check_rotary_input
from posenc.positions import grid_coordinates
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.functional import rope_cos_sin
from posenc.rotary.kernels import rotate
from posenc.rotary.layouts import LAYOUTS, Layout
from posenc.rotary.multi_axis import MultiAxisRotary

__all__ = ["AxialRotary2D", "axial_cos_sin"]


def _check_head_dim(head_dim: object) -> int:
    head_dim = check_positive_int("head_dim", head_dim)
    assert isinstance(head_dim, int)
    if head_dim % 4 != 0:
        raise ValueError(
            f"head_dim must be divisible by 4 (rotary pairs split between x and y), got {head_dim}"
        )
    return head_dim


def axial_cos_sin(
    x: Tensor,
    y: Tensor,
    head_dim: int,
    *,
    base: float = 100.0,
    layout: Layout = "interleaved",
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """cos/sin tables of 2D axial RoPE: pairs ``0 .. d/4 - 1`` by ``x``, the rest by ``y``.

    .. math::
        ω_k = \\mathrm{base}^{-4k/d},\\; k < d/4; \\qquad
        φ_{p} = x ω_p \\;(p < d/4), \\quad φ_{p} = y ω_{p - d/4} \\;(d/4 \\le p < d/2)

    Pair ``p`` occupies channels ``(2p, 2p + 1)`` for ``layout="interleaved"`` (RoPE-ViT's
    complex pairs: channels ``[0, d/2)`` rotate by ``x``, ``[d/2, d)`` by ``y``) and
    ``(p, p + d/2)`` for ``layout="half"``. Built from :func:`~posenc.rotary.rope_cos_sin`
    of each axis with ``rope_inv_freq(d/2, base)`` (phases in float64, one rounding).

    Paper: Heo et al. 2024, "Rotary Position Embedding for Vision Transformer",
    https://arxiv.org/abs/2403.13298 (``compute_axial_cis``, θ = 100). Tested against
    rotary-embedding-torch's ``get_axial_freqs`` (which orders the axes ``[y | x]``).

    Args:
        x, y: column and row coordinates of equal shape ``(seq,)`` or ``(batch, seq)``.
        head_dim: channels per head ``d`` (divisible by 4).
        base: frequency base (> 0), 100 in RoPE-ViT axial.
        layout: ``"interleaved"`` (RoPE-ViT) or ``"half"``.
        dtype: dtype of the tables.

    Shape:
        Output: two tensors ``(*, seq, head_dim)`` for :func:`~posenc.rotary.apply_rotary`.

    Example::

        >>> cos, sin = axial_cos_sin(torch.tensor([0, 1]), torch.tensor([0, 0]), head_dim=8)
        >>> cos.shape
        torch.Size([2, 8])
    """
    _check_head_dim(head_dim)
    base = check_positive_float("base", base)
    check_in_choices("layout", layout, LAYOUTS)
    if not isinstance(x, Tensor) or not isinstance(y, Tensor) or x.shape != y.shape:
        raise ValueError("x and y must be tensors of one shape (seq,) or (batch, seq)")
    inv_freq = rope_inv_freq(head_dim // 2, base)  # (d/4,), float64
    quarter = head_dim // 4
    # layout "half" gives cat(f, f): its first d/4 channels are each pair's value once.
    cos_x, sin_x = rope_cos_sin(x, inv_freq, layout="half", dtype=dtype)
    cos_y, sin_y = rope_cos_sin(y, inv_freq, layout="half", dtype=dtype)
    tables = []
    for along_x, along_y in ((cos_x, cos_y), (sin_x, sin_y)):
        pairs = torch.cat((along_x[..., :quarter], along_y[..., :quarter]), dim=-1)  # (*, d/2)
        if layout == "half":
            tables.append(torch.cat((pairs, pairs), dim=-1))
        else:
            tables.append(pairs.repeat_interleave(2, dim=-1))
    return tables[0], tables[1]


class AxialRotary2D(MultiAxisRotary):
    """2D axial RoPE over a ``height × width`` patch grid; positions are token indices.

    The token-index view of :meth:`MultiAxisRotary.axial` ``(head_dim, 2)``: token ``t`` is
    mapped to ``(⌊t/W⌋, t mod W)`` (checked against the grid) and rotated by the axial preset's
    frequencies, so there is one implementation of axial RoPE.

    .. math::
        q'_t = R_x(x_t)\\,R_y(y_t)\\,q_t, \\quad x_t = t \\bmod W, \\; y_t = \\lfloor t/W
        \\rfloor, \\quad q'_m · k'_n = f(q, k, x_m - x_n, y_m - y_n)

    with frequencies ``ω_k = base^(-4k/head_dim)``, ``k < head_dim/4``, on each axis (see
    :func:`axial_cos_sin`). Attention in a ViT is bidirectional and has no KV cache, but q
    and k may still carry different positions (cross-attention to another patch set).

    Paper: Heo et al. 2024, https://arxiv.org/abs/2403.13298 (RoPE-ViT ``rope_axial``; the
    class token, if any, is left unrotated by the caller). Tested against
    rotary-embedding-torch ``RotaryEmbedding(head_dim // 2, theta=base).get_axial_freqs``
    and, along one row, against :class:`~posenc.rotary.RotaryEmbedding` with
    ``rotary_dim = head_dim / 2``.

    Args:
        head_dim: channels per head (divisible by 4).
        height, width: the patch grid (≥ 1 each); positions must lie in ``[0, height·width)``.
        base: frequency base (> 0), 100 in RoPE-ViT.
        layout: ``"interleaved"`` (default, RoPE-ViT's adjacent pairs) or ``"half"``.
        device: accepted for a uniform constructor signature (the module holds no tensors).
        dtype: dtype of the cos/sin tables; ``None`` = float32 (float64 for float64 q).

    Shape:
        - q: ``(batch, heads, q_len, head_dim)``; k: ``(batch, heads, k_len, head_dim)``.
        - q_pos: ``(q_len,)`` or ``(batch, q_len)``; k_pos likewise, token indices.
        - Output: q and k rotated, same shapes and dtypes.

    Example::

        >>> rope = AxialRotary2D(16, height=4, width=4)
        >>> q = k = torch.randn(2, 4, 16, 16)
        >>> q, k = rope(q, k, torch.arange(16), torch.arange(16))
    """

    def __init__(
        self,
        head_dim: int,
        height: int,
        width: int,
        *,
        base: float = 100.0,
        layout: Layout = "interleaved",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _check_head_dim(head_dim)
        base = check_positive_float("base", base)
        check_in_choices("layout", layout, LAYOUTS)
        preset = MultiAxisRotary.axial(head_dim, 2, base=base, layout=layout)
        super().__init__(head_dim, preset.frequencies, layout=layout)
        self.num_axes = 1  # positions are row-major token indices
        self.height = check_positive_int("height", height)
        self.width = check_positive_int("width", width)
        self.base = base
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype or None, got {dtype}")
        self.dtype = dtype

    def coordinates(self, positions: Tensor) -> Tensor:
        """``(row, column)`` of row-major token indices: ``(2, [batch,] seq)``."""
        index = positions.to(torch.long)
        return torch.stack(
            (torch.div(index, self.width, rounding_mode="floor"), index % self.width)
        )

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """Raise ``ValueError`` naming ``name`` unless positions are indices into the grid."""
        grid_coordinates(positions, self.height, self.width, name=name)

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One cos/sin per pair (columns first, then rows), rounded to ``self.dtype`` if set."""
        cos, sin = super().rotary_tables(positions, dtype, update=update)
        if self.dtype is not None:
            cos, sin = cos.to(self.dtype).to(cos.dtype), sin.to(self.dtype).to(sin.dtype)
        return cos, sin

    def rotate(self, x: Tensor, positions: Tensor, *, name: str = "x") -> Tensor:
        """Rotate one tensor ``(batch, heads, seq, head_dim)`` by its token indices."""
        pos_name = "positions" if name == "x" else f"{name}_pos"
        check_rotary_input(x, positions, self.head_dim, name, pos_name, "AxialRotary2D")
        self.validate_positions(positions, pos_name)
        cos, sin = self.rotary_tables(positions.to(x.device), x.dtype)
        return rotate(x, cos, sin, layout=self.layout, rotary_dim=self.rotary_dim)

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate q by ``q_pos`` and k by ``k_pos`` (row-major token indices)."""
        return self.rotate(q, q_pos, name="q"), self.rotate(k, k_pos, name="k")

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, height={self.height}, width={self.width}, "
            f"base={self.base:g}, layout={self.layout!r}"
        )

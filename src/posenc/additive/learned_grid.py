"""Learned position tables on patch grids: ViT's joint table and factorized per-axis tables.

* :class:`LearnedGrid`, ViT's ``pos_embed`` (Dosovitskiy et al. 2020,
  https://arxiv.org/abs/2010.11929): one learned row per patch of an ``h × w`` grid
  (row-major), after ``prefix_tokens`` rows for tokens without a grid position (CLS,
  registers), looked up by token index. :meth:`LearnedGrid.resample` moves it to another grid
  by :func:`resample_grid_table`, as fine-tuning at a higher resolution does (ViT §3.2).
* :class:`FactorizedLearned`: a sum of smaller tables, each indexed by a group of the
  position axes: ``P(r, c) = R[r] + C[c]`` with one axis per group (the default), MAE-ST's
  separable video embedding ``P(t, h, w) = S[h·W + w] + T[t]`` with groups ``((1, 2), (0,))``
  (Feichtenhofer et al. 2022, https://arxiv.org/abs/2205.09113).

:func:`resample_grid_table` is timm's ``resample_abs_pos_embed``: prefix rows kept as they are,
the grid rows reshaped to ``(1, dim, h, w)`` and resized by :func:`torch.nn.functional.interpolate`
(``align_corners=False``) in float32, then cast back; ``mode="bicubic", antialias=True`` is
timm's default, ``antialias=False`` is DeiT's and MAE's ``interpolate_pos_embed`` (they differ
when shrinking, and bicubic antialias uses the Keys ``a = −0.5`` kernel, plain bicubic
``a = −0.75``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_in_choices,
    check_integer_valued,
    check_non_negative_int,
    check_positive_float,
    check_positive_int,
    validating_values,
)
from posenc.additive.learned import LearnedPositionalEmbedding
from posenc.encoding.base import state_device
from posenc.encoding.protocols import AdditiveEncoding
from posenc.positions import check_positions

__all__ = ["FactorizedLearned", "GridResampleMode", "LearnedGrid", "resample_grid_table"]

GridResampleMode = Literal["bicubic", "bilinear", "nearest"]
_MODES: tuple[str, ...] = ("bicubic", "bilinear", "nearest")


def _check_size(name: str, size: object) -> tuple[int, ...]:
    if not isinstance(size, Sequence) or isinstance(size, str) or not size:
        raise ValueError(f"{name} must be a non-empty sequence of grid sizes, got {size!r}")
    return tuple(check_positive_int(f"{name}[{index}]", v) for index, v in enumerate(size))


def resample_grid_table(
    table: Tensor,
    new_size: Sequence[int],
    old_size: Sequence[int] | None = None,
    *,
    prefix_tokens: int = 0,
    mode: GridResampleMode = "bicubic",
    antialias: bool = True,
) -> Tensor:
    """Resize a 2D grid position table ``(prefix + h·w, dim)`` to ``(prefix + H·W, dim)``.

    Args:
        table: floating ``(prefix_tokens + h·w, dim)``; the grid rows are row-major.
        new_size: ``(H, W)``.
        old_size: ``(h, w)``; None = a square grid (the grid rows must be a square number).
        prefix_tokens: leading rows without a grid position, returned unchanged.
        mode: ``"bicubic"`` (default, timm/DeiT/MAE), ``"bilinear"`` or ``"nearest"``.
        antialias: ``True`` = timm's default; ``False`` = DeiT's and MAE's resize.
            Only for bicubic and bilinear.

    Returns:
        the resized table, ``table.dtype`` on ``table.device``.

    Example::

        >>> resample_grid_table(torch.randn(1 + 16, 8), (6, 6), prefix_tokens=1).shape
        torch.Size([37, 8])
    """
    if not isinstance(table, Tensor) or table.dim() != 2 or not table.is_floating_point():
        raise ValueError("table must be a floating tensor of shape (prefix_tokens + h·w, dim)")
    prefix_tokens = check_non_negative_int("prefix_tokens", prefix_tokens)
    check_in_choices("mode", mode, _MODES)
    if antialias and mode == "nearest":
        raise ValueError("antialias=True is defined for mode 'bicubic' or 'bilinear' only")
    new = _check_size("new_size", new_size)
    if prefix_tokens >= table.shape[0]:
        raise ValueError(
            f"prefix_tokens must be in [0, {table.shape[0]}) (the table has {table.shape[0]} "
            f"rows: prefix rows, then at least one grid row); got {prefix_tokens}"
        )
    cells = table.shape[0] - prefix_tokens
    if old_size is None:
        side = math.isqrt(max(cells, 0))
        if side * side != cells or cells == 0:
            raise ValueError(
                f"old_size is needed: the table's {cells} grid rows (after {prefix_tokens} "
                "prefix rows) are not a square grid"
            )
        old: tuple[int, ...] = (side, side)
    else:
        old = _check_size("old_size", old_size)
    if len(new) != 2 or len(old) != 2:
        raise ValueError(f"new_size and old_size must be 2D (h, w); got {new} and {old}")
    if old[0] * old[1] != cells:
        raise ValueError(
            f"old_size {old} has {old[0] * old[1]} cells but the table has {cells} grid rows "
            f"after {prefix_tokens} prefix rows"
        )
    prefix, grid = table[:prefix_tokens], table[prefix_tokens:]
    if new == old:
        return table.clone()
    image = grid.float().reshape(1, *old, -1).permute(0, 3, 1, 2)  # (1, dim, h, w)
    corners = None if mode == "nearest" else False
    resized = F.interpolate(image, size=new, mode=mode, align_corners=corners, antialias=antialias)
    rows = resized.permute(0, 2, 3, 1).reshape(new[0] * new[1], -1).to(table.dtype)
    return torch.cat((prefix, rows))


class LearnedGrid(LearnedPositionalEmbedding):
    """ViT's learned table over a patch grid, after ``prefix_tokens`` rows, by token index.

    Row ``prefix_tokens + r·w + c`` is the patch at row ``r``, column ``c``; rows
    ``0 .. prefix_tokens − 1`` belong to the prefix tokens. Lookup, range checks and
    initialization are :class:`LearnedPositionalEmbedding`'s (``N(0, 0.02²)``, timm's
    truncated normal aside); :meth:`resample` moves the table to another grid.

    Args:
        size: ``(h, w)`` of the patch grid (any number of axes; :meth:`resample` takes 2).
        dim: embedding width.
        prefix_tokens: rows before the grid (1 for ViT's CLS token).
        init_std, device, dtype: as :class:`LearnedPositionalEmbedding`.

    Example::

        >>> pe = LearnedGrid((4, 4), dim=8, prefix_tokens=1)
        >>> pe(torch.arange(17)).shape
        torch.Size([17, 8])
        >>> pe.resample((6, 6)).weight.shape
        torch.Size([37, 8])
    """

    def __init__(
        self,
        size: Sequence[int],
        dim: int,
        *,
        prefix_tokens: int = 0,
        init_std: float = 0.02,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.size = _check_size("size", size)
        self.prefix_tokens = check_non_negative_int("prefix_tokens", prefix_tokens)
        rows = prefix_tokens + math.prod(self.size)
        super().__init__(rows, dim, init_std=init_std, device=device, dtype=dtype)

    @torch.no_grad()
    def resample(
        self, size: Sequence[int], *, mode: GridResampleMode = "bicubic", antialias: bool = True
    ) -> LearnedGrid:
        """Resize the grid rows to ``size`` in place (prefix rows kept) and return ``self``.

        Replaces ``weight`` by a new parameter: rebuild an optimizer made before the call.
        """
        weight = resample_grid_table(
            self.weight.detach(),
            size,
            self.size,
            prefix_tokens=self.prefix_tokens,
            mode=mode,
            antialias=antialias,
        )
        self.weight = nn.Parameter(weight, requires_grad=self.weight.requires_grad)
        self.size = _check_size("size", size)
        self.max_seq_len = weight.shape[0]
        return self

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, prefix_tokens={self.prefix_tokens}"


class FactorizedLearned(AdditiveEncoding):
    """A sum of learned tables, each indexed by a group of position axes.

    .. math:: P(a_0, \\dots, a_{N-1}) = \\sum_g W_g[\\text{index}_g(a_{G_g})]

    where ``index_g`` numbers the axes of group ``g`` row-major over their sizes. Default
    groups: each axis alone (``R[r] + C[c]``); MAE-ST's separable video embedding is
    ``groups=((1, 2), (0,))`` on ``(t, h, w)``.

    Args:
        size: the grid ``(s_0, …, s_{N−1})``; positions read ``N`` axes.
        dim: embedding width.
        groups: a partition of ``range(N)``; None = one axis per group.
        init_std: standard deviation of every table's normal initialization.
        device, dtype: of the tables.

    Shape:
        positions ``(N, seq)`` or ``(N, batch, seq)`` of whole coordinates with
        ``0 ≤ a_i < s_i`` → ``(seq, dim)`` or ``(batch, seq, dim)``.

    Example::

        >>> pe = FactorizedLearned((2, 4, 4), dim=8, groups=((1, 2), (0,)))
        >>> [tuple(t.shape) for t in pe.tables]
        [(16, 8), (2, 8)]
    """

    def __init__(
        self,
        size: Sequence[int],
        dim: int,
        *,
        groups: Sequence[Sequence[int]] | None = None,
        init_std: float = 0.02,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.size = _check_size("size", size)
        self.num_axes = len(self.size)
        self.dim = check_positive_int("dim", dim)
        self.init_std = check_positive_float("init_std", init_std)
        if groups is None:
            groups = [(axis,) for axis in range(self.num_axes)]
        self.groups = tuple(tuple(int(axis) for axis in group) for group in groups)
        flat = sorted(axis for group in self.groups for axis in group)
        if flat != list(range(self.num_axes)) or any(not group for group in self.groups):
            raise ValueError(
                f"groups must partition the axes 0..{self.num_axes - 1} into non-empty groups, "
                f"got {groups!r}"
            )
        self.tables = nn.ParameterList(
            nn.Parameter(
                torch.empty(math.prod(self.size[a] for a in group), dim, device=device, dtype=dtype)
            )
            for group in self.groups
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every table from ``N(0, init_std²)``."""
        for table in self.tables:
            nn.init.normal_(table, mean=0.0, std=self.init_std)

    def forward(self, positions: Tensor) -> Tensor:
        check_positions(positions, num_axes=self.num_axes, device=state_device(self))
        check_integer_valued("positions", positions)
        coords = positions.to(torch.long) if self.num_axes > 1 else positions.long()[None]
        if coords.numel() > 0 and validating_values():
            flat = coords.flatten(1)
            low, high = flat.amin(1).tolist(), flat.amax(1).tolist()  # one sync per bound
            for axis, (lo, hi) in enumerate(zip(low, high, strict=True)):
                if lo < 0 or hi >= self.size[axis]:
                    raise ValueError(
                        f"positions axis {axis} must lie in [0, {self.size[axis]}) (size "
                        f"{self.size}); got values from {lo} to {hi}"
                    )
        out: Tensor | None = None
        for group, table in zip(self.groups, self.tables, strict=True):
            index = torch.zeros_like(coords[0])
            for axis in group:  # row-major over the group's axes
                index = index * self.size[axis] + coords[axis]
            term = F.embedding(index.to(table.device), table)
            out = term if out is None else out + term
        assert out is not None
        return out

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, groups={self.groups}"

"""Learned absolute position embeddings: a trained table, looked up by position, resizable.

:func:`resize_table` is the pure function that interpolates a table to a new length;
:class:`LearnedPositionalEmbedding` holds the table and never clamps or truncates: positions
outside ``[0, max_seq_len)`` raise, and :meth:`LearnedPositionalEmbedding.resize` is the one
explicit way to change the length.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_in_choices,
    check_integer_valued,
    check_positive_float,
    check_positive_int,
    validating_values,
)
from posenc.encoding.protocols import AdditiveEncoding
from posenc.positions import check_positions

__all__ = ["LearnedPositionalEmbedding", "ResizeMode", "resize_table"]

ResizeMode = Literal["linear", "nearest", "area"]
_RESIZE_MODES: tuple[ResizeMode, ...] = ("linear", "nearest", "area")


def resize_table(
    table: Tensor,
    new_len: int,
    mode: ResizeMode = "linear",
    align_corners: bool = False,
) -> Tensor:
    r"""Interpolate a position table ``(old_len, dim)`` along positions to ``(new_len, dim)``.

    Each channel is resampled independently with :func:`torch.nn.functional.interpolate`
    (the 1-D analogue of the ViT/DeiT position-embedding resize; timm's
    ``resample_abs_pos_embed`` does the 2-D bicubic case). With ``align_corners=False``
    output row ``j`` reads the table at source position

    .. math:: x_j = (j + \tfrac12)\,\frac{\text{old\_len}}{\text{new\_len}} - \tfrac12

    (clamped to ``[0, old_len - 1]`` for ``"linear"``); with ``align_corners=True`` it reads
    ``x_j = j (old_len - 1) / (new_len - 1)``, so the first and last rows are kept exactly.

    The interpolation runs in at least float32 (half-precision tables are upcast, float64
    stays float64) and the result is cast back to ``table.dtype``.

    Args:
        table: ``(old_len, dim)`` floating tensor.
        new_len: number of rows of the result (≥ 1).
        mode: ``"linear"`` (default), ``"nearest"`` (row ``⌊j·old_len/new_len⌋``) or
            ``"area"`` (average over the covered source rows; for shrinking).
        align_corners: only for ``"linear"``; see above.

    Returns:
        ``(new_len, dim)`` tensor of ``table.dtype`` on ``table.device``.

    Example::

        >>> resize_table(torch.tensor([[0.0], [2.0]]), 3, align_corners=True)
        tensor([[0.],
                [1.],
                [2.]])
    """
    if not isinstance(table, Tensor) or table.dim() != 2 or not table.is_floating_point():
        raise ValueError("table must be a floating tensor of shape (old_len, dim)")
    if table.shape[0] < 1:
        raise ValueError("table must have at least one row (old_len >= 1)")
    new_len = check_positive_int("new_len", new_len)
    check_in_choices("mode", mode, _RESIZE_MODES)
    if align_corners and mode != "linear":
        raise ValueError(f"align_corners=True is only defined for mode='linear', not {mode!r}")
    compute_dtype = torch.promote_types(table.dtype, torch.float32)
    x = table.to(compute_dtype).t()[None]  # (1, dim, old_len): channels as F.interpolate's C
    corners = align_corners if mode == "linear" else None
    out = F.interpolate(x, size=new_len, mode=mode, align_corners=corners)  # (1, dim, new_len)
    return out[0].t().to(table.dtype).contiguous()


class LearnedPositionalEmbedding(AdditiveEncoding):
    r"""A trained table of absolute position embeddings: ``P(p) = W[p]``.

    .. math:: P(p) = W_{p,:}, \quad W \in \mathbb{R}^{\text{max\_seq\_len} \times d},
        \quad W_{ij} \sim \mathcal{N}(0, \text{init\_std}^2)

    Used by BERT and GPT-2 (absolute learned positions; Gehring et al. 2017,
    https://arxiv.org/abs/1705.03122). Tested against direct row indexing of ``weight``, a
    float64 ``gradcheck``, and analytic results for :func:`resize_table`.

    Positions must be whole numbers in ``[0, max_seq_len)``; anything else raises
    ``ValueError``: nothing is clamped or truncated. Call :meth:`resize` to change the length.

    Args:
        max_seq_len: number of rows of the table (≥ 1).
        dim: embedding width (≥ 1).
        init_std: standard deviation of the normal initialisation (> 0; GPT-2 uses 0.02).
        device: device of ``weight``.
        dtype: dtype of ``weight`` and of the output.

    Attributes:
        weight: ``nn.Parameter`` of shape ``(max_seq_len, dim)``.

    Shape:
        positions ``(seq,)`` or ``(batch, seq)`` → ``(seq, dim)`` or ``(batch, seq, dim)``.

    Example::

        >>> pe = LearnedPositionalEmbedding(max_seq_len=16, dim=8)
        >>> pe(torch.arange(4)).shape
        torch.Size([4, 8])
        >>> pe.resize(32).max_seq_len
        32
    """

    def __init__(
        self,
        max_seq_len: int,
        dim: int,
        *,
        init_std: float = 0.02,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.max_seq_len = check_positive_int("max_seq_len", max_seq_len)
        self.dim = check_positive_int("dim", dim)
        self.init_std = check_positive_float("init_std", init_std)
        self.weight = nn.Parameter(torch.empty(max_seq_len, dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw ``weight`` from ``N(0, init_std²)``."""
        nn.init.normal_(self.weight, mean=0.0, std=self.init_std)

    def forward(self, positions: Tensor) -> Tensor:
        check_positions(positions, device=self.weight.device)
        check_integer_valued("positions", positions)
        if positions.numel() > 0 and validating_values():
            low, high = torch.stack(torch.aminmax(positions)).tolist()  # one device sync
            if low < 0 or high >= self.max_seq_len:
                raise ValueError(
                    f"positions must lie in [0, max_seq_len) = [0, {self.max_seq_len}); got "
                    f"values from {low:g} to {high:g}. Call resize() to change the table length."
                )
        return F.embedding(positions.to(device=self.weight.device, dtype=torch.long), self.weight)

    @torch.no_grad()
    def resize(
        self, new_len: int, mode: ResizeMode = "linear", align_corners: bool = False
    ) -> LearnedPositionalEmbedding:
        """Interpolate the trained table to ``new_len`` rows in place and return ``self``.

        Replaces ``weight`` with a new ``nn.Parameter`` (see :func:`resize_table`) and sets
        ``max_seq_len = new_len``. An optimizer built before the call still holds the old
        parameter: rebuild it (and its state) after resizing.
        """
        new_weight = resize_table(self.weight.detach(), new_len, mode, align_corners)
        self.weight = nn.Parameter(new_weight, requires_grad=self.weight.requires_grad)
        self.max_seq_len = new_len
        return self

    def extra_repr(self) -> str:
        return f"max_seq_len={self.max_seq_len}, dim={self.dim}"

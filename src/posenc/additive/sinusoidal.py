"""Sinusoidal absolute encodings: Vaswani et al. 2017 and the scaled variant of Hua et al. 2022.

The math lives in :func:`sinusoidal_encoding`, a pure function evaluated in float64 and cast
at the end; :class:`SinusoidalEncoding` and :class:`ScaledSinusoidalEncoding` are thin module
shells around it. Neither keeps a table, so any length and any (fractional) position works.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.encoding.protocols import AdditiveEncoding
from posenc.positions import check_positions

__all__ = [
    "ScaledSinusoidalEncoding",
    "SinusoidalEncoding",
    "SinusoidalLayout",
    "check_table_dtype",
    "sinusoidal_encoding",
    "sinusoidal_float64",
    "sinusoidal_inv_freq",
]

SinusoidalLayout = Literal["interleaved", "concat"]
_LAYOUTS: tuple[SinusoidalLayout, ...] = ("interleaved", "concat")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_args(dim: int, base: float, layout: str) -> float:
    dim = check_positive_int("dim", dim)
    base = check_positive_float("base", base)
    check_in_choices("layout", layout, _LAYOUTS)
    if layout == "concat" and dim % 2 != 0:
        raise ValueError(f"dim must be even for layout='concat' ([sin ‖ cos] halves), got {dim}")
    return base


def check_table_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype not in _FLOAT_DTYPES:
        allowed = ", ".join(str(d) for d in _FLOAT_DTYPES)
        raise ValueError(f"dtype must be one of {allowed}; got {dtype}")
    return dtype


def sinusoidal_inv_freq(
    dim: int, base: float = 10000.0, *, device: torch.device | str | None = None
) -> Tensor:
    """Frequencies ``ω_i = base^(-2i/dim)`` for pair index ``i = 0 .. ⌈dim/2⌉ - 1``, in float64.

    Each frequency is evaluated by the C library's ``pow`` on Python floats (not a vectorised
    tensor ``pow``, which can be one ulp off), so the values do not depend on the device.

    Returns:
        float64 tensor ``(⌈dim/2⌉,)``.
    """
    dim = check_positive_int("dim", dim)
    base = check_positive_float("base", base)
    values = [base ** (-2.0 * i / dim) for i in range((dim + 1) // 2)]
    return torch.tensor(values, dtype=torch.float64, device=device)


def sinusoidal_encoding(
    positions: Tensor,
    dim: int,
    base: float = 10000.0,
    layout: SinusoidalLayout = "interleaved",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    r"""Sinusoidal position encoding of Vaswani et al. (2017), evaluated in float64.

    .. math::
        PE(p, 2i) = \sin(p\,\omega_i), \quad PE(p, 2i+1) = \cos(p\,\omega_i), \quad
        \omega_i = \text{base}^{-2i/d}

    Paper: "Attention Is All You Need", https://arxiv.org/abs/1706.03762. Tested against a
    float64 evaluation of the formula, positional-encodings' ``PositionalEncoding1D``
    (interleaved, even ``dim``) and x-transformers' ``ScaledSinusoidalEmbedding`` (concat).

    Odd ``dim``: channel ``c`` uses pair index ``i = c // 2`` and frequency
    ``base^(-2i/d)`` with the true ``d``; even channels are sin, odd channels cos. The formula
    is evaluated literally at every channel, so the last channel of an odd ``dim`` is a sin
    without its cos partner. (positional-encodings instead rounds ``d`` up to even for the
    frequencies; the two agree only for even ``dim``.)

    Positions and frequencies are float64 and the result is cast to ``dtype`` once at the
    end, so every output value is the float64 value of the formula rounded to ``dtype``. There
    is no table: any length, integer or fractional positions.

    Args:
        positions: ``(seq,)`` or ``(batch, seq)``, integer or floating, finite.
        dim: number of channels ``d`` (≥ 1).
        base: frequency base (> 0), 10000 in the paper.
        layout: ``"interleaved"`` (``[sin ω_0, cos ω_0, sin ω_1, ...]``, the paper's order) or
            ``"concat"`` (``[sin ω_0 .. sin ω_{d/2-1} ‖ cos ω_0 .. cos ω_{d/2-1}]``, the
            tensor2tensor / x-transformers order; needs even ``dim``).
        dtype: floating dtype of the result.

    Shape:
        positions ``(*, seq)`` → output ``(*, seq, dim)``.

    Returns:
        Tensor of ``dtype`` on ``positions.device``.

    Example::

        >>> sinusoidal_encoding(torch.arange(3), dim=4).shape
        torch.Size([3, 4])
        >>> sinusoidal_encoding(torch.tensor([0.0]), dim=3)
        tensor([[0., 1., 0.]])
    """
    base = _check_args(dim, base, layout)
    check_table_dtype(dtype)
    check_positions(positions)
    return sinusoidal_float64(positions, dim, base, layout).to(positions.device, dtype)


def sinusoidal_float64(positions: Tensor, dim: int, base: float, layout: str) -> Tensor:
    """The float64 values of the formula, on ``positions.device`` (on the CPU for MPS)."""
    device = positions.device
    # MPS has no float64: evaluate on the CPU; callers move the cast result back.
    if device.type == "mps":
        device = torch.device("cpu")
    inv_freq = sinusoidal_inv_freq(dim, base, device=device)  # (⌈d/2⌉,)
    angles = positions.to(device=device, dtype=torch.float64)[..., None] * inv_freq
    if layout == "concat":
        return torch.cat((angles.sin(), angles.cos()), dim=-1)
    # (*, seq, ⌈d/2⌉, 2) -> (*, seq, 2⌈d/2⌉); an odd dim drops the last cos.
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[..., :dim]


class SinusoidalEncoding(AdditiveEncoding):
    r"""Fixed sinusoidal encoding of Vaswani et al. (2017); no parameters, no length limit.

    .. math::
        PE(p, 2i) = \sin(p\,\text{base}^{-2i/d}), \quad
        PE(p, 2i+1) = \cos(p\,\text{base}^{-2i/d})

    Paper: https://arxiv.org/abs/1706.03762. Tested against a float64 evaluation of the
    formula and positional-encodings' ``PositionalEncoding1D``. See
    :func:`sinusoidal_encoding` for the odd-``dim`` rule and the layouts.

    Args:
        dim: number of channels (≥ 1).
        base: frequency base (> 0).
        layout: ``"interleaved"`` (default) or ``"concat"`` (even ``dim``).
        device: accepted for a uniform constructor signature; the module holds no tensors and
            its output follows ``positions.device``.
        dtype: output dtype (default ``torch.get_default_dtype()`` at construction). The
            module has no tensors, so ``module.to(dtype)`` does not change it.

    Shape:
        positions ``(seq,)`` or ``(batch, seq)`` → ``(seq, dim)`` or ``(batch, seq, dim)``.

    Example::

        >>> pe = SinusoidalEncoding(dim=8)
        >>> pe(torch.arange(5)).shape
        torch.Size([5, 8])
    """

    def __init__(
        self,
        dim: int,
        base: float = 10000.0,
        layout: SinusoidalLayout = "interleaved",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.base = _check_args(dim, base, layout)
        self.dim = dim
        self.layout: SinusoidalLayout = layout
        self.dtype = check_table_dtype(torch.get_default_dtype() if dtype is None else dtype)

    def forward(self, positions: Tensor) -> Tensor:
        return sinusoidal_encoding(positions, self.dim, self.base, self.layout, self.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}, layout={self.layout!r}, dtype={self.dtype}"


class ScaledSinusoidalEncoding(AdditiveEncoding):
    r"""Sinusoidal encoding times one learnable scalar gain ``g`` (initialised to ``dim^-1/2``).

    .. math::
        P(p) = g \cdot [\sin(p\,\omega) \,\|\, \cos(p\,\omega)], \quad
        \omega_i = \text{base}^{-2i/d}, \; i < d/2

    Paper: Hua et al. 2022, "Transformer Quality in Linear Time",
    https://arxiv.org/abs/2202.10447 (scaled sinusoidal of FLASH). Tested against
    x-transformers' ``ScaledSinusoidalEmbedding`` (layout ``"concat"``, the default here).

    The encoding is evaluated in float64, multiplied by ``g`` in float64 and cast to the
    gain's dtype once, so the output dtype follows ``module.to(dtype)``.

    Args:
        dim: number of channels (≥ 1; even for ``"concat"``).
        base: frequency base (> 0).
        layout: ``"concat"`` (default, x-transformers order) or ``"interleaved"``.
        device: device of the gain parameter.
        dtype: dtype of the gain and of the output (default ``torch.get_default_dtype()``).

    Attributes:
        gain: the learnable scalar ``g``, shape ``()``.

    Shape:
        positions ``(seq,)`` or ``(batch, seq)`` → ``(seq, dim)`` or ``(batch, seq, dim)``.

    Example::

        >>> pe = ScaledSinusoidalEncoding(dim=8)
        >>> pe(torch.arange(5)).shape
        torch.Size([5, 8])
    """

    def __init__(
        self,
        dim: int,
        base: float = 10000.0,
        layout: SinusoidalLayout = "concat",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.base = _check_args(dim, base, layout)
        self.dim = dim
        self.layout: SinusoidalLayout = layout
        if dtype is not None:
            check_table_dtype(dtype)
        self.gain = nn.Parameter(torch.empty((), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set the gain back to ``dim^-1/2``."""
        with torch.no_grad():
            self.gain.fill_(self.dim**-0.5)

    def forward(self, positions: Tensor) -> Tensor:
        check_positions(positions, device=self.gain.device)
        pe = sinusoidal_float64(positions, self.dim, self.base, self.layout)
        gain = self.gain.to(device=pe.device, dtype=torch.float64)
        return (pe * gain).to(positions.device, self.gain.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}, layout={self.layout!r}"

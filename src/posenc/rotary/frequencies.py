"""Rotary frequencies: the inverse frequencies ``θ_i`` that set how fast each channel pair turns.

Plain RoPE (Su et al. 2021, https://arxiv.org/abs/2104.09864) uses

.. math::

    θ_i = \\mathrm{base}^{-2i / d}, \\qquad i = 0, \\dots, d/2 - 1,

where ``d`` is the rotary dimension. Context-extension scalings (PI, NTK, YaRN, ...) change
these frequencies and may add an attention factor: see :mod:`posenc.rotary.scaling`, whose
values build on :func:`rope_inv_freq` and plug into
:class:`posenc.rotary.rope.RotaryEmbedding` (``scaling=``) or, as an ``inv_freq`` tensor and
``attention_factor``, into :func:`posenc.rotary.functional.rope_cos_sin`. Everything here is a
plain function of ``(rotary_dim, base)``.

Frequencies are computed in float64 by default: a float32 ``θ_i`` carries a relative error of
up to ``2^-24``, which a position ``m`` multiplies into a phase error of ``m·θ_i·2^-24``
(0.03 rad at ``m = 2^20``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int

__all__ = ["check_rotary_dim", "rope_inv_freq"]


def check_rotary_dim(rotary_dim: object, name: str = "rotary_dim") -> int:
    """Return ``rotary_dim`` if it is an even ``int`` ≥ 2, else raise ``ValueError`` naming it."""
    rotary_dim = check_positive_int(name, rotary_dim)
    if rotary_dim % 2 != 0:
        raise ValueError(f"{name} must be even (channels rotate in pairs), got {rotary_dim}")
    return rotary_dim


def resolve_rotary_dim(head_dim: int, rotary_dim: int | None) -> int:
    """``rotary_dim`` (default ``head_dim``), checked even, ≥ 2 and ≤ ``head_dim``."""
    head_dim = check_positive_int("head_dim", head_dim)
    rotary_dim = check_rotary_dim(head_dim if rotary_dim is None else rotary_dim)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be <= head_dim ({head_dim}), got {rotary_dim}")
    return rotary_dim


def rope_inv_freq(
    rotary_dim: int,
    base: float = 10000.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Inverse frequencies of plain RoPE, ``θ_i = base^(-2i/rotary_dim)``.

    .. math::

        θ_i = \\mathrm{base}^{-2i/d}, \\qquad i = 0, \\dots, d/2 - 1

    Paper: RoFormer, Su et al. 2021, https://arxiv.org/abs/2104.09864 (eq. 15).
    Tested against ``transformers`` ``LlamaRotaryEmbedding.inv_freq`` (which computes the same
    values in float32, ``1 / base ** (arange(0, d, 2) / d)``).

    Args:
        rotary_dim: number of rotated channels ``d``; even and ≥ 2.
        base: the RoPE base (``rope_theta``), > 0. Llama-2 uses 1e4, Llama-3 5e5.
        device: device of the result (the values are computed on the CPU, then moved).
        dtype: dtype of the result. The values are always computed in float64 and then cast,
            so keep float64 (the default) when phases are formed later.

    Shape:
        Output: ``(rotary_dim // 2,)``.

    Returns:
        The inverse frequencies, decreasing from ``θ_0 = 1``.

    Example::

        >>> rope_inv_freq(4, base=100.0)
        tensor([1.0000, 0.1000], dtype=torch.float64)
    """
    check_rotary_dim(rotary_dim)
    base = check_positive_float("base", base)
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    # Always on the CPU: the values then do not depend on the device's pow, and devices
    # without float64 (MPS) still get a float64-accurate result.
    # (explicitly: also under a default-device context, e.g. a meta-device build)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device="cpu") / rotary_dim
    inv_freq = torch.full_like(exponents, base).pow(-exponents)
    return inv_freq.to(dtype).to(device)

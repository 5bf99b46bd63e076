"""RoPE scalings that vLLM serves and HF transformers has no ``rope_type`` for.

* :class:`FixedNTK`: vLLM's ``"ntk"`` (``ntk_scaling_rope.py``), fixed NTK and, with
  ``mixed_b``, mixed NTK (Su Jianlin, https://kexue.fm/archives/9706);
* :class:`GeometricYaRN`: Grok-1's ``extra_method="yarn_log"`` (``grok1_scaling_rope.py``),
  YaRN's ramp with a geometric instead of a linear interpolation;
* :class:`BasePower`: Grok-1's ``extra_method="theta_scale"``, the base raised to a power.

Each is tested against vLLM's formula re-derived from its code in float64 (vLLM computes its
tables in float32). Notation as :mod:`posenc.rotary.scaling`: ``b`` base, ``d`` rotary dim,
``s`` factor, ``L0`` original context length, ``θ_i = b^(-2i/d)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int
from posenc.rotary.frequencies import check_rotary_dim, rope_inv_freq
from posenc.rotary.scaling._common import at_least_one, check_seq_len, set_field
from posenc.rotary.scaling.base import Scaling
from posenc.rotary.scaling.yarn import check_ramp_fields, yarn_correction_range, yarn_ramp

__all__ = ["BasePower", "FixedNTK", "GeometricYaRN"]


@dataclass(frozen=True)
class FixedNTK(Scaling):
    """vLLM's ``"ntk"``: every frequency divided by ``s^(k/(d/2))``, ``k = 1 … d/2``.

    .. math::

        θ'_i = θ_i \\,/\\, λ_i, \\quad λ_i = \\exp\\bigl(a\\,(i + 1)^{β}\\bigr), \\quad
        a = \\frac{\\ln s}{(d/2)^{β}}, \\quad i = 0, \\dots, d/2 - 1

    Without ``mixed_b`` (``β = 1``): ``λ_i = s^(2(i+1)/d)``, i.e. ``θ'_i = (b s)^(-2i/d) /
    s^(2/d)``, the base change ``b s`` then one more step of it (vLLM's code). Every
    frequency moves, the highest by ``s^(2/d)``, and the lowest is divided by exactly ``s``:
    unlike :class:`~posenc.rotary.scaling.NTKAware` (``b s^(d/(d-2))``), which keeps ``θ_0``.
    With ``mixed_b`` (mixed NTK, Su Jianlin, https://kexue.fm/archives/9706, the "NTK-RoPE-
    mixed" of 2023): ``β > 1`` moves the high frequencies less and the low ones more, the
    lowest still by ``s``. ``A = 1``. Tested against vLLM's
    ``NTKScalingRotaryEmbedding._compute_inv_freq``.

    vLLM's ``rope_type`` is ``"ntk"``, which is :class:`~posenc.rotary.scaling.NTKAware` in
    posenc's dict form: this one is ``"fixed_ntk"``.

    Args:
        factor: ``s`` ≥ 1 (``s = 1`` is plain RoPE).
        mixed_b: ``β`` > 0, or None for fixed NTK (the same as ``β = 1``).

    Example::

        >>> FixedNTK(4.0).inv_freq(4, 100.0)  # (1 / 2, 1 / (10 · 4))
        tensor([0.5000, 0.0250], dtype=torch.float64)
    """

    factor: float
    mixed_b: float | None = None
    type_name: ClassVar[str] = "fixed_ntk"

    def __post_init__(self) -> None:
        set_field(self, "factor", at_least_one("factor", self.factor))
        if self.mixed_b is not None:
            set_field(self, "mixed_b", check_positive_float("mixed_b", self.mixed_b))

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
        check_rotary_dim(rotary_dim)
        base = check_positive_float("base", base)
        s = self.factor
        if self.mixed_b is None:
            return rope_inv_freq(rotary_dim, base * s) / s ** (2 / rotary_dim)
        beta = self.mixed_b
        a = math.log(s) / (rotary_dim / 2) ** beta
        k = torch.arange(1, rotary_dim // 2 + 1, dtype=torch.float64, device="cpu")
        return rope_inv_freq(rotary_dim, base) / torch.exp(a * k**beta)


@dataclass(frozen=True)
class GeometricYaRN(Scaling):
    """Grok-1's ``"yarn_log"``: YaRN's ramp, interpolating ``θ`` and ``θ/s`` geometrically.

    .. math::

        m_i = e\\,(1 - r_i), \\quad
        θ'_i = θ_i^{m_i} (θ_i / s)^{1 - m_i} = θ_i\\, s^{m_i - 1}

    with YaRN's ramp ``r_i`` (:class:`~posenc.rotary.scaling.YaRN`, always truncated, as
    vLLM's ``yarn_find_correction_range``): pairs below ``lo`` keep ``θ_i`` (``e = 1``), pairs
    above ``hi`` get ``θ_i / s``, and between the ramp is linear in ``ln θ'`` where YaRN's is
    linear in ``θ'``. Grok-1 puts no attention factor on its tables: ``A = 1``. Tested
    against vLLM's ``Grok1ScalingRotaryEmbedding._compute_inv_freq`` (which takes ``L0`` as
    its ``max_position_embeddings`` and caches ``s · L0`` positions). Grok-1's
    ``"yarn"``/``"yarn_linear"`` are ``YaRN(..., extrapolation_factor=e,
    attention_factor_override=1.0)``.

    Args:
        factor: ``s`` ≥ 1 (``s = 1`` is plain RoPE).
        original_max_position_embeddings: ``L0`` ≥ 1.
        beta_fast: ``β_fast`` > 0 (32).
        beta_slow: ``β_slow`` > 0 and ≤ ``beta_fast`` (1).
        extrapolation_factor: ``e`` ≥ 0 (1), vLLM's weight on the kept ``θ_i``.

    Example::

        >>> GeometricYaRN(4.0, 64).inv_freq(8, 1e4)[0].item()  # the highest frequency: kept
        1.0
    """

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    extrapolation_factor: float = 1.0
    type_name: ClassVar[str] = "geometric_yarn"

    def __post_init__(self) -> None:
        check_ramp_fields(self)

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
        low, high = yarn_correction_range(
            rotary_dim,
            base,
            self.original_max_position_embeddings,
            self.beta_fast,
            self.beta_slow,
        )
        keep = (1.0 - yarn_ramp(rotary_dim, low, high)) * self.extrapolation_factor
        # θ^m (θ/s)^(1-m) without logarithms, so that s = 1 gives θ bit for bit
        return rope_inv_freq(rotary_dim, base) * torch.full_like(keep, self.factor).pow(keep - 1)


@dataclass(frozen=True)
class BasePower(Scaling):
    """Grok-1's ``"theta_scale"``: the base raised to the power that stretches ``L0`` to ``s L0``.

    .. math::

        k = \\frac{\\ln(s L_0 / 2π)}{\\ln(L_0 / 2π)}, \\quad b' = b^k, \\quad
        θ'_i = b'^{-2i/d} = θ_i^{k}

    The pair whose wavelength ``2π/θ`` was ``L0`` gets wavelength ``s L0``
    (``(2π/L0)^k = 2π/(s L0)``); the highest frequency ``θ_0 = 1`` is kept, and pairs with
    longer wavelengths are stretched by more than ``s``. ``A = 1``. Tested against vLLM's
    ``Grok1ScalingRotaryEmbedding._compute_inv_freq`` (``L0`` is its
    ``max_position_embeddings``).

    Args:
        factor: ``s`` ≥ 1 (``s = 1`` is plain RoPE).
        original_max_position_embeddings: ``L0`` ≥ 7 (``L0 > 2π``: ``ln(L0/2π)`` divides).

    Example::

        >>> BasePower(4.0, 64).inv_freq(4, 100.0)[0].item()
        1.0
    """

    factor: float
    original_max_position_embeddings: int
    type_name: ClassVar[str] = "base_power"

    def __post_init__(self) -> None:
        set_field(self, "factor", at_least_one("factor", self.factor))
        original = check_positive_int(
            "original_max_position_embeddings", self.original_max_position_embeddings
        )
        if original <= 2 * math.pi:
            raise ValueError(
                "original_max_position_embeddings must be an int >= 7 (> 2π: ln(L0 / 2π) "
                f"divides), got {original}"
            )

    @property
    def exponent(self) -> float:
        """``k = ln(s L0 / 2π) / ln(L0 / 2π)`` (1 for ``s = 1``)."""
        original = self.original_max_position_embeddings
        return math.log(original * self.factor / (2 * math.pi)) / math.log(original / (2 * math.pi))

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
        base = check_positive_float("base", base)
        return rope_inv_freq(rotary_dim, base**self.exponent)

"""YaRN: interpolate the low frequencies, keep the high ones, ramp between; plus ``A``.

:class:`YaRN` and the pieces of it that Grok-1's geometric YaRN
(:class:`~posenc.rotary.scaling.vllm.GeometricYaRN`) shares: the correction range, the ramp
and the checks of their fields. Paper: Peng et al. 2023, https://arxiv.org/abs/2309.00071.
Reproduces HF transformers 5.23 ``ROPE_INIT_FUNCTIONS["yarn"]`` in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int
from posenc.rotary.frequencies import check_rotary_dim, rope_inv_freq
from posenc.rotary.scaling._common import at_least_one, check_seq_len, non_negative, set_field
from posenc.rotary.scaling.base import Scaling
from posenc.rotary.scaling.length import GrowAndReset, LengthState

__all__ = ["YaRN", "check_ramp_fields", "yarn_correction_range", "yarn_ramp"]


def _get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1·k·ln s + 1`` (1 for ``s ≤ 1``), in HF's op order."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class YaRN(Scaling):
    """YaRN: interpolate low frequencies, keep high ones, ramp between; plus ``A``.

    .. math::

        c(β) = \\frac{d \\ln(L_0 / (2π β))}{2 \\ln b}, \\quad
        lo = \\max(\\lfloor c(β_{fast}) \\rfloor, 0), \\quad
        hi = \\min(\\lceil c(β_{slow}) \\rceil, d - 1)

        r_i = \\mathrm{clamp}\\bigl((i - lo) / (hi - lo), 0, 1\\bigr), \\quad
        θ'_i = \\frac{θ_i}{s} r_i + θ_i (1 - r_i)

        A = \\text{attention\\_factor\\_override, else }
        \\frac{g(s, \\text{mscale})}{g(s, \\text{mscale\\_all\\_dim})}
        \\text{ if both are non-zero, else } g(s, 1), \\quad g(s, k) = 0.1 k \\ln s + 1

    floor/ceil only when ``truncate`` (gpt-oss uses ``truncate=False``); ``hi`` gets +0.001
    when ``lo == hi``; ``g = 1`` for ``s ≤ 1``. The clamp at ``d - 1`` (not ``d/2 - 1``) is
    HF's. ``mscale``/``mscale_all_dim`` of 0 or None mean "unset" (DeepSeek configs).

    Paper: Peng et al. 2023, https://arxiv.org/abs/2309.00071 (eqs. 17-23). Tested against
    HF ``ROPE_INIT_FUNCTIONS["yarn"]``.

    Args:
        factor: ``s`` ≥ 1 (with ``s = 1`` the frequencies are plain RoPE and ``A = 1``).
        original_max_position_embeddings: ``L0`` ≥ 1.
        beta_fast: ``β_fast`` > 0, rotations where extrapolation ends (32).
        beta_slow: ``β_slow`` > 0 and ≤ ``beta_fast``, rotations where interpolation
            begins (1).
        mscale, mscale_all_dim: DeepSeek's ``A`` ratio; None or ≥ 0.
        attention_factor_override: ``A`` > 0, replacing the formula (HF key
            ``attention_factor``).
        truncate: floor/ceil the correction range.
        dynamic: Dynamic-YaRN (Peng et al. §3.3): the factor follows the length, ``s =
            max(factor, seq_len / L0)``, and so does ``A`` (with ``factor = 1``, plain RoPE
            up to ``L0``); a :class:`~posenc.rotary.rope.RotaryEmbedding` follows the longest
            length seen and resets below ``L0``, as HF's dynamic NTK (the yarn repository's
            ``LlamaDynamicYaRNScaledRotaryEmbedding`` only grows). Neither transformers
            5.23 nor vLLM has it (no HF ``rope_type``).
        extrapolation_factor: ``e`` ≥ 0, the weight of the kept ``θ_i``: ``θ'_i = θ_i/s (1
            - e (1 - r_i)) + θ_i e (1 - r_i)`` (the yarn repository's and vLLM's
            ``extrapolation_factor``, which scales the ramp mask; DeepSeek's and Grok-1's
            ``yarn`` take it). The default 1 is the formula above; HF has no such key, so
            ``e ≠ 1`` has no HF form. Tested against vLLM's ``deepseek_scaling_rope.py``.

    Example::

        >>> YaRN(40.0, 4096, mscale=1.0, mscale_all_dim=1.0).attention_factor
        1.0
    """

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor_override: float | None = None
    truncate: bool = True
    dynamic: bool = False
    extrapolation_factor: float = 1.0
    type_name: ClassVar[str] = "yarn"

    def __post_init__(self) -> None:
        check_ramp_fields(self)
        for name in ("mscale", "mscale_all_dim"):
            value = getattr(self, name)
            if value is not None:
                set_field(self, name, non_negative(name, value))
        if self.attention_factor_override is not None:
            set_field(
                self,
                "attention_factor_override",
                check_positive_float("attention_factor_override", self.attention_factor_override),
            )
        if not isinstance(self.truncate, bool):
            raise ValueError(f"truncate must be a bool, got {self.truncate!r}")
        if not isinstance(self.dynamic, bool):
            raise ValueError(f"dynamic must be a bool, got {self.dynamic!r}")

    @property
    def depends_on_length(self) -> bool:  # type: ignore[override]
        return self.dynamic

    @property
    def length_threshold(self) -> int:
        """Lengths up to this keep the initial frequencies (``L0``)."""
        return self.original_max_position_embeddings

    def frequency_length(self, seq_len: int) -> int | None:
        return seq_len if self.dynamic and seq_len > self.length_threshold else None

    def new_state(self) -> LengthState:
        """Dynamic YaRN: HF's grow-and-reset rule of dynamic NTK
        (:class:`~posenc.rotary.scaling.length.GrowAndReset` at ``L0``); static otherwise."""
        return GrowAndReset(self.length_threshold) if self.dynamic else LengthState()

    def factor_at(self, seq_len: int | None) -> float:
        """``s``: :attr:`factor`, or for dynamic YaRN ``max(factor, seq_len / L0)``."""
        if not self.dynamic or seq_len is None:
            return self.factor
        return max(self.factor, seq_len / self.original_max_position_embeddings)

    def correction_range(self, rotary_dim: int, base: float) -> tuple[float, float]:
        """``(lo, hi)``: the channel-pair indices where the ramp starts and ends."""
        return yarn_correction_range(
            rotary_dim,
            base,
            self.original_max_position_embeddings,
            self.beta_fast,
            self.beta_slow,
            self.truncate,
        )

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        factor = self.factor_at(check_seq_len(seq_len))
        low, high = self.correction_range(rotary_dim, base)
        theta = rope_inv_freq(rotary_dim, base)
        ramp = yarn_ramp(rotary_dim, low, high)  # 0: keep θ, 1: θ / s
        if self.extrapolation_factor != 1.0:
            # DeepSeek's and vLLM's weight on θ: (1 - ramp) scaled by the factor
            keep = (1.0 - ramp) * self.extrapolation_factor
            return theta / factor * (1.0 - keep) + theta * keep
        return theta / factor * ramp + theta * (1.0 - ramp)

    @property
    def attention_factor(self) -> float:
        return self.attention_factor_at(None)

    def attention_factor_at(self, seq_len: int | None) -> float:
        if self.attention_factor_override is not None:
            return self.attention_factor_override
        factor = self.factor_at(seq_len)
        if self.mscale and self.mscale_all_dim:
            return float(
                _get_mscale(factor, self.mscale) / _get_mscale(factor, self.mscale_all_dim)
            )
        return _get_mscale(factor)


def check_ramp_fields(scaling: Any) -> None:
    """Validate (and normalise to floats) the fields of YaRN's ramp that :class:`YaRN` and
    :class:`GeometricYaRN` share: ``factor`` ≥ 1, ``original_max_position_embeddings`` ≥ 1,
    ``beta_fast`` ≥ ``beta_slow`` > 0 and ``extrapolation_factor`` ≥ 0 (``ValueError`` naming
    the field)."""
    set_field(scaling, "factor", at_least_one("factor", scaling.factor))
    original = check_positive_int(
        "original_max_position_embeddings", scaling.original_max_position_embeddings
    )
    set_field(scaling, "original_max_position_embeddings", original)
    set_field(scaling, "beta_fast", check_positive_float("beta_fast", scaling.beta_fast))
    set_field(scaling, "beta_slow", check_positive_float("beta_slow", scaling.beta_slow))
    if scaling.beta_fast < scaling.beta_slow:
        raise ValueError(
            f"beta_fast must be >= beta_slow ({scaling.beta_slow}), got {scaling.beta_fast}"
        )
    extrapolation = non_negative("extrapolation_factor", scaling.extrapolation_factor)
    set_field(scaling, "extrapolation_factor", extrapolation)


def yarn_correction_range(
    rotary_dim: int,
    base: float,
    original_max_position_embeddings: int,
    beta_fast: float,
    beta_slow: float,
    truncate: bool = True,
) -> tuple[float, float]:
    """YaRN's ``(lo, hi)``: the pair indices where the ramp starts and ends.

    ``c(β) = d ln(L0 / (2π β)) / (2 ln b)``; ``lo = max(c(β_fast), 0)``, ``hi = min(c(β_slow),
    d - 1)``, floored and ceiled when ``truncate`` (HF's and vLLM's ``find_correction_range``).
    """
    check_rotary_dim(rotary_dim)
    base = check_positive_float("base", base)
    if base == 1.0:
        raise ValueError("base must be != 1 for YaRN (ln b divides)")
    original = original_max_position_embeddings

    def dim_of(rotations: float) -> float:
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def yarn_ramp(rotary_dim: int, low: float, high: float) -> Tensor:
    """YaRN's ramp ``r_i = clamp((i - lo) / (hi - lo), 0, 1)`` over the ``rotary_dim // 2``
    pairs, float64 on the CPU: 0 where the frequency is kept, 1 where it is divided by ``s``.
    ``hi`` gets +0.001 when ``lo == hi`` (HF's and vLLM's guard against the singular ramp)."""
    if low == high:
        high += 0.001
    index = torch.arange(rotary_dim // 2, dtype=torch.float64, device="cpu")
    return ((index - low) / (high - low)).clamp(0.0, 1.0)

"""The base of the RoPE scalings and the pieces several of them share.

:class:`Scaling` (the interface every scaling implements), the field checks that raise
``ValueError`` naming the field, and YaRN's correction range and ramp (used by
:class:`~posenc.rotary.scaling.YaRN` and :class:`~posenc.rotary.scaling.vllm.GeometricYaRN`).
Kept apart from :mod:`posenc.rotary.scaling` so that the scalings of
:mod:`posenc.rotary.scaling.vllm` and :mod:`posenc.rotary.scaling.per_frequency` build on
them while ``scaling``'s dict conversion lists every scaling: the imports run one way
(``scaling`` → ``scaling_vllm`` / ``scaling_per_frequency`` → ``scaling_base``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int
from posenc.rotary.frequencies import check_rotary_dim

__all__ = ["Scaling", "yarn_correction_range", "yarn_ramp"]


def _at_least_one(name: str, value: object) -> float:
    value = check_positive_float(name, value)
    if value < 1.0:
        raise ValueError(f"{name} must be a finite number >= 1, got {value!r}")
    return value


def _non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_seq_len(seq_len: object) -> int | None:
    if seq_len is None:
        return None
    return check_positive_int("seq_len", seq_len)


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)  # normalise a field of a frozen dataclass


@dataclass(frozen=True)
class Scaling:
    """Base of the RoPE scalings: inverse frequencies and an attention factor ``A``."""

    #: True when inv_freq depends on the sequence length (DynamicNTK "hf" mode, LongRoPE).
    depends_on_length: ClassVar[bool] = False
    #: the ``"type"`` of :func:`scaling_from_dict` / :func:`scaling_to_dict`.
    type_name: ClassVar[str] = ""

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        """float64 ``(rotary_dim // 2,)`` inverse frequencies, computed on the CPU."""
        raise NotImplementedError

    @property
    def attention_factor(self) -> float:
        """``A``, multiplying cos and sin (so the logits by ``A²``)."""
        return 1.0

    def attention_factor_at(self, seq_len: int | None) -> float:
        """``A`` for the frequencies of length ``seq_len`` (differs from
        :attr:`attention_factor` only for a length-dependent ``A``: dynamic YaRN)."""
        return self.attention_factor

    def frequency_length(self, seq_len: int) -> int | None:
        """The length a module's frequencies follow for a sequence of ``seq_len`` positions,
        without history (None: the initial frequencies). Length-dependent scalings only:
        dynamic NTK and dynamic YaRN follow ``seq_len`` beyond their threshold, LongRoPE
        switches to its long factors past ``L0`` (``L0 + 1`` stands for "long")."""
        return None


def check_ramp_fields(scaling: Any) -> None:
    """Validate (and normalise to floats) the fields of YaRN's ramp that :class:`YaRN` and
    :class:`GeometricYaRN` share: ``factor`` ≥ 1, ``original_max_position_embeddings`` ≥ 1,
    ``beta_fast`` ≥ ``beta_slow`` > 0 and ``extrapolation_factor`` ≥ 0 (``ValueError`` naming
    the field)."""
    _set(scaling, "factor", _at_least_one("factor", scaling.factor))
    check_positive_int("original_max_position_embeddings", scaling.original_max_position_embeddings)
    _set(scaling, "beta_fast", check_positive_float("beta_fast", scaling.beta_fast))
    _set(scaling, "beta_slow", check_positive_float("beta_slow", scaling.beta_slow))
    if scaling.beta_fast < scaling.beta_slow:
        raise ValueError(
            f"beta_fast must be >= beta_slow ({scaling.beta_slow}), got {scaling.beta_fast}"
        )
    extrapolation = _non_negative("extrapolation_factor", scaling.extrapolation_factor)
    _set(scaling, "extrapolation_factor", extrapolation)


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

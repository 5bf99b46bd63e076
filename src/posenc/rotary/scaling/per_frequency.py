"""RoPE scalings that treat each frequency by its own rule: LongRoPE's per-frequency
factors, Llama 3's wavelength bands and Gemma's proportional RoPE (re-exported by
:mod:`posenc.rotary.scaling`, which lists them in :func:`~posenc.rotary.scaling.scaling_types`).

Each reproduces HF transformers 5.23 ``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` in float64;
the module docstring of :mod:`posenc.rotary.scaling` states the deliberate differences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int
from posenc.rotary.frequencies import check_rotary_dim, rope_inv_freq
from posenc.rotary.scaling._common import at_least_one, check_seq_len, set_field
from posenc.rotary.scaling.base import Scaling
from posenc.rotary.scaling.length import LengthState, LengthSwitch

__all__ = ["Llama3", "LongRoPE", "Proportional"]


def _factor_list(name: str, values: object) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"{name} must be a non-empty sequence of numbers > 0")
    return tuple(check_positive_float(f"{name}[{i}]", v) for i, v in enumerate(values))


@dataclass(frozen=True, repr=False)
class LongRoPE(Scaling):
    """LongRoPE: per-frequency rescale factors, short below ``L0`` and long above.

    .. math::

        θ'_i = \\frac{1}{e_i\\, b^{2i/d}}, \\quad
        e = \\begin{cases} \\text{long\\_factor} & \\text{seq\\_len} > L_0 \\\\
        \\text{short\\_factor} & \\text{otherwise (and seq\\_len = None)} \\end{cases}

        A = \\text{attention\\_factor\\_override, else }
        \\sqrt{1 + \\ln s / \\ln L_0} \\text{ for } s > 1 \\text{ else } 1,
        \\quad s = \\text{factor or } \\text{max\\_position\\_embeddings} / L_0

    Paper: Ding et al. 2024, https://arxiv.org/abs/2402.13753 (used by Phi-3). Tested
    against HF ``ROPE_INIT_FUNCTIONS["longrope"]`` and HF's per-forward switch.

    Args:
        short_factor, long_factor: ``d/2`` numbers > 0 each (the length is checked against
            ``rotary_dim`` in :meth:`inv_freq`).
        original_max_position_embeddings: ``L0`` ≥ 2.
        factor: ``s`` ≥ 1, or None to use ``max_position_embeddings / L0`` (Phi-3).
        max_position_embeddings: ≥ ``L0``; needed when ``factor`` and the override are None.
        attention_factor_override: ``A`` > 0, replacing the formula.
    """

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position_embeddings: int
    factor: float | None = None
    max_position_embeddings: int | None = None
    attention_factor_override: float | None = None
    depends_on_length: ClassVar[bool] = True
    type_name: ClassVar[str] = "longrope"

    def __post_init__(self) -> None:
        set_field(self, "short_factor", _factor_list("short_factor", self.short_factor))
        set_field(self, "long_factor", _factor_list("long_factor", self.long_factor))
        if len(self.long_factor) != len(self.short_factor):
            raise ValueError(
                f"long_factor has {len(self.long_factor)} entries but short_factor has "
                f"{len(self.short_factor)}; both must have rotary_dim // 2"
            )
        original = check_positive_int(
            "original_max_position_embeddings", self.original_max_position_embeddings
        )
        set_field(self, "original_max_position_embeddings", original)
        if original < 2:
            raise ValueError("original_max_position_embeddings must be >= 2 (ln L0 divides)")
        if self.factor is not None:
            set_field(self, "factor", at_least_one("factor", self.factor))
        if self.max_position_embeddings is not None:
            length = check_positive_int("max_position_embeddings", self.max_position_embeddings)
            set_field(self, "max_position_embeddings", length)
            if self.max_position_embeddings < original:
                raise ValueError(
                    f"max_position_embeddings must be >= original_max_position_embeddings "
                    f"({original}), got {self.max_position_embeddings}"
                )
        if self.attention_factor_override is not None:
            set_field(
                self,
                "attention_factor_override",
                check_positive_float("attention_factor_override", self.attention_factor_override),
            )
        elif self.factor is None and self.max_position_embeddings is None:
            raise ValueError(
                "factor (or max_position_embeddings, or attention_factor_override) is required "
                "to set LongRoPE's attention factor"
            )

    @property
    def scale(self) -> float | None:
        """``s``: ``factor``, else ``max_position_embeddings / L0`` (None if neither is set)."""
        if self.factor is not None:
            return self.factor
        if self.max_position_embeddings is None:
            return None
        return self.max_position_embeddings / self.original_max_position_embeddings

    def frequency_length(self, seq_len: int) -> int | None:
        original = self.original_max_position_embeddings
        return original + 1 if seq_len > original else None

    def new_state(self) -> LengthState:
        """HF's per-call switch (:class:`~posenc.rotary.scaling.length.LengthSwitch`): the
        long factors iff ``seq_len > L0``."""
        return LengthSwitch(self.frequency_length)

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        seq_len = check_seq_len(seq_len)
        check_rotary_dim(rotary_dim)
        if len(self.short_factor) != rotary_dim // 2:
            raise ValueError(
                f"short_factor and long_factor have {len(self.short_factor)} entries but "
                f"rotary_dim {rotary_dim} needs {rotary_dim // 2}"
            )
        long = seq_len is not None and seq_len > self.original_max_position_embeddings
        factors = torch.tensor(self.long_factor if long else self.short_factor, dtype=torch.float64)
        return rope_inv_freq(rotary_dim, base) / factors

    @property
    def attention_factor(self) -> float:
        if self.attention_factor_override is not None:
            return self.attention_factor_override
        s = self.scale
        assert s is not None  # guaranteed by __post_init__
        if s <= 1.0:
            return 1.0
        return math.sqrt(1 + math.log(s) / math.log(self.original_max_position_embeddings))

    def __repr__(self) -> str:
        return (
            f"LongRoPE(short_factor=<{len(self.short_factor)} values>, "
            f"long_factor=<{len(self.long_factor)} values>, "
            f"original_max_position_embeddings={self.original_max_position_embeddings}, "
            f"factor={self.factor}, max_position_embeddings={self.max_position_embeddings}, "
            f"attention_factor_override={self.attention_factor_override})"
        )


@dataclass(frozen=True)
class Llama3(Scaling):
    """Llama-3.1 scaling: keep short wavelengths, divide long ones by ``s``, smooth between.

    .. math::

        λ_i = 2π / θ_i, \\quad
        θ'_i = \\begin{cases} θ_i & λ_i < L_0 / hf \\\\ θ_i / s & λ_i > L_0 / lf \\\\
        (1 - g_i)\\, θ_i / s + g_i θ_i & \\text{otherwise} \\end{cases}, \\quad
        g_i = \\frac{L_0 / λ_i - lf}{hf - lf}

    With ``lf == hf`` the smoothing band is empty (no division by zero). ``A = 1``.
    Paper: Llama 3 herd, https://arxiv.org/abs/2407.21783 (Meta's reference
    ``apply_scaling``); Llama-3.1 uses ``s = 8, lf = 1, hf = 4, L0 = 8192``. Tested against
    HF ``ROPE_INIT_FUNCTIONS["llama3"]``.

    Args:
        factor: ``s`` ≥ 1.
        low_freq_factor: ``lf`` > 0.
        high_freq_factor: ``hf`` ≥ ``lf``.
        original_max_position_embeddings: ``L0`` ≥ 1.
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int
    type_name: ClassVar[str] = "llama3"

    def __post_init__(self) -> None:
        set_field(self, "factor", at_least_one("factor", self.factor))
        set_field(
            self, "low_freq_factor", check_positive_float("low_freq_factor", self.low_freq_factor)
        )
        high = check_positive_float("high_freq_factor", self.high_freq_factor)
        set_field(self, "high_freq_factor", high)
        if self.low_freq_factor > high:
            raise ValueError(
                f"low_freq_factor must be <= high_freq_factor ({high}), got {self.low_freq_factor}"
            )
        original = check_positive_int(
            "original_max_position_embeddings", self.original_max_position_embeddings
        )
        set_field(self, "original_max_position_embeddings", original)

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
        theta = rope_inv_freq(rotary_dim, base)
        original, low, high = (
            self.original_max_position_embeddings,
            self.low_freq_factor,
            self.high_freq_factor,
        )
        wavelength = 2 * math.pi / theta
        out = torch.where(wavelength > original / low, theta / self.factor, theta)
        if high > low:
            smooth = (original / wavelength - low) / (high - low)
            smoothed = (1 - smooth) * theta / self.factor + smooth * theta
            medium = (wavelength >= original / high) & (wavelength <= original / low)
            out = torch.where(medium, smoothed, out)
        return out


@dataclass(frozen=True)
class Proportional(Scaling):
    """Gemma-style proportional RoPE: head-width frequencies on a fraction of the pairs.

    .. math::

        n = \\lfloor p · D / 2 \\rfloor, \\quad
        θ'_j = \\begin{cases} b^{-2j/D} / s & j < n \\\\ 0 & n ≤ j < D/2 \\end{cases}

    Called with ``rotary_dim = D = head_dim``: pairs ``(j, j + D/2)`` span the whole head and
    the zero frequencies leave their pairs unrotated (unlike partial rotary, whose exponent
    uses the rotary width). ``A = 1``. Reference: HF ``ROPE_INIT_FUNCTIONS["proportional"]``
    (Gemma 4), against which it is tested. With ``s = 1`` this is p-RoPE (Barbero et al.
    2024, "Round and Round We Go! What makes Rotary Positional Encodings useful?",
    https://arxiv.org/abs/2410.06205): the highest ``p`` fraction of the frequencies rotate,
    the lowest, which carry little position and go out of distribution first beyond the
    training length (:mod:`posenc.rotary.scaling.laws`), are removed.

    Args:
        partial_rotary_factor: ``p`` in (0, 1].
        factor: ``s`` > 0 (a plain division, 1 in Gemma 4).
    """

    partial_rotary_factor: float
    factor: float = 1.0
    type_name: ClassVar[str] = "proportional"

    def __post_init__(self) -> None:
        p = check_positive_float("partial_rotary_factor", self.partial_rotary_factor)
        if p > 1.0:
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {p}")
        set_field(self, "partial_rotary_factor", p)
        set_field(self, "factor", check_positive_float("factor", self.factor))

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
        theta = rope_inv_freq(rotary_dim, base)
        rotated = int(self.partial_rotary_factor * rotary_dim // 2)
        theta[rotated:] = 0.0
        return theta / self.factor

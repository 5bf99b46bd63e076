"""RoPE context-extension scalings: typed values that give inverse frequencies and ``A``.

A scaling replaces plain RoPE's ``θ_i = b^(-2i/d)`` by ``θ'_i`` and may add an attention
factor ``A`` that multiplies cos and sin (so the logits by ``A²``, HF convention). Each
scaling is a frozen dataclass validated on construction (``ValueError`` naming the field and
its allowed range); :meth:`Scaling.inv_freq` computes float64 values on the CPU.

Notation: ``b`` base, ``d`` rotary dim, ``s`` factor, ``L0`` original context length.
Every formula of this module reproduces HF transformers 5.23
``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (tested to 1e-6 relative on the frequencies and
exactly on ``A``), computed in float64. vLLM's fixed and mixed NTK and Grok-1's geometric
YaRN and base power, which HF lacks, are in :mod:`posenc.rotary.scaling.vllm`; LongRoPE,
Llama 3 and proportional RoPE in :mod:`posenc.rotary.scaling.per_frequency` (both re-exported
here and listed by :func:`scaling_types`).

Differences from HF, all deliberate:

* values HF only warns about raise here: ``factor`` < 1 for the extension methods (> 0 for
  :class:`Linear` and :class:`Proportional`, which are plain divisions), ``beta_fast`` <
  ``beta_slow``, ``low_freq_factor`` > ``high_freq_factor``, LongRoPE factor lists whose
  length is not ``d/2``;
* YaRN ``beta_fast``/``beta_slow`` must be > 0: HF's ``beta or default`` silently turns 0
  into the default, which a typed value has no need for;
* Llama-3 with ``low_freq_factor == high_freq_factor``: the smoothing band is empty; the
  single wavelength ``λ = L0/lf`` (if hit exactly) is kept, where HF divides 0 by 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Literal

from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.rotary.frequencies import check_rotary_dim, rope_inv_freq
from posenc.rotary.scaling.base import (
    Scaling,
    _at_least_one,
    _check_seq_len,
    _non_negative,
    _set,
    check_ramp_fields,
    yarn_correction_range,
    yarn_ramp,
)
from posenc.rotary.scaling.per_frequency import Llama3, LongRoPE, Proportional
from posenc.rotary.scaling.vllm import BasePower, FixedNTK, GeometricYaRN

__all__ = [
    "BasePower",
    "DynamicNTK",
    "FixedNTK",
    "GeometricYaRN",
    "Linear",
    "Llama3",
    "LongRoPE",
    "NTKAware",
    "Proportional",
    "Scaling",
    "YaRN",
    "scaling_from_dict",
    "scaling_to_dict",
    "scaling_types",
]


def _get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1·k·ln s + 1`` (1 for ``s ≤ 1``), in HF's op order."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class Linear(Scaling):
    """Position interpolation (PI): ``θ'_i = θ_i / s``, i.e. positions ``m / s``; ``A = 1``.

    Paper: Chen et al. 2023, https://arxiv.org/abs/2306.15595. Tested against HF
    ``ROPE_INIT_FUNCTIONS["linear"]``.

    Args:
        factor: ``s`` > 0 (``s < 1`` compresses, which HF allows with a warning).

    Example::

        >>> Linear(4.0).inv_freq(4, 100.0)
        tensor([0.2500, 0.0250], dtype=torch.float64)
    """

    factor: float
    type_name: ClassVar[str] = "linear"

    def __post_init__(self) -> None:
        _set(self, "factor", check_positive_float("factor", self.factor))

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        _check_seq_len(seq_len)
        return rope_inv_freq(rotary_dim, base) / self.factor


def _ntk_base(base: float, rotary_dim: int, ratio: float) -> float:
    """``b · ratio^(d/(d-2))`` (NTK-aware base change); needs ``d ≥ 4``."""
    base = check_positive_float("base", base)
    if check_rotary_dim(rotary_dim) < 4:
        raise ValueError(
            f"rotary_dim must be >= 4 for NTK scaling (exponent d/(d-2)), got {rotary_dim}"
        )
    return base * ratio ** (rotary_dim / (rotary_dim - 2))


@dataclass(frozen=True)
class NTKAware(Scaling):
    """NTK-aware scaling: a fixed base change ``b' = b · s^(d/(d-2))``, ``θ'_i = b'^(-2i/d)``.

    The highest frequency is kept and the lowest is divided by exactly ``s``. From bloc97,
    "NTK-Aware Scaled RoPE", r/LocalLLaMA, 2023 (discussed in YaRN,
    https://arxiv.org/abs/2309.00071, §3.1). HF has no static NTK type; tested against
    rotary-embedding-torch ``RotaryEmbedding(theta_rescale_factor=s)``. ``A = 1``.

    Args:
        factor: ``s`` ≥ 1.

    Example::

        >>> NTKAware(1.0).inv_freq(4, 100.0)
        tensor([1.0000, 0.1000], dtype=torch.float64)
    """

    factor: float
    type_name: ClassVar[str] = "ntk"

    def __post_init__(self) -> None:
        _set(self, "factor", _at_least_one("factor", self.factor))

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        _check_seq_len(seq_len)
        return rope_inv_freq(rotary_dim, _ntk_base(base, rotary_dim, self.factor))


@dataclass(frozen=True)
class DynamicNTK(Scaling):
    """Dynamic NTK: the NTK base change sized to the current length (emozilla, 2023).

    .. math::

        L = \\max(\\text{seq\\_len}, L_{max}), \\quad
        b' = b\\,\\bigl(s L / L_{max} - (s - 1)\\bigr)^{d/(d-2)}, \\quad θ'_i = b'^{-2i/d}

    with ``L_max = max_position_embeddings`` (not ``L0``), so lengths up to ``L_max`` give
    plain RoPE. From emozilla, "Dynamically Scaled RoPE", r/LocalLLaMA, 2023. Tested against
    HF ``ROPE_INIT_FUNCTIONS["dynamic"]`` and HF ``LlamaRotaryEmbedding`` decoding.

    Two modes:

    * ``"hf"``: HF semantics. :meth:`inv_freq` with ``seq_len`` applies the formula
      (``seq_len=None`` gives plain RoPE); a :class:`~posenc.rotary.rope.RotaryEmbedding`
      follows the longest length seen and resets to plain RoPE when a shorter-than-``L_max``
      sequence comes after a longer one. ``depends_on_length`` is True. Note that the formula
      still rescales beyond ``L_max`` when ``s = 1`` (``b' = b (L/L_max)^{d/(d-2)}``).
    * ``"fixed"``: frequencies computed once at ``target_length`` and never changed, as vLLM
      does at start-up (vLLM uses ``target_length = s · L_max``). ``depends_on_length`` is
      False; ``seq_len`` is ignored.

    ``A = 1``.

    Args:
        factor: ``s`` ≥ 1.
        max_position_embeddings: ``L_max`` ≥ 1.
        mode: ``"hf"`` or ``"fixed"``.
        target_length: the length of the ``"fixed"`` mode (required there, None in ``"hf"``).
    """

    factor: float
    max_position_embeddings: int
    mode: Literal["hf", "fixed"] = "hf"
    target_length: int | None = None
    type_name: ClassVar[str] = "dynamic"

    def __post_init__(self) -> None:
        _set(self, "factor", _at_least_one("factor", self.factor))
        check_positive_int("max_position_embeddings", self.max_position_embeddings)
        check_in_choices("mode", self.mode, ("hf", "fixed"))
        if self.mode == "fixed":
            if self.target_length is None:
                raise ValueError("target_length is required when mode='fixed' (an int >= 1)")
            check_positive_int("target_length", self.target_length)
        elif self.target_length is not None:
            raise ValueError("target_length must be None when mode='hf' (the length is dynamic)")

    @property
    def depends_on_length(self) -> bool:  # type: ignore[override]
        return self.mode == "hf"

    @property
    def length_threshold(self) -> int:
        """Lengths up to this keep the initial frequencies (``L_max``)."""
        return self.max_position_embeddings

    def frequency_length(self, seq_len: int) -> int | None:
        return seq_len if self.depends_on_length and seq_len > self.length_threshold else None

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        seq_len = _check_seq_len(seq_len)
        length = self.target_length if self.mode == "fixed" else seq_len
        if length is None or length <= self.max_position_embeddings:
            _ntk_base(base, rotary_dim, 1.0)  # same argument checks as the scaled path
            return rope_inv_freq(rotary_dim, base)
        s = self.factor
        ratio = s * length / self.max_position_embeddings - (s - 1)
        return rope_inv_freq(rotary_dim, _ntk_base(base, rotary_dim, ratio))


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
                _set(self, name, _non_negative(name, value))
        if self.attention_factor_override is not None:
            _set(
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
        factor = self.factor_at(_check_seq_len(seq_len))
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


_TYPES: dict[str, type[Scaling]] = {
    cls.type_name: cls
    for cls in (
        Linear,
        NTKAware,
        DynamicNTK,
        YaRN,
        LongRoPE,
        Llama3,
        Proportional,
        FixedNTK,
        GeometricYaRN,
        BasePower,
    )
}


def scaling_types() -> dict[str, type[Scaling]]:
    """Every ``type`` :func:`scaling_from_dict` accepts (besides ``default``: none), with its
    class; a new scaling registered here reaches every user of this table (the lab's
    ``extend``)."""
    return dict(_TYPES)


def scaling_from_dict(d: Mapping[str, Any] | None) -> Scaling | None:
    """Build a scaling from posenc's dict form ``{"type": "yarn", **fields}``.

    The keys are the dataclass field names (e.g. ``attention_factor_override``, not HF's
    ``attention_factor``; HF configs go through :mod:`posenc.integrations.hf`). ``None``,
    ``{"type": "default"}`` and ``{"type": None}`` give None (plain RoPE). An unknown type, an
    unknown key or a missing required key raises ``ValueError`` naming it.

    Example::

        >>> scaling_from_dict({"type": "linear", "factor": 2})
        Linear(factor=2.0)
    """
    if d is None:
        return None
    if not isinstance(d, Mapping):
        raise ValueError(f"scaling must be a mapping with a 'type' key, got {type(d).__name__}")
    if "type" not in d:
        raise ValueError(f"scaling dict needs a 'type' key (one of default, {', '.join(_TYPES)})")
    kind = d["type"]
    rest = {key: value for key, value in d.items() if key != "type"}
    if kind in (None, "default"):
        if rest:
            raise ValueError(
                f"unknown key(s) {', '.join(map(str, rest))} for scaling type 'default'"
            )
        return None
    if kind not in _TYPES:
        raise ValueError(
            f"unknown scaling type {kind!r}; choose one of default, {', '.join(_TYPES)}"
        )
    cls = _TYPES[kind]
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(map(str, rest)) - names)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)} for scaling type {kind!r}; "
            f"allowed: {', '.join(sorted(names))}"
        )
    required = [
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    ]
    missing = [name for name in required if name not in rest]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)} for scaling type {kind!r}")
    return cls(**rest)


def scaling_to_dict(s: Scaling | None) -> dict[str, Any]:
    """posenc's dict form of a scaling (every field; tuples as lists); inverse of
    :func:`scaling_from_dict`. ``None`` gives ``{"type": "default"}``.

    Example::

        >>> scaling_to_dict(Linear(2.0))
        {'type': 'linear', 'factor': 2.0}
    """
    if s is None:
        return {"type": "default"}
    if not isinstance(s, Scaling) or type(s).type_name not in _TYPES:
        raise ValueError(f"s must be a Scaling or None, got {type(s).__name__}")
    out: dict[str, Any] = {"type": type(s).type_name}
    for f in fields(s):
        value = getattr(s, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out

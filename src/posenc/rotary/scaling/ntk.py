"""NTK-aware scaling: RoPE's base changed so that the lowest frequency is divided by ``s``,
fixed (:class:`NTKAware`) or sized to the current length (:class:`DynamicNTK`).

From bloc97, "NTK-Aware Scaled RoPE", and emozilla, "Dynamically Scaled RoPE", r/LocalLLaMA,
2023 (discussed in YaRN, https://arxiv.org/abs/2309.00071, §3.1). :class:`DynamicNTK`
reproduces HF transformers 5.23 ``ROPE_INIT_FUNCTIONS["dynamic"]`` in float64. vLLM's fixed
and mixed NTK, a different table, is :class:`~posenc.rotary.scaling.vllm.FixedNTK`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.rotary.frequencies import check_rotary_dim, rope_inv_freq
from posenc.rotary.scaling._common import at_least_one, check_seq_len, set_field
from posenc.rotary.scaling.base import Scaling
from posenc.rotary.scaling.length import GrowAndReset, LengthState

__all__ = ["DynamicNTK", "NTKAware"]


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
        set_field(self, "factor", at_least_one("factor", self.factor))

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
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
        set_field(self, "factor", at_least_one("factor", self.factor))
        length = check_positive_int("max_position_embeddings", self.max_position_embeddings)
        set_field(self, "max_position_embeddings", length)
        check_in_choices("mode", self.mode, ("hf", "fixed"))
        if self.mode == "fixed":
            if self.target_length is None:
                raise ValueError("target_length is required when mode='fixed' (an int >= 1)")
            target = check_positive_int("target_length", self.target_length)
            set_field(self, "target_length", target)
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

    def new_state(self) -> LengthState:
        """HF's grow-and-reset rule in ``"hf"`` mode
        (:class:`~posenc.rotary.scaling.length.GrowAndReset` at ``L_max``); static in
        ``"fixed"``."""
        return GrowAndReset(self.length_threshold) if self.depends_on_length else LengthState()

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        seq_len = check_seq_len(seq_len)
        length = self.target_length if self.mode == "fixed" else seq_len
        if length is None or length <= self.max_position_embeddings:
            _ntk_base(base, rotary_dim, 1.0)  # same argument checks as the scaled path
            return rope_inv_freq(rotary_dim, base)
        s = self.factor
        ratio = s * length / self.max_position_embeddings - (s - 1)
        return rope_inv_freq(rotary_dim, _ntk_base(base, rotary_dim, ratio))

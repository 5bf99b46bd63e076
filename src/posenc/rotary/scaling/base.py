"""The interface every RoPE scaling implements: inverse frequencies and an attention factor.

A scaling replaces plain RoPE's ``θ_i = b^(-2i/d)`` by ``θ'_i`` and may add an attention
factor ``A`` that multiplies cos and sin (so the logits by ``A²``, HF convention). Scalings
are frozen dataclasses, validated on construction; the families are the other modules of
:mod:`posenc.rotary.scaling`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from posenc.rotary.scaling.length import FollowLength, LengthState

__all__ = ["Scaling"]


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

    def new_state(self) -> LengthState:
        """A fresh :class:`~posenc.rotary.scaling.length.LengthState` for one module: the
        rule by which its frequencies follow the sequence length. Static scalings never
        change; a length-dependent one without a rule of its own follows each call's length
        exactly (:class:`~posenc.rotary.scaling.length.FollowLength`)."""
        return FollowLength() if self.depends_on_length else LengthState()

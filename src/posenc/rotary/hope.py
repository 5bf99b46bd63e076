"""HoPE: RoPE with only its high-frequency pairs rotating (Chen et al., ACL 2025).

Chen, Lv, Luan, Wang and Liu, "HoPE: A Novel Positional Encoding Without Long-Term Decay for
Enhanced Context Awareness and Extrapolation" (ACL 2025, https://arxiv.org/abs/2410.21216):
the low-frequency pairs of RoPE, which do not complete one turn within the training length
``L`` (their "activated" components shape a U-shaped attention and go out of distribution
beyond ``L``), are made position-independent; the high-frequency pairs rotate as in RoPE:

.. math::

    θ^{\\mathrm{HoPE}}_i = \\begin{cases} θ_i & 2π / θ_i ≤ L \\\\ 0 & 2π / θ_i > L
    \\end{cases}, \\qquad θ_i = b^{-2i/d}

A pair with ``θ = 0`` is left unrotated, so its part of ``q·k`` is the plain dot product
of its channels at any positions (the "position-independent components"). This is p-RoPE's
(Barbero et al. 2024) and Gemma 4's proportional RoPE (:class:`~posenc.rotary.scaling.
Proportional`) cut, with the fraction kept set by the training length instead of a
number. No reference implementation is public: tested against a float64 evaluation of the
formula. The cut-off (a pair is "low" when its period ``2π/θ_i`` exceeds ``L``) is our
reading of the paper (docs/rotary.md, HoPE).

:class:`HighFrequencyOnly` is the scaling (frequencies only, ``A = 1``) and
:func:`hope_rotary` the RoPE built with it, what the registry's ``hope`` builds. It is not in
:func:`~posenc.rotary.scaling.scaling_types` (it is no context-extension scaling), so
:func:`~posenc.rotary.scaling.scaling_to_dict` and the HF export refuse it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.layouts import Layout
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import Scaling

__all__ = ["HighFrequencyOnly", "hope_inv_freq", "hope_rotary"]


def hope_inv_freq(rotary_dim: int, base: float, train_length: int) -> Tensor:
    """HoPE's inverse frequencies: RoPE's ``θ_i``, zero where ``2π / θ_i > train_length``.

    Args:
        rotary_dim: rotated channels ``d`` (even, ≥ 2).
        base: RoPE base ``b`` > 0.
        train_length: ``L``, the training length (≥ 1).

    Returns:
        float64 ``(rotary_dim // 2,)``; the first pairs (the fastest) keep their ``θ_i``.

    Example::

        >>> hope_inv_freq(8, 10000.0, 64)  # periods 6.3, 63, 628, 6283: two kept
        tensor([1.0000, 0.1000, 0.0000, 0.0000], dtype=torch.float64)
    """
    train_length = check_positive_int("train_length", train_length)
    theta = rope_inv_freq(rotary_dim, base)
    return torch.where(2 * math.pi / theta <= train_length, theta, torch.zeros_like(theta))


@dataclass(frozen=True)
class HighFrequencyOnly(Scaling):
    """HoPE's frequencies as a RoPE scaling: pairs whose period exceeds ``train_length``
    stop rotating (see the module).

    Args:
        train_length: ``L`` ≥ 1; at least one pair must complete a turn within it
            (``L ≥ 2π``, the fastest pair's period).

    Raises:
        ValueError: naming ``train_length``.
    """

    train_length: int
    type_name: ClassVar[str] = "hope"

    def __post_init__(self) -> None:
        length = check_positive_int("train_length", self.train_length)
        object.__setattr__(self, "train_length", length)
        if self.train_length < 2 * math.pi:
            raise ValueError(
                f"train_length must be >= 2π ≈ 6.28 (the fastest pair's period) for any pair "
                f"to rotate, got {self.train_length}"
            )

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        return hope_inv_freq(rotary_dim, base, self.train_length)

    def kept_pairs(self, rotary_dim: int, base: float) -> int:
        """How many pairs rotate (the first ones)."""
        return int((self.inv_freq(rotary_dim, base) > 0).sum())


def hope_rotary(
    head_dim: int,
    *,
    train_length: int = 1024,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    layout: Layout = "half",
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> RotaryEmbedding:
    """A :class:`~posenc.rotary.RotaryEmbedding` with HoPE's frequencies
    (:class:`HighFrequencyOnly`).

    Args:
        head_dim: channels per head.
        train_length: ``L``, the training length (the registry fills the model's
            ``max_seq_len``); pairs whose period exceeds it do not rotate.
        base, rotary_dim, layout, device, dtype: as :class:`~posenc.rotary.RotaryEmbedding`.

    Raises:
        ValueError: naming the argument (``train_length`` below 2π, and RoPE's own checks).

    Example::

        >>> rope = hope_rotary(16, train_length=64)
        >>> (rope.inv_freq() > 0).sum().item()  # of 8 pairs, periods 6.3, 19.9, 62.8 rotate
        3
    """
    check_positive_float("base", base)
    return RotaryEmbedding(
        head_dim,
        rotary_dim=rotary_dim,
        base=base,
        layout=layout,
        scaling=HighFrequencyOnly(train_length),
        device=device,
        dtype=dtype,
    )

"""RIFLEx: lower a video model's intrinsic temporal frequency so that it stays within one
period at the extrapolated length (Zhao et al., ICML 2025, https://arxiv.org/abs/2502.15894).

A RoPE component ``j`` (1-based, ``θ_j = b^(-2(j-1)/d)``) repeats every ``N_j = 2π/θ_j``
frames. Generating ``s×`` longer than the training length ``L`` with plain RoPE repeats the
video at a frame ``N`` that the paper traces to one component, the *intrinsic frequency*
``k``: the one whose period is closest to ``N`` (paper Eq. 7). RIFLEx lowers only it, so that
its phase stays below one turn over the ``L·s`` frames generated (Eq. 8):

.. math::

    k = \\arg\\min_j |N_j - N|, \\qquad θ'_k = γ \\, \\frac{2π}{L s}, \\qquad θ'_j = θ_j \\;(j ≠ k)

with ``γ = 0.9`` in the reference code (``thu-ml/RIFLEx`` ``riflex_utils.py``
``get_1d_rotary_pos_embed_riflex``: "to keep the extrapolated length below 90% of a single
period"; the paper's bound is ``γ = 1``). The reference's ``L_test`` is ``L·s``; its ``k`` for
HunyuanVideo (``b = 256, d = 16, N = 66``) is 4 and for CogVideoX (``b = 1e4, d = 16,
N = 26``) 2, both what :func:`riflex_intrinsic_k` gives. Apply it to the temporal axis only
(:func:`posenc.rotary.diffusion.video_axes_rotary` ``scalings=[RIFLEx(...), None, None]``).
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

__all__ = ["RIFLEx", "riflex_intrinsic_k"]


def riflex_intrinsic_k(rotary_dim: int, base: float, repetition_frame: float) -> int:
    """RIFLEx's intrinsic component (1-based ``k``): the RoPE frequency whose period
    ``N_j = 2π/θ_j`` is closest to the frame ``N`` where naive extrapolation first repeats
    (paper Eq. 7; the lowest ``j`` on a tie).

    Example::

        >>> riflex_intrinsic_k(16, 256.0, 66)  # HunyuanVideo's temporal axis
        4
    """
    check_rotary_dim(rotary_dim)
    base = check_positive_float("base", base)
    frame = check_positive_float("repetition_frame", repetition_frame)
    periods = 2 * math.pi / rope_inv_freq(rotary_dim, base)
    return int(torch.argmin((periods - frame).abs()).item()) + 1


@dataclass(frozen=True)
class RIFLEx(Scaling):
    """RIFLEx: component ``k`` set to ``γ·2π/(L·s)``, the others kept (see the module).

    .. math:: θ'_k = γ \\, 2π / (L s), \\qquad θ'_j = θ_j \\; (j ≠ k)

    The phase of component ``k`` at the last generated frame ``L·s - 1`` is then
    ``γ·2π·(L·s - 1)/(L·s) < 2π``. As the reference, ``θ'_k`` replaces ``θ_k`` whatever its
    value (it lowers it whenever ``N_k < L·s/γ``, the case RIFLEx is for). ``A = 1``.

    Paper: Zhao et al. 2025, https://arxiv.org/abs/2502.15894 (Eqs. 7, 8). Tested against a
    float64 re-derivation of ``thu-ml/RIFLEx`` ``get_1d_rotary_pos_embed_riflex``.

    Args:
        factor: ``s`` ≥ 1, the extrapolation factor (frames generated / ``L``).
        train_length: ``L`` ≥ 1, the frames (latent frames for a video VAE) of training.
        k: the intrinsic component, 1-based as the paper (pair ``k - 1``); None to identify
            it from ``repetition_frame`` (:func:`riflex_intrinsic_k`).
        repetition_frame: ``N`` > 0, the first repeating frame under plain extrapolation;
            exactly one of ``k`` and ``repetition_frame`` is given.
        margin: ``γ`` in ``(0, 1]``; 0.9 as the reference code.

    Example::

        >>> riflex = RIFLEx(factor=2.0, train_length=33, k=4)  # HunyuanVideo, 2x
        >>> theta = riflex.inv_freq(16, 256.0)
        >>> round(float(theta[3]) * 66 / (2 * math.pi), 6)
        0.9
    """

    factor: float
    train_length: int
    k: int | None = None
    repetition_frame: float | None = None
    margin: float = 0.9
    type_name: ClassVar[str] = "riflex"

    def __post_init__(self) -> None:
        set_field(self, "factor", at_least_one("factor", self.factor))
        set_field(self, "train_length", check_positive_int("train_length", self.train_length))
        if (self.k is None) == (self.repetition_frame is None):
            raise ValueError(
                "give exactly one of k (the 1-based intrinsic component) and repetition_frame "
                f"(the frame N that identifies it), got k={self.k!r}, "
                f"repetition_frame={self.repetition_frame!r}"
            )
        if self.k is not None:
            set_field(self, "k", check_positive_int("k", self.k))
        else:
            frame = check_positive_float("repetition_frame", self.repetition_frame)
            set_field(self, "repetition_frame", frame)
        margin = check_positive_float("margin", self.margin)
        if margin > 1.0:
            raise ValueError(f"margin must be in (0, 1] (a fraction of one period), got {margin}")
        set_field(self, "margin", margin)

    @property
    def test_length(self) -> float:
        """``L·s``: the frames generated (the reference's ``L_test``)."""
        return self.train_length * self.factor

    def intrinsic_k(self, rotary_dim: int, base: float) -> int:
        """The 1-based component this scaling lowers for ``(rotary_dim, base)``."""
        if self.k is not None:
            pairs = check_rotary_dim(rotary_dim) // 2
            if self.k > pairs:
                raise ValueError(f"k must be <= rotary_dim / 2 = {pairs}, got {self.k}")
            return self.k
        assert self.repetition_frame is not None
        return riflex_intrinsic_k(rotary_dim, base, self.repetition_frame)

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
        k = self.intrinsic_k(rotary_dim, base)
        theta = rope_inv_freq(rotary_dim, base)
        theta[k - 1] = self.margin * 2 * math.pi / self.test_length
        return theta

"""Additive GRAPE: positions as unipotent actions on lifted queries and keys.

GRAPE (Zhang et al., ICLR 2026, https://arxiv.org/abs/2512.07805; code
model-architectures/GRAPE) lifts a query and a key to homogeneous coordinates of ``d + 2``
channels and lets a phase ``s`` act by the unipotent matrix of a nilpotent generator ``A``
(``A² = 0``, so the exponential stops after one term):

.. math::

    \\hat q = (q, 1, 0), \\quad \\hat k = (k, 0, 1), \\quad A = e_{d} e_{d+1}^⊤, \\quad
    G(s) = \\exp(sA) = I + sA,

    \\hat q_i' = G(s_i)^{-⊤} \\hat q_i, \\quad \\hat k_j' = G(s_j) \\hat k_j, \\quad
    \\hat q_i'^⊤ \\hat k_j' = \\hat q_i^⊤ G(s_j − s_i) \\hat k_j = q_i^⊤ k_j + (s_j − s_i).

The logit gains ``s_j − s_i``, a function of the phases' difference (the exact relative
law), and a key lifted once stays valid (streaming cacheability). Two phases give the
known methods exactly:

* **ALiBi**: ``s_n = m_h n`` (a slope per head): ``s_j − s_i = m_h (j − i) = −m_h (i − j)``,
  causal ALiBi (:class:`~posenc.bias.AlibiBias`);
* **FoX**: ``s_n = −Σ_{t ≤ n} log f_t`` (forget gates ``f_t = σ(w^⊤ x_t + b)``):
  ``s_j − s_i = Σ_{j < t ≤ i} log f_t``, the forgetting transformer's bias
  (:class:`~posenc.token_state.ForgettingGate`).

:func:`grape_additive_logits` evaluates the lifted form with explicit matrices in float64
(the reference the tests compare ALiBi, FoX and :class:`GrapeAdditiveBias` with);
:class:`GrapeAdditiveBias` is the positional case with learned slopes, served by attention
as a pointwise bias ``m_h (k_pos − q_pos)``; :class:`posenc.contextual.GrapeGatedBias` is the
paper's trained variant, whose rate is gated by the query and/or the key (a lift in
``GL(d + 4)``), served as a contextual logit term.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from posenc._validate import check_finite, check_floating_dtype, check_positive_int
from posenc.bias.alibi import alibi_slopes
from posenc.encoding.protocols import BiasEncoding

__all__ = [
    "GrapeAdditiveBias",
    "grape_additive_logits",
    "lift_key",
    "lift_query",
    "unipotent_action",
]


def lift_query(q: Tensor) -> Tensor:
    """``(q, 1, 0)``: ``(..., d)`` → ``(..., d + 2)``."""
    ones, zeros = torch.ones_like(q[..., :1]), torch.zeros_like(q[..., :1])
    return torch.cat((q, ones, zeros), dim=-1)


def lift_key(k: Tensor) -> Tensor:
    """``(k, 0, 1)``: ``(..., d)`` → ``(..., d + 2)``."""
    ones, zeros = torch.ones_like(k[..., :1]), torch.zeros_like(k[..., :1])
    return torch.cat((k, zeros, ones), dim=-1)


def unipotent_action(phase: Tensor, dim: int) -> Tensor:
    """``G(s) = exp(s A)`` with ``A = e_d e_{d+1}ᵀ`` in ``GL(d + 2)``, by
    ``torch.linalg.matrix_exp`` (it equals ``I + sA``: ``A² = 0``).

    Shape:
        ``phase`` ``(...)`` → ``(..., d + 2, d + 2)``, float64.
    """
    s = phase.to(torch.float64)
    generator = torch.zeros(dim + 2, dim + 2, dtype=torch.float64, device=s.device)
    generator[dim, dim + 1] = 1.0
    return torch.linalg.matrix_exp(s[..., None, None] * generator)


def grape_additive_logits(q: Tensor, k: Tensor, q_phase: Tensor, k_phase: Tensor) -> Tensor:
    """``q̂'ᵀ k̂'`` of the lifted, acted-on queries and keys, in float64 (the reference).

    .. math:: \\hat q_i' = G(s_i)^{-⊤} \\hat q_i, \\quad \\hat k_j' = G(s_j) \\hat k_j, \\quad
        \\ell_{ij} = \\hat q_i'^⊤ \\hat k_j' = q_i^⊤ k_j + s_j − s_i

    Args:
        q: ``(batch, heads, q_len, d)``; k: ``(batch, heads, k_len, d)``.
        q_phase: ``(batch | 1, heads, q_len)`` phases of the queries; k_phase: ``(batch | 1,
            heads, k_len)`` of the keys.

    Returns:
        ``(batch, heads, q_len, k_len)`` float64 logits (unscaled).
    """
    dim = q.shape[-1]
    q_act = torch.linalg.inv(unipotent_action(q_phase, dim)).transpose(-1, -2)
    k_act = unipotent_action(k_phase, dim)
    q_lift = (q_act @ lift_query(q.to(torch.float64))[..., None])[..., 0]
    k_lift = (k_act @ lift_key(k.to(torch.float64))[..., None])[..., 0]
    return q_lift @ k_lift.transpose(-1, -2)


class GrapeAdditiveBias(BiasEncoding):
    """Additive GRAPE of positions: the unipotent action with phase ``s_n = m_h n``.

    .. math:: b_{hij} = s_{h,j} − s_{h,i} = m_h (k\\_pos_j − q\\_pos_i)

    Paper: GRAPE, https://arxiv.org/abs/2512.07805 (the additive family; its trained
    variants gate the rate by the query or key: model-architectures/GRAPE
    ``llama-mha-grape-a-*``). The slopes ``m_h`` are learned, initialized at ALiBi's: at
    initialization the bias is causal ALiBi's (tested against
    :class:`~posenc.bias.AlibiBias` and :func:`grape_additive_logits` in float64).
    Causal only: the law is linear in ``j − i``, so keys after the query would get a bonus
    growing without bound.

    Args:
        num_heads: heads (one slope each).
        device, dtype: of the slopes (default float64: ALiBi's slopes exactly).

    Shape:
        ``bias(q_pos, k_pos)``: ``(num_heads, q_len, k_len)`` for 1-D positions, else
        ``(batch, num_heads, q_len, k_len)``.

    Example::

        >>> grape = GrapeAdditiveBias(4)
        >>> grape.bias(torch.arange(3), torch.arange(3)).shape
        torch.Size([4, 3, 3])
    """

    causal_only: ClassVar[bool] = True
    shared_across_layers: ClassVar[bool] = True
    depends_on_distance_only: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_floating_dtype("dtype", dtype)
        factory = {"device": device, "dtype": dtype or torch.float64}
        self.slopes = nn.Parameter(torch.empty(num_heads, **factory))  # type: ignore[arg-type]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """ALiBi's slopes (:func:`~posenc.bias.alibi_slopes`)."""
        if self.slopes.device.type == "meta":
            return
        with torch.no_grad():
            self.slopes.copy_(alibi_slopes(self.num_heads))

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``m_h (k_pos − q_pos)`` of ``head``, in ``dtype``."""
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            # Exact differences of fractional positions (PI), then one rounding.
            q_pos, k_pos = q_pos.to(torch.float64), k_pos.to(torch.float64)
        distance = (k_pos - q_pos).to(dtype)  # integer differences are exact
        return self.slopes[head].to(dtype) * distance

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """The validated bias (``ValueError`` naming ``slopes`` if they are not finite);
        ``dtype`` defaults to float32 (float64 for float64 positions)."""
        check_finite("slopes", self.slopes.detach())
        return super().bias(q_pos, k_pos, dtype)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}"

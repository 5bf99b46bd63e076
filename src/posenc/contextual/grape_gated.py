"""Additive GRAPE gated by the query and the key: the paper's trained GRAPE-A variants.

GRAPE (Zhang et al., ICLR 2026, https://arxiv.org/abs/2512.07805) trains its additive family
with a rate that reads the query and/or the key. It is still a unipotent action, on a lift of
``d + 4`` channels (:func:`grape_gated_logits`; the ungated lift of ALiBi and FoX is
:mod:`posenc.bias.grape_additive`):

.. math::

    \\hat q_i = (q_i, g_i, 1, 0, 0), \\quad \\hat k_j = (k_j, 0, 0, 1, h_j), \\quad
    A = e_d e_{d+2}^⊤ + e_{d+1} e_{d+3}^⊤, \\quad
    \\hat q_i^⊤ G(s_j − s_i) \\hat k_j = q_i^⊤ k_j + (s_j − s_i)(g_i + h_j)

with ``G(s) = exp(sA) = I + sA`` (``A² = 0``) and phase ``s_n = ω_h n``.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_floating_dtype, check_in_choices, check_positive_int
from posenc.bias.alibi import alibi_slopes
from posenc.encoding.protocols import ContextualEncoding

__all__ = ["GrapeGate", "GrapeGatedBias", "grape_gated_logits"]

GrapeGate = Literal["query", "key", "query_key"]
GATES: tuple[str, ...] = get_args(GrapeGate)


def grape_gated_logits(
    q: Tensor, k: Tensor, q_phase: Tensor, k_phase: Tensor, q_gate: Tensor, k_gate: Tensor
) -> Tensor:
    """The gated lift in ``GL(d + 4)``, in float64 (the reference of :class:`GrapeGatedBias`).

    .. math::

        \\hat q_i = (q_i, g_i, 1, 0, 0), \\quad \\hat k_j = (k_j, 0, 0, 1, h_j), \\quad
        A = e_d e_{d+2}^⊤ + e_{d+1} e_{d+3}^⊤ \\ (A^2 = 0), \\quad
        \\ell_{ij} = \\hat q_i^⊤ G(s_j − s_i) \\hat k_j = q_i^⊤ k_j + (s_j − s_i)(g_i + h_j)

    Args:
        q, k: ``(batch, heads, q_len | k_len, d)``.
        q_phase, k_phase: ``(batch | 1, heads, q_len | k_len)``.
        q_gate: ``(batch, heads, q_len)`` query gates ``g_i``; k_gate: ``(batch, heads,
            k_len)`` key gates ``h_j``.
    """
    dim = q.shape[-1]
    generator = torch.zeros(dim + 4, dim + 4, dtype=torch.float64, device=q.device)
    generator[dim, dim + 2] = generator[dim + 1, dim + 3] = 1.0

    def action(phase: Tensor) -> Tensor:
        return torch.linalg.matrix_exp(phase.to(torch.float64)[..., None, None] * generator)

    one, zero = torch.ones_like(q_gate), torch.zeros_like(q_gate)
    q_extra = torch.stack((q_gate, one, zero, zero), dim=-1).to(torch.float64)
    k_one, k_zero = torch.ones_like(k_gate), torch.zeros_like(k_gate)
    k_extra = torch.stack((k_zero, k_zero, k_one, k_gate), dim=-1).to(torch.float64)
    q_hat = torch.cat((q.to(torch.float64), q_extra), dim=-1)
    k_hat = torch.cat((k.to(torch.float64), k_extra), dim=-1)
    q_act = torch.linalg.inv(action(q_phase)).transpose(-1, -2)
    q_lift = (q_act @ q_hat[..., None])[..., 0]
    k_lift = (action(k_phase) @ k_hat[..., None])[..., 0]
    return q_lift @ k_lift.transpose(-1, -2)


class GrapeGatedBias(ContextualEncoding):
    """Additive GRAPE with a rate gated by the query, the key or both (the paper's trained
    GRAPE-A variants).

    .. math::

        b_{hij} = (j − i)\\, ω_h\\, \\big(g_h(q_i) + h_h(k_j)\\big), \\quad
        ω_h = \\operatorname{softplus}(ρ_h)\\, m_h, \\quad
        g_h(q) = \\operatorname{softplus}(\\hat v_h^⊤ q / \\sqrt d), \\quad
        h_h(k) = \\operatorname{softplus}(\\hat u_h^⊤ k / \\sqrt d)

    with ``m_h`` ALiBi's slopes, ``v̂, û`` the unit vectors of learned ``v, u`` and ``(j − i)``
    the key's minus the query's position; ``gate="query"`` keeps ``g`` only, ``"key"`` ``h``
    only. It is the unipotent lift of :func:`grape_gated_logits` with phase ``s_n = ω_h n``
    (tested against it in float64). Paper: GRAPE, https://arxiv.org/abs/2512.07805 (re-derived
    from the reference's ``QueryKeyGatedAdditiveBias``, model-architectures/GRAPE
    ``llama-mha-grape-a-querykeygated.py``: its bias is added to the scaled logits, unscaled;
    ``ρ`` starts at ``softplus⁻¹(1)``, ``u, v ~ N(0, 1/d)``). Causal only, as
    :class:`GrapeAdditiveBias`.

    Args:
        num_heads: heads.
        head_dim: channels per head of q and k (the gates read them).
        gate: ``"query_key"`` (default), ``"query"`` or ``"key"``.
        device, dtype: of the parameters.

    Shape:
        ``forward(q, k, q_pos, k_pos)``: ``(batch, heads, q_len, k_len)``.

    Example::

        >>> gated = GrapeGatedBias(2, 8)
        >>> q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
        >>> gated(q, k, torch.arange(4), torch.arange(4)).shape
        torch.Size([1, 2, 4, 4])
    """

    causal_only: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        *,
        gate: GrapeGate = "query_key",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        check_in_choices("gate", gate, GATES)
        check_floating_dtype("dtype", dtype)
        self.gate: GrapeGate = gate
        factory = {"device": device, "dtype": dtype}
        self.rate = nn.Parameter(torch.empty(num_heads, **factory))  # type: ignore[arg-type]
        self.u = nn.Parameter(torch.empty(num_heads, head_dim, **factory))  # type: ignore[arg-type]
        self.v = nn.Parameter(torch.empty(num_heads, head_dim, **factory))  # type: ignore[arg-type]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``softplus(ρ) = 1``; ``u, v ~ N(0, 1/d)`` (the reference's)."""
        if self.rate.device.type == "meta":
            return
        with torch.no_grad():
            self.rate.fill_(math.log(math.expm1(1.0)))
            self.u.normal_(0.0, self.head_dim**-0.5)
            self.v.normal_(0.0, self.head_dim**-0.5)

    def omega(self, dtype: torch.dtype) -> Tensor:
        """``ω_h = softplus(ρ_h) m_h``, ``(heads,)`` in ``dtype``."""
        slopes = alibi_slopes(self.rate.shape[0]).to(device=self.rate.device, dtype=dtype)
        return F.softplus(self.rate.to(dtype)) * slopes

    def gates(self, q: Tensor, k: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``g(q_i)`` ``(batch, heads, q_len)`` and ``h(k_j)`` ``(batch, heads, k_len)``; the
        gate a mode leaves out is zero."""
        root = self.head_dim**0.5
        zeros_q = q.new_zeros(q.shape[:-1], dtype=dtype)
        zeros_k = k.new_zeros(k.shape[:-1], dtype=dtype)
        g, h = zeros_q, zeros_k
        if self.gate in ("query", "query_key"):
            v = F.normalize(self.v.to(dtype), dim=-1)
            g = F.softplus(torch.einsum("bhqd,hd->bhq", q.to(dtype), v) / root)
        if self.gate in ("key", "query_key"):
            u = F.normalize(self.u.to(dtype), dim=-1)
            h = F.softplus(torch.einsum("bhkd,hd->bhk", k.to(dtype), u) / root)
        return g, h

    def logit_term(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float
    ) -> Tensor:
        """``(j − i) ω_h (g(q_i) + h(k_j))``, ``(batch, heads, q_len, k_len)`` (unscaled)."""
        dtype = torch.promote_types(q.dtype, torch.float32)
        q_p = q_pos.to(torch.float64)[..., None, :, None]  # (…, 1, q, 1)
        k_p = k_pos.to(torch.float64)[..., None, None, :]  # (…, 1, 1, k)
        distance = (k_p - q_p).to(dtype)
        g, h = self.gates(q, k, dtype)
        rate = g[..., :, None] + h[..., None, :]  # (batch, heads, q, k)
        return self.omega(dtype)[:, None, None] * distance * rate

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, gate={self.gate!r}"

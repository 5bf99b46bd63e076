"""Stick-breaking attention: each key takes a sigmoid share of what the nearer keys left.

No positional encoding and no softmax. Row ``i`` breaks a stick of length 1 from the most
recent key backwards: key ``j`` takes the share ``β_ij = σ(scale · q_iᵀ k_j)`` of what the
keys between them left,

.. math::
    A_{ij} = \\beta_{ij} \\prod_{j < k < i} (1 - \\beta_{ik}), \\qquad
    o_i = \\sum_{j < i} A_{ij} v_j + \\Big(1 - \\sum_{j < i} A_{ij}\\Big)\\, r_h

computed in log space, ``log A_ij = log σ(z_ij) + Σ_{j<k<i} log σ(−z_ik)`` with a reverse
(exclusive) cumulative sum along the row. Order is recency, so the method carries position
information itself. The key of the query's own token is excluded (``j < i``, the paper's and
the reference's default; ``attend_current=True`` includes it); keys the mask hides take no
share and break nothing. What no key took (the remaining mass) multiplies a learned vector
``r_h`` per head (the reference model's ``head_bias``; zero at initialization, and
``remainder=False`` drops it: then the output is the plain sum).

Paper: Tan et al. 2024, Scaling Stick-Breaking Attention, https://arxiv.org/abs/2410.17980;
reference code github.com/shawntan/stickbreaking-attention (its naive reference and decoding
step, and the dolomite model's ``rem · head_bias``). Tested against a float64 loop over the
formula.

Backends: the attention module runs
:func:`~posenc.attention.plans.stick_breaking.stick_breaking_attention` for an encoding with
the **attention-weights** hook (:mod:`posenc.encoding.base`). ``sdpa`` computes all rows at once
(materializing ``(batch, heads, q, k)``), ``chunked`` blocks of query rows (``O(block ·
keys)``, recomputed in the backward pass); ``flex`` cannot serve it: FlexAttention
normalizes by a softmax, and a stick-breaking weight depends on the scores of every key
between ``j`` and ``i`` (no ``score_mod`` of one pair).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_bool_mask,
    check_floating_dtype,
    check_floating_tensor,
    check_positive_int,
)
from posenc.encoding.protocols import AttentionWeights

__all__ = ["StickBreaking", "stick_breaking_weights"]


def stick_breaking_weights(scores: Tensor, visible: Tensor | None) -> Tensor:
    """Stick-breaking weights ``A`` from scaled scores, keys ordered oldest to newest.

    ``A_ij = σ(z_ij) ∏_{k > j, visible} σ(−z_ik)``: each visible key takes its share of
    what every later visible key of the row left (under causal order the later visible keys
    are those between ``j`` and the query). Hidden keys get 0 and leave the stick whole.

    Args:
        scores: ``(..., rows, keys)`` scaled logits ``z``.
        visible: bool broadcastable to ``scores`` (True: the key takes part), or None.

    Returns:
        ``A`` of ``scores``' shape and dtype; each row sums to at most 1.
    """
    log_take = F.logsigmoid(scores)
    log_leave = F.logsigmoid(-scores)
    if visible is not None:
        log_leave = log_leave.masked_fill(~visible, 0.0)
    # Σ over the keys after j: an exclusive reverse cumulative sum (shifted, not subtracted,
    # so that no large sum is differenced).
    after = log_leave.flip(-1).cumsum(-1).flip(-1)
    after = torch.cat([after[..., 1:], torch.zeros_like(after[..., :1])], dim=-1)
    weights = torch.exp(log_take + after)
    return weights if visible is None else weights.masked_fill(~visible, 0.0)


class StickBreaking(AttentionWeights):
    """Stick-breaking attention (Tan et al. 2024) in place of the softmax; no positions.

    See the module docstring for the formula. Implements the attention-weights hook:
    ``attention_weights(scores, visible) -> A`` and ``remainder_term(remaining) -> (…,
    head_dim)``; ``attend_current`` says whether a query's own key takes part.

    Args:
        num_heads: attention heads (one remainder vector each).
        head_dim: per-head width of the values.
        attend_current: include the query's own key (default False: ``j < i``).
        remainder: learn ``r_h`` for the remaining mass (default True, zero-initialized).

    Example::

        >>> from posenc.attention import Attention
        >>> attn = Attention(dim=16, num_heads=2, pos=StickBreaking(num_heads=2, head_dim=8))
        >>> attn(torch.randn(1, 5, 16)).shape
        torch.Size([1, 5, 16])
    """

    causal_only: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        *,
        attend_current: bool = False,
        remainder: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        num_heads = check_positive_int("num_heads", num_heads)
        head_dim = check_positive_int("head_dim", head_dim)
        check_floating_dtype("dtype", dtype)
        for name, flag in (("attend_current", attend_current), ("remainder", remainder)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be a bool, got {flag!r}")
        self.num_heads, self.head_dim = num_heads, head_dim
        self.attend_current, self.remainder = attend_current, remainder
        self.remainder_vector = (
            nn.Parameter(torch.zeros(num_heads, head_dim, device=device, dtype=dtype))
            if remainder
            else None
        )

    def reset_parameters(self) -> None:
        """``r_h = 0`` (the reference's initialization)."""
        if self.remainder_vector is not None and self.remainder_vector.device.type != "meta":
            with torch.no_grad():
                self.remainder_vector.zero_()

    def attention_weights(self, scores: Tensor, visible: Tensor | None) -> Tensor:
        """The attention-weights hook: :func:`stick_breaking_weights`."""
        return stick_breaking_weights(scores, visible)

    def remainder_term(self, remaining: Tensor) -> Tensor | None:
        """``(1 − Σ_j A_ij) r_h``, ``(batch, heads, rows, head_dim)``; None without ``r``."""
        if self.remainder_vector is None:
            return None
        vector = self.remainder_vector.to(remaining.dtype)
        return remaining.unsqueeze(-1) * vector.unsqueeze(-2)

    def forward(self, scores: Tensor, visible: Tensor | None = None) -> Tensor:
        """The weights of scaled ``scores`` ``(batch, heads, rows, keys)`` (validated).

        Raises:
            ValueError: naming ``scores`` (not a floating 4-D tensor) or ``visible`` (not
                bool, or not broadcastable to ``scores``).
        """
        check_floating_tensor("scores", scores, ("batch", "heads", "rows", "keys"))
        check_bool_mask("visible", visible, "scores", scores)
        return stick_breaking_weights(scores, visible)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"attend_current={self.attend_current}, remainder={self.remainder}"
        )

"""Gated attention: a sigmoid gate on each head's attention output, from the layer input.

.. math::

    o'_{i,h} = o_{i,h} \\odot \\sigma(x_i W_g^{(h)})

elementwise and head-specific (``W_g`` maps the model width to ``heads · head_dim``), applied
to the SDPA output before the output projection: the G1 position of Qiu et al. 2025, "Gated
Attention for Large Language Models" (https://arxiv.org/abs/2505.06708), shipped in Qwen3-Next
(HF ``Qwen3NextAttention``: ``attn_output * torch.sigmoid(gate)``). The paper reports that it
adds a non-linearity after the low-rank value/output map and a query-dependent sparsity that
removes the "attention sink" (first-token attention mass 46.7 % → 4.8 %); the lab measures the
latter with :func:`posenc.models.first_token_attention_mass`.

Example::

    >>> gate = OutputGate(dim=8, num_heads=2, head_dim=4)
    >>> gate(torch.randn(1, 2, 3, 4), torch.randn(1, 3, 8)).shape
    torch.Size([1, 2, 3, 4])
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["OutputGate", "output_gate"]


def output_gate(out: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """``out ⊙ σ(x Wᵀ)`` per head.

    Shape:
        out ``(batch, heads, seq, head_dim)``, x ``(batch, seq, dim)``, weight
        ``(heads · head_dim, dim)`` → ``(batch, heads, seq, head_dim)``.
    """
    batch, heads, seq, head_dim = out.shape
    gate = torch.sigmoid(x @ weight.T).view(batch, seq, heads, head_dim).transpose(1, 2)
    return out * gate.to(out.dtype)


class OutputGate(nn.Module):
    """The gate's projection ``W_g`` (no bias, as Qwen3-Next's fused query/gate projection);
    calls :func:`output_gate`.

    Args:
        dim: model width (the layer input's).
        num_heads, head_dim: the attention output's heads and width.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, num_heads * head_dim, bias=False, device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        self.proj.reset_parameters()

    def forward(self, out: Tensor, x: Tensor) -> Tensor:
        return output_gate(out, x, self.proj.weight)

"""FoX, the Forgetting Transformer: a data-dependent bias from per-token forget gates.

Each head has a forget gate per token, read from the token's hidden state; the logit of a
query ``i`` and an earlier key ``j`` is reduced by everything forgotten between them:

.. math::
    f_t = \\sigma(w_f^\\top x_t + b_f), \\qquad c_i = \\sum_{t \\le i} \\log f_t, \\qquad
    \\ell_{ij} = \\text{scale}\\, q_i^\\top k_j + c_i - c_j \\quad (j \\le i)

so ``c_i − c_j = Σ_{j<t≤i} log f_t = log ∏_{j<t≤i} f_t`` (the paper's ``log F_ij``). With
every gate at the same ``f`` this is ALiBi with slope ``−log f`` (x-transformers calls it
data-dependent ALiBi).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_layer_input,
    check_positive_int,
)
from posenc.encoding.protocols import TokenStateEncoding

__all__ = ["ForgettingGate", "fox_bias", "fox_log_gates"]


def fox_log_gates(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Per-head log forget gates ``log σ(w_fᵀ x_t + b_f)``, ``(batch, heads, seq)``.

    Computed in float32 (float64 for float64 ``x``): they are summed over the whole sequence,
    and half precision would round the sums.

    Args:
        x: the attention layer's input ``(batch, seq, dim)``.
        weight: ``(heads, dim)``; bias: ``(heads,)``.
    """
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    logits = F.linear(x.to(cdt), weight.to(cdt), bias.to(cdt))  # (batch, seq, heads)
    return F.logsigmoid(logits).transpose(1, 2)


def fox_bias(c_q: Tensor, c_k: Tensor) -> Tensor:
    """FoX's bias ``c_i − c_j`` from the cumulative log gates of the queries and the keys.

    ``c_q`` ``(..., q_len)`` and ``c_k`` ``(..., k_len)`` give ``(..., q_len, k_len)``.
    Meaningful for ``j ≤ i`` (causal attention hides the rest).
    """
    return c_q.unsqueeze(-1) - c_k.unsqueeze(-2)


class ForgettingGate(TokenStateEncoding):
    """FoX (Lin et al., ICLR 2025): the forget-gate bias ``c_i − c_j`` of each head.

    .. math::
        f_t = \\sigma(w_f^\\top x_t + b_f), \\quad c_i = \\sum_{t \\le i} \\log f_t, \\quad
        \\text{logits}_{ij} \\mathrel{+}= c_i - c_j \\ (j \\le i)

    Paper: https://openreview.net/forum?id=q2Lnyegkr8 (Forgetting Transformer: Softmax
    Attention with a Forget Gate); reference code github.com/zhixuan-lin/forgetting-transformer;
    tested against x-transformers' ``DataDependentAlibi`` and a float64 evaluation of the
    formula.

    The gates read the hidden states, not the positions: the encoding implements the
    **token-state** hook (:mod:`posenc.encoding.base`): :class:`~posenc.attention.Attention` hands
    it
    its input ``x`` (after the block's norm, as in the paper and x-transformers), it returns
    ``c`` of the new tokens continuing the cached keys' ``c`` (the KV cache keeps every key's
    ``c``), and the bias is :func:`fox_bias`. Padding tokens (``key_padding_mask`` False)
    get ``f = 1``: they forget nothing, so ``c`` of the real tokens around them is unchanged.
    Backends: ``sdpa`` (the bias materialized, ``(batch, heads, q, k)``), ``chunked`` (per
    query block), ``flex`` (``score_mod`` reading ``c`` by index; CPU forward only).

    Causal only: the paper defines it for decoders (x-transformers' bidirectional variant with
    a second set of gates is not provided). Positions are not read: FoX is usually used
    without another encoding (the paper's FoX uses no RoPE).

    Args:
        dim: the model width (the gates read ``x`` of that width).
        num_heads: attention heads (one gate per head).
        bias_init: initial ``b_f`` (x-transformers' default 5: ``σ(5) ≈ 0.993``, little
            forgetting at the start).

    Shape:
        ``forward(x)``: x ``(batch, seq, dim)`` → bias ``(batch, heads, seq, seq)`` (valid on
        and below the diagonal).

    Example::

        >>> fox = ForgettingGate(dim=16, num_heads=2)
        >>> fox(torch.randn(1, 5, 16)).shape
        torch.Size([1, 2, 5, 5])
    """

    causal_only: ClassVar[bool] = True

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        bias_init: float = 5.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dim = check_positive_int("dim", dim)
        num_heads = check_positive_int("num_heads", num_heads)
        check_floating_dtype("dtype", dtype)
        if (
            isinstance(bias_init, bool)
            or not isinstance(bias_init, (int, float))
            or not float("-inf") < bias_init < float("inf")
        ):
            raise ValueError(f"bias_init must be a finite number, got {bias_init!r}")
        self.dim, self.num_heads, self.bias_init = dim, num_heads, float(bias_init)
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(num_heads, dim, **factory))  # type: ignore[arg-type]
        self.bias = nn.Parameter(torch.empty(num_heads, **factory))  # type: ignore[arg-type]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s weight initialization, ``b_f = bias_init`` (x-transformers)."""
        if self.weight.device.type == "meta":
            return
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        nn.init.constant_(self.bias, self.bias_init)

    def token_state(self, x: Tensor, previous: Tensor | None, real: Tensor | None) -> Tensor:
        """The token-state hook: ``c`` of the new tokens, ``(batch, heads, seq)``.

        Args:
            x: the layer's input for the new tokens ``(batch, seq, dim)``.
            previous: ``c`` of the last cached key ``(batch, heads, 1)``, or None.
            real: ``(batch, seq)`` bool, False for padding tokens (``f = 1``), or None.
        """
        log_gates = fox_log_gates(x, self.weight, self.bias)
        if real is not None:
            log_gates = log_gates.masked_fill(~real.unsqueeze(1), 0.0)
        c = log_gates.cumsum(dim=-1)
        return c if previous is None else c + previous.to(c.dtype)

    def state_bias(self, q_state: Tensor, k_state: Tensor) -> Tensor:
        """The bias from broadcastable query and key states (``score_mod`` uses scalars)."""
        return q_state - k_state

    def forward(self, x: Tensor) -> Tensor:
        """The bias ``c_i − c_j`` of one sequence, ``(batch, heads, seq, seq)``.

        Raises:
            ValueError: naming ``x`` unless it is a floating ``(batch, seq, dim)`` tensor on
                the gates' device.
        """
        check_layer_input(x, self.dim, type(self).__name__, self.weight.device)
        c = self.token_state(x, None, None)
        return fox_bias(c, c)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, bias_init={self.bias_init}"

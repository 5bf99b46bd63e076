"""Biases computed from per-token states of the layer's input (the token-state hook; FoX).

An encoding with ``token_state(x, previous, real)`` and ``state_bias(q_state, k_state)``
(:mod:`posenc.encoding.base`) reads the hidden states, not only positions:
:class:`~posenc.attention.
Attention` hands it its input ``x`` of the new tokens, gets their states ``(batch, heads,
seq)`` continuing the state of the last cached key, keeps them with the KV cache, and the
backends add ``state_bias(q_state[i], k_state[j])`` to the logits:

* ``sdpa``: the bias materialized once, ``(batch, heads, q, k)``, through
  :func:`~posenc.attention.rows.attend_rows`;
* ``chunked``: per block of query rows, ``(batch, heads, rows, keys)``;
* ``flex``: a ``score_mod`` reading the states by index (nothing of size L×L).

The states of one layer's call travel in a per-layer view of the forward's
:class:`~posenc.attention.AttentionContext`
(:func:`posenc.attention.context.with_token_bias`; its memo is shared).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc.encoding.protocols import TokenStateEncoding

__all__ = ["TokenBias", "check_token_bias_fits"]


@dataclass(frozen=True)
class TokenBias:
    """The per-token states of one layer's call.

    Attributes:
        encoding: the encoding (its ``state_bias``).
        q_state: ``(batch, heads, q_len)`` states of the queries (the new tokens).
        k_state: ``(batch, heads, k_len)`` states of every key (cached, then new).
    """

    encoding: TokenStateEncoding
    q_state: Tensor
    k_state: Tensor

    def block(self, start: int, stop: int, end: int, dtype: torch.dtype) -> Tensor:
        """The bias of query rows ``start:stop`` over keys ``:end``, ``(batch, heads, rows,
        end)`` in ``dtype``."""
        q = self.q_state[..., start:stop].unsqueeze(-1)
        k = self.k_state[..., :end].unsqueeze(-2)
        bias: Tensor = self.encoding.state_bias(q, k)
        return bias.to(dtype)

    def score_mod(
        self, then: Callable[[Tensor], Tensor] | None = None
    ) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
        """The bias as a FlexAttention ``score_mod``; ``then`` maps the biased score (a
        score map around the encoding: soft-capping)."""
        q_state, k_state, state_bias = self.q_state, self.k_state, self.encoding.state_bias

        def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            bias = state_bias(q_state[b, h, q_idx], k_state[b, h, kv_idx])
            score = score + bias.to(score.dtype)
            return score if then is None else then(score)

        return score_mod


def check_token_bias_fits(encoding: TokenStateEncoding, *, dim: int, num_heads: int) -> None:
    """Raise ``ValueError`` naming ``pos`` unless a token-state encoding reads inputs of the
    attention's width ``dim`` (its ``dim``) and has one state per query head (its
    ``num_heads``)."""
    name = type(encoding).__name__
    width = encoding.dim
    if width != dim:
        raise ValueError(
            f"pos: {name} reads inputs of dim={width} but the attention's dim is {dim}"
        )
    heads = encoding.num_heads
    if heads != num_heads:
        raise ValueError(
            f"pos: {name} has num_heads={heads} but the attention has num_heads={num_heads}"
        )

"""What the explicit plans share: the constants, the blocks of rows, the term interface, the
one :class:`torch.autograd.Function` that runs a term, and when a call is served.

A learnable term inside the softmax needs the score gradients ``dS = P ⊙ (dP − D)`` with
``D_i = dO_i · O_i``, which no fused CPU kernel returns, so short training calls write the
softmax out. Under autograd that costs a saved temporary and a backward node per
elementwise step; here each call is one :class:`ExplicitCausal` over blocks of
:data:`EXPLICIT_ROWS` query rows (causal rows ``[a, b)`` see keys ``[0, b)`` only, so the
blocks skip most future keys' products). It keeps each block's ``P`` and the output; its
backward forms each block's ``dS`` once, in place, and reduces it by table row in one pass.
A :class:`Term` says what one encoding adds to a block's scores and how its gradients
reduce (:mod:`~posenc.attention.plans.explicit.shaw`,
:mod:`~posenc.attention.plans.explicit.xl`, :mod:`~posenc.attention.plans.explicit.distance`).

Used only inside :mod:`posenc.attention.plans.explicit`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.plans.base import PlanCall
from posenc.encoding.kinds import ClippedRelative, SinusoidRelative
from posenc.encoding.resolve import Hooks

__all__ = [
    "EXPLICIT_ROWS",
    "EXPLICIT_SCORES",
    "ExplicitCausal",
    "Term",
    "causal_square",
    "explicit_applies",
    "future_keys",
    "plan_applies",
    "row_blocks",
]

#: ``q_len · k_len`` up to which training calls of Shaw and Transformer-XL write the softmax
#: out in one call (the ``sdpa`` backend's threshold for materialized terms).
EXPLICIT_SCORES = 512 * 512


#: Query rows per block: causal rows ``[a, b)`` see keys ``[0, b)`` only, so blocks skip the
#: future keys' products (at 256 tokens 4 blocks do 5/8 of the full square's work).
EXPLICIT_ROWS = 64


def row_blocks(length: int, least: int) -> list[tuple[int, int]]:
    """Row blocks ``[a, b)`` of :data:`EXPLICIT_ROWS` (the first at least ``least`` rows)."""
    rows = max(EXPLICIT_ROWS, least)
    return [(a, min(length, a + rows)) for a in range(0, length, rows)]


def future_keys(rows: int, device: torch.device) -> Tensor:
    """``(rows, rows)`` bool, True above the diagonal (keys after the query)."""
    return torch.ones(rows, rows, dtype=torch.bool, device=device).triu_(1)


class Term:
    """What one encoding adds to a block of causal scores, and its gradients.

    ``begin`` runs once per call (forward, then again in the backward) with the call's
    queries and the encoding's tensors; the other methods run per row block ``[a, b)``
    over the keys ``[0, b)``.
    """

    least_rows = 1  # the first block's rows at least

    def begin(self, q: Tensor, params: tuple[Tensor, ...], scale: float) -> None:
        self.q, self.params, self.scale = q, params, scale

    def content_q(self) -> Tensor:
        """The queries that meet the keys in ``q kᵀ``."""
        return self.q

    def add(self, scores: Tensor, a: int, b: int) -> None:
        """Add the term to the block's scaled scores, in place."""

    def masks(self) -> bool:
        """True when :meth:`add` already hides the future keys."""
        return False

    def value(self, probs: Tensor, out: Tensor, a: int, b: int) -> Tensor | None:
        """Add the value term to ``out`` in place; return what the backward needs of it."""
        return None

    def d_probs(
        self, d_probs: Tensor, grad_out: Tensor, row_dot: Tensor, saved: Tensor | None, a: int
    ) -> None:
        """``dP − D`` in place (plus the value term's share of ``dP``)."""
        d_probs.sub_(row_dot[..., None])

    def d_scores_out(self, d_probs: Tensor) -> Tensor:
        """Where the block's ``dS`` is written (shaped like ``d_probs``): ``d_probs`` itself."""
        return d_probs

    def grad(self, d_scores: Tensor, a: int, b: int) -> Tensor | None:
        """Accumulate the tables' gradients of the block's ``dS`` (unscaled); return the
        block's extra query gradient (or None)."""
        return None

    def value_grad(self, saved: Tensor | None, grad_out: Tensor, a: int, b: int) -> None:
        """Accumulate the value term's table gradient."""

    def content_grad(self, d_content_q: Tensor) -> None:
        """Accumulate what the gradient of :meth:`content_q`'s block gives the tables."""

    def param_grads(self, needed: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
        return tuple(None for _ in needed)


class ExplicitCausal(torch.autograd.Function):
    """Causal attention (``q_len == k_len``) with one encoding's term, by row blocks; the
    score gradients formed once per block, in place (see the module docstring)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        term: Term,
        scale: float,
        *params: Tensor,
    ) -> Tensor:
        batch, heads, length, _ = q.shape
        term.begin(q, params, scale)
        content_q = term.content_q()
        out = q.new_empty(batch, heads, length, v.shape[-1])
        probs, saved = [], []
        for a, b in row_blocks(length, term.least_rows):
            scores = torch.matmul(content_q[:, :, a:b], k[:, :, :b].transpose(-1, -2))
            scores.mul_(scale)
            term.add(scores, a, b)
            if not term.masks():
                scores[..., a:b].masked_fill_(future_keys(b - a, q.device), float("-inf"))
            block_probs = torch.softmax(scores, dim=-1)
            del scores
            block_out = torch.matmul(block_probs, v[:, :, :b])
            saved.append(term.value(block_probs, block_out, a, b))
            out[:, :, a:b] = block_out
            probs.append(block_probs)
        ctx.term, ctx.scale, ctx.probs, ctx.saved = term, scale, probs, saved
        ctx.save_for_backward(q, k, v, out, *params)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, *params = ctx.saved_tensors
        term: Term = ctx.term
        scale = ctx.scale
        term.begin(q, tuple(params), scale)
        content_q = term.content_q()
        grad_out = grad_out.contiguous()
        row_dot = (grad_out * out).sum(-1)  # D_i = dO_i · O_i
        d_q = torch.empty_like(q)
        d_k, d_v = torch.zeros_like(k), torch.zeros_like(v)
        length = q.shape[2]
        blocks = row_blocks(length, term.least_rows)
        for (a, b), block_probs, saved in zip(blocks, ctx.probs, ctx.saved, strict=True):
            block_grad = grad_out[:, :, a:b]
            d_v[:, :, :b] += torch.matmul(block_probs.transpose(-1, -2), block_grad)
            d_scores = torch.matmul(block_grad, v[:, :, :b].transpose(-1, -2))  # dP
            term.d_probs(d_scores, block_grad, row_dot[:, :, a:b], saved, a)
            d_scores = torch.mul(d_scores, block_probs, out=term.d_scores_out(d_scores))  # dS
            block_d_q = torch.matmul(d_scores, k[:, :, :b]).mul_(scale)
            term.content_grad(block_d_q)
            d_k[:, :, :b] += torch.matmul(d_scores.transpose(-1, -2), content_q[:, :, a:b])
            extra = term.grad(d_scores, a, b)
            d_q[:, :, a:b] = block_d_q if extra is None else block_d_q.add_(extra)
            if saved is not None:
                term.value_grad(saved, block_grad, a, b)
        d_k.mul_(scale)
        return (
            d_q,
            d_k,
            d_v,
            None,
            None,
            *term.param_grads(ctx.needs_input_grad[5:]),
        )


def causal_square(context: AttentionContext, q: Tensor, k: Tensor) -> bool:
    """Causal, ``q_len == k_len`` ≤ ``EXPLICIT_SCORES`` pairs, default positions, no padding."""
    mask, length = context.mask, q.shape[-2]
    return (
        context.index_positions
        and mask.causal
        and mask.key_padding is None
        and not mask.has_pairwise
        and k.shape[-2] == length
        and length * length <= EXPLICIT_SCORES
    )


def explicit_applies(hooks: Hooks, context: AttentionContext, q: Tensor, k: Tensor) -> bool:
    """True when a training call of Shaw or Transformer-XL takes an explicit plan: causal,
    ``q_len == k_len`` ≤ ``EXPLICIT_SCORES`` pairs, default positions, no padding."""
    contextual = hooks.contextual
    if not isinstance(contextual, (ClippedRelative, SinusoidRelative)):
        return False
    if hooks.bias is not None or hooks.scores is not None:
        return False
    if not causal_square(context, q, k):
        return False
    length = q.shape[-2]
    if isinstance(contextual, ClippedRelative):
        return contextual.clipped_relative_tables()[2] < length
    return True


def plan_applies(call: PlanCall) -> bool:
    """Whether Shaw's or Transformer-XL's explicit plan serves ``call``: under autograd, no
    rows per block asked for, and :func:`explicit_applies`."""
    # rows per block asked for: the blocked plans serve the call
    return (
        call.grad
        and call.block_size is None
        and explicit_applies(call.hooks, call.context, call.q, call.k)
    )

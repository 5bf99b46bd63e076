"""Explicit-softmax plans with a hand-written backward, for training Shaw and Transformer-XL
on short causal sequences.

A learnable term inside the softmax needs the score gradients ``dS = P ⊙ (dP − D)`` with
``D_i = dO_i · O_i``, which no fused CPU kernel returns, so short training calls write the
softmax out. Under autograd that costs a saved temporary and a backward node per
elementwise step; here each call is one :class:`torch.autograd.Function` that keeps
``P`` and the output, and whose backward forms ``dS`` once, in place, and reduces it by
table row in one pass.

* Shaw (:class:`~posenc.encoding.kinds.ClippedRelative`, clip distance ``K``), causal: a
  key ``K`` or more before the query uses the edge vectors ``a^K_{−K}``, ``a^V_{−K}``. The
  key term ``q_i · a^K_{−K}`` is then the same for the whole far part of row ``i``: only
  its difference to the band's terms enters the softmax, so the logits are
  ``scale · q kᵀ`` plus, on the band of the ``K`` keys ``i − K < j ≤ i``,
  ``scale · q_i · (a^K_{j−i} − a^K_{−K})`` (written through a strided view of the
  scores, row stride ``L + 1``). The value term needs ``P`` on the band and the far part's
  mass ``1 − Σ_band P``: ``Σ_j P_ij a^V_ij = P̄_i A^V`` with ``P̄`` of width ``K + 1``. In
  the backward the value term adds ``dO_i · a^V_c`` to ``dP`` (a row constant on the far
  part, a band correction), and the tables' gradients are ``∂a^K = scale · Σ dS̄ᵀ q`` and
  ``∂a^V = Σ P̄ᵀ dO``, with ``dS̄`` the band of ``dS`` and its far part's row sum.
* Transformer-XL (:class:`~posenc.encoding.kinds.SinusoidRelative`), causal: ``u · k_j``
  folds into the queries (``(q + u) kᵀ``); the position term is one matmul of ``(q + v)``
  against the projected encodings of the distances ``L − 1, …, −1`` and Transformer-XL's
  relative shift is a strided view of it (row stride ``L``), added to the scores in one
  pass. Backward: ``dS`` written back through the same view gives the product's gradient,
  two matmuls give those of ``q + v`` and of the projected table (``W_R`` then by autograd).

Served: causal attention with ``q_len == k_len``, default positions, no key padding, under
autograd, no rows per block asked for (``Backend(block_size=...)``), at most :data:`EXPLICIT_SCORES` (query, key) pairs (there one call beats blocks;
longer sequences take the flash-parts and block plans). Shaw, Dai et al.: see
:mod:`posenc.contextual`. Tested against the ``sdpa`` backend's materialized reference
(values and gradients) and by ``gradcheck`` in float64.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.plans.base import FlashPartsPlan, PlanCall
from posenc.attention.rows import expand_heads
from posenc.encoding.kinds import ClippedRelative, SinusoidRelative
from posenc.encoding.resolve import Hooks

__all__ = [
    "EXPLICIT_CLIPPED",
    "EXPLICIT_SCORES",
    "EXPLICIT_SINUSOID",
    "explicit_applies",
    "shaw_causal_attention",
    "xl_causal_attention",
]

#: ``q_len · k_len`` up to which training calls of Shaw and Transformer-XL write the softmax
#: out in one call (the ``sdpa`` backend's threshold for materialized terms).
EXPLICIT_SCORES = 512 * 512


def _future(length: int, device: torch.device) -> Tensor:
    """``(length, length)`` bool, True above the diagonal (keys after the query)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).triu_(1)


def _band_lower(x: Tensor, reach: int) -> Tensor:
    """Rows ``reach − 1 …`` of ``x`` ``(batch, heads, L, L)`` (contiguous) on their band:
    ``[..., t, c] = x[..., reach − 1 + t, t + c]``, ``c < reach`` (a strided view)."""
    batch, heads, length, _ = x.shape
    return x.as_strided(
        (batch, heads, length - reach + 1, reach),
        (heads * length * length, length * length, length + 1, 1),
        x.storage_offset() + (reach - 1) * length,
    )


def _band_top(padded: Tensor, reach: int) -> Tensor:
    """The band of the first ``reach − 1`` rows, read from their ``(…, reach − 1, reach −
    1)`` corner padded on the left by ``reach − 1`` columns: ``[..., i, c] = padded[..., i,
    i + c]`` (row stride ``2 reach − 1``)."""
    batch, heads, rows, width = padded.shape
    return padded.as_strided(
        (batch, heads, rows, reach),
        (heads * rows * width, rows * width, width + 1, 1),
        padded.storage_offset(),
    )


def band_read(x: Tensor, reach: int) -> Tensor:
    """``[..., i, c] = x[..., i, i − reach + 1 + c]`` (0 where that key is before key 0):
    the ``reach`` keys ``i − reach < j ≤ i`` of every row, ``(batch, heads, L, reach)``."""
    batch, heads, length, _ = x.shape
    band = x.new_empty(batch, heads, length, reach)
    band[..., reach - 1 :, :] = _band_lower(x, reach)
    if reach > 1:
        corner = F.pad(x[..., : reach - 1, : reach - 1], (reach - 1, 0))
        band[..., : reach - 1, :] = _band_top(corner, reach)
    return band


def band_add_(x: Tensor, band: Tensor, reach: int) -> None:
    """``x[..., i, i − reach + 1 + c] += band[..., i, c]`` for the keys that exist (in place;
    ``x`` contiguous ``(batch, heads, L, L)``, ``band`` ``(batch, heads, L, reach)``)."""
    _band_lower(x, reach).add_(band[..., reach - 1 :, :])
    if reach > 1:
        batch, heads = x.shape[:2]
        corner = x.new_zeros(batch, heads, reach - 1, 2 * reach - 2)
        _band_top(corner, reach).copy_(band[..., : reach - 1, :])
        x[..., : reach - 1, : reach - 1] += corner[..., reach - 1 :]


class _ShawCausal(torch.autograd.Function):
    """Causal attention with Shaw's clipped key (and value) tables; see the module docstring."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_table: Tensor,
        value_table: Tensor | None,
        reach: int,
        scale: float,
    ) -> Tensor:
        length = q.shape[-2]
        keys = key_table[: reach + 1] * scale  # rows of distances −K … 0
        per_row = torch.matmul(q, keys.T)  # (batch, heads, L, K + 1)
        scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)
        band_add_(scores, per_row[..., 1:] - per_row[..., :1], reach)
        scores.masked_fill_(_future(length, q.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        del scores
        out = torch.matmul(probs, v)
        summed = None  # P̄: the far part's mass, then the band's probabilities
        if value_table is not None:
            band = band_read(probs, reach)
            summed = torch.cat([1.0 - band.sum(-1, keepdim=True), band], dim=-1)
            out.add_(torch.matmul(summed, value_table[: reach + 1]))
        ctx.reach, ctx.scale = reach, scale
        ctx.save_for_backward(q, k, v, keys, value_table, probs, out, summed)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, keys, value_table, probs, out, summed = ctx.saved_tensors
        reach, scale = ctx.reach, ctx.scale
        grad_out = grad_out.contiguous()
        d_v = torch.matmul(probs.transpose(-1, -2), grad_out)
        d_scores = torch.matmul(grad_out, v.transpose(-1, -2))  # dP, then dS in place
        row_dot = (grad_out * out).sum(-1)  # D_i = dO_i · O_i
        d_value_table = None
        if value_table is not None:
            per_row = torch.matmul(grad_out, value_table[: reach + 1].T)  # dO_i · a^V_c
            d_scores.sub_((row_dot - per_row[..., 0])[..., None])
            band_add_(d_scores, per_row[..., 1:] - per_row[..., :1], reach)
            if ctx.needs_input_grad[4]:
                d_value_table = torch.zeros_like(value_table)
                d_value_table[: reach + 1] = summed.flatten(0, -2).T @ grad_out.flatten(0, -2)
        else:
            d_scores.sub_(row_dot[..., None])
        d_scores.mul_(probs)
        d_q = torch.matmul(d_scores, k).mul_(scale)
        d_k = torch.matmul(d_scores.transpose(-1, -2), q).mul_(scale)
        band = band_read(d_scores, reach)
        far = d_scores.sum(-1, keepdim=True) - band.sum(-1, keepdim=True)
        d_rows = torch.cat([far, band], dim=-1)  # ∂ of q_i · a^K_c · scale, (…, L, K + 1)
        d_q.add_(torch.matmul(d_rows, keys))
        d_key_table = None
        if ctx.needs_input_grad[3]:
            d_key_table = keys.new_zeros(2 * reach + 1, keys.shape[-1])
            d_key_table[: reach + 1] = (d_rows.flatten(0, -2).T @ q.flatten(0, -2)).mul_(scale)
        return d_q, d_k, d_v, d_key_table, d_value_table, None, None


class _XLCausal(torch.autograd.Function):
    """Causal attention with Transformer-XL's terms; see the module docstring."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        u: Tensor,
        v_bias: Tensor,
        table: Tensor,
        scale: float,
    ) -> Tensor:
        batch, heads, length, _ = q.shape
        content_q = q + u[:, None]
        position_q = q + v_bias[:, None]
        scores = torch.matmul(content_q, k.transpose(-1, -2)).mul_(scale)
        product = torch.matmul(position_q, table.transpose(-1, -2))  # (b, h, L, L + 1)
        scores.add_(_shift(product), alpha=scale)
        scores.masked_fill_(_future(length, q.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        del scores, product
        out = torch.matmul(probs, v)
        ctx.scale = scale
        ctx.save_for_backward(content_q, position_q, k, v, table, probs, out)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        content_q, position_q, k, v, table, probs, out = ctx.saved_tensors
        scale = ctx.scale
        grad_out = grad_out.contiguous()
        d_v = torch.matmul(probs.transpose(-1, -2), grad_out)
        d_scores = torch.matmul(grad_out, v.transpose(-1, -2))
        d_scores.sub_((grad_out * out).sum(-1, keepdim=True)).mul_(probs).mul_(scale)
        d_content_q = torch.matmul(d_scores, k)
        d_k = torch.matmul(d_scores.transpose(-1, -2), content_q)
        batch, heads, length, _ = content_q.shape
        d_product = d_scores.new_zeros(batch, heads, length, length + 1)
        _shift(d_product).copy_(d_scores)
        del d_scores
        d_position_q = torch.matmul(d_product, table)
        d_table = None
        if ctx.needs_input_grad[5]:
            d_table = torch.matmul(d_product.transpose(-1, -2), position_q).sum(0)
        d_u = d_content_q.sum((0, 2)) if ctx.needs_input_grad[3] else None
        d_v_bias = d_position_q.sum((0, 2)) if ctx.needs_input_grad[4] else None
        return d_content_q + d_position_q, d_k, d_v, d_u, d_v_bias, d_table, None


def _shift(product: Tensor) -> Tensor:
    """Transformer-XL's relative shift as a view: ``[..., a, j] = product[..., a, L − 1 − a +
    j]`` of a contiguous ``(batch, heads, L, L + 1)`` product (row stride ``L``)."""
    batch, heads, length, width = product.shape
    return product.as_strided(
        (batch, heads, length, length),
        (heads * length * width, length * width, width - 1, 1),
        product.storage_offset() + length - 1,
    )


def shaw_causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_table: Tensor,
    value_table: Tensor | None,
    reach: int,
    scale: float,
) -> Tensor:
    """Causal attention of ``q`` over ``k``, ``v`` (same length, default positions) with
    Shaw's tables clipped at ``reach`` (< the length), by :class:`_ShawCausal`.

    Shape: q, k, v ``(batch, heads, L, head_dim)``; tables ``(2 · reach + 1, head_dim)``.
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out: Tensor = _ShawCausal.apply(q, k, v, key_table, value_table, reach, scale)
    return out


def xl_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, u: Tensor, v_bias: Tensor, table: Tensor, scale: float
) -> Tensor:
    """Causal attention with Transformer-XL's terms (same length, default positions).

    Shape: q, k, v ``(batch, heads, L, head_dim)``; ``u``, ``v_bias`` ``(heads, head_dim)``;
    ``table`` ``(heads, L + 1, head_dim)``: the projected encodings of distances ``L − 1,
    …, 0, −1``.
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out: Tensor = _XLCausal.apply(q, k, v, u, v_bias, table, scale)
    return out


def explicit_applies(hooks: Hooks, context: AttentionContext, q: Tensor, k: Tensor) -> bool:
    """True when a training call of Shaw or Transformer-XL takes an explicit plan: causal,
    ``q_len == k_len`` ≤ ``EXPLICIT_SCORES`` pairs, default positions, no padding."""
    contextual = hooks.contextual
    if not isinstance(contextual, (ClippedRelative, SinusoidRelative)):
        return False
    if hooks.bias is not None or hooks.scores is not None:
        return False
    mask, length = context.mask, q.shape[-2]
    if not (
        context.index_positions
        and mask.causal
        and mask.key_padding is None
        and not mask.has_pairwise
        and k.shape[-2] == length
        and length * length <= EXPLICIT_SCORES
    ):
        return False
    if isinstance(contextual, ClippedRelative):
        return contextual.clipped_relative_tables()[2] < length
    return True


def _applies(call: PlanCall) -> bool:
    # rows per block asked for: the blocked plans serve the call
    return (
        call.grad
        and call.block_size is None
        and explicit_applies(call.hooks, call.context, call.q, call.k)
    )


def _shaw_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    assert isinstance(hooks.contextual, ClippedRelative)
    key_table, value_table, reach = hooks.contextual.clipped_relative_tables()
    heads = q.shape[1]
    return shaw_causal_attention(
        q,
        expand_heads(k, heads),
        expand_heads(v, heads),
        key_table.to(q.dtype),
        None if value_table is None else value_table.to(q.dtype),
        reach,
        scale,
    )


def _xl_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    encoding = hooks.contextual
    assert isinstance(encoding, SinusoidRelative)
    length = q.shape[2]

    def build() -> Tensor:
        distances = torch.arange(length - 1, -2, -1, device=q.device)
        return encoding.projected(distances).to(q.dtype)  # (heads, L + 1, head_dim)

    # One table per forward for every layer sharing the encoding (its W_R backward once).
    table = context.cached((id(encoding), "xl-distances", length, q.dtype, q.device), build)
    u, v_bias = (t.to(q.dtype) for t in encoding.distance_terms())
    heads = q.shape[1]
    return xl_causal_attention(
        q, expand_heads(k, heads), expand_heads(v, heads), u, v_bias, table, scale
    )


#: Shaw's tables in training at short causal lengths: one explicit softmax, own backward.
EXPLICIT_CLIPPED = FlashPartsPlan("explicit clipped", ClippedRelative, _applies, _shaw_plan)

#: Transformer-XL's terms in training at short causal lengths: likewise.
EXPLICIT_SINUSOID = FlashPartsPlan(
    "explicit sinusoid", SinusoidRelative, _applies, _xl_plan
)

"""Explicit-softmax plans with a hand-written backward, for training learnable relative terms
on short causal sequences (Shaw, Transformer-XL, T5 and the other learnable biases of the
distance).

A learnable term inside the softmax needs the score gradients ``dS = P ⊙ (dP − D)`` with
``D_i = dO_i · O_i``, which no fused CPU kernel returns, so short training calls write the
softmax out. Under autograd that costs a saved temporary and a backward node per
elementwise step; here each call is one :class:`torch.autograd.Function` over blocks of
:data:`EXPLICIT_ROWS` query rows (causal rows ``[a, b)`` see keys ``[0, b)`` only, so the
blocks skip most future keys' products). It keeps each block's ``P`` and the output; its
backward forms each block's ``dS`` once, in place, and reduces it by table row in one pass.

* Shaw (:class:`~posenc.encoding.kinds.ClippedRelative`, clip distance ``K``): a key ``K``
  or more before the query uses the edge vectors ``a^K_{−K}``, ``a^V_{−K}``. The key term
  ``q_i · a^K_{−K}`` is then the same for the whole far part of row ``i``: only its
  difference to the band's terms enters the softmax, so the logits are ``scale · q kᵀ``
  plus, on the band of the ``K`` keys ``i − K < j ≤ i``, ``scale · q_i · (a^K_{j−i} −
  a^K_{−K})`` (written through a strided view of the scores, row stride ``keys + 1``). The
  value term needs ``P`` on the band and the far part's mass ``1 − Σ_band P``: ``Σ_j P_ij
  a^V_ij = P̄_i A^V`` with ``P̄`` of width ``K + 1``. In the backward the value term adds
  ``dO_i · a^V_c`` to ``dP`` (a row constant on the far part, a band correction), and the
  tables' gradients are ``∂a^K = scale · Σ dS̄ᵀ q`` and ``∂a^V = Σ P̄ᵀ dO``, with ``dS̄``
  the band of ``dS`` and its far part's row sum.
* Transformer-XL (:class:`~posenc.encoding.kinds.SinusoidRelative`): ``u · k_j`` folds into
  the queries (``(q + u) kᵀ``); the position term is one matmul of ``(q + v)`` against the
  projected encodings of the distances ``b − 1, …, −1`` and Transformer-XL's relative shift
  is a strided view of it (row stride ``b``), added to the scores. Backward: ``dS`` is
  written straight into the product's layout (the view covers one contiguous range), and
  two matmuls give the gradients of ``q + v`` and of the projected table (``W_R``'s by
  autograd, once per forward for the layers sharing the encoding).
* A learnable bias of the distance alone (T5, KERPLE, the dynamic bias, FIRE below its
  threshold): each block adds its ``(heads, rows, keys)`` slice of the forward's distance
  table (:func:`~posenc.attention.plans.distance.distance_table`, future keys at the lowest
  value, which is the causal mask), and the table's gradient is ``Σ_batch dS`` summed along
  its diagonals.

Served: causal attention with ``q_len == k_len``, default positions, no key padding, under
autograd, no rows per block asked for (``Backend(block_size=...)``), at most
:data:`EXPLICIT_SCORES` (query, key) pairs; longer sequences take the flash-parts and
block plans. Papers: see :mod:`posenc.contextual` and :mod:`posenc.bias`. Tested against
the ``sdpa`` backend's materialized reference (values and gradients) and by ``gradcheck``
in float64.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.plans.base import FlashPartsPlan, PlanCall
from posenc.attention.plans.distance import distance_table
from posenc.attention.rows import expand_heads
from posenc.encoding.kinds import ClippedRelative, SinusoidRelative
from posenc.encoding.protocols import BiasEncoding
from posenc.encoding.resolve import Hooks

__all__ = [
    "EXPLICIT_CLIPPED",
    "EXPLICIT_DISTANCE",
    "EXPLICIT_ROWS",
    "EXPLICIT_SCORES",
    "EXPLICIT_SINUSOID",
    "band_add_",
    "band_read",
    "distance_causal_attention",
    "explicit_applies",
    "shaw_causal_attention",
    "xl_causal_attention",
]

#: ``q_len · k_len`` up to which training calls of Shaw and Transformer-XL write the softmax
#: out in one call (the ``sdpa`` backend's threshold for materialized terms).
EXPLICIT_SCORES = 512 * 512


#: Query rows per block: causal rows ``[a, b)`` see keys ``[0, b)`` only, so blocks skip the
#: future keys' products (at 256 tokens 4 blocks do 5/8 of the full square's work).
EXPLICIT_ROWS = 64


def _blocks(length: int, least: int) -> list[tuple[int, int]]:
    """Row blocks ``[a, b)`` of :data:`EXPLICIT_ROWS` (the first at least ``least`` rows)."""
    rows = max(EXPLICIT_ROWS, least)
    return [(a, min(length, a + rows)) for a in range(0, length, rows)]


def _future(rows: int, device: torch.device) -> Tensor:
    """``(rows, rows)`` bool, True above the diagonal (keys after the query)."""
    return torch.ones(rows, rows, dtype=torch.bool, device=device).triu_(1)


def _band_lower(x: Tensor, reach: int, first: int) -> Tensor:
    """The band of the rows ``i ≥ reach − 1`` of a block ``x`` ``(batch, heads, rows,
    keys)`` whose row 0 is query ``first``: ``[..., t, c] = x[..., r₀ + t, first + r₀ + t −
    reach + 1 + c]`` with ``r₀ = max(0, reach − 1 − first)`` (a strided view, row stride + 1)."""
    batch, heads, rows, _ = x.shape
    skip = max(0, reach - 1 - first)
    stride = x.stride()
    return x.as_strided(
        (batch, heads, rows - skip, reach),
        (stride[0], stride[1], stride[2] + 1, 1),
        x.storage_offset() + skip * stride[2] + first + skip - reach + 1,
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


def band_read(x: Tensor, reach: int, first: int = 0) -> Tensor:
    """``[..., r, c] = x[..., r, i − reach + 1 + c]`` for query ``i = first + r`` (0 where
    that key is before key 0): the ``reach`` keys ``i − reach < j ≤ i`` of every row of a
    block ``(batch, heads, rows, keys)`` of causal scores, ``(batch, heads, rows, reach)``.
    ``first`` is 0 or at least ``reach − 1``."""
    batch, heads, rows, _ = x.shape
    band = x.new_empty(batch, heads, rows, reach)
    skip = max(0, reach - 1 - first)
    band[..., skip:, :] = _band_lower(x, reach, first)
    if skip:
        corner = F.pad(x[..., :skip, :skip], (skip, 0))
        band[..., :skip, :] = _band_top(corner, reach)
    return band


def band_add_(x: Tensor, band: Tensor, reach: int, first: int = 0) -> None:
    """``x[..., r, i − reach + 1 + c] += band[..., r, c]`` (query ``i = first + r``) for the
    keys that exist, in place; the inverse reading of :func:`band_read`."""
    skip = max(0, reach - 1 - first)
    _band_lower(x, reach, first).add_(band[..., skip:, :])
    if skip:
        batch, heads = x.shape[:2]
        corner = x.new_zeros(batch, heads, skip, 2 * skip)
        _band_top(corner, reach).copy_(band[..., :skip, :])
        x[..., :skip, :skip] += corner[..., skip:]


class _Term:
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


class _ShawTerm(_Term):
    """Shaw's clipped tables, causal: the band's differences to the far part's edge term."""

    def __init__(self, reach: int) -> None:
        self.reach = reach
        self.least_rows = reach - 1

    def begin(self, q: Tensor, params: tuple[Tensor, ...], scale: float) -> None:
        super().begin(q, params, scale)
        key_table = params[0]
        self.keys = key_table[: self.reach + 1] * scale  # rows of distances −K … 0
        self.per_row = torch.matmul(q, self.keys.T)  # (batch, heads, L, K + 1)
        self.d_rows: list[Tensor] = []
        self.d_value: Tensor | None = None

    def add(self, scores: Tensor, a: int, b: int) -> None:
        rows = self.per_row[:, :, a:b]
        band_add_(scores, rows[..., 1:] - rows[..., :1], self.reach, a)

    def value(self, probs: Tensor, out: Tensor, a: int, b: int) -> Tensor | None:
        if len(self.params) < 2:
            return None
        band = band_read(probs, self.reach, a)
        summed = torch.cat([1.0 - band.sum(-1, keepdim=True), band], dim=-1)  # P̄
        out.add_(torch.matmul(summed, self.params[1][: self.reach + 1]))
        return summed

    def d_probs(
        self, d_probs: Tensor, grad_out: Tensor, row_dot: Tensor, saved: Tensor | None, a: int
    ) -> None:
        if len(self.params) < 2:
            d_probs.sub_(row_dot[..., None])
            return
        per_row = torch.matmul(grad_out, self.params[1][: self.reach + 1].T)  # dO_i · a^V_c
        d_probs.sub_((row_dot - per_row[..., 0])[..., None])
        band_add_(d_probs, per_row[..., 1:] - per_row[..., :1], self.reach, a)

    def grad(self, d_scores: Tensor, a: int, b: int) -> Tensor | None:
        band = band_read(d_scores, self.reach, a)
        far = d_scores.sum(-1, keepdim=True) - band.sum(-1, keepdim=True)
        d_rows = torch.cat([far, band], dim=-1)  # ∂ of q_i · a^K_c · scale, (…, rows, K + 1)
        self.d_rows.append(d_rows)
        return torch.matmul(d_rows, self.keys)

    def value_grad(self, saved: Tensor | None, grad_out: Tensor, a: int, b: int) -> None:
        assert saved is not None
        part = saved.flatten(0, -2).T @ grad_out.flatten(0, -2)
        self.d_value = part if self.d_value is None else self.d_value.add_(part)

    def param_grads(self, needed: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
        key_table = self.params[0]
        grads: list[Tensor | None] = [None] * len(self.params)
        if needed[0]:
            d_rows = torch.cat(self.d_rows, dim=2).flatten(0, -2)
            d_keys = key_table.new_zeros(key_table.shape)
            d_keys[: self.reach + 1] = (d_rows.T @ self.q.flatten(0, -2)).mul_(self.scale)
            grads[0] = d_keys
        if len(self.params) > 1 and needed[1] and self.d_value is not None:
            d_values = self.d_value.new_zeros(self.params[1].shape)
            d_values[: self.reach + 1] = self.d_value
            grads[1] = d_values
        return tuple(grads)


class _XLTerm(_Term):
    """Transformer-XL's terms, causal: ``u`` folded into the queries, the position product
    of each block read through the relative shift."""

    def begin(self, q: Tensor, params: tuple[Tensor, ...], scale: float) -> None:
        super().begin(q, params, scale)
        u, v_bias, table = params
        self.folded = q + u[:, None]
        self.position_q = q + v_bias[:, None]
        self.table = table  # (heads, L + 1, head_dim): distances L − 1 … −1
        self.d_position_q: list[Tensor] = []
        self.d_table = torch.zeros_like(table)
        self.d_u = torch.zeros_like(u)

    def content_grad(self, d_content_q: Tensor) -> None:
        self.d_u += d_content_q.sum((0, 2))

    def content_q(self) -> Tensor:
        return self.folded

    def _columns(self, b: int) -> Tensor:
        return self.table[:, self.table.shape[1] - b - 1 :]  # distances b − 1 … −1

    def add(self, scores: Tensor, a: int, b: int) -> None:
        product = torch.matmul(self.position_q[:, :, a:b], self._columns(b).transpose(-1, -2))
        scores.add_(_shift(product), alpha=self.scale)

    def d_scores_out(self, d_probs: Tensor) -> Tensor:
        # dS written straight into the product's layout: the shift view of a contiguous
        # (rows, b + 1) product covers its flat range [rows − 1, rows − 1 + rows · b), so only
        # the rows − 1 entries before it and the one after it are zeroed.
        batch, heads, rows, keys = d_probs.shape
        self.d_product = d_probs.new_empty(batch, heads, rows, keys + 1)
        flat = self.d_product.view(batch, heads, -1)
        flat[..., : rows - 1].zero_()
        flat[..., rows - 1 + rows * keys :].zero_()
        return _shift(self.d_product)

    def grad(self, d_scores: Tensor, a: int, b: int) -> Tensor | None:
        d_product = self.d_product  # holds dS through the shift (unscaled)
        columns = self._columns(b)
        d_position_q = torch.matmul(d_product, columns).mul_(self.scale)
        self.d_position_q.append(d_position_q)
        d_columns = torch.matmul(d_product.transpose(-1, -2), self.position_q[:, :, a:b])
        self.d_table[:, self.table.shape[1] - b - 1 :] += d_columns.sum(0).mul_(self.scale)
        return d_position_q

    def param_grads(self, needed: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
        d_v_bias = torch.cat(self.d_position_q, dim=2).sum((0, 2)) if needed[1] else None
        return (self.d_u if needed[0] else None, d_v_bias, self.d_table if needed[2] else None)


class _DistanceTerm(_Term):
    """A bias of the distance alone from its descending table (future keys at the lowest
    value): the block's bias materialized once per block, its gradient by anti-diagonals."""

    def begin(self, q: Tensor, params: tuple[Tensor, ...], scale: float) -> None:
        super().begin(q, params, scale)
        self.d_table = torch.zeros_like(params[0])

    def masks(self) -> bool:
        return True

    def add(self, scores: Tensor, a: int, b: int) -> None:
        table = self.params[0]  # (heads, 2L − 1): distances L − 1 … −(L − 1)
        rows = b - a
        length = (table.shape[1] + 1) // 2
        # reversed rows r' = rows − 1 − r read table[L − b + r' + j] (strides 1, 1)
        reversed_rows = table.as_strided(
            (table.shape[0], rows, b),
            (table.stride(0), 1, 1),
            table.storage_offset() + length - b,
        )
        scores.add_(reversed_rows.flip(1))

    def grad(self, d_scores: Tensor, a: int, b: int) -> Tensor | None:
        summed = d_scores.sum(0)  # (heads, rows, keys)
        heads, rows, _ = summed.shape
        width = rows + b - 1
        # row r at column rows − 1 − r + j: table index L − b + that column
        shifted = summed.new_zeros(heads, rows, width)
        shifted.as_strided((heads, rows, b), (rows * width, width - 1, 1), rows - 1).copy_(summed)
        length = (self.d_table.shape[1] + 1) // 2
        self.d_table[:, length - b : length - b + width] += shifted.sum(1)
        return None

    def param_grads(self, needed: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
        return (self.d_table if needed[0] else None,)


class _ExplicitCausal(torch.autograd.Function):
    """Causal attention (``q_len == k_len``) with one encoding's term, by row blocks; the
    score gradients formed once per block, in place (see the module docstring)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        term: _Term,
        scale: float,
        *params: Tensor,
    ) -> Tensor:
        batch, heads, length, _ = q.shape
        term.begin(q, params, scale)
        content_q = term.content_q()
        out = q.new_empty(batch, heads, length, v.shape[-1])
        probs, saved = [], []
        for a, b in _blocks(length, term.least_rows):
            scores = torch.matmul(content_q[:, :, a:b], k[:, :, :b].transpose(-1, -2))
            scores.mul_(scale)
            term.add(scores, a, b)
            if not term.masks():
                scores[..., a:b].masked_fill_(_future(b - a, q.device), float("-inf"))
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
        term: _Term = ctx.term
        scale = ctx.scale
        term.begin(q, tuple(params), scale)
        content_q = term.content_q()
        grad_out = grad_out.contiguous()
        row_dot = (grad_out * out).sum(-1)  # D_i = dO_i · O_i
        d_q = torch.empty_like(q)
        d_k, d_v = torch.zeros_like(k), torch.zeros_like(v)
        length = q.shape[2]
        blocks = _blocks(length, term.least_rows)
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


def _shift(product: Tensor) -> Tensor:
    """Transformer-XL's relative shift as a view: ``[..., r, j] = product[..., r, rows − 1 −
    r + j]`` of a contiguous ``(batch, heads, rows, b + 1)`` product of a block's rows against
    the distances ``b − 1 … −1`` (row stride ``b``); keys after the query read leftovers."""
    batch, heads, rows, width = product.shape
    return product.as_strided(
        (batch, heads, rows, width - 1),
        (heads * rows * width, rows * width, width - 1, 1),
        product.storage_offset() + rows - 1,
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
    Shaw's tables clipped at ``reach`` (< the length).

    Shape: q, k, v ``(batch, heads, L, head_dim)``; tables ``(2 · reach + 1, head_dim)``.
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    tables = (key_table,) if value_table is None else (key_table, value_table)
    out: Tensor = _ExplicitCausal.apply(q, k, v, _ShawTerm(reach), scale, *tables)
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
    out: Tensor = _ExplicitCausal.apply(q, k, v, _XLTerm(), scale, u, v_bias, table.contiguous())
    return out


def distance_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, table: Tensor, scale: float
) -> Tensor:
    """Causal attention (same length, default positions) with a bias of the distance alone.

    Shape: q, k, v ``(batch, heads, L, head_dim)``; ``table`` ``(heads, 2L − 1)``: the bias
    at distances ``L − 1, …, −(L − 1)``, the negative ones (future keys) at the dtype's
    lowest value (:func:`~posenc.attention.plans.distance.distance_table`).
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out: Tensor = _ExplicitCausal.apply(q, k, v, _DistanceTerm(), scale, table.contiguous())
    return out


def _causal_square(context: AttentionContext, q: Tensor, k: Tensor) -> bool:
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
    if not _causal_square(context, q, k):
        return False
    length = q.shape[-2]
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


def _distance_applies(call: PlanCall) -> bool:
    encoding = call.hooks.bias
    return (
        call.grad
        and call.block_size is None
        and encoding is not None
        and any(p.requires_grad for p in encoding.parameters())
        and _causal_square(call.context, call.q, call.k)
        and call.hooks.distance_only(call.k.shape[2] - 1)
    )


def _distance_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    block_size: int | None,
) -> Tensor:
    encoding = hooks.bias
    assert encoding is not None
    heads, length = q.shape[1], q.shape[2]
    # the distance-table plan's table of this forward, shared with it and across layers
    key = (id(encoding), "distance-table", length, length, True, q.dtype, q.device)
    table = context.cached(
        key, lambda: distance_table(encoding, heads, length, length, True, q.dtype, q.device)
    )
    return distance_causal_attention(
        q, expand_heads(k, heads), expand_heads(v, heads), table, scale
    )


#: A learnable bias of the distance alone in training at short causal lengths (T5, KERPLE,
#: the dynamic bias, FIRE below its threshold): one explicit softmax per row block.
EXPLICIT_DISTANCE = FlashPartsPlan(
    "explicit distance", BiasEncoding, _distance_applies, _distance_plan
)

#: Shaw's tables in training at short causal lengths: one explicit softmax, own backward.
EXPLICIT_CLIPPED = FlashPartsPlan("explicit clipped", ClippedRelative, _applies, _shaw_plan)

#: Transformer-XL's terms in training at short causal lengths: likewise.
EXPLICIT_SINUSOID = FlashPartsPlan("explicit sinusoid", SinusoidRelative, _applies, _xl_plan)

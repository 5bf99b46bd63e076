"""The explicit plan of Shaw's clipped tables (:class:`~posenc.encoding.kinds.ClippedRelative`,
clip distance ``K``) in training at short causal lengths.

A key ``K`` or more before the query uses the edge vectors ``a^K_{−K}``, ``a^V_{−K}``. The key
term ``q_i · a^K_{−K}`` is then the same for the whole far part of row ``i``: only its
difference to the band's terms enters the softmax, so the logits are ``scale · q kᵀ`` plus, on
the band of the ``K`` keys ``i − K < j ≤ i``, ``scale · q_i · (a^K_{j−i} − a^K_{−K})``
(written through a strided view of the scores, row stride ``keys + 1``: :func:`band_add_`).
The value term needs ``P`` on the band and the far part's mass ``1 − Σ_band P``: ``Σ_j P_ij
a^V_ij = P̄_i A^V`` with ``P̄`` of width ``K + 1``. In the backward the value term adds ``dO_i ·
a^V_c`` to ``dP`` (a row constant on the far part, a band correction), and the tables'
gradients are ``∂a^K = scale · Σ dS̄ᵀ q`` and ``∂a^V = Σ P̄ᵀ dO``, with ``dS̄`` the band of
``dS`` and its far part's row sum.

Paper: Shaw et al., "Self-Attention with Relative Position Representations" (arXiv:1803.02155);
see :mod:`posenc.contextual`. Tested against the ``sdpa`` backend's materialized reference
(values and gradients) and by ``gradcheck`` in float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.plans.base import FlashPartsPlan
from posenc.attention.plans.explicit._common import ExplicitCausal, Term, plan_applies
from posenc.attention.rows import expand_heads
from posenc.encoding.kinds import ClippedRelative
from posenc.encoding.resolve import Hooks

__all__ = ["EXPLICIT_CLIPPED", "band_add_", "band_read", "shaw_causal_attention"]


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


class _ShawTerm(Term):
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
    out: Tensor = ExplicitCausal.apply(q, k, v, _ShawTerm(reach), scale, *tables)
    return out


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


#: Shaw's tables in training at short causal lengths: one explicit softmax, own backward.
EXPLICIT_CLIPPED = FlashPartsPlan("explicit clipped", ClippedRelative, plan_applies, _shaw_plan)

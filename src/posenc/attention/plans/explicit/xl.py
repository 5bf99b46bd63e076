"""The explicit plan of Transformer-XL's terms (:class:`~posenc.encoding.kinds.SinusoidRelative`)
in training at short causal lengths.

``u · k_j`` folds into the queries (``(q + u) kᵀ``); the position term is one matmul of ``(q +
v)`` against the projected encodings of the distances ``b − 1, …, −1`` and Transformer-XL's
relative shift is a strided view of it (row stride ``b``), added to the scores. Backward:
``dS`` is written straight into the product's layout (the view covers one contiguous range),
and two matmuls give the gradients of ``q + v`` and of the projected table (``W_R``'s by
autograd, once per forward for the layers sharing the encoding).

Paper: Dai et al., "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context"
(arXiv:1901.02860); see :mod:`posenc.contextual`. Tested against the ``sdpa`` backend's
materialized reference (values and gradients) and by ``gradcheck`` in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.plans.base import FlashPartsPlan
from posenc.attention.plans.explicit._common import ExplicitCausal, Term, plan_applies
from posenc.attention.rows import expand_heads
from posenc.encoding.kinds import SinusoidRelative
from posenc.encoding.resolve import Hooks

__all__ = ["EXPLICIT_SINUSOID", "xl_causal_attention"]


class _XLTerm(Term):
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


def xl_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, u: Tensor, v_bias: Tensor, table: Tensor, scale: float
) -> Tensor:
    """Causal attention with Transformer-XL's terms (same length, default positions).

    Shape: q, k, v ``(batch, heads, L, head_dim)``; ``u``, ``v_bias`` ``(heads, head_dim)``;
    ``table`` ``(heads, L + 1, head_dim)``: the projected encodings of distances ``L − 1,
    …, 0, −1``.
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out: Tensor = ExplicitCausal.apply(q, k, v, _XLTerm(), scale, u, v_bias, table.contiguous())
    return out


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


#: Transformer-XL's terms in training at short causal lengths: likewise.
EXPLICIT_SINUSOID = FlashPartsPlan("explicit sinusoid", SinusoidRelative, plan_applies, _xl_plan)

"""The explicit plan of a learnable bias of the distance alone (T5, KERPLE, the dynamic bias,
FIRE below its threshold) in training at short causal lengths.

Each block adds its ``(heads, rows, keys)`` slice of the forward's distance table
(:func:`~posenc.attention.plans.distance.distance_table`, future keys at the lowest value,
which is the causal mask), and the table's gradient is ``Σ_batch dS`` summed along its
diagonals.

Papers: see :mod:`posenc.bias`. Tested against the ``sdpa`` backend's materialized reference
(values and gradients) and by ``gradcheck`` in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.plans.base import FlashPartsPlan, PlanCall
from posenc.attention.plans.distance import distance_table
from posenc.attention.plans.explicit._common import ExplicitCausal, Term, causal_square
from posenc.attention.rows import expand_heads
from posenc.encoding.protocols import BiasEncoding
from posenc.encoding.resolve import Hooks

__all__ = ["EXPLICIT_DISTANCE", "distance_causal_attention"]


class _DistanceTerm(Term):
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


def distance_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, table: Tensor, scale: float
) -> Tensor:
    """Causal attention (same length, default positions) with a bias of the distance alone.

    Shape: q, k, v ``(batch, heads, L, head_dim)``; ``table`` ``(heads, 2L − 1)``: the bias
    at distances ``L − 1, …, −(L − 1)``, the negative ones (future keys) at the dtype's
    lowest value (:func:`~posenc.attention.plans.distance.distance_table`).
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out: Tensor = ExplicitCausal.apply(q, k, v, _DistanceTerm(), scale, table.contiguous())
    return out


def _distance_applies(call: PlanCall) -> bool:
    encoding = call.hooks.bias
    return (
        call.grad
        and call.block_size is None
        and encoding is not None
        and any(p.requires_grad for p in encoding.parameters())
        and causal_square(call.context, call.q, call.k)
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

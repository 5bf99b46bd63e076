"""Attention's fast paths: plans chosen by the kind an encoding declares.

Each plan (:class:`~posenc.attention.plans.base.Plan`) serves the encodings of one kind
(:mod:`posenc.encoding.kinds`) exactly: the same values and gradients as the reference path,
in O(block · keys) memory on the CPU flash kernel. :func:`run_plan` tries :data:`PLANS` in
order and runs the first that applies; a new structure is one kind in
:mod:`posenc.encoding.kinds` and one plan here, nothing in the backends.

========================  ===========================================  ==================
plan                      serves                                       when
========================  ===========================================  ==================
``scores term``           :class:`~posenc.encoding.kinds.AdditiveScores`  forward only
``linear bias``           :class:`~posenc.encoding.kinds.LinearBias`   causal, any positions
``explicit distance``     a learnable bias of ``q - k`` alone          training, short
``distance table``        a bias of ``q - k`` alone                    default positions
``materialized bias``     any pointwise bias                           forward only
``explicit clipped``      :class:`~posenc.encoding.kinds.ClippedRelative`  training, short
``explicit sinusoid``     :class:`~posenc.encoding.kinds.SinusoidRelative`  training, short
``clipped relative``      :class:`~posenc.encoding.kinds.ClippedRelative`  default positions
``disentangled relative`` :class:`~posenc.encoding.kinds.DisentangledRelative`  forward, default
``sinusoid relative``     :class:`~posenc.encoding.kinds.SinusoidRelative`  forward, default
========================  ===========================================  ==================

Stick-breaking attention (:mod:`~posenc.attention.plans.stick_breaking`) replaces the softmax
and runs by its own loop over query blocks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.attention import flash
from posenc.attention.context import AttentionContext
from posenc.attention.plans.base import Plan, PlanCall, padding_mask, tracks_grad
from posenc.attention.plans.distance import DISTANCE_TABLE
from posenc.attention.plans.explicit import (
    EXPLICIT_CLIPPED,
    EXPLICIT_DISTANCE,
    EXPLICIT_SINUSOID,
    explicit_applies,
)
from posenc.attention.plans.flash_parts import LINEAR_BIAS, MATERIALIZED_BIAS, SCORES_TERM
from posenc.attention.plans.relative import (
    CLIPPED_RELATIVE,
    DISENTANGLED_RELATIVE,
    SINUSOID_RELATIVE,
)
from posenc.attention.rows import compute_dtype
from posenc.encoding.resolve import Hooks

__all__ = ["PLANS", "Plan", "choose_plan", "explicit_applies", "run_plan"]

#: The plans, in the order they are tried.
PLANS: tuple[Plan, ...] = (
    SCORES_TERM,
    LINEAR_BIAS,
    EXPLICIT_DISTANCE,
    DISTANCE_TABLE,
    MATERIALIZED_BIAS,
    EXPLICIT_CLIPPED,
    EXPLICIT_SINUSOID,
    CLIPPED_RELATIVE,
    DISENTANGLED_RELATIVE,
    SINUSOID_RELATIVE,
)


def choose_plan(call: PlanCall) -> Plan | None:
    """The first plan of :data:`PLANS` whose kind the call's encoding has and that applies."""
    hooks = call.hooks
    acting = hooks.scores or hooks.bias or hooks.contextual
    for plan in PLANS:
        if isinstance(acting, plan.kind) and plan.applies(call):
            return plan
    return None


def run_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
    block_size: int | None = None,
) -> Tensor | None:
    """Attention by a plan, or None when no plan applies.

    ``block_size`` overrides the plan's query rows per block. A plan needs the CPU flash
    kernel, no dropout, exactly one of a pointwise bias, a contextual term or a scores reader
    (no score map or sink logits: they change the softmax the kernel computes), a mask of
    causal order and key padding only, and eager mode.
    """
    mask = context.mask
    if not flash.available(q):
        return None
    acting = [p for p in (hooks.bias, hooks.contextual, hooks.scores) if p is not None]
    if len(acting) != 1 or hooks.score_map is not None or hooks.sinks is not None:
        return None
    if dropout_p > 0.0 or mask.has_pairwise or torch.compiler.is_compiling():
        return None
    call = PlanCall(
        hooks, context, q, k, v, grad=tracks_grad(hooks, q, k, v), block_size=block_size
    )
    plan = choose_plan(call)
    if plan is None:
        return None
    cdt = compute_dtype(q.dtype)
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    out = plan.run(qc, kc, vc, hooks, context, padding_mask(context, cdt), scale, block_size)
    empty = mask.empty_rows()
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out.to(q.dtype)

"""Attention over complete rows of queries with an encoding's logit terms.

:func:`attend_rows` is the one place where a bias, a contextual term, a scores reader and a
mask meet: ``softmax(scale·q kᵀ + bias + term → scores hook → score map → mask [, sinks])
v (+ value term)``. The ``sdpa`` backend calls it once on all queries (the reference),
``chunked`` once per block of queries with the keys those queries may see. Sink logits join
the softmax as one more column (a key of logit ``s_h`` and zero value), dropped after it.

Numerics: half-precision inputs are computed in float32 (the bias, the scores, the softmax)
and rounded once at the end; float64 stays float64 throughout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.encoding.resolve import Hooks

__all__ = [
    "as_4d",
    "attend_rows",
    "compute_dtype",
    "expand_heads",
    "fill_masked",
    "softmax_with_sinks",
]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other dtype computes scores in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def expand_heads(x: Tensor, heads: int) -> Tensor:
    """Repeat grouped key/value heads ``(batch, kv_heads, ...)`` to ``heads``."""
    repeat = heads // x.shape[1]
    return x if repeat == 1 else x.repeat_interleave(repeat, dim=1)


def fill_masked(logits: Tensor | None, allowed: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """An additive mask: ``logits`` (or 0) where allowed, the dtype's lowest value elsewhere.

    The lowest finite value rather than -inf: a row with no visible key stays finite (its
    output is zeroed afterwards) instead of turning into NaN in the softmax and its gradient.
    """
    if allowed is None:
        return as_4d(logits)
    low = torch.finfo(dtype).min
    if logits is None:
        return as_4d(torch.zeros((), dtype=dtype, device=allowed.device).masked_fill(~allowed, low))
    return as_4d(logits.masked_fill(~allowed, low))


def as_4d(mask: Tensor | None) -> Tensor | None:
    """``(heads, q, k)`` → ``(1, heads, q, k)``: SDPA's CPU flash kernel takes 4-D masks only
    (a 3-D one sends it to the slow math path)."""
    if mask is None or mask.dim() == 4:
        return mask
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def attend_rows(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    q_pos: Tensor,
    k_pos: Tensor,
    allowed: Tensor | None,
    scale: float,
    dropout_p: float,
    bias: Tensor | None = None,
    contiguous: tuple[int, int] | None = None,
    causal: bool = False,
) -> Tensor:
    """Attention of complete query rows over the keys ``k``, ``v``.

    Args:
        q: ``(batch, heads, rows, head_dim)``; k, v: ``(batch, kv_heads, keys, ·)``.
        hooks: the encoding's hooks.
        q_pos, k_pos: positions of these rows and keys (for the encoding's terms).
        allowed: visible pairs, bool broadcastable to ``(batch, heads, rows, keys)``, or None.
        scale: logit scale.
        dropout_p: dropout on the attention probabilities.
        bias: the encoding's bias for these rows and keys, precomputed (a per-forward table,
            a token-state bias), or None to evaluate ``bias_at`` here (a pointwise bias).
        contiguous: ``(q_start, k_start)`` when the positions are ``q_start + arange`` and
            ``k_start + arange`` for every row (known from how they were made): a contextual
            term is then computed by its ``logit_term_contiguous``.
        causal: the mask includes causal order (pairs it hides may get arbitrary finite
            terms from ``logit_term_contiguous``).

    Returns:
        ``(batch, heads, rows, v_dim)`` in q's dtype; rows that see no key are zero.
    """
    out_dtype = q.dtype
    cdt = compute_dtype(q.dtype)
    q, k, v = q.to(cdt), k.to(cdt), v.to(cdt)
    heads = q.shape[1]
    extra: Tensor | None = None
    if bias is not None:
        extra = bias.to(cdt)
    elif hooks.bias is not None:
        extra = hooks.materialized_bias(q_pos, k_pos, cdt)
    if hooks.contextual is not None:
        contextual, k_all = hooks.contextual, expand_heads(k, heads)
        if contiguous is not None:
            term = contextual.logit_term_contiguous(q, k_all, *contiguous, scale, causal)
        else:
            term = contextual.logit_term(q, k_all, q_pos, k_pos, scale)
        term = term.to(cdt)
        extra = term if extra is None else extra + term
    # A term that needs a gradient sends SDPA to its math path anyway (its kernels give no
    # gradient for the mask); writing the softmax out skips that path's masked-row checks.
    explicit = hooks.needs_probabilities or (extra is not None and extra.requires_grad)
    low = torch.finfo(cdt).min
    if explicit:
        k, v = expand_heads(k, heads), expand_heads(v, heads)
        content = q @ k.transpose(-1, -2)
        # extra + scale · q kᵀ in one pass (the matmul's output is fresh: scale it in place).
        scores = content.mul_(scale) if extra is None else torch.add(extra, content, alpha=scale)
        if hooks.scores is not None:
            scores = hooks.scores.transform_scores(
                scores, q=q, k=k, q_pos=q_pos, k_pos=k_pos, allowed=allowed
            )
            if hooks.score_map is not None:
                scores = hooks.score_map.map_scores(scores)
            masked = fill_masked(scores, allowed, cdt)
        elif hooks.score_map is not None:  # a fresh tensor of full shape: fill it in place
            scores = hooks.score_map.map_scores(scores)
            masked = scores if allowed is None else scores.masked_fill_(~allowed, low)
        elif allowed is not None:  # fresh scores of full shape: hide what the mask hides in place
            masked = scores.masked_fill_(~allowed, low)
        else:
            masked = scores
        assert masked is not None
        if hooks.sinks is not None:
            probs = softmax_with_sinks(masked, hooks.sinks.sink_logits(cdt, q.device))
        else:
            probs = torch.softmax(masked, dim=-1)
        if dropout_p > 0.0:
            probs = F.dropout(probs, p=dropout_p)
        out = probs @ v
        if hooks.contextual is not None and hooks.value_term:
            value = hooks.contextual.value_term(probs, q_pos, k_pos)
            if value is not None:
                out = out + value.to(cdt)
    else:
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=fill_masked(extra, allowed, cdt),
            dropout_p=dropout_p,
            scale=scale,
            enable_gqa=k.shape[1] != heads,
        )
    if allowed is not None:
        out = out.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    return out.to(out_dtype)


def softmax_with_sinks(scores: Tensor, sinks: Tensor) -> Tensor:
    """``softmax([scores, s_h])`` over each row with the sink column dropped (gpt-oss).

    The sink is a key of logit ``s_h`` and no value: it takes its share of each row's
    probability (all of it in a row that sees no key) and gives nothing back.

    Args:
        scores: ``(batch, heads, rows, keys)``, masked pairs at the dtype's lowest value.
        sinks: ``(heads,)`` logits in ``scores``' dtype.
    """
    column = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]

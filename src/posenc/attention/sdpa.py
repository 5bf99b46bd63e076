"""The ``sdpa`` backend: :func:`torch.nn.functional.scaled_dot_product_attention`, the reference.

Without logit terms (NoPE, additive and rotary encodings) the mask takes SDPA's cheapest
form, so its flash kernel runs and nothing of size L×L is built:

=====================================  ==================================================
mask                                   form
=====================================  ==================================================
none                                   no mask
causal, ``q_len == k_len``             ``is_causal=True``
causal, one query (decoding)           no mask (the query sees every key)
key padding                            a ``(batch, 1, 1, k_len)`` additive mask (with
                                       causal order: the CPU flash kernel's ``is_causal``
                                       plus that mask, :mod:`posenc.attention.flash`)
anything else (documents, predicates,  query blocks with their ``(batch, 1, block, k)``
tensors, causal with ``1 < q_len <``   masks (:func:`posenc.attention.blocks.blocked`)
``k_len``)
=====================================  ==================================================

With a bias, a contextual term or a scores reader it is the reference every other backend
is tested against: the bias is materialized as ``(heads, q, k)`` once per forward (shared
by the layers that share the encoding) and the rows are computed by
:func:`~posenc.attention.rows.attend_rows`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention import flash
from posenc.attention.blocks import blocked
from posenc.attention.context import AttentionContext
from posenc.attention.rows import as_4d, attend_rows, compute_dtype
from posenc.encoding.resolve import Hooks

__all__ = ["padding_mask", "sdpa_attention", "shared_bias"]


def shared_bias(hooks: Hooks, context: AttentionContext, dtype: torch.dtype) -> Tensor:
    """The whole materialized bias of this forward, built once for every layer sharing it."""
    key = (id(hooks.encoding), "bias", dtype, context.q_pos.device)
    return context.cached(key, lambda: hooks.materialized_bias(context.q_pos, context.k_pos, dtype))


def _bias_only(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
) -> Tensor:
    """A pointwise bias: the bias with the mask folded in, built once per forward for every
    layer that shares the encoding, as SDPA's float mask (its flash kernel runs)."""
    cdt = compute_dtype(q.dtype)
    mask = context.mask

    def build() -> tuple[Tensor, Tensor | None]:
        allowed = mask.block(0, mask.q_len, 0, mask.k_len, heads=q.shape[1])
        bias = hooks.materialized_bias(context.q_pos, context.k_pos, cdt)
        if allowed is None:
            return as_4d(bias), None  # type: ignore[return-value]
        low = torch.finfo(cdt).min
        if torch.broadcast_shapes(bias.shape, allowed.shape) == bias.shape:
            bias = bias.masked_fill_(~allowed, low)  # fresh: fill in place
        else:  # a per-row mask (padding, documents) widens the bias to the batch
            bias = bias.masked_fill(~allowed, low)
        return as_4d(bias), ~allowed.any(dim=-1, keepdim=True)  # type: ignore[return-value]

    masked, empty = context.cached((id(hooks.encoding), "masked-bias", cdt, q.device), build)
    out = F.scaled_dot_product_attention(
        q.to(cdt),
        k.to(cdt),
        v.to(cdt),
        attn_mask=masked,
        dropout_p=dropout_p,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out.to(q.dtype)


def padding_mask(context: AttentionContext, dtype: torch.dtype) -> Tensor:
    """The key padding as an additive ``(batch, 1, 1, k_len)`` mask (0 / lowest value)."""
    padding = context.mask.key_padding
    assert padding is not None
    key = ("padding", dtype)
    low = torch.finfo(dtype).min
    return context.cached(
        key,
        lambda: (
            torch.zeros((), dtype=dtype, device=padding.device)
            .masked_fill(~padding, low)
            .view(padding.shape[0], 1, 1, -1)
        ),
    )


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
) -> Tensor:
    """Attention with SDPA; see the module docstring for the form each mask takes."""
    mask = context.mask
    if hooks.bias and not (hooks.contextual or hooks.scores or hooks.score_map or hooks.sinks):
        return _bias_only(q, k, v, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p)
    if hooks.logit_terms:
        bias = shared_bias(hooks, context, compute_dtype(q.dtype)) if hooks.bias else None
        if context.token_bias is not None:  # FoX: (batch, heads, q, k) from per-token states
            bias = context.token_bias.block(0, mask.q_len, mask.k_len, compute_dtype(q.dtype))
        allowed = mask.block(0, mask.q_len, 0, mask.k_len, heads=q.shape[1])
        return attend_rows(
            q,
            k,
            v,
            hooks=hooks,
            q_pos=context.q_pos,
            k_pos=context.k_pos,
            allowed=allowed,
            scale=scale,
            dropout_p=dropout_p,
            bias=bias,
            contiguous=(mask.causal_offset, 0) if context.index_positions else None,
            causal=mask.causal,
        )
    gqa = k.shape[1] != q.shape[1]
    square = mask.q_len == mask.k_len
    if mask.has_pairwise or (
        mask.causal and not square and mask.q_len > 1 and mask.key_padding is None
    ):
        return blocked(q, k, v, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p)
    if mask.key_padding is None:
        is_causal = mask.causal and square
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, scale=scale, is_causal=is_causal, enable_gqa=gqa
        )
    additive = padding_mask(context, q.dtype)
    if not mask.causal or mask.q_len == 1:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=additive, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
        )
    elif square and dropout_p == 0.0 and flash.available(q) and q.shape[-1] == v.shape[-1]:
        out = flash.causal_with_mask(q, k, v, additive, scale)
    else:
        return blocked(q, k, v, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p)
    empty = mask.empty_rows()
    return out if empty is None else out.masked_fill(empty, 0.0)

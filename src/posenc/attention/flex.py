"""The ``flex`` backend: FlexAttention with the encoding's ``score_mod`` and a block mask.

The ``score_mod`` is derived from the encoding's ``bias_at`` (the same method the
materialized bias comes from, so the two agree by construction): it looks up the query's
and key's positions by index and adds ``bias_at(head, q_pos, k_pos)``. The mask becomes a
``BlockMask`` from :meth:`AttentionMask.mask_mod`, built a band of query blocks at a time
(:mod:`posenc.attention.flex_mask`: no ``L×L`` mask, unlike ``create_block_mask``); a
causal-only block mask is cached per shape and device across forwards, any other one is
built once per forward.

Serves encodings without logit terms, pointwise biases, score maps (soft-capping, inside
the ``score_mod``) and sink logits (the output rescaled by ``σ(LSE − s_h)``, FlexAttention
returning each row's log-sum-exp; compiled on the CPU it returns none, so sinks there
need ``compile=False``). It cannot serve contextual
terms (Shaw, Transformer-XL read q and k per pair, and Shaw's value term needs the
probabilities) or scores readers (they need whole rows): those raise at construction.
On the CPU (torch 2.13) FlexAttention runs forward only; a call that needs gradients raises.
Compiled with ``torch.compile`` by default (the first call of a new shape compiles for
seconds); ``compile=False`` runs FlexAttention's eager reference, which materializes scores
(for tests).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.attention.flex_mask import block_mask_by_rows
from posenc.attention.mask import AttentionMask
from posenc.attention.rows import compute_dtype
from posenc.encoding.resolve import Hooks

__all__ = [
    "compiled_flex",
    "flex_attention_backend",
    "flex_available",
    "score_mod_of",
]

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def flex_available() -> bool:
    """True when this torch has FlexAttention."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def score_mod_of(hooks: Hooks, q_pos: Tensor, k_pos: Tensor) -> ScoreMod | None:
    """The encoding's bias and score map as a FlexAttention ``score_mod`` (None without
    either).

    ``map_scores(score + bias_at(head, q_pos[b, q_idx], k_pos[b, kv_idx], score.dtype))``;
    positions shared by the batch are indexed without ``b``.
    """
    if not (hooks.bias or hooks.score_map):
        return None
    bias_at = None if hooks.bias is None else hooks.bias.bias_at
    map_scores = None if hooks.score_map is None else hooks.score_map.map_scores

    def lookup(positions: Tensor, b: Tensor, index: Tensor) -> Tensor:
        return positions[b, index] if positions.dim() == 2 else positions[index]

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if bias_at is not None:
            q, k = lookup(q_pos, b, q_idx), lookup(k_pos, b, kv_idx)
            score = score + bias_at(h, q, k, score.dtype)
        return score if map_scores is None else map_scores(score)

    return score_mod


@functools.lru_cache(maxsize=32)
def _causal_block_mask(q_len: int, k_len: int, device: torch.device) -> Any:
    offset = k_len - q_len

    def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx + offset

    return block_mask_by_rows(causal, None, None, q_len, k_len, device)


def block_mask_of(mask: AttentionMask, context: AttentionContext) -> Any:
    """The ``BlockMask`` of ``mask`` (None when every pair is visible)."""
    if mask.is_trivial:
        return None
    if mask.key_padding is None and not mask.has_pairwise:
        return _causal_block_mask(mask.q_len, mask.k_len, mask.device)

    def build() -> Any:
        return block_mask_by_rows(
            mask.mask_mod(), mask.batch, None, mask.q_len, mask.k_len, mask.device
        )

    return context.cached(("flex-block-mask",), build)


@functools.lru_cache(maxsize=1)
def compiled_flex() -> Callable[..., Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    compiled: Callable[..., Tensor] = torch.compile(flex_attention, dynamic=False)
    return compiled


def flex_attention_backend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    compile: bool = True,
) -> Tensor:
    """Attention with FlexAttention; rows that see no key are zero (FlexAttention's rule)."""
    from torch.nn.attention.flex_attention import flex_attention

    needs_grad = torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad or _has_grad(hooks)
    )
    if q.device.type == "cpu" and needs_grad:
        raise ValueError(
            "backend 'flex' runs forward only on the CPU (FlexAttention has no CPU backward in "
            f"torch {torch.__version__}); use backend='chunked' or 'auto' to train on the CPU, "
            "or call under torch.no_grad()"
        )
    mask = context.mask
    if mask.k_len == 0 or mask.q_len == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    score_mod = score_mod_of(hooks, context.q_pos, context.k_pos)
    if context.token_bias is not None:  # FoX: its states by index (no bias_at alongside)
        then = None if hooks.score_map is None else hooks.score_map.map_scores  # soft-capped
        score_mod = context.token_bias.score_mod(then)
    block_mask = block_mask_of(mask, context)
    run: Callable[..., Tensor] = compiled_flex() if compile else flex_attention  # type: ignore[assignment]
    sinks = (
        None if hooks.sinks is None else hooks.sinks.sink_logits(compute_dtype(q.dtype), q.device)
    )
    if sinks is not None and compile and q.device.type == "cpu":
        raise ValueError(
            f"backend 'flex' cannot serve {hooks.name}'s sinks on the CPU: "
            "compiled FlexAttention there returns no log-sum-exp (torch "
            f"{torch.__version__}: return_lse is not supported on the CPU), which the sinks' "
            "correction needs; use backend 'sdpa', 'chunked' or 'auto' (or "
            "Backend('flex', compile=False), FlexAttention's eager reference)"
        )
    if not compile:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the eager reference warns that it is slow
            return _call(run, q, k, v, score_mod, block_mask, scale, sinks)
    return _call(run, q, k, v, score_mod, block_mask, scale, sinks)


def _call(
    run: Callable[..., Tensor],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score_mod: Any,
    block_mask: Any,
    scale: float,
    sinks: Tensor | None = None,
) -> Tensor:
    """FlexAttention; with ``sinks`` (``(heads,)`` logits) its output ``O`` over the
    keys is rescaled by the share the sink leaves them, ``σ(LSE − s_h)`` (a log-sum-exp
    correction: FlexAttention has no extra column, but returns each row's LSE)."""
    out = run(
        q,
        k,
        v,
        score_mod=score_mod,
        block_mask=block_mask,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
        return_lse=sinks is not None,
    )
    if sinks is None:
        return out
    out, lse = out  # lse: (batch, heads, q) float32, -inf in a row that sees no key
    keep = torch.sigmoid(lse - sinks.view(1, -1, 1))
    return (out * keep.unsqueeze(-1).to(out.dtype)).to(q.dtype)


def _has_grad(hooks: Hooks) -> bool:
    encoding = hooks.encoding
    return encoding is not None and any(p.requires_grad for p in encoding.parameters())

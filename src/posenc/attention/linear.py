"""Linear attention with rotary encodings on the feature-mapped q and k (RoFormer §3.4.3).

Linear attention (Katharopoulos et al. 2020, https://arxiv.org/abs/2006.16236) replaces the
softmax kernel ``exp(qᵀk)`` by a product of non-negative features ``φ(q)ᵀφ(k)``, so the sum
over keys factors and costs ``O(L · d²)`` instead of ``O(L² · d)``. RoFormer (Su et al.
2021, https://arxiv.org/abs/2104.09864, eq. 19) keeps the normalisation un-rotated, to stay
positive, and rotates only the numerator's features::

    out_i = Σ_j (R_i φ(q_i))ᵀ (R_j φ(k_j)) v_j  /  Σ_j φ(q_i)ᵀ φ(k_j)

with ``j ≤ i`` (causal) or all ``j`` (bidirectional). Because ``R_i`` is orthogonal and
relative (``R_iᵀ R_j = R_{j−i}``), the numerator's weights depend on ``i − j`` as in RoPE's
softmax form; they may be negative, the denominator is not.

φ is ``elu(x) + 1`` (Katharopoulos et al.; RoFormer's Performer experiment used FAVOR+'s
random features, which are not reproduced here) or ``relu``. No logit scale applies: the
denominator normalises. Causal attention runs in blocks of rows: each block's own pairs are
written out (``block × block``), earlier keys enter through the running sums
``S = Σ_j R_jφ(k_j) v_jᵀ`` and ``z = Σ_j φ(k_j)``; no tensor grows as ``L²``.

Masks: causal order and key padding (a padded key adds nothing); packed documents, user
masks and predicates need pairs and are refused. A row that sees no key gives zeros. With a
KV cache the feature-mapped keys are stored unrotated and rotated when read, so the result
equals the full forward (as for every posenc cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.backends import FEATURE_MAPS
from posenc.attention.context import AttentionContext
from posenc.attention.rows import compute_dtype, expand_heads
from posenc.attention.segmented import rotate_keys_on_read
from posenc.encoding.resolve import Hooks

if TYPE_CHECKING:
    from posenc.attention.cache import KVCache

__all__ = [
    "feature_map",
    "linear_attention",
    "linear_self_attention",
]

#: Query rows per block of the causal form (its pairs are written out per block).
DEFAULT_BLOCK = 64


def feature_map(x: Tensor, kind: str) -> Tensor:
    """φ(x) elementwise: ``elu(x) + 1`` for ``"elu"``, ``relu(x)`` for ``"relu"``."""
    if kind == "elu":
        return F.elu(x) + 1.0
    if kind == "relu":
        return F.relu(x)
    raise ValueError(
        f"feature_map must be one of {', '.join(map(repr, FEATURE_MAPS))}; got {kind!r}"
    )


def linear_self_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    cache: KVCache | None,
    owner: object,
    kind: str,
    block_size: int | None,
) -> Tensor:
    """One attention layer's linear attention: φ, the cache, rotation, the sums.

    Args:
        q: ``(batch, heads, q_len, head_dim)`` projections; k, v ``(batch, kv_heads, seq,
            head_dim)`` of the new tokens.
        hooks, context: the layer's encoding hooks and this forward's context.
        cache: a :class:`~posenc.attention.KVCache` (its keys are stored feature-mapped and
            unrotated), or None.
        owner: the attention layer (binds the cache).
        kind: the feature map (:data:`FEATURE_MAPS`).
        block_size: causal query rows per block (None: :data:`DEFAULT_BLOCK`).

    Returns:
        ``(batch, heads, q_len, head_dim)``.
    """
    mask = context.mask
    if mask.has_pairwise:
        raise ValueError(
            "document_ids / attn_mask: backend 'linear' serves causal order and key padding "
            "only (packed documents and user masks need the (query, key) pairs); use a "
            "softmax backend"
        )
    fq, fk = feature_map(q, kind), feature_map(k, kind)
    if cache is not None:
        if cache.bind(owner, "unrotated", needed=False):
            raise ValueError(
                "cache: backend 'linear' stores feature-mapped keys unrotated (its "
                "denominator reads them un-rotated); use KVCache() or KVCache(keys='unrotated')"
            )
        fk, v = cache.store(fk, v, context)
    if hooks.rotary:
        rq, rk = rotate_keys_on_read(fq, fk, hooks=hooks, context=context, cache=cache)
    else:
        rq, rk = fq, fk
    return linear_attention(
        rq,
        rk,
        fq,
        fk,
        v,
        causal=mask.causal,
        key_padding=mask.key_padding,
        block_size=block_size,
    )


def linear_attention(
    rq: Tensor,
    rk: Tensor,
    fq: Tensor,
    fk: Tensor,
    v: Tensor,
    *,
    causal: bool,
    key_padding: Tensor | None = None,
    block_size: int | None = None,
) -> Tensor:
    """``Σ_j (rq_i · rk_j) v_j / Σ_j (fq_i · fk_j)`` over the keys query i sees.

    Args:
        rq, fq: ``(batch, heads, q_len, d)`` rotated and un-rotated query features (the same
            tensor without an encoding; ``rq`` may be wider than ``fq``).
        rk, fk: ``(batch, kv_heads, k_len, ·)`` likewise for the keys; ``kv_heads`` divides
            ``heads`` (grouped-query attention).
        v: ``(batch, kv_heads, k_len, dv)``.
        causal: query i (the last ``q_len`` of the keys, bottom-right aligned) sees keys
            ``≤ i``; False: every key.
        key_padding: ``(batch, k_len)`` bool, True for real keys, or None.
        block_size: causal query rows per block.

    Returns:
        ``(batch, heads, q_len, dv)`` in ``v``'s dtype, computed in float32 at least; zero
        rows where no key is seen (or the denominator is zero, possible with ``relu``).
    """
    out_dtype = v.dtype
    cdt = compute_dtype(v.dtype)
    rq, rk, fq, fk, v = (t.to(cdt) for t in (rq, rk, fq, fk, v))
    heads = rq.shape[1]
    rk, fk, v = (expand_heads(t, heads) for t in (rk, fk, v))
    if key_padding is not None:
        real = key_padding[:, None, :, None].to(cdt)
        rk, fk, v = rk * real, fk * real, v * real
    if not causal:
        num = rq @ (rk.transpose(-1, -2) @ v)
        den = fq @ fk.sum(dim=-2, keepdim=True).transpose(-1, -2)
        return _divide(num, den).to(out_dtype)
    q_len, k_len = rq.shape[-2], rk.shape[-2]
    if q_len == 0:
        return v.new_zeros(*rq.shape[:-1], v.shape[-1]).to(out_dtype)
    offset = k_len - q_len  # keys before the first query: all of them visible to every query
    state = rk[..., :offset, :].transpose(-1, -2) @ v[..., :offset, :]  # (b, h, d, dv)
    total = fk[..., :offset, :].sum(dim=-2, keepdim=True)  # (b, h, 1, d)
    rows = min(q_len, DEFAULT_BLOCK if block_size is None else block_size)
    causal_block = torch.ones(rows, rows, dtype=torch.bool, device=rq.device).tril()
    parts = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        keys = slice(offset + start, offset + stop)
        own = causal_block[: stop - start, : stop - start]
        block_rq, block_fq = rq[..., start:stop, :], fq[..., start:stop, :]
        block_rk, block_fk, block_v = rk[..., keys, :], fk[..., keys, :], v[..., keys, :]
        pairs = (block_rq @ block_rk.transpose(-1, -2)).masked_fill(~own, 0.0)
        weights = (block_fq @ block_fk.transpose(-1, -2)).masked_fill(~own, 0.0)
        num = block_rq @ state + pairs @ block_v
        den = block_fq @ total.transpose(-1, -2) + weights.sum(dim=-1, keepdim=True)
        parts.append(_divide(num, den))
        state = state + block_rk.transpose(-1, -2) @ block_v
        total = total + block_fk.sum(dim=-2, keepdim=True)
    return torch.cat(parts, dim=-2).to(out_dtype)


def _divide(num: Tensor, den: Tensor) -> Tensor:
    """``num / den``, zero where ``den`` is zero (a row that sees no key)."""
    empty = den == 0
    return torch.where(empty, 0.0, num / den.masked_fill(empty, 1.0))

"""Multi-head attention that takes any positional encoding as one object.

The encoding's ``family`` decides where it acts (see :mod:`posenc.base`):

* rotary: q and k are rotated by their positions before the dot product;
* bias: ``bias(q_pos, k_pos)`` is materialized and added to the scaled logits;
* contextual: ``logits(q, k, q_pos, k_pos, scale)`` is added, and ``values(probs, ...)``
  is added to the output when the method has a value term (Shaw);
* additive and none: nothing happens here (the model adds additive encodings to the
  token embeddings).

The reference backend materializes the bias and calls
:func:`torch.nn.functional.scaled_dot_product_attention`; a contextual encoding with a value
term needs the probabilities, so that path computes the softmax explicitly.

Example::

    >>> from posenc.bias import AlibiBias
    >>> attn = Attention(dim=64, num_heads=4, pos=AlibiBias(num_heads=4))
    >>> attn(torch.randn(2, 10, 64)).shape
    torch.Size([2, 10, 64])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_positive_int
from posenc.base import ContextualEncoding, PositionalEncoding
from posenc.positions import check_positions, positions_from_length

__all__ = ["Attention", "KVCache", "attend", "causal_mask"]


@dataclass
class KVCache:
    """Keys, values and key positions of one attention layer, grown while decoding.

    Keys are stored after rotation, together with their positions, so that rotary and bias
    positions continue correctly for the next tokens. ``key_padding_mask`` (True = real
    token) is stored when any call supplied one.
    """

    k: Tensor | None = None
    v: Tensor | None = None
    positions: Tensor | None = None
    key_padding_mask: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached key positions."""
        return 0 if self.k is None else self.k.shape[-2]

    def append(
        self, k: Tensor, v: Tensor, positions: Tensor, key_padding_mask: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Add new keys, values, positions and mask; return the whole cached set."""
        batch, new = k.shape[0], k.shape[-2]
        if self.k is None or self.v is None or self.positions is None:
            self.k, self.v, self.positions = k, v, positions
            self.key_padding_mask = key_padding_mask
            return k, v, positions, key_padding_mask
        self.k = torch.cat([self.k, k], dim=-2)
        self.v = torch.cat([self.v, v], dim=-2)
        old_pos, new_pos = self.positions, positions
        if old_pos.dim() != new_pos.dim():
            old_pos = old_pos.expand(batch, -1) if old_pos.dim() == 1 else old_pos
            new_pos = new_pos.expand(batch, -1) if new_pos.dim() == 1 else new_pos
        self.positions = torch.cat([old_pos, new_pos], dim=-1)
        if key_padding_mask is not None or self.key_padding_mask is not None:
            old_mask = self.key_padding_mask
            if old_mask is None:
                old_mask = torch.ones(batch, self.length - new, dtype=torch.bool, device=k.device)
            if key_padding_mask is None:
                key_padding_mask = torch.ones(batch, new, dtype=torch.bool, device=k.device)
            self.key_padding_mask = torch.cat([old_mask, key_padding_mask.bool()], dim=-1)
        return self.k, self.v, self.positions, self.key_padding_mask


def causal_mask(q_len: int, k_len: int, device: torch.device | None = None) -> Tensor:
    """Boolean ``(q_len, k_len)`` mask, True where key j may be seen by query i.

    Queries are the last ``q_len`` of the ``k_len`` tokens (bottom-right aligned), which is
    what decoding with a KV cache needs.
    """
    q_index = torch.arange(k_len - q_len, k_len, device=device)
    return torch.arange(k_len, device=device) <= q_index[:, None]


def _combine_masks(
    q_len: int,
    k_len: int,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    attn_mask: Tensor | None,
    device: torch.device,
) -> Tensor | None:
    """One boolean mask broadcastable to ``(batch, heads, q_len, k_len)``, or None."""
    allowed: Tensor | None = causal_mask(q_len, k_len, device) if causal else None
    if key_padding_mask is not None:
        kpm = key_padding_mask.bool()[:, None, None, :]
        allowed = kpm if allowed is None else allowed & kpm
    if attn_mask is not None:
        extra = attn_mask.bool()
        extra = extra[:, None] if extra.dim() == 3 else extra
        allowed = extra if allowed is None else allowed & extra
    return allowed


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    pos: PositionalEncoding | None,
    q_pos: Tensor,
    k_pos: Tensor,
    causal: bool,
    key_padding_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Scaled dot-product attention with a positional encoding's logit terms.

    q, k, v are ``(batch, heads, seq, head_dim)``; k and v may have fewer heads than q
    (grouped-query attention; q heads must be a multiple). Rotary encodings must already
    have been applied to q and k (:class:`Attention` does it before caching keys).

    Args:
        pos: the encoding; bias and contextual families add their terms here.
        q_pos, k_pos: positions ``(seq,)`` or ``(batch, seq)`` of queries and keys.
        causal: mask keys after each query (queries are the last ``q_len`` keys).
        key_padding_mask: ``(batch, k_len)``, True for real tokens.
        attn_mask: extra boolean mask ``(q_len, k_len)`` or ``(batch, q_len, k_len)``, True
            where attention is allowed (e.g. :func:`posenc.positions.document_mask`).
        scale: logit scale, default ``1/sqrt(head_dim)``.

    Returns:
        ``(batch, q_heads, q_len, head_dim)``. Queries that may see no key at all (padding
        rows) get zeros instead of NaN.
    """
    batch, q_heads, q_len, head_dim = q.shape
    kv_heads, k_len = k.shape[1], k.shape[-2]
    if q_heads % kv_heads != 0:
        raise ValueError(
            f"number of query heads ({q_heads}) must be a multiple of key/value heads ({kv_heads})"
        )
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    allowed = _combine_masks(
        q_len,
        k_len,
        causal=causal,
        key_padding_mask=key_padding_mask,
        attn_mask=attn_mask,
        device=q.device,
    )
    empty_rows = None
    if allowed is not None:
        # A query with no visible key would give NaN; let it see everything, zero it later.
        allowed = allowed.expand(batch, q_heads, q_len, k_len)
        empty_rows = ~allowed.any(-1, keepdim=True)
        allowed = allowed | empty_rows

    extra: Tensor | None = None
    if pos is not None and pos.family == "bias":
        extra = pos.bias(q_pos, k_pos)  # type: ignore[operator]
    repeat = q_heads // kv_heads
    if isinstance(pos, ContextualEncoding):
        # Contextual terms read every query head's keys: expand grouped key heads.
        k = k.repeat_interleave(repeat, dim=1) if repeat > 1 else k
        v = v.repeat_interleave(repeat, dim=1) if repeat > 1 else v
        kv_heads = q_heads
        extra = pos.logits(q, k, q_pos, k_pos, scale)

    if isinstance(pos, ContextualEncoding) and pos.uses_values:
        logits = torch.matmul(q, k.transpose(-1, -2)) * scale
        if extra is not None:
            logits = logits + extra.to(logits.dtype)
        if allowed is not None:
            logits = logits.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(logits.float(), dim=-1).to(q.dtype)
        if dropout_p > 0.0:
            probs = F.dropout(probs, p=dropout_p)
        out = torch.matmul(probs, v)
        value_term = pos.values(probs, q_pos, k_pos)
        if value_term is not None:
            out = out + value_term.to(out.dtype)
    else:
        mask: Tensor | None
        if extra is None:
            mask = allowed
        else:
            mask = extra.to(q.dtype)
            if mask.dim() == 3:
                mask = mask.unsqueeze(0)
            if allowed is not None:
                mask = mask.masked_fill(~allowed, float("-inf"))
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout_p,
            scale=scale,
            enable_gqa=kv_heads != q_heads,
        )
    if empty_rows is not None:
        out = out.masked_fill(empty_rows, 0.0)
    return out


class Attention(nn.Module):
    """Multi-head (or grouped-query) self-attention with a pluggable positional encoding.

    Args:
        dim: model width.
        num_heads: query heads.
        num_kv_heads: key/value heads (grouped-query attention); must divide ``num_heads``.
            Default ``num_heads``.
        head_dim: per-head width, default ``dim // num_heads``.
        pos: the positional encoding object (``None`` or :class:`posenc.base.NoPE` for
            none). Additive encodings are ignored here; the model adds them.
        causal: decoder (True) or bidirectional encoder (False) attention.
        dropout: attention-probability dropout in training.

    Shape:
        x ``(batch, seq, dim)`` → ``(batch, seq, dim)``; positions ``(seq,)`` or
        ``(batch, seq)``, default ``cache.length + arange(seq)``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        pos: PositionalEncoding | None = None,
        causal: bool = True,
        dropout: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("num_heads", num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_positive_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
            )
        if head_dim is None:
            if dim % num_heads != 0:
                raise ValueError(
                    f"dim ({dim}) must be divisible by num_heads ({num_heads}), "
                    "or give head_dim explicitly"
                )
            head_dim = dim // num_heads
        check_positive_int("head_dim", head_dim)
        if pos is not None and not isinstance(pos, PositionalEncoding):
            raise ValueError(
                f"pos must be a posenc PositionalEncoding or None, got {type(pos).__name__}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        heads_of_pos = getattr(pos, "num_heads", None)
        if pos is not None and pos.family == "bias" and heads_of_pos != num_heads:
            raise ValueError(
                f"the bias encoding has num_heads={heads_of_pos} but attention has "
                f"num_heads={num_heads}; they must match"
            )
        self.dim, self.num_heads, self.num_kv_heads = dim, num_heads, num_kv_heads
        self.head_dim, self.causal, self.dropout = head_dim, causal, dropout
        self.pos = pos
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(dim, num_heads * head_dim, bias=False, **factory)
        self.k_proj = nn.Linear(dim, num_kv_heads * head_dim, bias=False, **factory)
        self.v_proj = nn.Linear(dim, num_kv_heads * head_dim, bias=False, **factory)
        self.out_proj = nn.Linear(num_heads * head_dim, dim, bias=False, **factory)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (batch, seq, {self.dim}); got {tuple(x.shape)}")
        batch, seq, _ = x.shape
        if positions is None:
            offset = 0 if cache is None else _next_position(cache)
            positions = positions_from_length(seq, offset, device=x.device)
        check_positions(positions, "positions")
        if positions.shape[-1] != seq or (positions.dim() == 2 and positions.shape[0] != batch):
            raise ValueError(
                f"positions must have shape ({seq},) or ({batch}, {seq}); "
                f"got {tuple(positions.shape)}"
            )
        if key_padding_mask is not None and tuple(key_padding_mask.shape) != (batch, seq):
            raise ValueError(
                f"key_padding_mask must have shape ({batch}, {seq}) (the new tokens); "
                f"got {tuple(key_padding_mask.shape)}"
            )
        q = self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.pos is not None and self.pos.family == "rotary":
            q, k = self.pos(q, k, positions, positions)
        k_pos, kpm = positions, key_padding_mask
        if cache is not None:
            k, v, k_pos, kpm = cache.append(k, v, positions, key_padding_mask)
        out = attend(
            q,
            k,
            v,
            pos=self.pos,
            q_pos=positions,
            k_pos=k_pos,
            causal=self.causal,
            key_padding_mask=kpm,
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out_proj(out.transpose(1, 2).reshape(batch, seq, -1))


def _next_position(cache: KVCache) -> int:
    """Default position of the next token: the number of cached keys.

    Callers with their own positions (left padding, packed rows) pass ``positions``
    explicitly; this default never reads tensor values, so it needs no host sync.
    """
    return cache.length

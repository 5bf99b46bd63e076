"""Per-forward state: positions, the mask and the tables every layer shares, validated once.

A model builds one :class:`AttentionContext` per forward (:func:`build_context`) and hands
it to every layer; a standalone :class:`~posenc.attention.Attention` builds its own. All
input checks happen here, at the boundary; the per-layer path reads the context and does
no value checks (each would be a host sync on a GPU). Tables an encoding shared by all
layers needs (RoPE's cos/sin, a materialized bias, a flex block mask) are built on first
use and kept in :attr:`AttentionContext.memo` for the rest of the forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import Tensor

from posenc._validate import validating_values
from posenc.attention.cache import KVCache
from posenc.attention.mask import AttentionMask, MaskMod
from posenc.encoding.protocols import TokenStateEncoding
from posenc.encoding.resolve import Hooks
from posenc.positions import (
    check_device,
    check_positions,
    concat_positions,
    next_positions,
    position_batch,
)
from posenc.token_state.token_bias import TokenBias

__all__ = [
    "AttentionContext",
    "build_context",
    "check_cache",
    "check_dense_mask",
    "check_document_ids",
    "check_key_padding_mask",
    "mask_predicate",
    "with_chunks",
    "with_token_bias",
]

T = TypeVar("T")


@dataclass(eq=False)
class AttentionContext:
    """What every layer of one forward shares.

    Attributes:
        q_pos: positions of the new tokens (the queries).
        k_pos: positions of every key: the cached ones, then the new ones.
        mask: the :class:`AttentionMask` of this forward.
        index_positions: True when key ``j`` sits at position ``j`` and the queries are the
            last keys (positions made by default from an empty or index-positioned cache).
            Known from how positions were made, never by reading them.
        memo: per-forward tables, keyed by whatever identifies them.
        token_bias: one layer's per-token states (a token-state encoding, FoX), in that
            layer's view of the context (:func:`with_token_bias`).
    """

    q_pos: Tensor
    k_pos: Tensor
    mask: AttentionMask
    index_positions: bool
    memo: dict[Hashable, Any] = field(default_factory=dict)
    token_bias: TokenBias | None = None

    def cached(self, key: Hashable, build: Callable[[], T]) -> T:
        """``build()`` once per forward under ``key``; later calls return the same object."""
        if key not in self.memo:
            self.memo[key] = build()
        value: T = self.memo[key]
        return value


def check_key_padding_mask(
    mask: object,
    batch: int,
    seq: int,
    name: str = "key_padding_mask",
    *,
    device: torch.device | None = None,
) -> Tensor:
    """Validate a key padding mask (True or 1 = real token) and return it as bool.

    Accepts bool, or integer / floating tensors holding only 0 and 1, on ``device`` when it
    is given. A floating mask in the additive convention (0 keep, -inf pad) would be silently
    inverted by a cast, so it raises.
    """
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a tensor ({batch}, {seq}), got {type(mask).__name__}")
    if tuple(mask.shape) != (batch, seq):
        raise ValueError(
            f"{name} must have shape (batch, seq) = ({batch}, {seq}) (one entry per new token); "
            f"got {tuple(mask.shape)}"
        )
    check_device(name, mask, device)
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex():
        raise ValueError(f"{name} must be bool or 0/1, got {mask.dtype}")
    if validating_values() and mask.numel() > 0 and not bool(((mask == 0) | (mask == 1)).all()):
        hint = ""
        if mask.is_floating_point() and bool(torch.isinf(mask).any()):
            hint = (
                " It looks like an additive mask (0 keep, -inf pad); posenc takes a boolean "
                "key_padding_mask, True (or 1) for real tokens: pass `mask == 0`."
            )
        raise ValueError(
            f"{name} must be bool or hold only 0 and 1 (True/1 = real token, False/0 = "
            f"padding); got other values.{hint}"
        )
    return mask != 0


def check_document_ids(
    ids: object, batch: int, seq: int, *, device: torch.device | None = None
) -> Tensor:
    """Validate document ids ``(seq,)`` or ``(batch, seq)`` (integers, on ``device`` when it
    is given); errors name them."""
    if not isinstance(ids, Tensor) or ids.is_floating_point() or ids.dtype == torch.bool:
        got = ids.dtype if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(
            f"document_ids must be an integer tensor (seq,) or (batch, seq); got {got}"
        )
    if (
        ids.dim() not in (1, 2)
        or ids.shape[-1] != seq
        or (ids.dim() == 2 and ids.shape[0] != batch)
    ):
        raise ValueError(
            f"document_ids must have shape ({seq},) or ({batch}, {seq}) (batch {batch}, one "
            f"id per token); got {tuple(ids.shape)}"
        )
    check_device("document_ids", ids, device)
    return ids


def check_dense_mask(
    mask: Tensor, batch: int, q_len: int, k_len: int, *, device: torch.device | None = None
) -> Tensor:
    """Validate a user's boolean ``attn_mask`` ``(q, k)`` or ``(batch, q, k)`` (on ``device``
    when it is given)."""
    if mask.dtype != torch.bool:
        raise ValueError(
            f"attn_mask must be a bool tensor (True = may attend) or a mask_mod callable; got "
            f"{mask.dtype} (add biases through an encoding instead)"
        )
    ok = mask.dim() == 2 or (mask.dim() == 3 and mask.shape[0] == batch)
    if not ok or tuple(mask.shape[-2:]) != (q_len, k_len):
        raise ValueError(
            f"attn_mask must have shape ({q_len}, {k_len}) or ({batch}, {q_len}, {k_len}) "
            f"(queries, all keys); got {tuple(mask.shape)}"
        )
    check_device("attn_mask", mask, device)
    return mask


def mask_predicate(
    attn_mask: Tensor | MaskMod | None, batch: int, q_len: int, k_len: int, device: torch.device
) -> tuple[Tensor | None, MaskMod | None]:
    """Split a user ``attn_mask`` into ``(dense, predicate)``, validated."""
    if attn_mask is None:
        return None, None
    if isinstance(attn_mask, Tensor):
        return check_dense_mask(attn_mask, batch, q_len, k_len, device=device), None
    if not callable(attn_mask):
        raise ValueError(
            "attn_mask must be a bool tensor or a mask_mod callable, "
            f"got {type(attn_mask).__name__}"
        )
    return None, attn_mask


def check_cache(cache: KVCache, *, batch: int, num_axes: int, device: torch.device) -> None:
    """Raise ``ValueError`` naming ``cache`` unless a non-empty cache continues this forward:
    its batch, device and the number of position axes of its keys' positions."""
    assert cache.k is not None and cache.positions is not None
    if cache.k.shape[0] != batch:
        raise ValueError(
            f"cache holds batch {cache.k.shape[0]} but x has batch {batch}; give each "
            "sequence batch its own cache"
        )
    if cache.k.device != device:
        raise ValueError(
            f"cache holds keys on {cache.k.device} but this forward runs on {device}; start a "
            "new cache there"
        )
    stored = cache.positions
    fits = (
        stored.dim() in (1, 2)
        if num_axes == 1
        else stored.dim() in (2, 3) and stored.shape[0] == num_axes
    )
    if not fits:
        axes = "one position axis" if num_axes == 1 else f"{num_axes} position axes"
        raise ValueError(
            f"cache holds positions of shape {tuple(stored.shape)}, written by a layer whose "
            f"encoding reads another number of position axes than this one ({axes}); give "
            "each layer its own cache"
        )


def build_context(
    *,
    batch: int,
    seq: int,
    device: torch.device,
    causal: bool,
    hooks: Hooks,
    positions: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    document_ids: Tensor | None = None,
    attn_mask: Tensor | MaskMod | None = None,
    cache: KVCache | None = None,
    chunk_size: int | None = None,
) -> AttentionContext:
    """Validate one forward's inputs and build its :class:`AttentionContext`.

    Args:
        batch, seq: of the new tokens.
        device: where attention runs.
        causal: decoder (True) or encoder (False) attention.
        hooks: the encoding's hooks (its ``num_axes`` and its own position checks).
        positions: of the new tokens; default: continue the cache (``max + 1``) or
            ``arange(seq)`` on every axis.
        key_padding_mask: ``(batch, seq)`` for the new tokens, True/1 = real token.
        document_ids: ``(seq,)`` or ``(batch, seq)`` document id of each new token.
        attn_mask: a bool tensor ``(seq, k_len)`` / ``(batch, seq, k_len)`` over all keys, or
            a FlexAttention-style ``mask_mod(b, h, q_idx, kv_idx)``.
        cache: the KV cache the keys continue (its stored positions, padding and ids).
        chunk_size: chunked local attention (:func:`with_chunks`), or None.

    Raises:
        ValueError: naming the argument, for every malformed input.
    """
    num_axes = hooks.num_axes
    device = torch.device(device)
    if cache is not None and not isinstance(cache, KVCache):
        raise ValueError(
            f"cache must be a posenc KVCache (one per layer: model.new_cache()), got "
            f"{type(cache).__name__}"
        )
    cached = cache is not None and cache.length > 0
    if cached:
        assert cache is not None
        check_cache(cache, batch=batch, num_axes=num_axes, device=device)
    old_pos = cache.positions if cached and cache is not None else None
    if positions is None:
        positions = next_positions(old_pos, seq, num_axes=num_axes, device=device)
        index_positions = cache is None or cache.index_positions
    else:
        check_positions(positions, "positions", num_axes=num_axes, device=device)
        index_positions = False
    rows = position_batch(positions, num_axes)
    if positions.shape[-1] != seq or rows not in (None, batch):
        want = (
            f"({seq},) or ({batch}, {seq})"
            if num_axes == 1
            else f"({num_axes}, {seq}) or ({num_axes}, {batch}, {seq})"
        )
        raise ValueError(
            f"positions must have shape {want} (batch {batch}, seq {seq}); got "
            f"{tuple(positions.shape)}"
        )
    real = (
        None
        if key_padding_mask is None
        else check_key_padding_mask(key_padding_mask, batch, seq, device=device)
    )
    if hooks.position_transform is not None:  # randomized: drawn before anything reads them
        transform = hooks.position_transform
        # the real tokens too: CAPE's mean-normalization must not read padding
        positions = transform.transform_positions(
            positions, batch=batch, continuing=cached, real=real
        )
        index_positions = index_positions and not transform.randomizing
    if validating_values():
        hooks.validate_positions(positions, "positions")
    k_pos = positions if old_pos is None else concat_positions(old_pos, positions, num_axes)
    old_len = cache.length if cached and cache is not None else 0

    held = cache if cached else None
    padding = _keys_padding(real, held, batch, seq, old_len, device)
    q_docs, k_docs = _keys_documents(document_ids, held, batch, seq, device)

    k_len = old_len + seq
    dense, predicate = mask_predicate(attn_mask, batch, seq, k_len, device)
    mask = AttentionMask(
        batch=batch,
        q_len=seq,
        k_len=k_len,
        device=device,
        causal=causal,
        key_padding=padding,
        q_documents=q_docs,
        k_documents=k_docs,
        predicate=predicate,
        dense=dense,
    )
    context = AttentionContext(positions, k_pos, mask, index_positions)
    if chunk_size is not None:
        check_chunk_cache(chunk_size, cache)
        return with_chunks(context, chunk_size)
    return context


def _keys_padding(
    padding: Tensor | None,
    cache: KVCache | None,
    batch: int,
    seq: int,
    old_len: int,
    device: torch.device,
) -> Tensor | None:
    """The key padding of every key: the cache's (real where it kept none), then the new
    tokens' (``padding``, checked bool; real where None); None when neither has any."""
    old_padding = None if cache is None else cache.key_padding_mask
    if padding is None and old_padding is None:
        return None
    ones = torch.ones(batch, 0, dtype=torch.bool, device=device)
    old = old_padding if old_padding is not None else ones.new_ones(batch, old_len)
    new = padding if padding is not None else ones.new_ones(batch, seq)
    return torch.cat([old, new], dim=-1)


def _keys_documents(
    document_ids: Tensor | None,
    cache: KVCache | None,
    batch: int,
    seq: int,
    device: torch.device,
) -> tuple[Tensor | None, Tensor | None]:
    """``(q_docs, k_docs)``: the new tokens' document ids and every key's (the cache's, then
    the new ones); given with every call once the cache holds them, or never."""
    old_docs = None if cache is None else cache.document_ids
    if document_ids is None:
        if old_docs is not None:
            raise ValueError("document_ids must be given with every call once the cache holds them")
        return None, None
    q_docs = check_document_ids(document_ids, batch, seq, device=device)
    if cache is not None and old_docs is None:
        raise ValueError(
            "document_ids were not given for the tokens already in the cache; give them "
            "from the cache's first call on"
        )
    return q_docs, q_docs if old_docs is None else concat_positions(old_docs, q_docs)


def check_chunk_cache(chunk_size: int, cache: KVCache | None) -> None:
    """Chunks count key indices from the sequence's start: a rolling cache that dropped keys
    (a windowed segment method) has lost that count, so it raises ``ValueError``."""
    if cache is not None and cache.evicted:
        raise ValueError(
            f"chunk_size={chunk_size}: the cache dropped {cache.evicted} keys (a rolling cache), "
            "so key indices no longer count from the sequence's start; make it with "
            "KVCache(evict=False)"
        )


def with_chunks(context: AttentionContext, chunk_size: int) -> AttentionContext:
    """The view of ``context`` whose mask adds chunked local attention of ``chunk_size``.

    Llama-4's ``attention_chunk_size`` (HF ``create_chunked_causal_mask``, vLLM
    ``ChunkedLocalAttention``): a query sees only keys of its own chunk, chunk ``⌊(j -
    s_b) / C⌋`` of key index ``j``, ``s_b`` the leading padding of row ``b`` (HF's
    ``left_padding_tokens``). The view is built once per forward and chunk size (layers with
    the same ``C`` share it) and has its own memo, so no table built for the unchunked mask
    (a flex block mask, a masked bias) is read for the chunked one. A context already chunked
    by another size raises ``ValueError`` (one mask holds one chunk size).
    """
    if context.mask.chunk_size not in (None, chunk_size):
        raise ValueError(
            f"chunk_size={chunk_size}: the context is already chunked by "
            f"{context.mask.chunk_size} (build_context(chunk_size=...)); build it without "
            "chunk_size and let each layer add its own"
        )

    def build() -> AttentionContext:
        padding = context.mask.key_padding
        start = None
        if padding is not None:  # leading padding: HF's (attention_mask.cumsum(-1) == 0).sum(-1)
            start = (padding.to(torch.int64).cumsum(dim=-1) == 0).sum(dim=-1)
        mask = dataclasses.replace(context.mask, chunk_size=chunk_size, chunk_start=start)
        return dataclasses.replace(context, mask=mask, memo={})

    return context.cached(("chunked-local", chunk_size), build)


def with_token_bias(
    context: AttentionContext, encoding: TokenStateEncoding, x: Tensor, cache: KVCache | None
) -> AttentionContext:
    """A view of ``context`` holding this layer's :class:`TokenBias` (the same memo).

    ``x`` is the layer's input ``(batch, seq, dim)``; the new states continue the state of
    the cache's last key and are appended to the cache.
    """
    seq = x.shape[1]
    previous = cache.token_states[..., -1:] if cache is not None and cache.length else None
    padding = context.mask.key_padding
    real = None if padding is None else padding[:, padding.shape[1] - seq :]
    state = encoding.token_state(x, previous, real)
    every = state if cache is None else cache.store_states(state)
    return dataclasses.replace(context, token_bias=TokenBias(encoding, state, every))

"""Sliding-window attention: a query sees only the ``W`` keys ending at its own.

A causal query at key index ``i`` sees keys ``j`` with ``i - W < j ≤ i`` (``W`` keys, its own
included); a bidirectional one keys with ``|i - j| < W``. Indices count every key of the
sequence, its left padding and a KV cache's keys included, as HF's
``sliding_window_overlay`` (``kv_idx > q_idx - sliding_window``) counts cache positions.
Mistral (https://arxiv.org/abs/2310.06825), Gemma 2/3, Cohere Command A's RNoPE-SWA layers
(https://arxiv.org/abs/2501.18795) and SWAN-GPT (https://arxiv.org/abs/2504.08719) use it.

The window is a mask piece (a :data:`~posenc.attention.MaskMod` predicate added to the
context's mask), so every softmax backend serves it and a KV cache that keeps every key stays
exact; the ``linear`` backend has no pairs to mask and refuses it. When the window is the
whole mask beside causal order and the encoding adds nothing to the logits (NoPE, rotary),
:func:`banded_attention` runs blocks of queries over only the keys their windows reach:
``O(L · W)`` work in place of ``O(L²)``.

Example::

    >>> from posenc.attention import build_context
    >>> from posenc.encoding.resolve import hooks_of
    >>> context = build_context(batch=1, seq=5, device=torch.device("cpu"), causal=True,
    ...                         hooks=hooks_of(None))
    >>> with_window(context, 2).mask.block(0, 5, 0, 5, heads=1).int()[0, 0]
    tensor([[1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 1, 1]], dtype=torch.int32)
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.attention.cache import KVCache
from posenc.attention.context import AttentionContext
from posenc.attention.mask import AttentionMask, MaskMod

__all__ = ["banded_attention", "banded_serves", "sliding_window_predicate", "with_window"]


def sliding_window_predicate(window: int, *, causal: bool, offset: int) -> MaskMod:
    """The window as a ``mask_mod(b, h, q_idx, kv_idx)``; ``q_idx`` counts this call's
    queries, which sit at key index ``q_idx + offset`` (``offset = k_len - q_len``)."""
    window = check_positive_int("window", window)

    def visible(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        distance = q_idx + offset - kv_idx
        if causal:
            return distance < window  # causal order hides distance < 0
        return distance.abs() < window

    return visible


def with_window(
    context: AttentionContext, window: int, cache: KVCache | None = None
) -> AttentionContext:
    """The view of ``context`` whose mask adds a sliding window of ``window`` keys.

    Built once per forward and window size (layers of one ``W`` share it), with its own memo
    (no flex block mask or masked bias of the unwindowed mask is read for it). A rolling
    ``cache`` that dropped keys has lost the key count the window measures: ``ValueError``.
    """
    window = check_positive_int("window", window)
    if cache is not None and cache.evicted:
        raise ValueError(
            f"window={window}: the cache dropped {cache.evicted} keys (a rolling cache), so key "
            "indices no longer count from the sequence's start; make it with "
            "KVCache(evict=False)"
        )

    def build() -> AttentionContext:
        mask = context.mask
        piece = sliding_window_predicate(window, causal=mask.causal, offset=mask.causal_offset)
        previous = mask.predicate
        if previous is None:
            predicate: MaskMod = piece
        else:

            def predicate(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
                return previous(b, h, q_idx, kv_idx) & piece(b, h, q_idx, kv_idx)

        return dataclasses.replace(
            context, mask=dataclasses.replace(mask, predicate=predicate), memo={}
        )

    return context.cached(("sliding-window", window), build)


def banded_serves(mask: AttentionMask) -> bool:
    """True when ``mask`` (before :func:`with_window`) is causal order and nothing else, so a
    window over it is a band :func:`banded_attention` computes."""
    return (
        mask.causal
        and mask.key_padding is None
        and mask.q_documents is None
        and mask.predicate is None
        and mask.dense is None
        and mask.chunk_size is None
    )


def banded_attention(
    q: Tensor, k: Tensor, v: Tensor, *, window: int, scale: float, dropout_p: float
) -> Tensor:
    """Causal sliding-window attention, one SDPA call per block of ``max(window, 64)``
    queries over the keys their windows reach (a ``(block, block + window)`` mask at most).

    Shapes: q ``(batch, heads, q_len, d)``, k and v ``(batch, kv_heads, k_len, ·)``; queries
    are the last ``q_len`` keys (key index ``i + k_len - q_len``).
    """
    q_len, k_len = q.shape[-2], k.shape[-2]
    offset = k_len - q_len
    size = max(window, 64)
    gqa = k.shape[1] != q.shape[1]
    outs = []
    for start in range(0, q_len, size):
        stop = min(q_len, start + size)
        low = max(0, start + offset - window + 1)  # the first key any of the block reaches
        high = stop + offset
        rows = torch.arange(start + offset, stop + offset, device=q.device)[:, None]
        keys = torch.arange(low, high, device=q.device)[None, :]
        allowed = (keys <= rows) & (keys > rows - window)  # (block, keys)
        outs.append(
            F.scaled_dot_product_attention(
                q[:, :, start:stop],
                k[:, :, low:high],
                v[:, :, low:high],
                attn_mask=allowed,
                dropout_p=dropout_p,
                scale=scale,
                enable_gqa=gqa,
            )
        )
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

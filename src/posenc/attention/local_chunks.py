"""Chunked local attention as one SDPA call per chunk: ``O(L · C)`` work instead of ``O(L²)``.

With Llama-4's chunked attention (:attr:`AttentionMask.chunk_size`) a query sees only keys
of its own chunk, so each chunk of queries attends over at most ``C`` keys. When the mask is
causal order and chunks only (no key padding, no documents or user masks) and the encoding
adds nothing to the logits (NoPE, additive, rotary), the ``sdpa`` backend runs each chunk as
its own SDPA call (its flash kernels) instead of blocks of query rows over every earlier key.
A chunk whose queries start after its first key (a KV-cache step inside a chunk) takes a
``(queries, keys)`` boolean mask of that chunk's size, never ``L × L``.

Tested against the generic per-block path and a dense mask
(``tests/attention/test_chunked_local.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.mask import AttentionMask

__all__ = ["chunk_by_chunk", "serves"]


def serves(mask: AttentionMask) -> bool:
    """True when ``mask`` is chunks plus (optionally) causal order and nothing else."""
    return (
        mask.chunk_size is not None
        and mask.key_padding is None
        and mask.q_documents is None
        and mask.predicate is None
        and mask.dense is None
    )


def chunk_by_chunk(
    q: Tensor, k: Tensor, v: Tensor, *, mask: AttentionMask, scale: float, dropout_p: float
) -> Tensor:
    """Attention under a chunk mask :func:`serves`, one SDPA call per chunk of queries.

    Shapes: q ``(batch, heads, q_len, d)``, k and v ``(batch, kv_heads, k_len, ·)``; queries
    are the last ``q_len`` keys (key index ``i + k_len - q_len``).
    """
    size = mask.chunk_size
    assert size is not None
    offset = mask.causal_offset
    gqa = k.shape[1] != q.shape[1]
    outs = []
    first = offset // size
    for chunk in range(first, (mask.k_len - 1) // size + 1):
        start = chunk * size  # the chunk's first key
        q_a, q_b = max(offset, start), min(mask.k_len, start + size)  # its queries (key index)
        k_b = q_b if mask.causal else min(mask.k_len, start + size)
        part_q = q[:, :, q_a - offset : q_b - offset]
        part_k, part_v = k[:, :, start:k_b], v[:, :, start:k_b]
        # square (queries from the chunk's start): SDPA's top-left causal order is ours
        is_causal = mask.causal and q_a == start and q_b - q_a > 1
        allowed = None
        if mask.causal and q_a > start and q_b - q_a > 1:  # a cache step inside the chunk
            rows = torch.arange(q_a, q_b, device=q.device)[:, None]
            allowed = torch.arange(start, k_b, device=q.device)[None, :] <= rows  # bottom-right
        out = F.scaled_dot_product_attention(
            part_q,
            part_k,
            part_v,
            attn_mask=allowed,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=gqa,
        )
        outs.append(out)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

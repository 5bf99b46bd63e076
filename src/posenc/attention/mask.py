"""Which keys each query may see, described as structure and never as an L×L tensor.

An :class:`AttentionMask` holds the pieces a mask is made of: causal order (bottom-right
aligned, so the queries of a KV-cache step are the last ``q_len`` of the ``k_len`` keys),
key padding, packed-document ids, chunked local attention (Llama-4's ``attention_chunk_size``),
and optionally a user predicate or a user tensor. Each
backend turns it into its own form: SDPA's ``is_causal`` or a broadcast ``(batch, 1, 1,
k)`` padding mask, a FlexAttention ``mask_mod``, or the rows of one block of queries
(:meth:`AttentionMask.block`). A pair is visible only if every piece allows it.

Example::

    >>> mask = AttentionMask(batch=1, q_len=3, k_len=5, device=torch.device("cpu"), causal=True)
    >>> mask.block(0, 3, 0, 5, heads=1).int()
    tensor([[1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0],
            [1, 1, 1, 1, 1]], dtype=torch.int32)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["AttentionMask", "MaskMod", "causal_mask"]

#: A predicate in FlexAttention's ``mask_mod`` form: ``(batch, head, q_index, k_index) ->
#: bool``, True where the key is visible; indices are broadcastable integer tensors,
#: ``q_index`` in ``[0, q_len)`` and ``k_index`` in ``[0, k_len)``.
MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def causal_mask(q_len: int, k_len: int, device: torch.device | None = None) -> Tensor:
    """Dense boolean ``(q_len, k_len)`` causal mask, True where key j may be seen by query i.

    Queries are the last ``q_len`` of the ``k_len`` tokens (bottom-right aligned), which is
    what decoding with a KV cache needs. For tests and plots: attention never builds it.
    """
    q_index = torch.arange(k_len - q_len, k_len, device=device)
    return torch.arange(k_len, device=device) <= q_index[:, None]


@dataclass(frozen=True, eq=False)
class AttentionMask:
    """The structure of an attention mask (validated by :func:`posenc.attention.context`).

    Args:
        batch: rows of the batch.
        q_len, k_len: queries and keys; queries are the last ``q_len`` keys when causal.
        device: where the block masks are built (the device of q).
        causal: hide keys after each query (bottom-right aligned).
        key_padding: ``(batch, k_len)`` bool, True for real keys, or None.
        q_documents, k_documents: document ids ``(q_len,)``/``(batch, q_len)`` and
            ``(k_len,)``/``(batch, k_len)``; a query sees keys of its own document only.
        predicate: a :data:`MaskMod`, or None.
        dense: a user boolean ``(q_len, k_len)`` or ``(batch, q_len, k_len)`` tensor, True
            where attention is allowed, or None.
        chunk_size: chunked local attention, or None: key ``j`` and query ``i`` (the key
            index ``i + k_len - q_len``) see each other only within one chunk,
            ``⌊(j - s_b) / C⌋ = ⌊(i + k_len - q_len - s_b) / C⌋``. Indices count every key
            of the sequence (a KV cache's too), as HF's ``chunked_overlay`` counts cache
            positions and vLLM's ``ChunkedLocalAttention`` its tokens.
        chunk_start: ``(batch,)`` integer ``s_b``, where row ``b``'s first chunk begins (its
            left padding, as HF's ``create_chunked_causal_mask``), or None for 0.
    """

    batch: int
    q_len: int
    k_len: int
    device: torch.device
    causal: bool = False
    key_padding: Tensor | None = None
    q_documents: Tensor | None = None
    k_documents: Tensor | None = None
    predicate: MaskMod | None = None
    dense: Tensor | None = None
    chunk_size: int | None = None
    chunk_start: Tensor | None = None

    @property
    def causal_offset(self) -> int:
        """Key index of query 0 under the causal order: ``k_len - q_len``."""
        return self.k_len - self.q_len

    @property
    def has_pairwise(self) -> bool:
        """True when a piece depends on (query, key) pairs beyond causal order.

        Documents, predicates and dense tensors need per-block evaluation (or a flex block
        mask); causal order and key padding have cheap broadcast forms.
        """
        return (
            self.q_documents is not None
            or self.predicate is not None
            or self.dense is not None
            or self.chunk_size is not None
        )

    @property
    def is_trivial(self) -> bool:
        """True when every query sees every key."""
        return not self.causal and self.key_padding is None and not self.has_pairwise

    def key_end(self, q_end: int) -> int:
        """One past the last key any of the queries ``[.., q_end)`` may see."""
        if not self.causal:
            return self.k_len
        return max(0, min(self.k_len, q_end + self.causal_offset))

    def block(
        self, q_start: int, q_end: int, k_start: int, k_end: int, *, heads: int
    ) -> Tensor | None:
        """Visible pairs of queries ``[q_start, q_end)`` and keys ``[k_start, k_end)``.

        Returns:
            bool broadcastable to ``(batch, heads, q_end - q_start, k_end - k_start)``, or
            None when every pair of the block is visible. Its size is that of the block.
        """
        device = self.device
        allowed: Tensor | None = None

        def both(extra: Tensor) -> None:
            nonlocal allowed
            allowed = extra if allowed is None else allowed & extra

        q_index = torch.arange(q_start, q_end, device=device)[:, None]
        k_index = torch.arange(k_start, k_end, device=device)[None, :]
        if self.causal and k_end - 1 > q_start + self.causal_offset:
            both(k_index <= q_index + self.causal_offset)  # (bq, bk)
        if self.key_padding is not None:
            both(self.key_padding[:, None, None, k_start:k_end])  # (batch, 1, 1, bk)
        if self.q_documents is not None and self.k_documents is not None:
            q_docs = self.q_documents[..., q_start:q_end, None]
            k_docs = self.k_documents[..., None, k_start:k_end]
            both((q_docs == k_docs).unsqueeze(-3))  # (batch?, 1, bq, bk)
        if self.dense is not None:
            part = self.dense[..., q_start:q_end, k_start:k_end]
            both(part.unsqueeze(-3) if part.dim() == 3 else part)
        if self.chunk_size is not None:
            q_chunk = self._chunk_of(q_index + self.causal_offset)
            both((q_chunk == self._chunk_of(k_index)).unsqueeze(-3))  # (batch?, 1, bq, bk)
        if self.predicate is not None:
            b = torch.arange(self.batch, device=device).view(-1, 1, 1, 1)
            h = torch.arange(heads, device=device).view(1, -1, 1, 1)
            both(self.predicate(b, h, q_index, k_index).to(torch.bool))
        return allowed

    def mask_mod(self) -> MaskMod:
        """The whole mask as a FlexAttention ``mask_mod`` (indices relative to this call)."""
        offset = self.causal_offset
        causal, padding, dense, predicate = (
            self.causal,
            self.key_padding,
            self.dense,
            self.predicate,
        )
        q_docs, k_docs = self.q_documents, self.k_documents
        chunk_size, chunk_start = self.chunk_size, self.chunk_start

        def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            visible = q_idx >= 0  # a True of the right type to combine with
            if causal:
                visible = visible & (kv_idx <= q_idx + offset)
            if padding is not None:
                visible = visible & padding[b, kv_idx]
            if q_docs is not None and k_docs is not None:
                if q_docs.dim() == 2:
                    visible = visible & (q_docs[b, q_idx] == k_docs[b, kv_idx])
                else:
                    visible = visible & (q_docs[q_idx] == k_docs[kv_idx])
            if dense is not None:
                visible = visible & (
                    dense[b, q_idx, kv_idx] if dense.dim() == 3 else dense[q_idx, kv_idx]
                )
            if chunk_size is not None:
                q_abs, k_abs = q_idx + offset, kv_idx
                if chunk_start is not None:
                    q_abs, k_abs = q_abs - chunk_start[b], k_abs - chunk_start[b]
                visible = visible & (q_abs // chunk_size == k_abs // chunk_size)
            if predicate is not None:
                visible = visible & predicate(b, h, q_idx, kv_idx)
            return visible

        return mask_mod

    def _chunk_of(self, index: Tensor) -> Tensor:
        """Chunk numbers of key indices ``index`` (2-D), ``(batch, ...)`` with a chunk start,
        else of ``index``'s shape (floor division: left padding falls in chunks < 0)."""
        assert self.chunk_size is not None
        if self.chunk_start is None:
            return torch.div(index, self.chunk_size, rounding_mode="floor")
        shifted = index - self.chunk_start.view(-1, 1, 1)
        return torch.div(shifted, self.chunk_size, rounding_mode="floor")

    def empty_rows(self) -> Tensor | None:
        """Queries that see no key, ``(batch, 1, q_len, 1)`` bool, for causal + padding only.

        Computed from the structure (no L×L tensor); None when no row can be empty. Masks
        with pairwise pieces find their empty rows per block instead.
        """
        if self.key_padding is None:
            return None  # causal order always leaves a query its own key
        if not self.causal:
            return ~self.key_padding.any(dim=-1).view(-1, 1, 1, 1)
        # A query sees keys [0, i + offset]; it sees none if the first real key is later.
        real = self.key_padding.to(torch.int32)
        no_key = torch.full_like(real[:, 0], self.k_len, dtype=torch.long)
        first_real = torch.where(real.any(dim=-1), real.argmax(dim=-1), no_key)  # (batch,)
        q_index = torch.arange(self.q_len, device=real.device) + self.causal_offset
        return (q_index[None, :] < first_real[:, None]).view(self.batch, 1, self.q_len, 1)

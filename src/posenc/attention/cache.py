"""The KV cache of one attention layer: keys, values and what the mask needs of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int

if TYPE_CHECKING:
    from posenc.attention.context import AttentionContext

__all__ = ["KVCache"]


class KVCache:
    """Keys, values, key positions, padding and document ids of one layer, grown while decoding.

    Keys are stored after rotation, together with their positions, so that rotary and bias
    positions continue correctly for the next tokens (the next default position is
    ``max(positions) + 1`` per row, see :func:`posenc.positions.next_positions`).
    ``key_padding_mask`` (True = real token) and ``document_ids`` are kept once any call
    supplied them. ``index_positions`` records that every position so far was the default
    (key ``j`` at position ``j``), which some backends exploit.

    Keys and values live in buffers whose capacity doubles when full, so a decoding step
    writes one token in place instead of copying the whole cache; :attr:`k` and :attr:`v` are
    views of the filled part. When gradients flow into the new keys the cache concatenates
    instead (autograd needs the earlier tensors intact).

    Example::

        >>> cache = KVCache()
        >>> cache.length
        0
    """

    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._length = 0
        self.positions: Tensor | None = None
        self.key_padding_mask: Tensor | None = None
        self.document_ids: Tensor | None = None
        self.index_positions = True

    @property
    def length(self) -> int:
        """Number of cached keys."""
        return self._length

    @property
    def k(self) -> Tensor | None:
        """Cached keys ``(batch, kv_heads, length, head_dim)`` (rotated), or None."""
        return None if self._k is None else self._k[:, :, : self._length]

    @property
    def v(self) -> Tensor | None:
        """Cached values ``(batch, kv_heads, length, v_dim)``, or None."""
        return None if self._v is None else self._v[:, :, : self._length]

    @property
    def capacity(self) -> int:
        """Keys the buffers hold before they grow."""
        return 0 if self._k is None else self._k.shape[-2]

    def store(self, k: Tensor, v: Tensor, context: AttentionContext) -> tuple[Tensor, Tensor]:
        """Append new keys and values, take the key metadata of ``context``; return all keys
        and values. The context already holds the concatenated positions, padding and ids."""
        end = self._length + k.shape[-2]
        if self._k is not None and (self._k.dtype != k.dtype or self._k.device != k.device):
            raise ValueError(
                f"k has dtype {k.dtype} on {k.device} but the cache holds {self._k.dtype} on "
                f"{self._k.device}; start a new cache"
            )
        tracked = torch.is_grad_enabled() and (k.requires_grad or v.requires_grad)
        if self._k is None or self._v is None or tracked or self._k.requires_grad:
            if self._k is None or self._v is None:
                self._k, self._v = k, v
            else:
                self._k = torch.cat([self.k, k], dim=-2)  # type: ignore[list-item]
                self._v = torch.cat([self.v, v], dim=-2)  # type: ignore[list-item]
        else:
            if end > self.capacity:
                self._grow(max(end, 2 * self.capacity))
            self._k[:, :, self._length : end] = k
            self._v[:, :, self._length : end] = v
        self._length = end
        self.positions = context.k_pos
        self.key_padding_mask = context.mask.key_padding
        self.document_ids = context.mask.k_documents
        self.index_positions = context.index_positions
        return self.k, self.v  # type: ignore[return-value]

    def _grow(self, capacity: int) -> None:
        assert self._k is not None and self._v is not None
        for name in ("_k", "_v"):
            old: Tensor = getattr(self, name)
            new = old.new_empty(*old.shape[:2], capacity, old.shape[-1])
            new[:, :, : self._length] = old[:, :, : self._length]
            setattr(self, name, new)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` keys (speculative decoding, benchmarks, beam resets)."""
        check_non_negative_int("length", length)
        if length > self._length:
            raise ValueError(f"length must be <= the cache length {self._length}, got {length}")
        self._length = length
        for name in ("positions", "key_padding_mask", "document_ids"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value[..., :length])

    def __repr__(self) -> str:
        return f"KVCache(length={self._length}, capacity={self.capacity})"

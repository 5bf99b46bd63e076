"""The KV cache of one attention layer: keys, values and what the mask needs of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from posenc.attention.context import AttentionContext

__all__ = ["KVCache"]


@dataclass
class KVCache:
    """Keys, values, key positions, padding and document ids of one layer, grown while decoding.

    Keys are stored after rotation, together with their positions, so that rotary and bias
    positions continue correctly for the next tokens (the next default position is
    ``max(positions) + 1`` per row, see :func:`posenc.positions.next_positions`).
    ``key_padding_mask`` (True = real token) and ``document_ids`` are stored once any call
    supplied them. ``index_positions`` records that every position so far was the default
    (key ``j`` at position ``j``), which some backends exploit.
    """

    k: Tensor | None = None
    v: Tensor | None = None
    positions: Tensor | None = None
    key_padding_mask: Tensor | None = None
    document_ids: Tensor | None = None
    index_positions: bool = True

    @property
    def length(self) -> int:
        """Number of cached keys."""
        return 0 if self.k is None else self.k.shape[-2]

    def store(self, k: Tensor, v: Tensor, context: AttentionContext) -> tuple[Tensor, Tensor]:
        """Append new keys and values, take the key metadata of ``context``; return all keys
        and values. The context already holds the concatenated positions, padding and ids."""
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        self.positions = context.k_pos
        self.key_padding_mask = context.mask.key_padding
        self.document_ids = context.mask.k_documents
        self.index_positions = context.index_positions
        return self.k, self.v

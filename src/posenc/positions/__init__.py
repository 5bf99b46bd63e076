"""Where positions come from: lengths and offsets (KV cache), padding, packed documents,
grids, randomized positions and multimodal (t, h, w) ids; the zigzag split of a sequence
over context-parallel ranks.
"""

from __future__ import annotations

from posenc.positions.sequence import (
    POSITION_LIMIT,
    check_device,
    check_padding_mask,
    check_positions,
    concat_positions,
    cu_seqlens_to_document_ids,
    document_mask,
    grid_coordinates,
    grid_positions,
    next_positions,
    packed_positions,
    position_batch,
    positions_from_length,
    positions_from_padding_mask,
    randomized_positions,
)
from posenc.positions.zigzag import zigzag_chunks, zigzag_indices, zigzag_shard, zigzag_unshard

__all__ = [
    "POSITION_LIMIT",
    "check_device",
    "check_padding_mask",
    "check_positions",
    "concat_positions",
    "cu_seqlens_to_document_ids",
    "document_mask",
    "grid_coordinates",
    "grid_positions",
    "next_positions",
    "packed_positions",
    "position_batch",
    "positions_from_length",
    "positions_from_padding_mask",
    "randomized_positions",
    "zigzag_chunks",
    "zigzag_indices",
    "zigzag_shard",
    "zigzag_unshard",
]

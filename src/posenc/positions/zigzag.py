"""Zigzag load balancing for context parallelism: which tokens each rank holds.

A sequence of ``L`` tokens is cut into ``2R`` chunks of ``s = L / 2R`` tokens; rank ``r`` of
``R`` holds chunks ``r`` and ``2R − r − 1``:

.. math::

    \\mathrm{tokens}(r) = [r s, (r + 1) s) \\cup [(2R − r − 1) s, (2R − r) s)

Under causal attention query ``i`` reads ``i + 1`` keys, so an early chunk is cheap and a late
one dear; pairing chunk ``r`` with its mirror gives every rank the same work (Llama 3's
context parallelism, arXiv 2407.21783 §3.3.2; zhuzilin/ring-flash-attention's
``zigzag_ring_flash_attn``, its issue #2). Every sequence-indexed tensor (q, k, v, position
ids, M-RoPE's ``(3, seq)`` ids, document ids, padding masks) must be cut by the same
permutation; these functions cut any of them along a given dimension, with two slices each
(no gather).

Example::

    >>> zigzag_indices(8, rank=0, world_size=2)
    tensor([0, 1, 6, 7])
    >>> x = torch.arange(8)
    >>> shards = [zigzag_shard(x, r, 2, dim=0) for r in range(2)]
    >>> shards
    [tensor([0, 1, 6, 7]), tensor([2, 3, 4, 5])]
    >>> zigzag_unshard(shards, dim=0)
    tensor([0, 1, 2, 3, 4, 5, 6, 7])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from posenc._validate import check_int, check_positive_int

__all__ = ["zigzag_chunks", "zigzag_indices", "zigzag_shard", "zigzag_unshard"]


def _check_rank(seq_len: int, rank: int, world_size: int) -> int:
    """Validate the split; return the chunk size ``seq_len / (2 world_size)``."""
    world_size = check_positive_int("world_size", world_size)
    check_int("rank", rank, 0, world_size - 1)
    seq_len = check_positive_int("seq_len", seq_len)
    if seq_len % (2 * world_size) != 0:
        raise ValueError(
            f"seq_len ({seq_len}) must be a multiple of 2 * world_size ({2 * world_size}) for "
            "the zigzag split (pad the sequence, masking the padding out)"
        )
    return seq_len // (2 * world_size)


def zigzag_chunks(rank: int, world_size: int) -> tuple[int, int]:
    """The two chunks rank ``rank`` holds, ``(rank, 2 world_size − rank − 1)``, in order."""
    world_size = check_positive_int("world_size", world_size)
    check_int("rank", rank, 0, world_size - 1)
    return rank, 2 * world_size - rank - 1


def zigzag_indices(
    seq_len: int, rank: int, world_size: int, *, device: torch.device | str | None = None
) -> Tensor:
    """Global token indices that rank ``rank`` holds, ``(seq_len / world_size,)`` int64.

    They are the positions of a plain sequence's tokens on that rank (for packed documents
    or M-RoPE, shard the positions tensor itself with :func:`zigzag_shard`).
    """
    size = _check_rank(seq_len, rank, world_size)
    first, second = zigzag_chunks(rank, world_size)
    return torch.cat(
        [
            torch.arange(first * size, (first + 1) * size, device=device),
            torch.arange(second * size, (second + 1) * size, device=device),
        ]
    )


def zigzag_shard(x: Tensor, rank: int, world_size: int, dim: int) -> Tensor:
    """Rank ``rank``'s part of ``x`` along ``dim`` (its two chunks, concatenated).

    Args:
        x: any tensor whose ``dim`` indexes the sequence (q ``(batch, heads, seq, head_dim)``
            with ``dim=-2``; positions ``(seq,)``, ``(batch, seq)`` or ``(3, batch, seq)``,
            document ids and padding masks with ``dim=-1``).
        rank, world_size: ``0 <= rank < world_size``; ``x.shape[dim]`` a multiple of
            ``2 world_size``.

    Returns:
        ``x`` with ``x.shape[dim] / world_size`` entries along ``dim``.
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"x must be a tensor, got {type(x).__name__}")
    if x.dim() == 0:
        raise ValueError("x must have a sequence dimension, got a 0-d tensor")
    check_int("dim", dim, -x.dim(), x.dim() - 1)
    size = _check_rank(x.shape[dim], rank, world_size)
    first, second = zigzag_chunks(rank, world_size)
    return torch.cat([x.narrow(dim, first * size, size), x.narrow(dim, second * size, size)], dim)


def zigzag_unshard(shards: Sequence[Tensor], dim: int) -> Tensor:
    """The whole sequence from every rank's shard (in rank order): :func:`zigzag_shard`'s
    inverse, ``zigzag_unshard([zigzag_shard(x, r, R, d) for r in range(R)], d) == x``."""
    world_size = len(shards)
    if world_size < 1:
        raise ValueError("shards must hold one tensor per rank, got none")
    length = shards[0].shape[dim]
    if length % 2 != 0 or any(s.shape[dim] != length for s in shards):
        raise ValueError(
            f"shards must all have the same even length along dim {dim}; got "
            f"{[s.shape[dim] for s in shards]}"
        )
    size = length // 2
    chunks: list[Tensor] = [shards[0]] * (2 * world_size)
    for rank, shard in enumerate(shards):
        first, second = zigzag_chunks(rank, world_size)
        chunks[first] = shard.narrow(dim, 0, size)
        chunks[second] = shard.narrow(dim, size, size)
    return torch.cat(chunks, dim)

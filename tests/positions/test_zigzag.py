from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.positions import zigzag_chunks, zigzag_indices, zigzag_shard, zigzag_unshard


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ranks_partition_the_sequence_in_mirrored_chunks(world_size: int) -> None:
    seq_len = 2 * world_size * 3
    held = [zigzag_indices(seq_len, r, world_size) for r in range(world_size)]
    assert_close(torch.cat(held).sort().values, torch.arange(seq_len), rtol=0, atol=0)
    for rank, indices in enumerate(held):
        first, second = zigzag_chunks(rank, world_size)
        assert (first, second) == (rank, 2 * world_size - rank - 1)
        assert indices[:3].tolist() == list(range(3 * first, 3 * first + 3))
        assert indices[3:].tolist() == list(range(3 * second, 3 * second + 3))


def test_causal_work_is_balanced() -> None:
    """Under causal attention query i reads i + 1 keys: every rank reads as many."""
    work = [int((zigzag_indices(32, r, 4) + 1).sum()) for r in range(4)]
    assert len(set(work)) == 1


@pytest.mark.parametrize(
    ("shape", "dim"),
    [((12,), 0), ((2, 12), -1), ((3, 2, 12), -1), ((2, 4, 12, 8), -2), ((2, 4, 12, 8), 2)],
)
def test_shard_matches_indices_and_unshard_inverts(shape: tuple[int, ...], dim: int) -> None:
    x = torch.randn(shape)
    shards = [zigzag_shard(x, r, 3, dim) for r in range(3)]
    for rank, shard in enumerate(shards):
        assert_close(shard, x.index_select(dim, zigzag_indices(12, rank, 3)), rtol=0, atol=0)
    assert_close(zigzag_unshard(shards, dim), x, rtol=0, atol=0)


def test_refuses_a_length_the_chunks_do_not_divide() -> None:
    with pytest.raises(ValueError, match=r"seq_len \(10\) must be a multiple of 2 \* world_size"):
        zigzag_shard(torch.zeros(10), 0, 3, dim=0)


@pytest.mark.parametrize(
    ("rank", "world_size", "match"), [(2, 2, "rank"), (-1, 2, "rank"), (0, 0, "world_size")]
)
def test_refuses_bad_rank_or_world(rank: int, world_size: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        zigzag_indices(8, rank, world_size)


def test_refuses_bad_dim_and_shards() -> None:
    with pytest.raises(ValueError, match="dim"):
        zigzag_shard(torch.zeros(4), 0, 1, dim=1)
    with pytest.raises(ValueError, match="0-d"):
        zigzag_shard(torch.tensor(1.0), 0, 1, dim=0)
    with pytest.raises(ValueError, match="same even length"):
        zigzag_unshard([torch.zeros(4), torch.zeros(2)], dim=0)
    with pytest.raises(ValueError, match="one tensor per rank"):
        zigzag_unshard([], dim=0)

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.lab.batch import Batch, BatchSource, derive_seed, shard_slice
from posenc.lab.data.corpus import LMSource
from posenc.lab.data.tasks import make_task


def _batch(rows: int = 4, cols: int = 5, positions: str | None = None) -> Batch:
    tokens = torch.arange(rows * cols).reshape(rows, cols)
    pos = None
    if positions == "shared":
        pos = torch.arange(cols) * 2
    elif positions == "rows":
        pos = tokens + 100
    return Batch(
        tokens,
        tokens + 1,
        tokens % 2 == 0,
        positions=pos,
        key_padding_mask=tokens % 3 != 0,
    )


@pytest.mark.parametrize("positions", [None, "shared", "rows"])
def test_shards_concatenate_to_the_batch(positions: str | None) -> None:
    batch = _batch(positions=positions)
    parts = [batch.shard(rank, 2) for rank in range(2)]
    for name in ("tokens", "targets", "loss_mask", "key_padding_mask"):
        assert_close(torch.cat([getattr(p, name) for p in parts]), getattr(batch, name))
    if positions == "rows":
        assert_close(torch.cat([p.positions for p in parts]), batch.positions)
    elif positions == "shared":
        assert all(torch.equal(p.positions, batch.positions) for p in parts)
    else:
        assert all(p.positions is None for p in parts)


def test_to_moves_every_tensor_and_keeps_none() -> None:
    batch = _batch(positions="shared")
    moved = batch.to("cpu")
    assert_close(moved.tokens, batch.tokens)
    assert_close(moved.positions, batch.positions)
    plain = Batch(batch.tokens, batch.targets, batch.loss_mask).to(torch.device("cpu"))
    assert plain.positions is None and plain.key_padding_mask is None
    assert (plain.batch_size, plain.seq_len) == (4, 5)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("targets", torch.zeros(4, 4, dtype=torch.long)),
        ("loss_mask", torch.ones(4, 5)),
        ("key_padding_mask", torch.ones(4, 4, dtype=torch.bool)),
        ("positions", torch.arange(4)),
    ],
)
def test_batch_rejects_mismatched_fields(field: str, value: torch.Tensor) -> None:
    kwargs = {
        "tokens": torch.zeros(4, 5, dtype=torch.long),
        "targets": torch.zeros(4, 5, dtype=torch.long),
        "loss_mask": torch.ones(4, 5, dtype=torch.bool),
    }
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        Batch(**kwargs)


def test_batch_rejects_float_tokens() -> None:
    with pytest.raises(ValueError, match="tokens"):
        Batch(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))


def test_shard_slice_rows_and_errors() -> None:
    assert shard_slice(8, 1, 4) == slice(2, 4)
    assert shard_slice(8, 0, 1) == slice(0, 8)
    with pytest.raises(ValueError, match="batch_size"):
        shard_slice(6, 0, 4)
    with pytest.raises(ValueError, match="rank"):
        shard_slice(8, 4, 4)
    with pytest.raises(ValueError, match="world_size"):
        shard_slice(8, 0, 0)


def test_derive_seed_is_stable_and_separates_parts() -> None:
    assert derive_seed("copy", 0, 1) == derive_seed("copy", 0, 1)
    seeds = {derive_seed(a, b) for a in range(30) for b in range(30)}
    assert len(seeds) == 900
    assert derive_seed(0, 10) != derive_seed(1, 0)  # no seed * K + step collisions
    assert derive_seed("1", 2) != derive_seed(1, 2)
    assert 0 <= derive_seed("x") < 2**63


def test_sources_satisfy_the_protocol() -> None:
    assert isinstance(LMSource(torch.zeros(100, dtype=torch.uint8), seq_len=8), BatchSource)
    assert isinstance(make_task("copy"), BatchSource)

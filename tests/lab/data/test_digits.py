"""The digits data source: seeded splits, epochs that visit every image once, sharding."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("sklearn")

from posenc.lab.data.digits import DigitsSource, load_digits_splits


def test_splits_and_source_are_seeded() -> None:
    data = load_digits_splits(500, seed=0)
    assert data.train_pixels.shape == (1297, 64) and data.test_pixels.shape == (500, 64)
    assert int(data.train_pixels.min()) >= 0 and int(data.train_pixels.max()) <= 16
    again = load_digits_splits(500, seed=0)
    assert_close(again.test_labels, data.test_labels)
    other = load_digits_splits(500, seed=1)
    assert not torch.equal(other.test_labels, data.test_labels)

    source = DigitsSource(data.train_pixels, data.train_labels, seed=0)
    batch = source.batch(3, 64)
    assert_close(
        DigitsSource(data.train_pixels, data.train_labels, seed=0).batch(3, 64).tokens, batch.tokens
    )
    assert batch.loss_mask[:, 0].all() and not batch.loss_mask[:, 1:].any()
    assert_close(batch.targets, batch.targets[:, :1].expand(-1, 64))
    shards = [source.batch(3, 64, rank=r, world_size=2).tokens for r in range(2)]
    assert_close(torch.cat(shards), batch.tokens)
    # An epoch visits every image once: pixels that spell their own index show it.
    index = DigitsSource(torch.arange(100)[:, None].expand(-1, 64), torch.zeros(100).long())
    seen = torch.cat([index.batch(step, 10).tokens[:, 0] for step in range(10)])
    assert_close(seen.sort().values, torch.arange(100))
    assert not torch.equal(index.batch(10, 10).tokens, index.batch(0, 10).tokens)
    with pytest.raises(ValueError, match="batch_size"):
        source.batch(0, 5000)

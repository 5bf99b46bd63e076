from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.positions import randomized_positions


@pytest.mark.parametrize(("length", "max_length", "batch"), [(5, 5, None), (7, 40, 3), (0, 4, 2)])
def test_distinct_sorted_in_range(length: int, max_length: int, batch: int | None) -> None:
    got = randomized_positions(length, max_length, batch=batch)
    rows = got[None] if batch is None else got
    assert got.shape == ((length,) if batch is None else (batch, length))
    assert got.dtype == torch.int64
    for row in rows:
        assert row.unique().numel() == length
        assert bool((row.diff() > 0).all())
        assert bool(((row >= 0) & (row < max_length)).all())


def test_full_range_is_the_identity() -> None:
    assert_close(randomized_positions(6, 6, batch=2), torch.arange(6).expand(2, 6))


def test_generator_makes_it_deterministic_and_rows_differ() -> None:
    a = randomized_positions(8, 1000, batch=4, generator=torch.Generator().manual_seed(1))
    b = randomized_positions(8, 1000, batch=4, generator=torch.Generator().manual_seed(1))
    c = randomized_positions(8, 1000, batch=4, generator=torch.Generator().manual_seed(2))
    assert_close(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a[0], a[1])


def test_every_position_is_reachable() -> None:
    got = randomized_positions(3, 10, batch=200, generator=torch.Generator().manual_seed(0))
    assert_close(got.unique(), torch.arange(10))


def test_length_above_max_length_raises_naming_both() -> None:
    with pytest.raises(ValueError, match=r"length=9, max_length=8"):
        randomized_positions(9, 8)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"length": -1, "max_length": 4}, "length"),
        ({"length": 2, "max_length": 0}, "max_length"),
        ({"length": 2, "max_length": 4, "batch": 0}, "batch"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, int], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        randomized_positions(**kwargs)

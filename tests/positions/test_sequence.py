from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.positions import (
    check_positions,
    concat_positions,
    cu_seqlens_to_document_ids,
    document_mask,
    grid_positions,
    next_positions,
    packed_positions,
    positions_from_length,
    positions_from_padding_mask,
)


def test_length_and_offset() -> None:
    assert_close(positions_from_length(4), torch.arange(4))
    assert_close(positions_from_length(3, offset=7), torch.tensor([7, 8, 9]))
    assert positions_from_length(0, offset=5).shape == (0,)


def test_per_row_offsets() -> None:
    got = positions_from_length(3, offset=torch.tensor([0, 5, 2]))
    assert_close(got, torch.tensor([[0, 1, 2], [5, 6, 7], [2, 3, 4]]))


def test_padding_mask_left_padded_rows_start_at_zero() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.bool)
    got = positions_from_padding_mask(mask)
    assert_close(got, torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 0, 0]]))


@pytest.mark.parametrize("batched", [False, True])
def test_packed_positions_restart_per_document(batched: bool) -> None:
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    want = torch.tensor([0, 1, 2, 0, 1, 0, 1, 2, 3])
    if batched:
        ids = torch.stack([ids, torch.tensor([5, 5, 5, 5, 5, 5, 7, 7, 3])])
        want = torch.stack([want, torch.tensor([0, 1, 2, 3, 4, 5, 0, 1, 0])])
    assert_close(packed_positions(ids), want)


def test_packed_positions_from_cu_seqlens_match_document_ids() -> None:
    cu = torch.tensor([0, 3, 3, 8, 10])  # an empty document in the middle
    ids = cu_seqlens_to_document_ids(cu)
    assert_close(ids, torch.tensor([0, 0, 0, 2, 2, 2, 2, 2, 3, 3]))
    assert_close(packed_positions(cu_seqlens=cu), torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 0, 1]))


def test_packed_positions_random_against_loop() -> None:
    gen = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 9, (20,), generator=gen)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    want = torch.cat([torch.arange(int(n)) for n in lengths])
    assert_close(packed_positions(cu_seqlens=cu), want)


def test_document_mask_blocks_cross_document_attention() -> None:
    ids = torch.tensor([0, 0, 1])
    want = torch.tensor([[True, True, False], [True, True, False], [False, False, True]])
    assert_close(document_mask(ids), want)


def test_fractional_positions_are_legal() -> None:
    pos = torch.tensor([0.0, 0.5, 1.25])
    assert check_positions(pos) is pos


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (torch.tensor([0.0, float("nan")]), "positions must be finite"),
        (torch.tensor([0.0, float("inf")]), "positions must be finite"),
        (torch.zeros(2, 3, 4), "positions must have shape"),
        (torch.tensor(3), "positions must have shape"),
        (torch.tensor([True, False]), "positions must be an integer or floating"),
        ([0, 1, 2], "positions must be a torch.Tensor"),
    ],
)
def test_check_positions_rejects(bad: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_positions(bad)  # type: ignore[arg-type]


def test_bad_lengths_and_offsets() -> None:
    with pytest.raises(ValueError, match="length"):
        positions_from_length(-1)
    with pytest.raises(ValueError, match="offset"):
        positions_from_length(3, offset=-2)
    with pytest.raises(ValueError, match="offset"):
        positions_from_length(3, offset=torch.tensor([0.5]))
    with pytest.raises(ValueError, match="offset"):
        positions_from_length(3, offset=torch.tensor([1, -1]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        packed_positions(cu_seqlens=torch.tensor([1, 3]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        packed_positions(cu_seqlens=torch.tensor([0, 3, 2]))
    with pytest.raises(ValueError, match="exactly one"):
        packed_positions()
    with pytest.raises(ValueError, match="document_ids"):
        packed_positions(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="mask"):
        positions_from_padding_mask(torch.tensor([[0.5, 1.0]]))


def test_next_positions_continue_at_max_plus_one() -> None:
    assert torch.equal(next_positions(None, 3), torch.arange(3))
    assert torch.equal(next_positions(torch.arange(4), 2), torch.tensor([4, 5]))
    # Left padding: pads sit at position 0; the next token follows the last real one.
    cached = torch.tensor([[0, 0, 0, 1], [0, 1, 2, 3]])
    assert torch.equal(next_positions(cached, 2), torch.tensor([[2, 3], [4, 5]]))
    # Several axes: every axis continues at max + 1 over all axes (M-RoPE's rule).
    image = grid_positions(1, 2, 3)  # t = 0, h in 0..1, w in 0..2: max 2 over 6 tokens
    assert torch.equal(next_positions(image, 2, num_axes=3), torch.tensor([[3, 4]] * 3))
    assert next_positions(torch.zeros(2, 0, dtype=torch.long), 3).shape == (2, 3)
    assert next_positions(torch.tensor([0.5, 1.5]), 1).tolist() == [2.5]


def test_concat_positions_expands_shared_rows() -> None:
    got = concat_positions(torch.arange(3), torch.tensor([[3], [7]]))
    assert torch.equal(got, torch.tensor([[0, 1, 2, 3], [0, 1, 2, 7]]))
    axes = concat_positions(
        torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 4, 1, dtype=torch.long), 3
    )
    assert axes.shape == (3, 4, 3)


def test_grid_positions_row_major() -> None:
    assert grid_positions(2, 3).tolist() == [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]
    assert grid_positions(2, 1, 2, offset=5).tolist() == [[5, 5, 6, 6], [5, 5, 5, 5], [5, 6, 5, 6]]
    with pytest.raises(ValueError, match=r"sizes\[1\]"):
        grid_positions(2, 0)
    with pytest.raises(ValueError, match="offset"):
        grid_positions(2, offset=-1)


@pytest.mark.parametrize(
    ("positions", "num_axes", "match"),
    [
        (torch.zeros(2, 5), 3, r"\(3, seq\) or \(3, batch, seq\)"),
        (torch.zeros(3, 2, 5, 1), 3, r"\(3, seq\)"),
        (torch.zeros(5), 2, r"\(2, seq\)"),
    ],
)
def test_check_positions_with_axes(positions: torch.Tensor, num_axes: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_positions(positions, num_axes=num_axes)
    check_positions(torch.zeros(num_axes, 4), num_axes=num_axes)
    check_positions(torch.zeros(num_axes, 2, 4), num_axes=num_axes)

from __future__ import annotations

import pytest
import torch

from posenc.attention import AttentionMask, causal_mask

CPU = torch.device("cpu")


def dense(mask: AttentionMask, heads: int = 2) -> torch.Tensor:
    """The mask's whole (batch, heads, q, k) form, from its block evaluation."""
    allowed = mask.block(0, mask.q_len, 0, mask.k_len, heads=heads)
    shape = (mask.batch, heads, mask.q_len, mask.k_len)
    return torch.ones(shape, dtype=torch.bool) if allowed is None else allowed.expand(shape)


def test_causal_is_bottom_right_aligned() -> None:
    mask = AttentionMask(batch=1, q_len=3, k_len=5, device=CPU, causal=True)
    assert torch.equal(dense(mask)[0, 0], causal_mask(3, 5))
    assert torch.equal(causal_mask(3, 5)[0], torch.tensor([True, True, True, False, False]))


def test_pieces_combine_with_and() -> None:
    padding = torch.tensor([[False, True, True, True], [True, True, True, False]])
    docs = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    mask = AttentionMask(
        batch=2,
        q_len=4,
        k_len=4,
        device=CPU,
        causal=True,
        key_padding=padding,
        q_documents=docs,
        k_documents=docs,
        predicate=lambda b, h, q, k: (h == 0) | (q != k),
    )
    want = (
        causal_mask(4, 4)
        & padding[:, None, None, :]
        & (docs[:, :, None] == docs[:, None, :])[:, None]
        & ((torch.arange(2).view(1, 2, 1, 1) == 0) | ~torch.eye(4, dtype=torch.bool))
    )
    assert torch.equal(dense(mask), want)


@pytest.mark.parametrize("block", [(0, 2, 0, 4), (2, 4, 1, 3), (1, 3, 0, 2)])
def test_blocks_are_slices_of_the_whole(block: tuple[int, int, int, int]) -> None:
    docs = torch.tensor([0, 0, 1, 1])
    mask = AttentionMask(
        batch=1, q_len=4, k_len=4, device=CPU, causal=True, q_documents=docs, k_documents=docs
    )
    qs, qe, ks, ke = block
    part = mask.block(qs, qe, ks, ke, heads=2)
    assert part is not None
    assert torch.equal(part.expand(1, 2, qe - qs, ke - ks), dense(mask)[:, :, qs:qe, ks:ke])


def test_mask_mod_equals_block_form() -> None:
    padding = torch.tensor([[False, True, True, True, True], [True] * 5])
    docs = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]])
    mask = AttentionMask(
        batch=2,
        q_len=3,
        k_len=5,
        device=CPU,
        causal=True,
        key_padding=padding,
        q_documents=docs[:, 2:],
        k_documents=docs,
    )
    mod = mask.mask_mod()
    b, h = torch.arange(2).view(-1, 1, 1, 1), torch.arange(2).view(1, -1, 1, 1)
    q, k = torch.arange(3).view(1, 1, -1, 1), torch.arange(5).view(1, 1, 1, -1)
    assert torch.equal(mod(b, h, q, k).expand(2, 2, 3, 5), dense(mask))


def test_key_end_and_trivial() -> None:
    mask = AttentionMask(batch=1, q_len=4, k_len=10, device=CPU, causal=True)
    assert [mask.key_end(stop) for stop in (1, 2, 4)] == [7, 8, 10]
    assert not mask.is_trivial
    assert AttentionMask(batch=1, q_len=4, k_len=10, device=CPU).is_trivial


def test_empty_rows_from_structure() -> None:
    padding = torch.tensor([[False, False, True, True], [True] * 4, [False] * 4])
    causal = AttentionMask(batch=3, q_len=4, k_len=4, device=CPU, causal=True, key_padding=padding)
    rows = causal.empty_rows()
    assert rows is not None
    want = ~dense(causal).any(-1, keepdim=True)[:, :1]
    assert torch.equal(rows, want)
    assert torch.equal(
        rows[:, 0, :, 0], torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])
    )
    both = AttentionMask(batch=3, q_len=4, k_len=4, device=CPU, key_padding=padding).empty_rows()
    assert both is not None and torch.equal(both.flatten(), torch.tensor([False, False, True]))
    assert AttentionMask(batch=1, q_len=2, k_len=2, device=CPU, causal=True).empty_rows() is None

"""ALiBi: slopes vs x-transformers and a re-derivation, bias forms, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.bias import AlibiBias, alibi_slopes, relative_distances


def _reference_schedule(n: int) -> list[float]:
    """Independent re-derivation: geometric sequence with start = ratio = 2^(-8/n)."""

    def geometric(count: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(count) - 3)))
        return [start * start**i for i in range(count)]

    if math.log2(n).is_integer():
        return geometric(n)
    c = 2 ** math.floor(math.log2(n))
    return geometric(c) + geometric(2 * c)[0::2][: n - c]


@pytest.mark.parametrize("num_heads", range(1, 65))
def test_slopes_match_rederivation(num_heads: int) -> None:
    expected = torch.tensor(_reference_schedule(num_heads), dtype=torch.float64)
    assert_close(alibi_slopes(num_heads), expected, rtol=1e-12, atol=0)


def test_slopes_match_x_transformers() -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    for num_heads in range(1, 65):
        ref = torch.tensor(xt.AlibiPositionalBias._get_slopes(num_heads), dtype=torch.float64)
        assert_close(alibi_slopes(num_heads), ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("num_heads", "exponents"),
    [
        (6, [2, 4, 6, 8, 1, 3]),
        (8, [1, 2, 3, 4, 5, 6, 7, 8]),
        (12, [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]),
        (16, [0.5 * h for h in range(1, 17)]),
    ],
)
def test_slopes_documented_anchors(num_heads: int, exponents: list[float]) -> None:
    # anchors-other.md §2.2: -log2(m_h), not sorted for non-powers of two.
    expected = torch.tensor(exponents, dtype=torch.float64)
    assert_close(-alibi_slopes(num_heads).log2(), expected, rtol=0, atol=1e-12)


def _causal_softmax(logits: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    mask = k_pos[None, :] <= q_pos[:, None]
    return logits.masked_fill(~mask, float("-inf")).softmax(-1)


@pytest.mark.parametrize(("q_len", "k_len"), [(7, 7), (3, 10), (1, 9)])
def test_causal_equals_reference_row_constant_after_softmax(q_len: int, k_len: int) -> None:
    heads = 6
    alibi = AlibiBias(heads, dtype=torch.float64)
    q_pos, k_pos = torch.arange(k_len - q_len, k_len), torch.arange(k_len)
    logits = torch.randn(heads, q_len, k_len, dtype=torch.float64)
    ours = alibi.bias(q_pos, k_pos)
    # The reference adds m_h * j (key index) to every row.
    reference = alibi_slopes(heads)[:, None, None] * k_pos.to(torch.float64)[None, None, :]
    reference = reference.expand(heads, q_len, k_len)
    assert_close(
        _causal_softmax(logits + ours, q_pos, k_pos),
        _causal_softmax(logits + reference, q_pos, k_pos),
    )
    # And it is -m_h (i - j) exactly.
    dist = (k_pos[None, :] - q_pos[:, None]).to(torch.float64)
    assert_close(ours, alibi_slopes(heads)[:, None, None] * dist)


def test_symmetric_form() -> None:
    heads = 5
    alibi = AlibiBias(heads, mode="symmetric", dtype=torch.float64)
    pos = torch.arange(9)
    bias = alibi.bias(pos, pos)
    dist = (pos[:, None] - pos[None, :]).abs().to(torch.float64)
    assert_close(bias, -alibi_slopes(heads)[:, None, None] * dist)
    assert_close(bias, bias.transpose(-1, -2))


@pytest.mark.parametrize("mode", ["causal", "symmetric"])
def test_num_biased_heads_leaves_the_rest_zero(mode: str) -> None:
    alibi = AlibiBias(8, num_biased_heads=3, mode=mode, dtype=torch.float64)
    pos = torch.arange(6)
    bias = alibi.bias(pos, pos)
    assert_close(bias[3:], torch.zeros(5, 6, 6, dtype=torch.float64))
    expected = AlibiBias(3, mode=mode, dtype=torch.float64).bias(pos, pos)
    assert_close(bias[:3], expected)


@pytest.mark.parametrize(("q_len", "k_len"), [(4, 4), (3, 11), (1, 6)])
@pytest.mark.parametrize("num_biased_heads", [8, 5])
def test_symmetric_matches_x_transformers(q_len: int, k_len: int, num_biased_heads: int) -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    ref = xt.AlibiPositionalBias(heads=num_biased_heads, total_heads=8)(q_len, k_len)
    alibi = AlibiBias(8, mode="symmetric", num_biased_heads=num_biased_heads)
    ours = alibi.bias(torch.arange(k_len - q_len, k_len), torch.arange(k_len))
    assert_close(ours, ref.to(torch.float32))


def test_x_transformers_custom_positions_batched() -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    q_pos = torch.tensor([[3.0, 4.0], [10.0, 12.5]])
    k_pos = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0], [2.0, 5.0, 7.0, 10.0, 12.5]])
    ref = xt.AlibiPositionalBias(heads=4).forward_custom_pos(q_pos, k_pos)
    ours = AlibiBias(4, mode="symmetric").bias(q_pos, k_pos)
    assert ours.shape == (2, 4, 2, 5)
    assert_close(ours, ref)


def test_explicit_slopes_and_fractional_positions() -> None:
    slopes = torch.tensor([0.5, 0.0, 2.0], dtype=torch.float64)
    alibi = AlibiBias(3, slopes=slopes, dtype=torch.float64)
    q_pos, k_pos = torch.tensor([1.5, 2.25]), torch.tensor([0.0, 0.5, 1.0, 2.25])
    dist = (k_pos[None, :] - q_pos[:, None]).to(torch.float64)
    assert_close(alibi.bias(q_pos, k_pos), slopes[:, None, None] * dist)


def test_batched_positions_broadcast() -> None:
    alibi = AlibiBias(4)
    q_pos = torch.tensor([[5, 6], [0, 1]])
    k_pos = torch.arange(7)
    bias = alibi.bias(q_pos, k_pos)
    assert bias.shape == (2, 4, 2, 7)
    for b in range(2):
        assert_close(bias[b], alibi.bias(q_pos[b], k_pos))


def test_dtype_is_chosen_and_module_casts_cannot_round_the_slopes() -> None:
    pos = torch.arange(4)
    assert AlibiBias(2).bias(pos, pos).dtype == torch.float32
    assert AlibiBias(2, dtype=torch.float64).bias(pos, pos).dtype == torch.float64
    assert AlibiBias(2).bias(pos, pos, dtype=torch.bfloat16).dtype == torch.bfloat16
    alibi = AlibiBias(12).to(torch.bfloat16)  # 12 heads: slopes that bf16 would round
    assert alibi.slopes.dtype == torch.float64
    assert torch.equal(alibi.slopes, alibi_slopes(12))
    exact = alibi_slopes(12)[:, None, None] * (pos[None, :] - pos[:, None]).double()
    assert_close(alibi.bias(pos, pos, dtype=torch.float64), exact, rtol=0, atol=0)


def test_relative_distances_whole_and_float() -> None:
    q_pos, k_pos = torch.tensor([2, 3]), torch.arange(4)
    expected = torch.tensor([[-2, -1, 0, 1], [-3, -2, -1, 0]])
    assert torch.equal(relative_distances(q_pos, k_pos, whole=True), expected)
    assert_close(relative_distances(q_pos, k_pos), expected.to(torch.float64))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 4, "slopes": [1.0, 2.0]}, "slopes"),
        ({"num_heads": 2, "slopes": [1.0, float("nan")]}, "slopes"),
        ({"num_heads": 4, "mode": "bidirectional"}, "mode"),
        ({"num_heads": 4, "num_biased_heads": 5}, "num_biased_heads"),
        ({"num_heads": 4, "num_biased_heads": 0}, "num_biased_heads"),
        ({"num_heads": 4, "slopes": [1.0] * 4, "num_biased_heads": 2}, "num_biased_heads"),
        ({"num_heads": 4, "dtype": torch.int64}, "dtype"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        AlibiBias(**kwargs)


def test_bad_slopes_argument() -> None:
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)

"""Sandwich: the paper's formula, NeMo's layout, numerics, hooks, dtypes, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Backend, attend, hooks_of
from posenc.attention.flex import flex_available, score_mod_of
from posenc.bias.sandwich import (
    SandwichBias,
    sandwich_bias,
    sandwich_frequencies,
    sandwich_head_scales,
)
from tests.attention.test_flex import evaluate_score_mod


def direct_formula(
    num_heads: int, head_dim: int, base: float, q_pos: list[float], k_pos: list[float]
) -> torch.Tensor:
    """b_h(i, j) = [Σ_{k=1}^{d'/2} cos((i − j) / base^(2k/d')) − d'/2] / (8h/H), h = 1..H."""
    out = []
    for h in range(1, num_heads + 1):
        rows = []
        for i in q_pos:
            row = []
            for j in k_pos:
                total = sum(
                    math.cos((i - j) / base ** (2 * k / head_dim))
                    for k in range(1, head_dim // 2 + 1)
                )
                row.append((total - head_dim / 2) / (8 * h / num_heads))
            rows.append(row)
        out.append(rows)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize(
    ("num_heads", "head_dim", "base"),
    [(1, 2, 10000.0), (3, 8, 10000.0), (8, 64, 10000.0), (12, 16, 500.0)],
)
@pytest.mark.parametrize(
    ("q_pos", "k_pos"),
    [
        ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]),  # self-attention, both directions
        ([37, 38], list(range(39))),  # KV cache
        ([1.5, 700.25], [0.0, 0.5, 1.0, 2.25, 699.0, 3000.75]),  # fractional positions
    ],
)
def test_bias_matches_direct_formula(
    num_heads: int, head_dim: int, base: float, q_pos: list, k_pos: list
) -> None:
    sandwich = SandwichBias(num_heads, head_dim, base=base, dtype=torch.float64)
    ours = sandwich.bias(torch.tensor(q_pos), torch.tensor(k_pos))
    want = direct_formula(num_heads, head_dim, base, q_pos, k_pos)
    assert ours.dtype == torch.float64
    assert_close(ours, want, rtol=1e-12, atol=1e-12)
    functional = sandwich_bias(
        torch.tensor(q_pos), torch.tensor(k_pos), num_heads=num_heads, head_dim=head_dim, base=base
    )
    assert_close(functional, want, rtol=1e-12, atol=1e-12)


def nemo_layout(num_heads: int, hidden_size: int, q_len: int, k_len: int, causal: bool):
    """NeMo's ``SandwichRelativePositionEmbedding.forward`` re-expressed in float64: a full
    ``|i − j|`` table sliced ``[-q:, -k:]``, ``tril`` when causal, ``inv_freq`` over
    ``k = 1..d'/2``, ``(Σ cos − d'/2) / (8h/H)``."""
    size = max(q_len, k_len)
    index = torch.arange(size)
    relative = (index[:, None] - index[None, :]).abs()[-q_len:, -k_len:]
    if causal:
        relative = torch.tril(relative)
    k = torch.arange(1, hidden_size / 2 + 1, dtype=torch.float64)
    inv_freq = 1.0 / (10000 ** (2 * k / hidden_size))
    summed = (relative[:, :, None].double() * inv_freq).cos().sum(-1)
    scales = torch.arange(1, num_heads + 1, dtype=torch.float64)[:, None, None]
    return (summed - hidden_size / 2) / (scales * 8 / num_heads)


@pytest.mark.parametrize(("q_len", "k_len"), [(9, 9), (1, 9), (3, 9)])
def test_matches_nemo_layout(q_len: int, k_len: int) -> None:
    heads, head_dim = 6, 16
    sandwich = SandwichBias(heads, head_dim, dtype=torch.float64)
    ours = sandwich.bias(torch.arange(k_len - q_len, k_len), torch.arange(k_len))
    assert_close(ours, nemo_layout(heads, head_dim, q_len, k_len, causal=False))
    if q_len == k_len:
        # NeMo's causal tril zeroes only the future, which the causal mask hides.
        visible = torch.ones(q_len, k_len, dtype=torch.bool).tril()
        causal = nemo_layout(heads, head_dim, q_len, k_len, causal=True)
        assert_close(ours.masked_fill(~visible, 0.0), causal.masked_fill(~visible, 0.0))


def test_frequencies_start_at_k_equals_one_and_head_scales() -> None:
    assert_close(
        sandwich_frequencies(4), torch.tensor([1e-2, 1e-4], dtype=torch.float64), rtol=1e-15, atol=0
    )
    assert_close(
        sandwich_frequencies(6, base=8.0),
        torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64),
        rtol=1e-15,
        atol=0,
    )
    assert_close(sandwich_head_scales(4), torch.tensor([2.0, 4.0, 6.0, 8.0], dtype=torch.float64))


def test_properties_zero_diagonal_symmetric_non_positive_heads_scaled() -> None:
    heads = 8
    sandwich = SandwichBias(heads, 32, dtype=torch.float64)
    pos = torch.arange(40)
    bias = sandwich.bias(pos, pos)
    assert_close(bias.diagonal(dim1=-2, dim2=-1), torch.zeros(heads, 40, dtype=torch.float64))
    assert_close(bias, bias.transpose(-1, -2), rtol=0, atol=0)
    assert_close(bias.clamp(max=0.0), bias, rtol=0, atol=0)
    # Head h is head 1 divided by h: head 1 decays fastest.
    unscaled = bias * sandwich_head_scales(heads)[:, None, None]
    assert_close(unscaled, unscaled[:1].expand_as(unscaled))


def test_float32_has_no_cancellation_near_the_diagonal() -> None:
    # Σ cos − d'/2 in float32 loses everything at tiny distances; −2 Σ sin² does not.
    sandwich = SandwichBias(2, 128)
    q_pos = torch.tensor([0.0], dtype=torch.float64)
    k_pos = torch.tensor([1e-3, 0.25, 1.0, 3.0, 1000.0], dtype=torch.float64)
    want = direct_formula(2, 128, 10000.0, q_pos.tolist(), k_pos.tolist())
    got = sandwich.bias(q_pos, k_pos, torch.float32)
    assert_close(got, want.float(), rtol=2e-5, atol=0)


@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_score_mod_equals_materialized_bias(batched: bool, dtype: torch.dtype) -> None:
    sandwich = SandwichBias(4, 16)
    hooks = hooks_of(sandwich)
    if batched:
        q_pos = torch.tensor([[3, 4, 9], [0, 50, 300]])
        k_pos = torch.tensor([[0, 1, 2, 3, 4, 9, 12], [0, 1, 50, 51, 200, 300, 299]])
    else:
        q_pos, k_pos = torch.tensor([7.5, 8.0, 200.0]), torch.arange(200, 207)
    hooks.prepare(torch.device("cpu"), dtype)
    score_mod = score_mod_of(hooks, q_pos, k_pos)
    assert score_mod is not None
    got = evaluate_score_mod(score_mod, 2, 4, 3, 7, dtype)
    want = sandwich.bias(q_pos, k_pos, dtype)
    assert_close(got, want.expand(2, 4, 3, 7), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
def test_compiled_flex_equals_sdpa() -> None:
    # Compiled FlexAttention lowers the score_mod as a pointwise subgraph: a reduction over a
    # frequency dimension inside it fails or is wrong (torch 2.13, CPU), hence the unrolled
    # elementwise sum in _sandwich.
    torch._dynamo.reset()
    sandwich = SandwichBias(4, 16)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 16, generator=generator) for _ in range(3))
    with torch.no_grad():
        got = attend(q, k, v, pos=sandwich, causal=True, backend=Backend("flex"))
        want = attend(q, k, v, pos=sandwich, causal=True, backend="sdpa")
    assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_attention_uses_the_bias_and_chunked_matches_sdpa() -> None:
    sandwich = SandwichBias(2, 8, dtype=torch.float64)
    generator = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 10, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(10)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) + sandwich.bias(pos, pos)
    scores = scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    sdpa = attend(q, k, v, pos=sandwich, causal=True)
    assert_close(sdpa, scores.softmax(-1) @ v)
    chunked = attend(q, k, v, pos=sandwich, causal=True, backend=Backend("chunked", block_size=4))
    assert_close(chunked, sdpa)


@pytest.mark.parametrize(("q_len", "k_len"), [(1, 20), (5, 20)])
def test_kv_cache_rows_equal_full_bias(q_len: int, k_len: int) -> None:
    sandwich = SandwichBias(4, 32)
    full = sandwich.bias(torch.arange(k_len), torch.arange(k_len))
    step = sandwich.bias(torch.arange(k_len - q_len, k_len), torch.arange(k_len))
    assert_close(step, full[:, k_len - q_len :], rtol=0, atol=0)


def test_batched_positions_broadcast() -> None:
    sandwich = SandwichBias(3, 8)
    q_pos = torch.tensor([[5, 6], [0, 1], [2.5, 3.5]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6.0]])  # batch of 1 broadcasts
    bias = sandwich.bias(q_pos, k_pos)
    assert bias.shape == (3, 3, 2, 7)
    for b in range(3):
        assert_close(bias[b], sandwich.bias(q_pos[b], k_pos[0]), rtol=0, atol=0)


def test_dtypes_and_module_casts_cannot_round_the_tables() -> None:
    pos = torch.arange(50)
    sandwich = SandwichBias(12, 64)
    float32 = sandwich.bias(pos, pos)
    assert float32.dtype == torch.float32
    assert SandwichBias(2, 8, dtype=torch.float64).bias(pos, pos).dtype == torch.float64
    # Half precision: computed in float32, rounded once.
    bf16 = sandwich.bias(pos, pos, torch.bfloat16)
    assert_close(bf16, float32.to(torch.bfloat16), rtol=0, atol=0)
    exact = direct_formula(12, 64, 10000.0, pos[:8].tolist(), pos.tolist())
    assert_close(float32[:, :8], exact.float(), rtol=1e-5, atol=1e-5)
    sandwich.to(torch.bfloat16)  # parameter-free: nothing to round
    assert_close(sandwich.bias(pos, pos), float32, rtol=0, atol=0)
    assert sandwich.state_dict() == {}
    assert SandwichBias.shared_across_layers is True


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((0, 8), {}, "num_heads"),
        ((2, 7), {}, "head_dim"),
        ((2, 0), {}, "head_dim"),
        ((2, 8.0), {}, "head_dim"),
        ((2, True), {}, "head_dim"),
        ((2, 8), {"base": 0.0}, "base"),
        ((2, 8), {"base": -10.0}, "base"),
        ((2, 8), {"base": float("inf")}, "base"),
        ((2, 8), {"dtype": torch.int32}, "dtype"),
    ],
)
def test_bad_constructor_arguments(args: tuple, kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SandwichBias(*args, **kwargs)


def test_bad_function_arguments() -> None:
    with pytest.raises(ValueError, match="head_dim"):
        sandwich_frequencies(5)
    with pytest.raises(ValueError, match="num_heads"):
        sandwich_head_scales(0)

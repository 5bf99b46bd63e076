"""Learned absolute embeddings: lookup, strict range checks, table resize, gradients."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call
from torch.testing import assert_close

from posenc.additive import LearnedPositionalEmbedding, resize_table
from posenc.attention import hooks_of
from posenc.encoding.protocols import AdditiveEncoding


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_lookup_equals_weight_rows(dtype: torch.dtype) -> None:
    pe = LearnedPositionalEmbedding(16, 6, dtype=dtype)
    assert isinstance(pe, AdditiveEncoding) and hooks_of(pe).additive
    positions = torch.tensor([[0, 5, 15, 5], [3, 2, 1, 0]])
    out = pe(positions)
    assert out.shape == (2, 4, 6) and out.dtype == dtype
    assert_close(out, pe.weight.detach()[positions], rtol=0, atol=0)
    assert_close(pe(positions[1]), pe.weight.detach()[positions[1]], rtol=0, atol=0)


def test_whole_float_positions_are_accepted() -> None:
    pe = LearnedPositionalEmbedding(8, 4)
    out = pe(torch.tensor([0.0, 7.0, 3.0]))
    assert_close(out, pe.weight.detach()[[0, 7, 3]], rtol=0, atol=0)


def test_init_is_normal_with_init_std() -> None:
    torch.manual_seed(123)
    pe = LearnedPositionalEmbedding(10, 4, init_std=0.5, dtype=torch.float64)
    torch.manual_seed(123)
    expected = torch.empty(10, 4, dtype=torch.float64).normal_(0.0, 0.5)
    assert_close(pe.weight.detach(), expected, rtol=0, atol=0)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_meta_device_construction() -> None:
    pe = LearnedPositionalEmbedding(32, 8, device="meta")
    assert pe.weight.device.type == "meta" and pe.weight.shape == (32, 8)


@CUDA
def test_cuda_table_takes_cpu_positions() -> None:
    pe = LearnedPositionalEmbedding(8, 4, device="cuda")
    out = pe(torch.tensor([1, 7, 1]))  # positions move to the table's device
    assert_close(out, pe.weight.detach()[[1, 7, 1]], rtol=0, atol=0)
    assert pe.resize(16).weight.device == out.device


@pytest.mark.parametrize(
    "positions",
    [torch.tensor([0, 16]), torch.tensor([[3, 100]]), torch.tensor([-1, 2]), torch.tensor([16.0])],
    ids=["at_end", "far_past", "negative", "float_at_end"],
)
def test_out_of_range_positions_raise_with_range(positions: torch.Tensor) -> None:
    pe = LearnedPositionalEmbedding(16, 4)
    with pytest.raises(ValueError, match=r"positions.*\[0, 16\)") as info:
        pe(positions)
    assert "resize()" in str(info.value) and "max_seq_len" in str(info.value)


def test_fractional_positions_raise() -> None:
    with pytest.raises(ValueError, match="positions"):
        LearnedPositionalEmbedding(16, 4)(torch.tensor([0.0, 2.5]))


@pytest.mark.parametrize("mode", ["linear", "nearest", "area"])
def test_resize_to_same_length_is_identity(mode: str) -> None:
    table = torch.randn(12, 5)
    assert_close(resize_table(table, 12, mode), table, rtol=0, atol=0)


def ramp(n: int, dim: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A table linear in position, W[i] = a + b·i, in float64."""
    a = torch.tensor([0.5, -2.0, 3.0], dtype=torch.float64)[:dim]
    b = torch.tensor([1.0, 0.25, -3.5], dtype=torch.float64)[:dim]
    i = torch.arange(n, dtype=torch.float64)[:, None]
    return a + b * i, a, b


@pytest.mark.parametrize("n", [2, 5, 16])
def test_resize_linear_doubles_a_ramp(n: int) -> None:
    table, a, b = ramp(n)
    j = torch.arange(2 * n, dtype=torch.float64)[:, None]
    # align_corners=False: row j samples source x = (j + 1/2)/2 - 1/2, clamped to the table.
    x = (j / 2 - 0.25).clamp(0, n - 1)
    assert_close(resize_table(table, 2 * n, "linear"), a + b * x, rtol=0, atol=1e-12)
    # align_corners=True: x = j (n - 1)/(2n - 1); both end rows are kept.
    x = j * (n - 1) / (2 * n - 1)
    out = resize_table(table, 2 * n, "linear", align_corners=True)
    assert_close(out, a + b * x, rtol=0, atol=1e-12)
    assert_close(out[[0, -1]], table[[0, -1]], rtol=0, atol=1e-12)


def test_resize_nearest() -> None:
    table = torch.randn(6, 4)
    assert_close(resize_table(table, 12, "nearest"), table.repeat_interleave(2, 0), rtol=0, atol=0)
    assert_close(resize_table(table, 3, "nearest"), table[0::2], rtol=0, atol=0)


def test_resize_area_averages_pairs() -> None:
    table = torch.randn(10, 4, dtype=torch.float64)
    expected = (table[0::2] + table[1::2]) / 2
    assert_close(resize_table(table, 5, "area"), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_resize_half_precision_runs_in_float32(dtype: torch.dtype) -> None:
    table = torch.randn(7, 4).to(dtype)
    out = resize_table(table, 13)
    assert out.dtype == dtype
    assert_close(out, resize_table(table.float(), 13).to(dtype), rtol=0, atol=0)


def test_module_resize_updates_table_and_length() -> None:
    pe = LearnedPositionalEmbedding(8, 4)
    old_weight = pe.weight
    expected = resize_table(old_weight.detach(), 20)
    assert pe.resize(20) is pe
    assert pe.max_seq_len == 20 and pe.weight.shape == (20, 4)
    assert pe.weight is not old_weight and isinstance(pe.weight, torch.nn.Parameter)
    assert pe.weight.requires_grad
    assert_close(pe.weight.detach(), expected, rtol=0, atol=0)
    positions = torch.arange(20)  # positions 8..19 were out of range before
    assert_close(pe(positions), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"\[0, 20\)"):
        pe(torch.tensor([20]))


def test_module_resize_shrink_then_old_positions_raise() -> None:
    pe = LearnedPositionalEmbedding(8, 4).resize(4, mode="area")
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        pe(torch.arange(8))


def test_gradcheck_wrt_weight() -> None:
    pe = LearnedPositionalEmbedding(5, 3, dtype=torch.float64)
    positions = torch.tensor([[0, 4, 4], [2, 0, 1]])  # repeats: gradients accumulate

    def f(weight: torch.Tensor) -> torch.Tensor:
        return functional_call(pe, {"weight": weight}, (positions,))

    weight = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (weight,))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_seq_len": 0, "dim": 4}, "max_seq_len"),
        ({"max_seq_len": -3, "dim": 4}, "max_seq_len"),
        ({"max_seq_len": 8, "dim": 0}, "dim"),
        ({"max_seq_len": 8, "dim": 4, "init_std": 0.0}, "init_std"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        LearnedPositionalEmbedding(**kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((0,), {}, "new_len"),
        ((-2,), {}, "new_len"),
        ((8,), {"mode": "cubic"}, "mode"),
        ((8,), {"mode": "nearest", "align_corners": True}, "align_corners"),
    ],
)
def test_bad_resize_arguments_raise(args: tuple, kwargs: dict, name: str) -> None:
    pe = LearnedPositionalEmbedding(4, 2)
    with pytest.raises(ValueError, match=name):
        pe.resize(*args, **kwargs)
    with pytest.raises(ValueError, match=name):
        resize_table(pe.weight.detach(), *args, **kwargs)
    assert pe.max_seq_len == 4 and pe.weight.shape == (4, 2)


@pytest.mark.parametrize(
    "table",
    [torch.zeros(4), torch.zeros(4, 2, dtype=torch.long), torch.zeros(0, 2)],
    ids=["1d", "integer", "empty"],
)
def test_bad_table_raises(table: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="table"):
        resize_table(table, 3)


@pytest.mark.parametrize(
    "positions",
    [
        torch.tensor([0.0, float("nan")]),
        torch.zeros(2, 3, 4, dtype=torch.long),
        torch.tensor([True, False]),
    ],
    ids=["nan", "3d", "bool"],
)
def test_bad_positions_raise(positions: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="positions"):
        LearnedPositionalEmbedding(8, 4)(positions)

"""Learned grid tables: timm's resample (restated and analytic), ViT's table with prefix
tokens, factorized and MAE-ST separable tables, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.additive import FactorizedLearned, LearnedGrid, resample_grid_table
from posenc.positions import grid_positions


def timm_resample(posemb, new_size, old_size, prefix, interpolation, antialias):
    """timm's resample_abs_pos_embed, restated: split the prefix, NCHW, interpolate in
    float32 with align_corners=False, back to rows, re-attach the prefix."""
    prefix_rows, grid = posemb[:, :prefix], posemb[:, prefix:]
    grid = grid.float().reshape(1, old_size[0], old_size[1], -1).permute(0, 3, 1, 2)
    grid = F.interpolate(
        grid, size=new_size, mode=interpolation, align_corners=False, antialias=antialias
    )
    grid = grid.permute(0, 2, 3, 1).reshape(1, -1, grid.shape[1]).to(posemb.dtype)
    return torch.cat([prefix_rows, grid], dim=1)


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize(
    ("old", "new", "prefix"), [((4, 4), (6, 6), 1), ((6, 6), (3, 3), 1), ((3, 5), (7, 4), 0)]
)
def test_resample_equals_timms_algorithm(old, new, prefix, antialias):
    table = torch.randn(prefix + old[0] * old[1], 8)
    expected = timm_resample(table[None], new, old, prefix, "bicubic", antialias)[0]
    got = resample_grid_table(table, new, old, prefix_tokens=prefix, antialias=antialias)
    assert_close(got, expected, rtol=0, atol=0)


def test_resample_of_a_linear_table_is_linear_inside_the_grid():
    # timm's antialiased bicubic uses Keys' a = -0.5, which reproduces linear functions
    # (a = -0.75 does not); source row y = (i + ½)·h/H − ½; interpolated in float32
    h = w = 8
    rows, cols = grid_positions(h, w).double()
    table = torch.stack((2 * rows + 1, 3 * cols - 2), dim=1)  # (64, 2)
    got = resample_grid_table(table, (12, 12), antialias=True).reshape(12, 12, 2)
    src = (torch.arange(12, dtype=torch.float64) + 0.5) * h / 12 - 0.5
    inside = slice(3, 9)  # far enough from the border that no tap is clamped
    assert_close(got[inside, 0, 0], 2 * src[inside] + 1, rtol=0, atol=1e-5)
    assert_close(got[0, inside, 1], 3 * src[inside] - 2, rtol=0, atol=1e-5)
    plain = resample_grid_table(table, (12, 12), antialias=False).reshape(12, 12, 2)
    assert (plain[inside, 0, 0] - (2 * src[inside] + 1)).abs().max() > 1e-3


def test_same_size_is_the_identity_and_prefix_rows_are_kept():
    table = torch.randn(1 + 16, 4)
    assert_close(resample_grid_table(table, (4, 4), prefix_tokens=1), table, rtol=0, atol=0)
    bigger = resample_grid_table(table, (7, 7), prefix_tokens=1)
    assert_close(bigger[:1], table[:1], rtol=0, atol=0)


def test_antialias_is_timms_choice_and_differs_from_deit():
    table = torch.randn(64, 4)
    with_aa = resample_grid_table(table, (4, 4), antialias=True)
    without = resample_grid_table(table, (4, 4), antialias=False)
    assert not torch.allclose(with_aa, without)  # shrinking: different filters
    up_aa = resample_grid_table(table, (12, 12), antialias=True)
    up = resample_grid_table(table, (12, 12), antialias=False)
    assert not torch.allclose(up_aa, up)  # growing: Keys a = -0.5 vs a = -0.75


def test_bf16_table_is_resampled_in_float32():
    table = torch.randn(16, 4).bfloat16()
    got = resample_grid_table(table, (6, 6))
    assert got.dtype == torch.bfloat16
    expected = resample_grid_table(table.float(), (6, 6)).bfloat16()
    assert_close(got, expected, rtol=0, atol=0)


def test_learned_grid_looks_up_rows_and_resamples_in_place():
    torch.manual_seed(0)
    pe = LearnedGrid((4, 4), dim=8, prefix_tokens=1)
    assert pe.weight.shape == (17, 8)
    positions = torch.tensor([[0, 1, 16], [5, 5, 2]])
    assert_close(pe(positions), pe.weight[positions])
    old = pe.weight.detach().clone()
    pe.resample((6, 5))
    assert pe.weight.shape == (31, 8) and pe.size == (6, 5) and pe.max_seq_len == 31
    assert_close(pe.weight[1:], resample_grid_table(old, (6, 5), prefix_tokens=1)[1:])
    with pytest.raises(ValueError, match=r"\[0, 31\)"):
        pe(torch.tensor([31]))


def test_factorized_is_the_sum_of_per_axis_rows():
    torch.manual_seed(0)
    pe = FactorizedLearned((3, 4), dim=6)
    coords = grid_positions(3, 4)
    rows, cols = pe.tables
    assert_close(pe(coords), rows[coords[0]] + cols[coords[1]])


def test_mae_st_separable_groups():
    torch.manual_seed(0)
    pe = FactorizedLearned((2, 3, 4), dim=6, groups=((1, 2), (0,)))
    spatial, temporal = pe.tables
    t, h, w = grid_positions(2, 3, 4)
    assert_close(pe(torch.stack((t, h, w))), spatial[h * 4 + w] + temporal[t])
    batched = torch.stack((t, h, w))[:, None].expand(3, 2, 24)
    assert pe(batched).shape == (2, 24, 6)
    pe(batched).sum().backward()
    assert all(table.grad is not None for table in pe.tables)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: resample_grid_table(torch.randn(15, 4), (4, 4)), "old_size is needed"),
        (lambda: resample_grid_table(torch.randn(12, 4), (4, 4), (3, 5)), "old_size"),
        (lambda: resample_grid_table(torch.randn(16, 4), (4, 0)), r"new_size\[1\]"),
        (lambda: resample_grid_table(torch.randn(16, 4), (4, 4, 4)), "2D"),
        (lambda: resample_grid_table(torch.randn(16, 4), (8, 8), mode="nearest"), "antialias"),
        (lambda: resample_grid_table(torch.randn(16, 4), (8, 8), mode="area"), "mode"),
        (lambda: LearnedGrid((4,), dim=4, prefix_tokens=-1), "prefix_tokens"),
        (lambda: FactorizedLearned((2, 3), dim=4, groups=((0,),)), "partition"),
        (lambda: FactorizedLearned((2, 3), dim=4)(torch.tensor([[0, 1], [0, 3]])), "axis 1"),
        (lambda: FactorizedLearned((2, 3), dim=4)(torch.zeros(3, 2)), r"\(2, seq\)"),
    ],
)
def test_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()

"""N-D grid sin-cos: parity with positional-encodings (1D/2D/3D, any channel count), MAE and
the 2D functions, each layout's channel rule, the module contract and errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.additive import (
    SinusoidalGrid,
    sinusoidal_2d,
    sinusoidal_encoding,
    sinusoidal_grid,
    sinusoidal_grid_encoding,
)
from posenc.positions import grid_positions

penc = pytest.importorskip("positional_encodings.torch_encodings")


@pytest.mark.parametrize(
    ("sizes", "channels"),
    [
        ((9,), 8),
        ((9,), 7),
        ((4, 5), 16),
        ((4, 5), 10),  # 12 computed, last pair dropped
        ((3, 1), 6),
        ((2, 3, 4), 12),
        ((2, 3, 4), 13),
        ((3, 2, 2), 6),
    ],
)
def test_positional_encodings_package_parity(sizes, channels):
    module = {1: penc.PositionalEncoding1D, 2: penc.PositionalEncoding2D}.get(
        len(sizes), penc.PositionalEncoding3D
    )(channels)
    reference = module(torch.zeros(1, *sizes, channels))[0]  # float32, (*sizes, C)
    ours = sinusoidal_grid(*sizes, dim=channels, layout="positional_encodings")
    assert_close(ours.reshape(*sizes, channels), reference)


@pytest.mark.parametrize(("height", "width", "dim"), [(4, 4, 16), (3, 5, 8), (1, 7, 12)])
def test_mae_and_timm_layouts_equal_the_2d_functions(height, width, dim):
    for layout in ("mae", "timm"):
        grid = sinusoidal_grid(height, width, dim=dim, layout=layout, dtype=torch.float64)
        flat = sinusoidal_2d(height, width, dim, layout=layout, dtype=torch.float64)
        assert_close(grid, flat, rtol=0, atol=0)


def test_blocks_is_mae_with_its_halves_swapped():
    # timm's interleave_sin_cos=True: [sin r | cos r | sin c | cos c]
    mae = sinusoidal_grid(3, 5, dim=16, layout="mae", dtype=torch.float64)
    blocks = sinusoidal_grid(3, 5, dim=16, layout="blocks", dtype=torch.float64)
    assert_close(blocks, torch.cat((mae[:, 8:], mae[:, :8]), dim=1), rtol=0, atol=0)


def test_blocks_and_timm_formula_in_3d():
    coords = grid_positions(2, 3, 4).double()
    f = 2  # dim 12 / (2 · 3 axes)
    omega = torch.tensor([10000.0 ** (-k / f) for k in range(f)], dtype=torch.float64)
    angles = coords[..., None] * omega  # (3, 24, 2)
    sin, cos = angles.sin(), angles.cos()
    blocks = torch.cat([sin[0], cos[0], sin[1], cos[1], sin[2], cos[2]], dim=-1)
    timm = torch.cat([sin[0], sin[1], sin[2], cos[0], cos[1], cos[2]], dim=-1)
    for layout, expected in (("blocks", blocks), ("timm", timm)):
        got = sinusoidal_grid_encoding(coords, 12, layout=layout, dtype=torch.float64)
        assert_close(got, expected, rtol=0, atol=0)


def test_factorized_is_the_sum_of_1d_encodings():
    coords = grid_positions(3, 4)
    rows = sinusoidal_encoding(coords[0], 8, dtype=torch.float64)
    cols = sinusoidal_encoding(coords[1], 8, dtype=torch.float64)
    got = sinusoidal_grid_encoding(coords, 8, layout="factorized", dtype=torch.float64)
    assert_close(got, rows + cols)


def test_each_axis_owns_its_channels():
    # blocks: moving along the time axis changes only the first third of the channels
    coords = grid_positions(2, 3, 4)
    moved = coords.clone()
    moved[0] += 1
    diff = (sinusoidal_grid_encoding(moved, 12) - sinusoidal_grid_encoding(coords, 12)).abs()
    assert diff[:, :4].min() >= 0 and diff[:, :4].max() > 0 and diff[:, 4:].max() == 0


def test_prefix_tokens_are_zero_rows_before_the_grid():
    table = sinusoidal_grid(4, 4, dim=16, layout="mae", prefix_tokens=1)
    assert table.shape == (17, 16)
    assert not table[0].any()
    assert_close(table[1:], sinusoidal_2d(4, 4, 16))


def test_fractional_coordinates_follow_the_formula():
    coords = torch.tensor([[0.5, 2.25], [1.75, 0.0]], dtype=torch.float64)
    got = sinusoidal_grid_encoding(coords, 4, layout="blocks", dtype=torch.float64)
    expected = torch.stack(
        [
            torch.tensor([math.sin(r), math.cos(r), math.sin(c), math.cos(c)])
            for r, c in coords.T.tolist()
        ]
    ).double()
    assert_close(got, expected)


def test_module_reads_each_calls_grid():
    pe = SinusoidalGrid(num_axes=2, dim=16, layout="mae")
    assert_close(pe(grid_positions(4, 4)), sinusoidal_2d(4, 4, 16))
    assert_close(pe(grid_positions(2, 6)), sinusoidal_2d(2, 6, 16))
    batched = torch.stack([grid_positions(2, 3), grid_positions(3, 2)], dim=1)  # (2, 2, 6)
    out = pe(batched)
    assert out.shape == (2, 6, 16)
    assert_close(out[1], sinusoidal_2d(3, 2, 16))
    one = SinusoidalGrid(num_axes=1, dim=8, layout="positional_encodings")
    assert_close(one(torch.arange(5)), sinusoidal_encoding(torch.arange(5), 8))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: sinusoidal_grid(3, 4, dim=10, layout="blocks"), "dim must be divisible by 4"),
        (lambda: sinusoidal_grid(2, 3, 4, dim=16, layout="timm"), "divisible by 6"),
        (lambda: sinusoidal_grid(2, 3, 4, dim=12, layout="mae"), "'mae' encodes 2 axes"),
        (lambda: sinusoidal_grid(3, 4, dim=9, layout="factorized"), "dim must be even"),
        (lambda: sinusoidal_grid(3, 4, dim=8, layout="sideways"), "layout"),
        (lambda: sinusoidal_grid(3, 4, dim=8, prefix_tokens=-1), "prefix_tokens"),
        (lambda: sinusoidal_grid(3, 0, dim=8), r"sizes\[1\]"),
        (lambda: sinusoidal_grid_encoding(torch.tensor([[0.0, math.nan]]), 4), "finite"),
        (lambda: SinusoidalGrid(2, 16)(torch.zeros(3, 5)), r"positions must have shape \(2, seq\)"),
        (lambda: SinusoidalGrid(3, 16), "dim must be divisible by 6"),
    ],
)
def test_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()

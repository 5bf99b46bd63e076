"""2D sin-cos encodings: parity with MAE (re-derived) and timm, layouts, module contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from posenc.additive import Sinusoidal2D, sinusoidal_2d, sinusoidal_2d_encoding
from posenc.encoding.protocols import AdditiveEncoding
from posenc.positions import grid_coordinates
from tests.timm_reference import timm_layer

GRIDS = [(4, 4, 16), (3, 5, 8), (1, 7, 12), (6, 2, 32)]


def mae_2d_sincos(height: int, width: int, dim: int) -> np.ndarray:
    """MAE's get_2d_sincos_pos_embed written out in float64 numpy (rectangular grid)."""
    grid_h = np.arange(height, dtype=np.float64)
    grid_w = np.arange(width, dtype=np.float64)
    grid = np.stack(np.meshgrid(grid_w, grid_h), axis=0)  # w goes first, as in MAE
    grid = grid.reshape(2, 1, height, width)

    def one_axis(embed_dim: int, pos: np.ndarray) -> np.ndarray:
        omega = np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0)
        omega = 1.0 / 10000**omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    emb_h = one_axis(dim // 2, grid[0])  # encodes the column index
    emb_w = one_axis(dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)


def mae_to_timm_permutation(dim: int) -> torch.Tensor:
    """Index p with timm = mae[:, p].

    mae = [sin c | cos c | sin r | cos r], timm = [sin r | sin c | cos r | cos c].
    """
    q = dim // 4
    sin_c, cos_c, sin_r, cos_r = (torch.arange(i * q, (i + 1) * q) for i in range(4))
    return torch.cat([sin_r, sin_c, cos_r, cos_c])


@pytest.mark.parametrize(("height", "width", "dim"), GRIDS)
def test_mae_layout_matches_mae_formula(height: int, width: int, dim: int) -> None:
    expected = torch.from_numpy(mae_2d_sincos(height, width, dim))
    got = sinusoidal_2d(height, width, dim, layout="mae", dtype=torch.float64)
    assert_close(got, expected, rtol=0, atol=1e-12)
    assert_close(sinusoidal_2d(height, width, dim), expected.float())


@pytest.mark.parametrize(("height", "width", "dim"), GRIDS)
def test_timm_layout_is_mae_permuted(height: int, width: int, dim: int) -> None:
    mae = sinusoidal_2d(height, width, dim, layout="mae", dtype=torch.float64)
    timm = sinusoidal_2d(height, width, dim, layout="timm", dtype=torch.float64)
    assert_close(timm, mae[:, mae_to_timm_permutation(dim)], rtol=0, atol=0)


@pytest.mark.parametrize(("height", "width", "dim"), GRIDS)
def test_parity_with_timm(height: int, width: int, dim: int) -> None:
    build_sincos2d_pos_embed = timm_layer("pos_embed_sincos").build_sincos2d_pos_embed

    expected = build_sincos2d_pos_embed([height, width], dim, temperature=10000.0)
    assert_close(sinusoidal_2d(height, width, dim, layout="timm"), expected)
    # The interleaved variant [sin r | cos r | sin c | cos c] is MAE with its halves swapped.
    interleaved = build_sincos2d_pos_embed(
        [height, width], dim, temperature=10000.0, interleave_sin_cos=True
    )
    mae = sinusoidal_2d(height, width, dim, layout="mae")
    assert_close(torch.cat([mae[:, dim // 2 :], mae[:, : dim // 2]], dim=1), interleaved)


def test_first_half_encodes_the_column() -> None:
    table = sinusoidal_2d(3, 4, 8, layout="mae")
    # Tokens 0..3 are row 0: the second half (row) is constant, the first half (column) varies.
    assert_close(table[:4, 4:], table[:1, 4:].expand(4, 4))
    assert not torch.allclose(table[0, :4], table[1, :4])
    assert_close(table[0], torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]))


def test_fractional_coordinates_interpolate_the_formula() -> None:
    rows, cols = torch.tensor([0.5, 2.25]), torch.tensor([1.5, 0.0])
    got = sinusoidal_2d_encoding(rows, cols, 8, dtype=torch.float64)
    omega = torch.tensor([1.0, 10000.0**-0.5], dtype=torch.float64)
    c, r = cols.double()[:, None] * omega, rows.double()[:, None] * omega
    assert_close(got, torch.cat([c.sin(), c.cos(), r.sin(), r.cos()], dim=1))


@pytest.mark.parametrize("layout", ["mae", "timm"])
def test_module_returns_table_rows(layout: str) -> None:
    pe = Sinusoidal2D(4, 5, 12, layout=layout)  # type: ignore[arg-type]
    assert isinstance(pe, AdditiveEncoding)
    table = sinusoidal_2d(4, 5, 12, layout=layout)  # type: ignore[arg-type]
    positions = torch.tensor([[0, 19, 7], [3, 3, 12]])
    assert_close(pe(positions), table[positions])
    assert_close(pe(torch.arange(20)), table)
    assert list(pe.parameters()) == []


def test_module_dtype() -> None:
    pe = Sinusoidal2D(2, 2, 8, dtype=torch.float64)
    assert pe(torch.arange(4)).dtype == torch.float64
    assert Sinusoidal2D(2, 2, 8, dtype=torch.bfloat16)(torch.arange(4)).dtype == torch.bfloat16


def test_grid_coordinates_row_major() -> None:
    rows, cols = grid_coordinates(torch.arange(6), 2, 3)
    assert_close(rows, torch.tensor([0, 0, 0, 1, 1, 1]))
    assert_close(cols, torch.tensor([0, 1, 2, 0, 1, 2]))


@pytest.mark.parametrize("bad", [-1, 16, 100])
def test_module_rejects_out_of_grid_positions(bad: int) -> None:
    pe = Sinusoidal2D(4, 4, 8)
    with pytest.raises(ValueError, match=r"positions.*height=4, width=4"):
        pe(torch.tensor([0, bad]))


def test_module_rejects_fractional_and_bad_positions() -> None:
    pe = Sinusoidal2D(4, 4, 8)
    with pytest.raises(ValueError, match="positions"):
        pe(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="positions"):
        pe(torch.zeros(2, 2, 2, dtype=torch.long))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"dim": 6}, "dim"),
        ({"dim": 0}, "dim"),
        ({"height": 0}, "height"),
        ({"width": -2}, "width"),
        ({"base": 0.0}, "base"),
        ({"layout": "interleaved"}, "layout"),
        ({"dtype": torch.int64}, "dtype"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"height": 4, "width": 4, "dim": 8, **kwargs}
    with pytest.raises(ValueError, match=name):
        sinusoidal_2d(**args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=name):
        Sinusoidal2D(**args)  # type: ignore[arg-type]


def test_encoding_rejects_mismatched_coordinates() -> None:
    with pytest.raises(ValueError, match="rows and cols"):
        sinusoidal_2d_encoding(torch.arange(3), torch.arange(4), 8)

"""Grid figures: the numbers behind them (patch similarity, rotary score maps) and that every
registered encoding, including the multi-axis ones, draws."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("matplotlib")

from posenc import viz
from posenc.additive import SinusoidalGrid
from posenc.registry import list_encodings
from posenc.rotary import AxialRotary2D, MultiAxisRotary
from posenc.viz.grids import (
    grid_inputs,
    patch_similarity,
    rotary_score_map,
    similarity_mosaic,
)
from tests.viz.test_base import colorbar_labels, tick_label_overlaps


def test_patch_similarity_is_cosine_similarity():
    table = torch.randn(6, 5, dtype=torch.float64)
    sim = patch_similarity(table, 2, 3)
    unit = table / table.norm(dim=-1, keepdim=True)
    assert_close(sim.reshape(6, 6), unit @ unit.T)
    assert_close(sim[1, 2, 1, 2], torch.tensor(1.0, dtype=torch.float64))
    with pytest.raises(ValueError, match="table must be"):
        patch_similarity(table, 3, 3)


def test_grid_inputs_follow_the_encodings_axes():
    assert grid_inputs(SinusoidalGrid(2, 8), 2, 3).shape == (2, 6)
    assert torch.equal(grid_inputs(AxialRotary2D(8, 2, 3), 2, 3), torch.arange(6))


@pytest.mark.parametrize(
    "encoding",
    [AxialRotary2D(16, 7, 9), MultiAxisRotary.axial(16, 2), MultiAxisRotary.mixed(16, 3)],
    ids=["rope_2d", "axial", "mixed"],
)
def test_rotary_score_map_peaks_at_the_query_and_is_point_symmetric(encoding):
    scores = rotary_score_map(encoding, 7, 9)
    # q = k = ones: the score at Δ = 0 is |q|² = head_dim, and score(Δ) = score(−Δ)
    assert_close(scores[:, 3, 4], torch.full((scores.shape[0],), 16.0, dtype=torch.float64))
    assert_close(scores, scores.flip(-1).flip(-2))
    assert scores.amax() <= 16.0 + 1e-9


@pytest.mark.parametrize("spec", list_encodings(), ids=lambda s: s.name)
def test_every_registered_encoding_draws(spec):
    if spec.family == "none":  # NoPE: no positions to draw, said so
        with pytest.raises(ValueError, match="nothing to plot for 'nope'"):
            viz.plot_encoding(spec.name)
        return
    figure = viz.plot_encoding(spec.name)
    assert figure.axes and any(ax.images or ax.lines for ax in figure.axes)
    assert all(colorbar_labels(figure)), colorbar_labels(figure)  # every colour bar says what
    assert tick_label_overlaps(figure) == []


def test_mrope_ids_figure():
    figure = viz.plot_figure("mrope-ids", version="qwen2_5_vl")
    assert len(figure.axes) == 3 and all(ax.collections for ax in figure.axes)
    with pytest.raises(ValueError, match="kind"):
        viz.plot_figure("mrope-ids", runs=[("audio", 3)])


def test_similarity_mosaic_places_each_patch_map_in_its_block():
    sim = torch.arange(2 * 3 * 2 * 3, dtype=torch.float64).reshape(2, 3, 2, 3)
    mosaic = similarity_mosaic(sim)
    assert mosaic.shape == (2 * 3 - 1, 3 * 4 - 1)
    assert_close(mosaic[3:5, 4:7], sim[1, 1])
    assert torch.isnan(mosaic[2]).all() and torch.isnan(mosaic[:, 3]).all()

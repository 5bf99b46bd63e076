"""Parity with timm's position embeddings on whole tensors: 2D sin-cos layouts, the learned
table's resampling, EVA's rotary embedding (axial, with ``ref_feat_shape`` rescaling) and
RoPE-Mixed (see :mod:`tests.timm_reference` for how timm is reached without torchvision)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.additive import LearnedGrid, resample_grid_table, sinusoidal_grid
from posenc.positions import grid_positions
from posenc.rotary import MultiAxisRotary, rescaled_grid_positions
from tests.timm_reference import timm_layer

GRIDS = [(4, 4, 16), (3, 5, 32), (7, 2, 8)]


@pytest.mark.parametrize(("height", "width", "dim"), GRIDS)
def test_sincos_2d_layouts(height: int, width: int, dim: int) -> None:
    sincos = timm_layer("pos_embed_sincos")
    for interleave, layout in ((False, "timm"), (True, "blocks")):
        expected = sincos.build_sincos2d_pos_embed(
            [height, width], dim, temperature=10000.0, interleave_sin_cos=interleave
        )
        assert_close(sinusoidal_grid(height, width, dim=dim, layout=layout), expected)


@pytest.mark.parametrize(
    ("old", "new", "prefix", "antialias"),
    [
        ((4, 4), (6, 6), 1, True),
        ((4, 4), (6, 6), 1, False),
        ((6, 6), (3, 3), 1, True),  # downsampling: antialias matters
        ((6, 6), (3, 3), 0, False),
        ((3, 5), (4, 7), 2, True),  # non-square, two prefix tokens (CLS + distillation)
    ],
)
def test_resample_abs_pos_embed(old, new, prefix, antialias) -> None:
    pos_embed = timm_layer("pos_embed")
    table = torch.randn(prefix + old[0] * old[1], 12)
    expected = pos_embed.resample_abs_pos_embed(
        table[None], list(new), list(old), num_prefix_tokens=prefix, antialias=antialias
    )[0]
    got = resample_grid_table(table, new, old, prefix_tokens=prefix, antialias=antialias)
    assert_close(got, expected, rtol=0, atol=0)
    module = LearnedGrid(old, 12, prefix_tokens=prefix)
    with torch.no_grad():
        module.weight.copy_(table)
    assert_close(module.resample(new, antialias=antialias).weight.detach(), expected)


def _timm_rotate(sincos, x: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
    return sincos.apply_rot_embed_cat(x, embed)  # adjacent pairs, as EVA


@pytest.mark.parametrize(("feat", "ref"), [((4, 6), None), ((6, 6), (4, 4)), ((3, 8), (6, 4))])
def test_eva_rotary_embedding_cat_is_the_axial_preset(feat, ref) -> None:
    """EVA's ``RotaryEmbeddingCat(in_pixels=False)``: pairs ``[0, d/4)`` read the row, the
    next ``d/4`` the column, ``θ_k = T^(−4k/d)``; ``ref_feat_shape`` rescales positions."""
    sincos = timm_layer("pos_embed_sincos")
    head_dim, base = 16, 10000.0
    rope = sincos.RotaryEmbeddingCat(
        head_dim, temperature=base, in_pixels=False, ref_feat_shape=list(ref) if ref else None
    )
    embed = rope.get_embed(list(feat))
    x = torch.randn(2, 3, feat[0] * feat[1], head_dim)
    expected = _timm_rotate(sincos, x, embed)

    ours = MultiAxisRotary.axial(head_dim, 2, base=base, axis_order=(0, 1))
    pos = grid_positions(*feat) if ref is None else rescaled_grid_positions(*feat, reference=ref)
    got, _ = ours(x, x, pos, pos)
    assert_close(got, expected)


@pytest.mark.parametrize(("heads", "head_dim", "feat"), [(2, 16, (4, 4)), (4, 8, (3, 5))])
def test_rope_mixed_initialization_and_rotation(heads: int, head_dim: int, feat) -> None:
    """timm's ``RotaryEmbeddingMixed`` (RoPE-ViT's ``init_random_2d_freqs``): the same random
    angle per head gives the same frequencies, and the same rotation of every head."""
    sincos = timm_layer("pos_embed_sincos")
    torch.manual_seed(7)
    theirs = sincos.RotaryEmbeddingMixed(heads * head_dim, depth=1, num_heads=heads)
    ours = MultiAxisRotary.mixed(head_dim, heads, generator=torch.Generator().manual_seed(7))
    fx, fy = theirs.freqs.detach()[:, 0]  # column and row frequencies, (heads, d/2)
    assert_close(ours.frequencies.detach(), torch.stack((fy, fx), dim=-1))

    x = torch.randn(2, heads, feat[0] * feat[1], head_dim)
    expected = _timm_rotate(sincos, x, theirs.get_embed(list(feat))[0])
    pos = grid_positions(*feat)
    got, _ = ours(x, x, pos, pos)
    assert_close(got, expected)

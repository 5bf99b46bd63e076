"""posenc.rotary.diffusion: diffusers' axis-split RoPE (FLUX.1, FLUX.2, Wan, HunyuanVideo,
CogVideoX) on whole tensors — cos/sin tables and rotated q/k in float32 against diffusers,
float64 against a re-derivation of diffusers' formula; the scalings per axis; errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.positions import grid_positions
from posenc.rotary import YaRN
from posenc.rotary.diffusion import (
    axes_frequencies,
    cogvideox_axes_dim,
    cogvideox_positions,
    cogvideox_rotary,
    diffusers_tables,
    flux2_ids,
    flux2_rotary,
    flux_ids,
    flux_rotary,
    hunyuan_video_rotary,
    video_axes_rotary,
    wan_axes_dim,
    wan_rotary,
)
from posenc.rotary.scaling import NTKAware

F64 = torch.float64


def qk(head_dim: int, seq: int, dtype: torch.dtype, heads: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shape = (2, heads, seq, head_dim)
    return (
        torch.randn(shape, generator=g, dtype=F64).to(dtype),
        torch.randn(shape, generator=g, dtype=F64).to(dtype),
    )


def reference_tables(axes_dim, base, positions):
    """Float64 re-derivation of diffusers' tables: per axis ``get_1d_rotary_pos_embed(dim,
    pos[a], theta, use_real=True, repeat_interleave_real=True)``, concatenated."""
    cos, sin = [], []
    for axis, dim in enumerate(axes_dim):
        inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=F64) / dim)
        angles = torch.outer(positions[axis].double(), inv)
        cos.append(angles.cos().repeat_interleave(2, dim=1))
        sin.append(angles.sin().repeat_interleave(2, dim=1))
    return torch.cat(cos, dim=-1), torch.cat(sin, dim=-1)


def reference_rotate(x, cos, sin):
    """diffusers ``apply_rotary_emb(use_real_unbind_dim=-1)`` re-derived (any dtype)."""
    real, imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    rotated = torch.stack((-imag, real), dim=-1).flatten(-2)
    return x * cos + rotated * sin


PRESETS = {
    "flux": (flux_rotary, (16, 56, 56), 1e4, lambda: flux_ids(5, 3, 4)),
    "flux2": (flux2_rotary, (32, 32, 32, 32), 2000.0, lambda: flux2_ids(5, 3, 4)),
    "wan": (wan_rotary, (44, 42, 42), 1e4, lambda: grid_positions(3, 4, 5)),
    "hunyuan_video": (hunyuan_video_rotary, (16, 56, 56), 256.0, lambda: grid_positions(3, 4, 5)),
    "cogvideox": (cogvideox_rotary, (16, 24, 24), 1e4, lambda: grid_positions(3, 4, 5)),
}


# ---- float64: the formula, whole tables and rotations -------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_float64_tables_and_rotation_equal_the_rederivation(name):
    build, axes_dim, base, ids = PRESETS[name]
    rope, positions = build(), ids()
    cos, sin = diffusers_tables(rope, positions, F64)
    ref_cos, ref_sin = reference_tables(axes_dim, base, positions)
    assert_close(cos, ref_cos, rtol=0, atol=1e-15)
    assert_close(sin, ref_sin, rtol=0, atol=1e-15)
    q, k = qk(rope.head_dim, positions.shape[-1], F64)
    q2, k2 = rope(q, k, positions, positions)
    assert_close(q2, reference_rotate(q, ref_cos, ref_sin))
    assert_close(k2, reference_rotate(k, ref_cos, ref_sin))


def test_axis_splits_are_the_models():
    assert wan_axes_dim(128) == (44, 42, 42)
    assert wan_axes_dim(64) == (24, 20, 20)  # 2 * (64 // 6) = 20
    assert cogvideox_axes_dim(64) == (16, 24, 24)
    assert flux_rotary().frequencies.shape == (64, 3)
    assert flux2_rotary().frequencies.shape == (64, 4)


def test_flux_text_tokens_are_not_rotated():
    rope, ids = flux_rotary(), flux_ids(3, 2, 2)
    q, k = qk(128, ids.shape[-1], F64)
    q2, _ = rope(q, k, ids, ids)
    assert torch.equal(q2[..., :3, :], q[..., :3, :])  # ids all 0: identity
    assert not torch.equal(q2[..., 4:, :], q[..., 4:, :])


# ---- diffusers parity (float32: diffusers' tables are float32) ----------------------------


@pytest.fixture
def embeddings():
    """diffusers' ``models.embeddings`` (the tests skip without diffusers)."""
    return pytest.importorskip("diffusers.models.embeddings", reason="the parity reference")


def check_parity(embeddings, rope, positions, cos_ref, sin_ref):
    cos, sin = diffusers_tables(rope, positions)
    assert cos.dtype == cos_ref.dtype == torch.float32
    assert_close(cos, cos_ref)
    assert_close(sin, sin_ref)
    q, k = qk(rope.head_dim, positions.shape[-1], torch.float32)
    q2, k2 = rope(q, k, positions, positions)
    rotate = embeddings.apply_rotary_emb  # use_real_unbind_dim=-1: adjacent pairs
    assert_close(q2, rotate(q, (cos_ref, sin_ref), use_real=True, use_real_unbind_dim=-1))
    assert_close(k2, rotate(k, (cos_ref, sin_ref), use_real=True, use_real_unbind_dim=-1))


@pytest.mark.parametrize(("text_len", "height", "width"), [(0, 2, 3), (7, 6, 5), (4, 16, 16)])
def test_flux_equals_diffusers(text_len, height, width, embeddings):
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    ids = flux_ids(text_len, height, width)
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(ids.T.float())
    check_parity(embeddings, flux_rotary(), ids, cos, sin)


def test_flux2_equals_diffusers(embeddings):
    from diffusers.models.transformers.transformer_flux2 import Flux2PosEmbed

    ids = flux2_ids(6, 5, 7)
    cos, sin = Flux2PosEmbed(theta=2000, axes_dim=[32, 32, 32, 32])(ids.T.float())
    check_parity(embeddings, flux2_rotary(), ids, cos, sin)


@pytest.mark.parametrize(("head_dim", "grid"), [(128, (3, 4, 5)), (64, (5, 2, 3))])
def test_wan_equals_diffusers(head_dim, grid, embeddings):
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    embed = WanRotaryPosEmbed(head_dim, (1, 2, 2), max_seq_len=64)
    latents = torch.zeros(1, 1, grid[0], 2 * grid[1], 2 * grid[2])
    cos, sin = embed(latents)  # (1, seq, 1, head_dim)
    check_parity(
        embeddings, wan_rotary(head_dim), grid_positions(*grid), cos[0, :, 0], sin[0, :, 0]
    )


def test_hunyuan_video_equals_diffusers(embeddings):
    from diffusers.models.transformers.transformer_hunyuan_video import (
        HunyuanVideoRotaryPosEmbed,
    )

    embed = HunyuanVideoRotaryPosEmbed(2, 1, [16, 56, 56], theta=256.0)
    cos, sin = embed(torch.zeros(1, 1, 5, 8, 12))  # grid (5, 4, 6)
    check_parity(embeddings, hunyuan_video_rotary(), grid_positions(5, 4, 6), cos, sin)


@pytest.mark.parametrize(
    ("grid", "frames", "crops", "grid_type"),
    [
        ((6, 9), 4, ((0, 0), (6, 9)), "linspace"),  # the base size: integer positions
        ((6, 9), 3, ((1, 0), (5, 9)), "linspace"),  # a crop: fractional h
        ((1, 4), 2, ((0, 2), (3, 7)), "linspace"),  # one row: h = top
        ((5, 7), 3, None, "slice"),  # CogVideoX 1.5
    ],
)
def test_cogvideox_equals_diffusers(grid, frames, crops, grid_type, embeddings):
    extra = {"max_size": (8, 10)} if grid_type == "slice" else {}
    cos, sin = embeddings.get_3d_rotary_pos_embed(
        64, crops, grid, frames, theta=10000, grid_type=grid_type, **extra
    )
    positions = cogvideox_positions(grid, frames, crops_coords=crops, grid_type=grid_type)
    check_parity(embeddings, cogvideox_rotary(64), positions, cos, sin)


# ---- scalings per axis ---------------------------------------------------------------------


def test_scaled_axis_uses_its_own_width():
    scaling = NTKAware(3.0)
    freqs = axes_frequencies([4, 8], 100.0, [None, scaling])
    assert torch.equal(freqs[:2, 0], torch.tensor([1.0, 0.1], dtype=F64))
    assert torch.equal(freqs[2:, 1], scaling.inv_freq(8, 100.0))
    assert torch.equal(freqs[:2, 1], torch.zeros(2, dtype=F64))


def test_attention_factor_must_be_shared():
    yarn = YaRN(2.0, 32)
    rope = flux_rotary(scalings=[yarn] * 3)
    assert rope.attention_factor == pytest.approx(0.1 * math.log(2.0) + 1.0)
    with pytest.raises(ValueError, match="scalings must share one attention factor"):
        flux_rotary(scalings=[None, yarn, yarn])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"head_dim": 8, "axes_dim": [4, 3]}, r"axes_dim\[1\]"),
        ({"head_dim": 8, "axes_dim": [4, 6]}, "sum to at most head_dim"),
        ({"head_dim": 8, "axes_dim": []}, "axes_dim must be a non-empty"),
        ({"head_dim": 8, "axes_dim": [4, 4], "scalings": [None]}, "one Scaling or None per axis"),
        ({"head_dim": 8, "axes_dim": [4, 4], "scalings": [None, 2.0]}, r"scalings\[1\]"),
        ({"head_dim": 8, "axes_dim": [4, 4], "layout": "odd"}, "layout"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        video_axes_rotary(**kwargs)


def test_bad_positions_and_splits_raise():
    with pytest.raises(ValueError, match="head_dim must be divisible by 16"):
        cogvideox_axes_dim(40)
    with pytest.raises(ValueError, match="crops_coords must be None"):
        cogvideox_positions((2, 2), 1, crops_coords=((0, 0), (2, 2)), grid_type="slice")
    with pytest.raises(ValueError, match="grid_type"):
        cogvideox_positions((2, 2), 1, grid_type="cube")
    with pytest.raises(ValueError, match="text_len"):
        flux_ids(-1, 2, 2)
    with pytest.raises(ValueError, match="length-dependent"):
        flux_rotary(scalings=[None, YaRN(2.0, 32, dynamic=True), None])

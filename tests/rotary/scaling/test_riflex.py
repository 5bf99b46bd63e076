"""RIFLEx: the frequency vector against a float64 re-derivation of the reference
(thu-ml/RIFLEx ``get_1d_rotary_pos_embed_riflex``), the intrinsic-frequency rule (paper
Eq. 7), the one-period property over ``L·s`` frames, the temporal axis of the video presets
(tables and rotation; diffusers' HunyuanVideo tables with the reference's temporal block),
errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.positions import grid_positions
from posenc.rotary import rope_inv_freq
from posenc.rotary.diffusion import diffusers_tables, hunyuan_video_rotary, wan_rotary
from posenc.rotary.scaling import RIFLEx, riflex_intrinsic_k

F64 = torch.float64


def reference_riflex_freqs(dim, theta, k, test_length):
    """``get_1d_rotary_pos_embed_riflex``'s frequencies re-derived in float64."""
    freqs = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=F64)[: dim // 2] / dim)
    freqs[k - 1] = 0.9 * 2 * torch.pi / test_length
    return freqs


@pytest.mark.parametrize(
    ("dim", "base", "k", "train_length", "factor"),
    [(16, 256.0, 4, 33, 2.0), (16, 1e4, 2, 13, 2.0), (44, 1e4, 6, 21, 3.0), (8, 100.0, 1, 5, 1.5)],
)
def test_frequencies_equal_the_reference(dim, base, k, train_length, factor):
    riflex = RIFLEx(factor=factor, train_length=train_length, k=k)
    got = riflex.inv_freq(dim, base)
    assert got.dtype == F64
    assert_close(
        got, reference_riflex_freqs(dim, base, k, train_length * factor), rtol=1e-15, atol=0
    )
    plain = rope_inv_freq(dim, base)
    others = torch.arange(dim // 2) != k - 1
    assert torch.equal(got[others], plain[others])  # untouched, bit for bit


@pytest.mark.parametrize(("base", "dim", "frame", "k"), [(256.0, 16, 66, 4), (1e4, 16, 26, 2)])
def test_intrinsic_k_of_the_references_readme(base, dim, frame, k):
    assert riflex_intrinsic_k(dim, base, frame) == k
    riflex = RIFLEx(factor=2.0, train_length=frame // 2, repetition_frame=frame)
    assert riflex.intrinsic_k(dim, base) == k
    assert torch.equal(riflex.inv_freq(dim, base), RIFLEx(2.0, frame // 2, k=k).inv_freq(dim, base))


@pytest.mark.parametrize("frame", [3.0, 10.0, 40.0, 66.0, 500.0, 1e5])
def test_intrinsic_k_has_the_closest_period(frame):
    periods = [2 * math.pi / float(t) for t in rope_inv_freq(24, 1e4)]
    k = riflex_intrinsic_k(24, 1e4, frame)
    assert all(abs(periods[k - 1] - frame) <= abs(p - frame) for p in periods)


@pytest.mark.parametrize("margin", [0.9, 1.0, 0.5])
def test_intrinsic_phase_stays_within_one_period(margin):
    # HunyuanVideo's temporal axis, 33 latent frames extended 2x: plain RoPE's component 4
    # (period 50.3 frames) turns more than once over the 66 frames; RIFLEx's does not.
    train, factor, k = 33, 2.0, 4
    frames = torch.arange(int(train * factor), dtype=F64)
    plain = rope_inv_freq(16, 256.0)
    riflex = RIFLEx(factor, train, k=k, margin=margin).inv_freq(16, 256.0)
    assert float(frames[-1] * plain[k - 1]) > 2 * math.pi
    phases = frames * riflex[k - 1]
    assert float(phases.max()) < 2 * math.pi
    assert riflex[k - 1] == pytest.approx(margin * 2 * math.pi / (train * factor), rel=1e-15)
    assert riflex[k - 1] < plain[k - 1]  # lowered


def test_temporal_axis_of_a_video_preset():
    riflex = RIFLEx(factor=2.0, train_length=4, k=2)
    rope = hunyuan_video_rotary(scalings=[riflex, None, None])
    plain = hunyuan_video_rotary()
    expected = plain.frequencies.clone()
    expected[1, 0] = 0.9 * 2 * math.pi / 8
    assert torch.equal(rope.frequencies, expected)  # only pair 1 of the time block moves
    positions = grid_positions(8, 2, 3)
    cos, sin = diffusers_tables(rope, positions, F64)
    inv_t = reference_riflex_freqs(16, 256.0, 2, 8)
    angles = torch.outer(positions[0].double(), inv_t)
    assert_close(cos[:, :16], angles.cos().repeat_interleave(2, dim=1), rtol=0, atol=1e-15)
    assert_close(sin[:, :16], angles.sin().repeat_interleave(2, dim=1), rtol=0, atol=1e-15)
    plain_cos, _ = diffusers_tables(plain, positions, F64)
    assert torch.equal(cos[:, 16:], plain_cos[:, 16:])


def test_wan_temporal_axis_rotation():
    riflex = RIFLEx(factor=2.0, train_length=3, k=3)
    rope = wan_rotary(64, scalings=[riflex, None, None])
    positions = grid_positions(6, 2, 2)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, positions.shape[-1], 64, generator=g, dtype=F64)
    cos, sin = diffusers_tables(rope, positions, F64)
    real, imag = q.reshape(*q.shape[:-1], -1, 2).unbind(-1)
    expected = q * cos + torch.stack((-imag, real), dim=-1).flatten(-2) * sin
    q2, _ = rope(q, q.clone(), positions, positions)
    assert_close(q2, expected)
    assert rope.frequencies[2, 0] == pytest.approx(0.9 * 2 * math.pi / 6, rel=1e-15)


def test_diffusers_hunyuan_tables_with_the_reference_temporal_block():
    """diffusers (0.42.1) has no RIFLEx option; the reference patches the temporal
    ``get_1d_rotary_pos_embed`` call of HunyuanVideo's rotary. Emulate that patch on
    diffusers' tables: the time block from the reference formula (float32, as the reference),
    the rest diffusers'."""
    pytest.importorskip("diffusers")
    from diffusers.models.transformers.transformer_hunyuan_video import (
        HunyuanVideoRotaryPosEmbed,
    )

    frames = 10
    cos_ref, sin_ref = HunyuanVideoRotaryPosEmbed(1, 1, [16, 56, 56], theta=256.0)(
        torch.zeros(1, 1, frames, 3, 2)
    )
    positions = grid_positions(frames, 3, 2)
    inv = reference_riflex_freqs(16, 256.0, 4, frames).float()
    angles = torch.outer(positions[0].float(), inv)
    cos_ref[:, :16] = angles.cos().repeat_interleave(2, dim=1)
    sin_ref[:, :16] = angles.sin().repeat_interleave(2, dim=1)
    rope = hunyuan_video_rotary(scalings=[RIFLEx(2.0, frames // 2, k=4), None, None])
    cos, sin = diffusers_tables(rope, positions)
    assert_close(cos, cos_ref)
    assert_close(sin, sin_ref)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"factor": 0.5, "train_length": 4, "k": 1}, "factor"),
        ({"factor": 2.0, "train_length": 0, "k": 1}, "train_length"),
        ({"factor": 2.0, "train_length": 4}, "exactly one of k"),
        ({"factor": 2.0, "train_length": 4, "k": 1, "repetition_frame": 8}, "exactly one of k"),
        ({"factor": 2.0, "train_length": 4, "k": 0}, "k"),
        ({"factor": 2.0, "train_length": 4, "repetition_frame": -1.0}, "repetition_frame"),
        ({"factor": 2.0, "train_length": 4, "k": 1, "margin": 1.5}, r"margin must be in \(0, 1\]"),
        ({"factor": 2.0, "train_length": 4, "k": 1, "margin": 0.0}, "margin"),
    ],
)
def test_bad_fields_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RIFLEx(**kwargs)


def test_k_beyond_the_axis_raises():
    with pytest.raises(ValueError, match=r"k must be <= rotary_dim / 2 = 8"):
        RIFLEx(2.0, 4, k=9).inv_freq(16, 256.0)

"""LongRoPE, Llama 3 and proportional RoPE: parity with HF ``ROPE_INIT_FUNCTIONS`` over a grid."""

from __future__ import annotations

import itertools

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.scaling import Llama3, LongRoPE, Proportional
from tests.rotary.scaling.hf_reference import (
    BASES,
    DIMS,
    FACTORS,
    ORIGINALS,
    assert_matches_hf,
    hf_init,
)


@pytest.mark.parametrize(("head_dim", "partial"), [(64, 1.0), (96, 1.0), (128, 0.5)])
@pytest.mark.parametrize("base", BASES)
def test_longrope_matches_hf_below_and_above_the_switch(
    head_dim: int, partial: float, base: float
) -> None:
    rotary_dim = int(head_dim * partial)
    generator = torch.Generator().manual_seed(rotary_dim)
    short = (1 + torch.rand(rotary_dim // 2, generator=generator)).tolist()
    long = (1 + 30 * torch.rand(rotary_dim // 2, generator=generator)).tolist()
    for factor, original in itertools.product([None, 1.0, 2.0, 32.0], ORIGINALS):
        max_pos = 32 * original
        params = {
            "short_factor": short,
            "long_factor": long,
            "original_max_position_embeddings": original,
            "rope_theta": base,
        }
        if factor is not None:
            params["factor"] = factor
        ours = LongRoPE(short, long, original, factor=factor, max_position_embeddings=max_pos)
        for length in (None, original, original + 1, 4 * original):
            hf = hf_init(
                "longrope",
                head_dim,
                params,
                partial=partial,
                max_position_embeddings=max_pos,
                seq_len=length,
            )
            assert_matches_hf(ours, rotary_dim, base, hf, seq_len=length)
            expected = long if length is not None and length > original else short
            torch.testing.assert_close(
                ours.inv_freq(rotary_dim, base, seq_len=length),
                rope_inv_freq(rotary_dim, base) / torch.tensor(expected, dtype=torch.float64),
            )


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_llama3_matches_hf(head_dim: int, partial: float, base: float) -> None:
    # (1, 1) and (2, 2): low == high, Llama-4 Scout's empty smoothing band.
    freq_factors = [(1.0, 4.0), (1.0, 1.0), (2.0, 2.0), (0.5, 8.0)]
    for factor, original, (low, high) in itertools.product(FACTORS, [2048, 8192], freq_factors):
        params = {
            "factor": factor,
            "low_freq_factor": low,
            "high_freq_factor": high,
            "original_max_position_embeddings": original,
            "rope_theta": base,
        }
        hf = hf_init("llama3", head_dim, params, partial=partial)
        ours = Llama3(factor, low, high, original)
        assert_matches_hf(ours, int(head_dim * partial), base, hf, blend_factor=factor)


@pytest.mark.parametrize("head_dim", [64, 128, 96])
@pytest.mark.parametrize("base", BASES)
def test_proportional_matches_hf(head_dim: int, base: float) -> None:
    for partial, factor in itertools.product([0.25, 0.5, 1.0], [1.0, 2.0]):
        params = {"factor": factor, "partial_rotary_factor": partial, "rope_theta": base}
        hf = hf_init("proportional", head_dim, params)
        ours = Proportional(partial, factor)
        assert_matches_hf(ours, head_dim, base, hf)
        got = ours.inv_freq(head_dim, base)
        assert (got[int(partial * head_dim // 2) :] == 0).all()


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

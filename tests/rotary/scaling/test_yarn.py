"""YaRN: parity with HF ``ROPE_INIT_FUNCTIONS["yarn"]`` over a grid, its attention factor and
ramp guard."""

from __future__ import annotations

import itertools

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.scaling import YaRN
from tests.rotary.scaling.hf_reference import (
    BASES,
    DIMS,
    FACTORS,
    ORIGINALS,
    assert_matches_hf,
    hf_init,
)


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_yarn_matches_hf(head_dim: int, partial: float, base: float) -> None:
    betas = [(32.0, 1.0), (16.0, 2.0)]
    for factor, original, (beta_fast, beta_slow), truncate in itertools.product(
        FACTORS, ORIGINALS, betas, [True, False]
    ):
        params = {
            "factor": factor,
            "original_max_position_embeddings": original,
            "beta_fast": beta_fast,
            "beta_slow": beta_slow,
            "truncate": truncate,
            "rope_theta": base,
        }
        hf = hf_init("yarn", head_dim, params, partial=partial, max_position_embeddings=original)
        ours = YaRN(factor, original, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate)
        assert_matches_hf(ours, int(head_dim * partial), base, hf, blend_factor=factor)


@pytest.mark.parametrize("factor", [1.0, 4.0, 40.0])
def test_yarn_attention_factor_matches_hf(factor: float) -> None:
    combos = [  # (mscale, mscale_all_dim, attention_factor override)
        (None, None, None),
        (1.0, 1.0, None),  # DeepSeek-V3: A = 1
        (0.707, 0.707, None),  # DeepSeek-V2
        (1.0, 0.5, None),
        (1.0, 0.0, None),  # 0 means unset: back to 0.1 ln s + 1
        (None, 1.0, None),
        (None, None, 0.5),  # HF key attention_factor
        (1.0, 1.0, 1.25),  # the override wins
    ]
    for mscale, mscale_all_dim, override in combos:
        params: dict = {"factor": factor, "original_max_position_embeddings": 4096}
        for key, value in (
            ("mscale", mscale),
            ("mscale_all_dim", mscale_all_dim),
            ("attention_factor", override),
        ):
            if value is not None:
                params[key] = value
        hf = hf_init("yarn", 64, {**params, "rope_theta": 1e4})
        ours = YaRN(
            factor,
            4096,
            mscale=mscale,
            mscale_all_dim=mscale_all_dim,
            attention_factor_override=override,
        )
        assert_matches_hf(ours, 64, 1e4, hf, blend_factor=factor)


def test_yarn_equal_betas_hit_the_singular_ramp_guard_like_hf() -> None:
    # beta_fast == beta_slow with truncate=False gives lo == hi: HF adds 0.001 to hi.
    params = {"factor": 8.0, "original_max_position_embeddings": 4096, "truncate": False}
    hf = hf_init("yarn", 64, {**params, "beta_fast": 4.0, "beta_slow": 4.0, "rope_theta": 1e4})
    ours = YaRN(8.0, 4096, beta_fast=4.0, beta_slow=4.0, truncate=False)
    low, high = ours.correction_range(64, 1e4)
    assert low == high
    assert_matches_hf(ours, 64, 1e4, hf, blend_factor=8.0)


def test_factor_one_yarn_is_what_hf_gives() -> None:
    # HF with factor 1: interpolation == extrapolation, so plain frequencies and A = 1.0.
    inv_freq, attention_factor = hf_init(
        "yarn", 64, {"factor": 1.0, "original_max_position_embeddings": 4096, "rope_theta": 1e4}
    )
    torch.testing.assert_close(inv_freq, rope_inv_freq(64, 1e4).float(), rtol=1e-6, atol=0)
    assert attention_factor == 1.0


def test_yarn_frequencies_ignore_a_default_meta_device() -> None:
    # The frequencies are constants built in float64 on the CPU: a model built under
    # `with torch.device("meta")` must get the same ones (the ramp once took the default
    # device and mixed a meta index into CPU frequencies).
    scaling = YaRN(factor=4.0, original_max_position_embeddings=64)
    expected = scaling.inv_freq(32, 10000.0)
    with torch.device("meta"):
        got = scaling.inv_freq(32, 10000.0)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

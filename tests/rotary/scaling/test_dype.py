"""DyPE: the static method exactly at κ = 1, plain RoPE (PI, NTK) and the hard one-turn cut
(YaRN) at t = 0, Dy-NTK against a float64 re-derivation of the authors'
``get_1d_rotary_pos_embed(dype=True)``, monotonicity in t, tables as a function of
(positions, t) through a FLUX preset, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.rotary import rope_inv_freq
from posenc.rotary.diffusion import diffusers_tables, flux_ids, flux_rotary
from posenc.rotary.scaling import DyPE, Linear, NTKAware, YaRN

F64 = torch.float64
STATIC = {
    "pi": Linear(4.0),
    "ntk": NTKAware(3.0),
    "yarn": YaRN(4.0, 64),
    "yarn_betas": YaRN(2.5, 48, beta_fast=16.0, beta_slow=2.0, truncate=False),
}
TIMES = [i / 10 for i in range(11)]


@pytest.mark.parametrize("name", sorted(STATIC))
def test_kappa_one_is_the_static_method_exactly(name):
    static = STATIC[name]
    dype = DyPE(static, lambda_s=1.0, lambda_t=3.0)
    assert dype.strength(1.0) == 1.0
    assert dype.at(1.0) == static
    assert torch.equal(dype.inv_freq(56, 1e4, 1.0), static.inv_freq(56, 1e4))
    assert dype.attention_factor_at(1.0) == static.attention_factor
    # through a whole 3-axis preset: the same tables
    ids = flux_ids(2, 5, 6)
    cos, sin = diffusers_tables(flux_rotary(scalings=[dype.at(1.0)] * 3), ids, F64)
    ref_cos, ref_sin = diffusers_tables(flux_rotary(scalings=[static] * 3), ids, F64)
    assert torch.equal(cos, ref_cos) and torch.equal(sin, ref_sin)


@pytest.mark.parametrize("name", ["pi", "ntk"])
def test_t_zero_is_plain_rope(name):
    dype = DyPE(STATIC[name])
    assert dype.strength(0.0) == 0.0
    assert torch.equal(dype.inv_freq(56, 1e4, 0.0), rope_inv_freq(56, 1e4))


def test_dy_yarn_at_t_zero_cuts_at_one_turn():
    # β_fast^0 = β_slow^0 = 1: frequencies with at least one turn over L0 kept, others / s
    dype = DyPE(YaRN(4.0, 64))
    theta = rope_inv_freq(56, 1e4)
    turns = 64 * theta / (2 * math.pi)
    expected = torch.where(turns >= 1, theta, theta / 4.0)
    assert torch.equal(dype.inv_freq(56, 1e4, 0.0), expected)
    assert dype.attention_factor_at(0.0) == YaRN(4.0, 64).attention_factor  # A stays


def reference_dy_ntk(dim, theta, ntk_factor, t, exponent):
    """The authors' NTK branch re-derived in float64: ``theta * ntk_factor ** (λ t^λ)``."""
    theta_ntk = theta * ntk_factor ** (exponent * t**exponent)
    return 1.0 / theta_ntk ** (torch.arange(0, dim, 2, dtype=F64) / dim)


@pytest.mark.parametrize("t", [0.0, 0.3, 0.75, 1.0])
@pytest.mark.parametrize("exponent", [2.0, 1.0])
def test_dy_ntk_equals_the_authors_formula(t, exponent):
    dim, base, ntk_factor = 56, 1e4, 5.0
    s = ntk_factor ** ((dim - 2) / dim)  # posenc's NTK factor: b' = b s^(d/(d-2))
    dype = DyPE(NTKAware(s), lambda_s=exponent, lambda_t=exponent)
    got = dype.inv_freq(dim, base, t)
    assert_close(got, reference_dy_ntk(dim, base, ntk_factor, t, exponent), rtol=1e-13, atol=0)


@pytest.mark.parametrize("name", sorted(STATIC))
def test_frequencies_do_not_increase_with_t(name):
    dype = DyPE(STATIC[name])
    table = torch.stack([dype.inv_freq(56, 1e4, t) for t in TIMES])  # (times, pairs)
    assert bool((table[1:] <= table[:-1]).all())
    assert bool((table[-1] < table[0]).any())  # and some do decrease


def test_dy_ntk_lowest_frequency_divided_by_s_to_kappa():
    dype = DyPE(NTKAware(3.0), lambda_s=2.0, lambda_t=2.0)
    theta = rope_inv_freq(56, 1e4)
    for t in TIMES:
        kappa = 2.0 * t**2
        assert dype.strength(t) == pytest.approx(kappa)
        got = dype.inv_freq(56, 1e4, t)
        assert float(got[0]) == 1.0  # the highest frequency is kept
        assert float(got[-1]) == pytest.approx(float(theta[-1]) / 3.0**kappa, rel=1e-12)


def test_tables_follow_the_timestep():
    dype = DyPE(YaRN(2.0, 64))
    ids = flux_ids(3, 6, 8)
    tables = {t: diffusers_tables(flux_rotary(scalings=[dype.at(t)] * 3), ids, F64) for t in TIMES}
    assert not torch.equal(tables[1.0][0][3:], tables[0.5][0][3:])
    # the text tokens (ids 0) turn by nothing at any t; only A scales them
    factor = YaRN(2.0, 64).attention_factor
    for cos, sin in tables.values():
        assert_close(cos[:3], torch.full_like(cos[:3], factor), rtol=0, atol=0)
        assert torch.equal(sin[:3], torch.zeros_like(sin[:3]))


@pytest.mark.parametrize("t", [-0.1, 1.5, float("nan"), float("inf"), True, "1"])
def test_timestep_outside_zero_one_raises(t):
    with pytest.raises(ValueError, match=r"t must be a diffusion timestep in \[0, 1\]"):
        DyPE(NTKAware(2.0)).at(t)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scaling": Linear(0.5)}, r"scaling.factor must be >= 1"),
        ({"scaling": NTKAware(2.0), "lambda_s": 0.0}, "lambda_s"),
        ({"scaling": NTKAware(2.0), "lambda_t": -1.0}, "lambda_t"),
        ({"scaling": YaRN(2.0, 64, dynamic=True)}, "static YaRN"),
        ({"scaling": 2.0}, "scaling must be a Linear, NTKAware or YaRN"),
    ],
)
def test_bad_fields_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DyPE(**kwargs)


def test_ntk_factor_below_one_raises_in_the_scaling():
    with pytest.raises(ValueError, match="factor must be a finite number >= 1"):
        DyPE(NTKAware(0.5))

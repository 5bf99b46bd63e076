"""RoPE periods and the scaling laws of RoPE-based extrapolation (Liu et al. 2023)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.rotary import rope_inv_freq
from posenc.rotary.scaling.laws import (
    base_for_context,
    critical_dimension,
    extrapolation_bound,
    full_period_base,
    rope_periods,
)


def test_llama2_critical_dimension_is_the_papers() -> None:
    # Liu et al. 2023, §3: 92 of LLaMA 2's 128 channels see a full period in 4096 tokens.
    assert critical_dimension(128, 10_000.0, 4096) == 92


@pytest.mark.parametrize(
    ("head_dim", "base", "train_len"),
    [(128, 1e4, 4096), (32, 1e4, 128), (64, 5e5, 8192), (128, 500.0, 4096), (16, 1e6, 100)],
)
def test_critical_dimension_is_the_closed_form(head_dim, base, train_len) -> None:
    x = head_dim / 2 * math.log(train_len / (2 * math.pi)) / math.log(base)
    assert not x.is_integer()  # where the closed form and the count agree
    expected = min(head_dim, max(0, 2 * math.ceil(x)))
    assert critical_dimension(head_dim, base, train_len) == expected


def test_periods_are_two_pi_over_the_frequencies() -> None:
    periods = rope_periods(64, 10_000.0)
    assert_close(periods, 2 * math.pi / rope_inv_freq(64, 10_000.0).double())
    # The channels counted are exactly those whose period fits in T.
    train_len = 300.0
    count = critical_dimension(64, 10_000.0, train_len)
    assert bool((periods[: count // 2] <= train_len).all())
    assert bool((periods[count // 2 :] > train_len).all())


def test_extrapolation_bound() -> None:
    # LLaMA 2 tuned at base 1e6: 2π·(1e6)^(92/128) ≈ 129k positions.
    bound = extrapolation_bound(128, 1e6, 4096, pretrain_base=1e4)
    assert bound == pytest.approx(2 * math.pi * 1e6 ** (92 / 128), rel=1e-12)
    assert 128_000 < bound < 130_000
    # As trained, the bound is the period of the first pair past the critical dimension:
    # longer than T, since that pair did not complete its period in training.
    own = extrapolation_bound(128, 1e4, 4096)
    assert own == pytest.approx(rope_periods(128, 1e4)[46].item(), rel=1e-12)
    assert own > 4096
    # The bound grows with the base; the small-base regime has no bound.
    bounds = [extrapolation_bound(128, b, 4096, pretrain_base=1e4) for b in (2e4, 1e5, 1e6, 1e7)]
    assert bounds == sorted(bounds)
    assert extrapolation_bound(128, 500.0, 4096) == math.inf
    # tuned below the pre-training base: unbounded once every period fits in T (Theorem 1)
    assert extrapolation_bound(128, 500.0, 4096, pretrain_base=1e4) == math.inf
    assert extrapolation_bound(32, 10.0, 128, pretrain_base=1e4) == math.inf


def test_no_bound_between_the_regimes() -> None:
    # base 5000 < 1e4 but above the full-period base (~720): the paper gives no bound there
    with pytest.raises(ValueError, match="base must be >= pretrain_base"):
        extrapolation_bound(128, 5000.0, 4096, pretrain_base=1e4)


def test_base_for_context_inverts_the_bound() -> None:
    for context in (16_384.0, 100_000.0, 1_000_000.0):
        base = base_for_context(128, context, 4096)
        bound = extrapolation_bound(128, base, 4096, pretrain_base=1e4)
        assert bound == pytest.approx(context, rel=1e-9)


def test_full_period_base_is_where_every_period_fits() -> None:
    base = full_period_base(128, 4096)
    assert critical_dimension(128, base * (1 - 1e-9), 4096) == 128
    assert critical_dimension(128, base * (1 + 1e-6), 4096) == 126
    assert full_period_base(2, 100) == math.inf


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: rope_periods(7), "head_dim must be even"),
        (lambda: rope_periods(0), "head_dim"),
        (lambda: rope_periods(8, 1.0), "base must be > 1"),
        (lambda: critical_dimension(8, 1e4, 0), "train_len"),
        (lambda: extrapolation_bound(8, 1e4, 5.0), "train_len must be at least 2π"),
        (lambda: extrapolation_bound(8, 1e4, 100, pretrain_base=-3), "pretrain_base"),
        (lambda: base_for_context(8, 3.0, 100), "context must be > 2π"),
        (lambda: full_period_base(8, 1.0), "train_len must be at least 2π"),
    ],
)
def test_bad_input_names_the_argument(call, name) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_periods_dtype() -> None:
    assert rope_periods(8).dtype == torch.float64

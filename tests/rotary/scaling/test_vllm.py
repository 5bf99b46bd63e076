"""vLLM's scalings that HF lacks (``posenc.rotary.scaling.vllm``) and YaRN's
``extrapolation_factor``, each against vLLM's formula re-derived from its code in float64
Python arithmetic (``vllm/model_executor/layers/rotary_embedding``: ``ntk_scaling_rope.py``,
``grok1_scaling_rope.py``, ``deepseek_scaling_rope.py``, ``common.py``). The table is
docs/vllm.md."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache
from posenc.rotary import (
    Linear,
    NTKAware,
    RotaryEmbedding,
    YaRN,
    rope_inv_freq,
    scaling_from_dict,
    scaling_to_dict,
)
from posenc.rotary.scaling import BasePower, FixedNTK, GeometricYaRN, Scaling, scaling_types

F64 = torch.float64
DIMS = [(128, 10000.0), (64, 500000.0), (96, 1e6)]  # (rotary_dim, base)


def _plain(rotary_dim: int, base: float) -> list[float]:
    """vLLM ``RotaryEmbedding._compute_inv_freq``: ``1 / base^(arange(0, d, 2) / d)``."""
    return [1.0 / base ** (i / rotary_dim) for i in range(0, rotary_dim, 2)]


def _vllm_ntk(rotary_dim: int, base: float, s: float, mixed_b: float | None) -> torch.Tensor:
    """``NTKScalingRotaryEmbedding._compute_inv_freq``: without ``mixed_b`` the plain table at
    base ``b·s`` divided by ``s^(2/d)``; with it the plain table divided by ``exp(a k^β)``,
    ``a = ln s / (d/2)^β``, ``k = 1 … d/2``."""
    if mixed_b is None:
        out = [f / s ** (2 / rotary_dim) for f in _plain(rotary_dim, base * s)]
    else:
        a = math.log(s) / (rotary_dim / 2) ** mixed_b
        out = [f / math.exp(a * k**mixed_b) for k, f in enumerate(_plain(rotary_dim, base), 1)]
    return torch.tensor(out, dtype=F64)


def _vllm_mask(
    rotary_dim: int, base: float, original: int, fast: float, slow: float, e: float
) -> list[float]:
    """``(1 − yarn_linear_ramp_mask(yarn_find_correction_range(...))) · extrapolation_factor``
    (``common.py``: floor/ceil, clamped to ``[0, d − 1]``; +0.001 on an empty ramp)."""

    def dim_of(rotations: float) -> float:
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(dim_of(fast)), 0)
    high = min(math.ceil(dim_of(slow)), rotary_dim - 1)
    if low == high:
        high += 0.001
    ramp = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(rotary_dim // 2)]
    return [(1.0 - r) * e for r in ramp]


def _vllm_grok(
    method: str,
    rotary_dim: int,
    base: float,
    s: float,
    original: int,
    fast: float = 32.0,
    slow: float = 1.0,
    e: float = 1.0,
) -> torch.Tensor:
    """``Grok1ScalingRotaryEmbedding._compute_inv_freq`` (``max_position_embeddings = L0``);
    ``"yarn"`` is also ``DeepseekScalingRotaryEmbedding._compute_inv_freq``."""
    pos = [base ** (i / rotary_dim) for i in range(0, rotary_dim, 2)]
    extra = [1.0 / p for p in pos]
    inter = [1.0 / (s * p) for p in pos]
    mask = _vllm_mask(rotary_dim, base, original, fast, slow, e)
    if method == "yarn":
        out = [i * (1 - m) + x * m for i, x, m in zip(inter, extra, mask, strict=True)]
    elif method == "yarn_log":
        out = [
            math.exp(math.log(x) * m + math.log(i) * (1.0 - m))
            for i, x, m in zip(inter, extra, mask, strict=True)
        ]
    else:  # theta_scale
        two_pi = 2 * math.pi
        scaled = base ** (math.log(original * s / two_pi) / math.log(original / two_pi))
        out = [1.0 / scaled ** (i / rotary_dim) for i in range(0, rotary_dim, 2)]
    return torch.tensor(out, dtype=F64)


# ---- parity --------------------------------------------------------------------------------


@pytest.mark.parametrize("mixed_b", [None, 0.5, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("factor", [1.5, 4.0, 16.0])
@pytest.mark.parametrize(("rotary_dim", "base"), DIMS)
def test_fixed_and_mixed_ntk_equal_vllm(
    rotary_dim: int, base: float, factor: float, mixed_b: float | None
) -> None:
    got = FixedNTK(factor, mixed_b=mixed_b).inv_freq(rotary_dim, base)
    assert_close(got, _vllm_ntk(rotary_dim, base, factor, mixed_b), rtol=1e-14, atol=0)


GROK = [
    (rotary_dim, base, factor, original, betas, e)
    for rotary_dim, base in DIMS
    for factor, original in [(4.0, 2048), (8.0, 8192), (40.0, 4096)]
    for betas in [(32.0, 1.0), (16.0, 2.0)]
    for e in [1.0, 0.5, 1.5]
]


@pytest.mark.parametrize(("rotary_dim", "base", "factor", "original", "betas", "e"), GROK)
def test_geometric_yarn_equals_vllm_grok_yarn_log(
    rotary_dim: int, base: float, factor: float, original: int, betas: tuple[float, float], e: float
) -> None:
    fast, slow = betas
    ours = GeometricYaRN(factor, original, beta_fast=fast, beta_slow=slow, extrapolation_factor=e)
    want = _vllm_grok("yarn_log", rotary_dim, base, factor, original, fast, slow, e)
    assert_close(ours.inv_freq(rotary_dim, base), want, rtol=1e-14, atol=0)
    assert ours.attention_factor == 1.0  # Grok-1's cache has no magnitude factor


@pytest.mark.parametrize(("rotary_dim", "base", "factor", "original", "betas", "e"), GROK)
def test_yarn_extrapolation_factor_equals_vllm_deepseek_and_grok_yarn(
    rotary_dim: int, base: float, factor: float, original: int, betas: tuple[float, float], e: float
) -> None:
    """DeepSeek's ``extrapolation_factor`` scales the ramp mask; Grok-1's ``"yarn"`` is the
    same table with ``A = 1``."""
    fast, slow = betas
    ours = YaRN(factor, original, beta_fast=fast, beta_slow=slow, extrapolation_factor=e)
    want = _vllm_grok("yarn", rotary_dim, base, factor, original, fast, slow, e)
    assert_close(ours.inv_freq(rotary_dim, base), want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("original", [7, 2048, 8192, 131072])
@pytest.mark.parametrize("factor", [1.5, 4.0, 40.0])
@pytest.mark.parametrize(("rotary_dim", "base"), DIMS)
def test_base_power_equals_vllm_grok_theta_scale(
    rotary_dim: int, base: float, factor: float, original: int
) -> None:
    got = BasePower(factor, original).inv_freq(rotary_dim, base)
    want = _vllm_grok("theta_scale", rotary_dim, base, factor, original)
    assert_close(got, want, rtol=1e-13, atol=0)


# ---- properties ----------------------------------------------------------------------------

UNIT = [
    FixedNTK(1.0),
    FixedNTK(1.0, mixed_b=2.0),
    GeometricYaRN(1.0, 2048),
    BasePower(1.0, 2048),
]


@pytest.mark.parametrize("scaling", UNIT, ids=repr)
def test_factor_one_is_plain_rope_bit_for_bit(scaling: Scaling) -> None:
    assert torch.equal(scaling.inv_freq(64, 1e4), rope_inv_freq(64, 1e4))


@pytest.mark.parametrize("mixed_b", [None, 0.5, 2.0])
def test_ntk_divides_the_lowest_frequency_by_s_and_moves_the_highest(
    mixed_b: float | None,
) -> None:
    s, d = 8.0, 64
    theta, got = rope_inv_freq(d, 1e4), FixedNTK(s, mixed_b=mixed_b).inv_freq(d, 1e4)
    assert_close(got[-1], theta[-1] / s, rtol=1e-14, atol=0)
    highest = s ** (-1 / (d / 2) ** (mixed_b or 1.0))
    assert_close(got[0], torch.tensor(highest, dtype=F64), rtol=1e-14, atol=0)
    assert bool((got < theta).all()) and bool((got >= theta / s * (1 - 1e-15)).all())
    # unlike bloc97's NTK-aware base change, which keeps θ_0
    assert NTKAware(s).inv_freq(d, 1e4)[0] == 1.0 != got[0]


def test_fixed_ntk_is_mixed_ntk_with_b_one() -> None:
    for d, base in DIMS:
        assert_close(
            FixedNTK(6.0).inv_freq(d, base),
            FixedNTK(6.0, mixed_b=1.0).inv_freq(d, base),
            rtol=1e-14,
            atol=0,
        )


def test_larger_mixed_b_moves_high_frequencies_less() -> None:
    theta = rope_inv_freq(64, 1e4)
    ratios = [FixedNTK(8.0, mixed_b=b).inv_freq(64, 1e4) / theta for b in (0.5, 1.0, 2.0, 4.0)]
    for lower, higher in itertools.pairwise(ratios):
        assert bool((higher[:-1] > lower[:-1]).all())  # the last pair is θ / s for every β


def test_geometric_yarn_keeps_high_divides_low_and_lies_below_linear_yarn() -> None:
    s, original, d, base = 16.0, 4096, 128, 1e4
    theta = rope_inv_freq(d, base)
    geometric = GeometricYaRN(s, original).inv_freq(d, base)
    linear = YaRN(s, original).inv_freq(d, base)
    low, high = YaRN(s, original).correction_range(d, base)
    assert torch.equal(geometric[: int(low) + 1], theta[: int(low) + 1])
    assert_close(geometric[int(high) :], theta[int(high) :] / s, rtol=1e-15, atol=0)
    # the geometric mean of θ and θ/s is below the arithmetic one, inside the ramp
    inside = slice(int(low) + 1, int(high))
    assert bool((geometric[inside] < linear[inside]).all())
    assert bool((geometric[inside] > theta[inside] / s).all())


def test_base_power_stretches_the_wavelength_l0_to_s_l0() -> None:
    s, original = 8.0, 4096
    scaling = BasePower(s, original)
    k = scaling.exponent
    assert math.isclose((2 * math.pi / original) ** k, 2 * math.pi / (s * original), rel_tol=1e-14)
    theta, got = rope_inv_freq(128, 5e5), scaling.inv_freq(128, 5e5)
    assert got[0] == 1.0
    assert_close(got, theta**k, rtol=1e-13, atol=0)


def test_yarn_extrapolation_factor_zero_is_position_interpolation() -> None:
    got = YaRN(4.0, 2048, extrapolation_factor=0.0).inv_freq(64, 1e4)
    assert_close(got, Linear(4.0).inv_freq(64, 1e4), rtol=1e-15, atol=0)
    assert YaRN(4.0, 2048) == YaRN(4.0, 2048, extrapolation_factor=1)  # the default is 1
    unit = YaRN(1.0, 2048, extrapolation_factor=0.5).inv_freq(64, 1e4)
    assert_close(unit, rope_inv_freq(64, 1e4), rtol=1e-15, atol=0)  # s = 1: plain RoPE


# ---- dicts, HF --------------------------------------------------------------------------------

DICTS = [
    FixedNTK(4.0),
    FixedNTK(4.0, mixed_b=2.0),
    GeometricYaRN(8.0, 4096, beta_fast=16.0, extrapolation_factor=0.5),
    BasePower(8.0, 4096),
    YaRN(8.0, 4096, extrapolation_factor=1.5),
]


@pytest.mark.parametrize("scaling", DICTS, ids=repr)
def test_dict_form_round_trips(scaling: Scaling) -> None:
    assert type(scaling).type_name in scaling_types()
    assert scaling_from_dict(scaling_to_dict(scaling)) == scaling


def test_ntk_in_the_dict_form_stays_ntk_aware() -> None:
    """vLLM's ``rope_type="ntk"`` is FixedNTK, posenc's ``"ntk"`` NTK-aware: no alias."""
    assert scaling_from_dict({"type": "ntk", "factor": 2.0}) == NTKAware(2.0)
    assert scaling_from_dict({"type": "fixed_ntk", "factor": 2.0}) == FixedNTK(2.0)


@pytest.mark.parametrize("scaling", DICTS, ids=repr)
def test_hf_export_refuses_what_hf_cannot_express(scaling: Scaling) -> None:
    from posenc.integrations.hf import to_rope_parameters

    with pytest.raises(ValueError, match="scaling"):
        to_rope_parameters(RotaryEmbedding(64, scaling=scaling))
    assert "extrapolation_factor" not in to_rope_parameters(
        RotaryEmbedding(64, scaling=YaRN(8.0, 4096))
    )


# ---- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (FixedNTK, {"factor": 0.5}, "factor must be a finite number >= 1"),
        (FixedNTK, {"factor": 2.0, "mixed_b": 0.0}, "mixed_b"),
        (FixedNTK, {"factor": 2.0, "mixed_b": float("inf")}, "mixed_b"),
        (GeometricYaRN, {"factor": 0.9, "original_max_position_embeddings": 64}, "factor"),
        (GeometricYaRN, {"factor": 2.0, "original_max_position_embeddings": 0}, "original_max"),
        (
            GeometricYaRN,
            {"factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": 0.5},
            "beta_fast must be >= beta_slow",
        ),
        (
            GeometricYaRN,
            {"factor": 2.0, "original_max_position_embeddings": 64, "extrapolation_factor": -1},
            "extrapolation_factor must be a finite number >= 0",
        ),
        (BasePower, {"factor": 0.5, "original_max_position_embeddings": 64}, "factor"),
        (
            BasePower,
            {"factor": 2.0, "original_max_position_embeddings": 6},
            r"original_max_position_embeddings must be an int >= 7",
        ),
        (
            YaRN,
            {"factor": 2.0, "original_max_position_embeddings": 64, "extrapolation_factor": "1"},
            "extrapolation_factor must be a finite number >= 0",
        ),
    ],
)
def test_bad_arguments_are_named(cls: type, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_bad_inv_freq_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="base must be != 1"):
        GeometricYaRN(2.0, 64).inv_freq(16, 1.0)
    with pytest.raises(ValueError, match="rotary_dim"):
        FixedNTK(2.0).inv_freq(7, 1e4)
    with pytest.raises(ValueError, match="seq_len"):
        BasePower(2.0, 64).inv_freq(16, 1e4, seq_len=0)


# ---- end to end ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scaling",
    [FixedNTK(4.0), FixedNTK(4.0, mixed_b=2.0), GeometricYaRN(4.0, 8), BasePower(4.0, 8)],
    ids=repr,
)
def test_attention_kv_cache_decoding_equals_the_full_forward(scaling: Scaling) -> None:
    torch.manual_seed(0)
    rope = RotaryEmbedding(16, base=100.0, scaling=scaling)
    assert_close(rope.inv_freq("cpu").to(F64), scaling.inv_freq(16, 100.0), rtol=1e-6, atol=0)
    attn = Attention(32, 2, pos=rope, causal=True).double()
    x = torch.randn(2, 12, 32, dtype=F64)
    with torch.no_grad():
        full = attn(x)
        cache = KVCache()
        steps = [attn(x[:, :5], cache=cache)]
        steps += [attn(x[:, t : t + 1], cache=cache) for t in range(5, 12)]
        plain = Attention(32, 2, pos=RotaryEmbedding(16, base=100.0), causal=True).double()
        plain.load_state_dict(attn.state_dict())
        unscaled = plain(x)
    assert cache.length == 12
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(full, unscaled)  # the scaling reaches the tables


def test_exported_from_posenc_rotary() -> None:
    import posenc.rotary

    for name in ("BasePower", "FixedNTK", "GeometricYaRN"):
        assert (
            getattr(posenc.rotary, name) is scaling_types()[getattr(posenc.rotary, name).type_name]
        )
        assert name in posenc.rotary.__all__

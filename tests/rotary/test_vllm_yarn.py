"""posenc's YaRN against vLLM's ``YaRNScalingRotaryEmbedding`` (``rope_type="yarn"``, with
``truncate``) and ``DeepseekScalingRotaryEmbedding`` (``"deepseek_yarn"``, ``mscale`` /
``mscale_all_dim``), re-derived from vLLM's code (``rotary_embedding/common.py``,
``yarn_scaling_rope.py``, ``deepseek_scaling_rope.py``) in float64 Python arithmetic."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from posenc.rotary import YaRN


def _correction_range(
    beta_fast: float, beta_slow: float, dim: int, base: float, original: int, truncate: bool
) -> tuple[float, float]:
    """vLLM ``yarn_find_correction_range`` (floor/ceil only with ``truncate``)."""

    def dim_of(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def _vllm_inv_freq(
    dim: int,
    base: float,
    factor: float,
    original: int,
    beta_fast: float,
    beta_slow: float,
    truncate: bool,
    extrapolation_factor: float = 1.0,
) -> list[float]:
    """vLLM ``_compute_inv_freq``: ``inv_freq_mask = (1 - ramp) · extrapolation_factor``."""
    low, high = _correction_range(beta_fast, beta_slow, dim, base, original, truncate)
    if low == high:
        high += 0.001
    out = []
    for i in range(dim // 2):
        pos_freq = base ** (2 * i / dim)
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        mask = (1 - ramp) * extrapolation_factor
        out.append(1 / (factor * pos_freq) * (1 - mask) + 1 / pos_freq * mask)
    return out


def _g(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


GRID = list(
    itertools.product(
        [(128, 10000.0), (64, 10000.0), (64, 150000.0)],  # (rotary_dim, base)
        [(4.0, 2048), (40.0, 4096), (32.0, 4096)],  # (factor, original_max)
        [(32.0, 1.0), (16.0, 2.0), (4.0, 4.0)],  # (beta_fast, beta_slow)
        [True, False],  # truncate
    )
)


@pytest.mark.parametrize(("dims", "scale", "betas", "truncate"), GRID)
def test_inv_freq_equals_vllm_yarn(
    dims: tuple[int, float], scale: tuple[float, int], betas: tuple[float, float], truncate: bool
) -> None:
    (dim, base), (factor, original), (fast, slow) = dims, scale, betas
    ours = YaRN(factor, original, beta_fast=fast, beta_slow=slow, truncate=truncate)
    want = _vllm_inv_freq(dim, base, factor, original, fast, slow, truncate)
    got = ours.inv_freq(dim, base).tolist()
    assert got == pytest.approx(want, rel=1e-14, abs=0)
    if truncate:  # DeepSeek always truncates; the same frequencies
        assert got == pytest.approx(_vllm_inv_freq(dim, base, factor, original, fast, slow, True))


@pytest.mark.parametrize(
    ("mscale", "mscale_all_dim", "override"),
    [
        (None, None, None),
        (1.0, 1.0, None),
        (0.707, 1.0, None),
        (1.0, None, None),
        (1.0, 0.0, None),
        (0.0, 1.0, None),
        (None, None, 0.8),
        (0.707, 0.707, 1.3),
    ],
)
def test_attention_factor_equals_vllm_yarn(
    mscale: float | None, mscale_all_dim: float | None, override: float | None
) -> None:
    """vLLM ``YaRNScalingRotaryEmbedding.mscale``: ``attention_factor``, else the ratio when
    both are non-zero, else ``g(s)`` (HF's rule too)."""
    factor = 40.0
    ours = YaRN(
        factor,
        4096,
        mscale=mscale,
        mscale_all_dim=mscale_all_dim,
        attention_factor_override=override,
    )
    if override is not None:
        want = override
    elif mscale and mscale_all_dim:
        want = _g(factor, mscale) / _g(factor, mscale_all_dim)
    else:
        want = _g(factor)
    assert ours.attention_factor == pytest.approx(want, rel=1e-15, abs=0)


@pytest.mark.parametrize(
    ("mscale", "mscale_all_dim"),
    [(1.0, 1.0), (0.707, 0.707), (0.707, 1.0), (1.0, 0.0), (1.0, None), (2.0, 0.5)],
)
def test_attention_factor_equals_vllm_deepseek_yarn(
    mscale: float, mscale_all_dim: float | None
) -> None:
    """vLLM ``DeepseekScalingRotaryEmbedding.mscale = g(s, mscale) / g(s, mscale_all_dim) ·
    attn_factor`` (defaults ``mscale=1``, ``mscale_all_dim=0``, ``attn_factor=1``): equal
    wherever both are set (DeepSeek-V2/V3's configs) or ``mscale`` is 1 and
    ``mscale_all_dim`` unset."""
    factor = 40.0
    vllm = _g(factor, mscale) / _g(factor, mscale_all_dim or 0.0)
    ours = YaRN(factor, 4096, mscale=mscale, mscale_all_dim=mscale_all_dim)
    assert ours.attention_factor == pytest.approx(vllm, rel=1e-15, abs=0)


def test_deepseek_yarn_differs_from_hf_where_one_mscale_is_unset() -> None:
    """The corner docs/vllm.md names: ``mscale`` ≠ 1 with ``mscale_all_dim`` unset (0) gives
    vLLM's deepseek_yarn ``g(s, mscale)`` and HF's yarn (posenc) ``g(s, 1)``; no published
    DeepSeek config is in that corner (V2: 0.707/0.707, V3: 1.0/1.0)."""
    factor = 40.0
    vllm = _g(factor, 0.707) / _g(factor, 0.0)
    ours = YaRN(factor, 4096, mscale=0.707, mscale_all_dim=0.0).attention_factor
    assert ours == _g(factor) and abs(ours - vllm) > 0.1


def test_deepseek_v3_preset_equals_vllm_deepseek_yarn() -> None:
    """DeepSeek-V3 (qk_rope_head_dim 64, base 1e4, factor 40, L0 4096, β 32/1, mscale and
    mscale_all_dim 1.0) through vLLM's deepseek_yarn, in float64."""
    from posenc.rotary.presets import DEEPSEEK_V3

    scaling = DEEPSEEK_V3.scaling
    assert isinstance(scaling, YaRN)
    want = _vllm_inv_freq(64, 10000.0, 40.0, 4096, 32.0, 1.0, True)
    got = scaling.inv_freq(DEEPSEEK_V3.head_dim, DEEPSEEK_V3.base)
    assert got.dtype == torch.float64
    assert got.tolist() == pytest.approx(want, rel=1e-14, abs=0)
    assert scaling.attention_factor == _g(40.0, 1.0) / _g(40.0, 1.0) == 1.0

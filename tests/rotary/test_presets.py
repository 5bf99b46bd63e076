"""Model presets: parity with HF for the published configs, and the research-note anchors."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.presets import (
    DEEPSEEK_V3,
    GPT_OSS_20B,
    LLAMA_3_1_8B,
    PHI_3_VISION_128K,
    PRESETS,
    QWEN2_7B,
    RopePreset,
)
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import LongRoPE, YaRN

# The rope fields of each model's published config.json, in HF's rope_parameters form.
HF_ROPE_PARAMETERS = {
    LLAMA_3_1_8B.name: {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 500000.0,
    },
    QWEN2_7B.name: {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
    },
    PHI_3_VISION_128K.name: {
        "rope_type": "longrope",
        "short_factor": list(PHI_3_VISION_128K.scaling.short_factor),
        "long_factor": list(PHI_3_VISION_128K.scaling.long_factor),
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
    },
    GPT_OSS_20B.name: {
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": 4096,
        "rope_theta": 150000.0,
    },
    DEEPSEEK_V3.name: {
        "rope_type": "yarn",
        "factor": 40.0,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
    },
}


def test_presets_are_registered_by_name() -> None:
    assert set(PRESETS) == set(HF_ROPE_PARAMETERS)
    assert all(isinstance(p, RopePreset) and PRESETS[p.name] is p for p in PRESETS.values())


@pytest.mark.parametrize("preset", list(PRESETS.values()), ids=lambda p: p.name)
def test_preset_matches_hf(preset: RopePreset) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = dict(HF_ROPE_PARAMETERS[preset.name])
    config = transformers.LlamaConfig(
        hidden_size=2 * preset.head_dim,
        num_attention_heads=2,
        head_dim=preset.head_dim,
        max_position_embeddings=preset.max_position_embeddings,
        rope_parameters=params,
    )
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](config)
    rope = preset.rope()
    got = rope.inv_freq()
    theta = rope_inv_freq(preset.head_dim, preset.base)
    factor = params.get("factor", 1.0)  # LongRoPE has no blend: nothing is excluded below
    # HF's float32 blend weights: see test_scaling.assert_matches_hf.
    blended = (got < theta * (1 - 1e-9)) & (got > theta / factor * (1 + 1e-9))
    bound = 1e-6 * (inv_freq.double() + torch.where(blended, theta * (1 - 1 / factor), 0.0))
    assert ((got - inv_freq.double()).abs() <= bound).all()
    torch.testing.assert_close(
        got[~blended].float(), inv_freq[~blended], rtol=1e-6, atol=0
    )  # outside the blend: plain 1e-6
    assert rope.attention_factor == attention_factor
    assert (rope.head_dim, rope.base, rope.layout) == (preset.head_dim, preset.base, preset.layout)


@pytest.mark.parametrize("seq_len", [4096, 4097, 131072])
def test_phi_3_128k_preset_switches_factors_like_hf(seq_len: int) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=3072,
        num_attention_heads=32,
        max_position_embeddings=131072,
        rope_parameters=dict(HF_ROPE_PARAMETERS[PHI_3_VISION_128K.name]),
    )
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["longrope"](config, seq_len=seq_len)
    scaling = PHI_3_VISION_128K.scaling
    assert scaling is not None
    got = scaling.inv_freq(96, PHI_3_VISION_128K.base, seq_len=seq_len)
    torch.testing.assert_close(got.float(), inv_freq, rtol=1e-6, atol=0)
    assert scaling.attention_factor == attention_factor
    assert math.isclose(attention_factor, 1.190238, abs_tol=5e-7)


def test_gpt_oss_anchors() -> None:
    scaling = GPT_OSS_20B.scaling
    assert isinstance(scaling, YaRN)
    low, high = scaling.correction_range(GPT_OSS_20B.head_dim, GPT_OSS_20B.base)
    assert (round(low, 4), round(high, 4)) == (8.0928, 17.3980)
    assert round(scaling.attention_factor, 6) == 1.346574


def test_deepseek_v3_attention_factor_is_one() -> None:
    assert DEEPSEEK_V3.scaling is not None and DEEPSEEK_V3.scaling.attention_factor == 1.0
    assert DEEPSEEK_V3.layout == "interleaved"


def test_yarn_correction_range_anchor() -> None:
    # d = 128, b = 1e4, L0 = 4096: corr 20.944 / 45.027, truncated to (20, 46).
    assert YaRN(4.0, 4096).correction_range(128, 1e4) == (20, 46)


def test_llama_3_1_split_29_kept_29_divided_6_smoothed() -> None:
    theta = rope_inv_freq(128, 500000.0)
    wavelength = 2 * math.pi / theta
    kept = wavelength < 8192 / 4
    divided = wavelength > 8192 / 1
    smoothed = ~kept & ~divided
    assert (int(kept.sum()), int(divided.sum()), int(smoothed.sum())) == (29, 29, 6)
    got = LLAMA_3_1_8B.rope().inv_freq()
    torch.testing.assert_close(got[kept], theta[kept], rtol=0, atol=0)
    torch.testing.assert_close(got[divided], theta[divided] / 8, rtol=0, atol=0)
    assert ((got[smoothed] < theta[smoothed]) & (got[smoothed] > theta[smoothed] / 8)).all()


def test_phi_3_128k_attention_factor_anchor() -> None:
    # Phi-3-mini-128k: s = 131072 / 4096 = 32 over L0 = 4096 gives A = 1.190238 whatever the
    # factor lists (no preset: the published 48-entry lists are not reproduced here).
    ones = (1.0,) * 48
    scaling = LongRoPE(ones, ones, 4096, max_position_embeddings=131072)
    assert round(scaling.attention_factor, 6) == 1.190238
    assert RotaryEmbedding(96, scaling=scaling).attention_factor == scaling.attention_factor


def test_preset_rope_takes_device_and_dtype() -> None:
    rope = QWEN2_7B.rope(device="cpu", dtype=torch.bfloat16)
    cos, _ = rope.cos_sin(torch.arange(4))
    assert cos.dtype == torch.bfloat16 and rope.scaling is QWEN2_7B.scaling


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

"""rope_inv_freq: the RoPE frequency convention, checked against HF and rotary-embedding-torch."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq

FP32_ULP = 2.0**-23  # relative spacing of float32 numbers in [1, 2)


@pytest.mark.parametrize("rotary_dim", [2, 8, 64, 128])
@pytest.mark.parametrize("base", [10000.0, 500000.0, 3.5])
def test_matches_formula_in_float64(rotary_dim: int, base: float) -> None:
    expected = torch.tensor(
        [math.pow(base, -2 * i / rotary_dim) for i in range(rotary_dim // 2)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(rope_inv_freq(rotary_dim, base), expected, rtol=1e-15, atol=0)


def test_dtype_and_device_arguments() -> None:
    inv_freq = rope_inv_freq(16, device="cpu", dtype=torch.float32)
    assert inv_freq.dtype == torch.float32
    assert inv_freq.device.type == "cpu"
    torch.testing.assert_close(inv_freq, rope_inv_freq(16).float(), rtol=0, atol=0)


@pytest.mark.parametrize(("head_dim", "base"), [(64, 10000.0), (128, 500000.0), (32, 1e6)])
def test_matches_hf_llama_inv_freq(head_dim: int, base: float) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = transformers.LlamaConfig(
        hidden_size=head_dim * 2,
        num_attention_heads=2,
        head_dim=head_dim,
        rope_theta=base,
        num_hidden_layers=1,
        intermediate_size=8,
        vocab_size=8,
    )
    hf = LlamaRotaryEmbedding(config).inv_freq
    # HF computes in float32, we in float64: the two agree to one float32 rounding.
    torch.testing.assert_close(rope_inv_freq(head_dim, base).float(), hf, rtol=FP32_ULP, atol=0)


@pytest.mark.parametrize(("dim", "theta"), [(32, 10000.0), (16, 500000.0)])
def test_matches_rotary_embedding_torch_freqs(dim: int, theta: float) -> None:
    ret = pytest.importorskip("rotary_embedding_torch")
    theirs = ret.RotaryEmbedding(dim=dim, theta=theta).freqs.detach()
    torch.testing.assert_close(rope_inv_freq(dim, theta).float(), theirs, rtol=FP32_ULP, atol=0)


@pytest.mark.parametrize("rotary_dim", [0, -2, 7, 1, 2.0, True, None])
def test_bad_rotary_dim(rotary_dim: object) -> None:
    with pytest.raises(ValueError, match="rotary_dim"):
        rope_inv_freq(rotary_dim)  # type: ignore[arg-type]


@pytest.mark.parametrize("base", [0.0, -1.0, float("nan"), float("inf"), "1e4"])
def test_bad_base(base: object) -> None:
    with pytest.raises(ValueError, match="base"):
        rope_inv_freq(8, base)  # type: ignore[arg-type]


def test_bad_dtype() -> None:
    with pytest.raises(ValueError, match="dtype"):
        rope_inv_freq(8, dtype=torch.int64)

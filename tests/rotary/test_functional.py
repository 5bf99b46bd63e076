"""RoPE's functions (``rope_angles``, ``rope_cos_sin``, ``apply_rotary``): parity with HF, exactness
in float64, gradients, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.functional import apply_rotary, rope_angles, rope_cos_sin
from posenc.rotary.layouts import rotary_channel_permutation
from posenc.rotary.rope import RotaryEmbedding

LAYOUTS = ["half", "interleaved"]


def hf_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor):
    """cos/sin exactly as HF LlamaRotaryEmbedding.forward builds them (float32 phases)."""
    freqs = positions[..., None].float() * inv_freq.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(64, 64), (64, 16), (80, 32)])
@pytest.mark.parametrize("batched_positions", [False, True])
def test_apply_rotary_matches_hf_apply_rotary_pos_emb(
    head_dim: int, rotary_dim: int, batched_positions: bool
) -> None:
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k = torch.randn(2, 4, 7, head_dim), torch.randn(2, 4, 7, head_dim)
    positions = torch.arange(3, 10)
    if batched_positions:
        positions = torch.stack((positions, positions + 100))
    cos, sin = hf_cos_sin(positions, rope_inv_freq(rotary_dim))
    if cos.dim() == 2:
        hf_cos, hf_sin = cos[None], sin[None]  # HF tables carry a batch axis
    else:
        hf_cos, hf_sin = cos, sin
    # GPT-NeoX partial rotary: HF's function on the rotated slice, the rest passes through.
    q_hf, k_hf = apply_rotary_pos_emb(q[..., :rotary_dim], k[..., :rotary_dim], hf_cos, hf_sin)
    q_hf = torch.cat((q_hf, q[..., rotary_dim:]), dim=-1)
    k_hf = torch.cat((k_hf, k[..., rotary_dim:]), dim=-1)
    # Same tables, same float32 arithmetic: bitwise equal.
    torch.testing.assert_close(apply_rotary(q, cos, sin), q_hf, rtol=0, atol=0)
    torch.testing.assert_close(apply_rotary(k, cos, sin), k_hf, rtol=0, atol=0)
    # Our module (float64 phases) differs from HF only by HF's float32 phase rounding.
    rope = RotaryEmbedding(head_dim, rotary_dim=rotary_dim)
    q_ours, k_ours = rope(q, k, positions, positions)
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=1e-5)
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=1e-5)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_cos_sin_match_hf_llama_rotary_embedding(base: float) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = transformers.LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        head_dim=64,
        rope_theta=base,
        num_hidden_layers=1,
        intermediate_size=8,
        vocab_size=8,
    )
    positions = torch.arange(2**12)[None]
    hf_cos, hf_sin = LlamaRotaryEmbedding(config)(torch.zeros(1), positions)
    cos, sin = rope_cos_sin(positions, rope_inv_freq(64, base))
    # HF's float32 phase m·θ is off by at most m·2^-24 (θ rounding) + m·2^-24 (product
    # rounding); with the two float32 roundings of cos/sin: |Δ| ≤ (m + 1)·2^-23.
    bound = (positions[..., None].double() + 1) * 2.0**-23
    assert bool(((cos.double() - hf_cos.double()).abs() <= bound).all())
    assert bool(((sin.double() - hf_sin.double()).abs() <= bound).all())
    # Where float32 phases are still accurate, the tables agree to float32 precision.
    torch.testing.assert_close(cos[:, :8], hf_cos[:, :8], rtol=0, atol=1e-6)
    torch.testing.assert_close(sin[:, :8], hf_sin[:, :8], rtol=0, atol=1e-6)
    # And HF is exactly the float32 formula that the precision test below calls naive.
    naive_cos, naive_sin = hf_cos_sin(positions, 1.0 / base ** (torch.arange(0, 64, 2) / 64))
    torch.testing.assert_close(hf_cos, naive_cos, rtol=0, atol=0)
    torch.testing.assert_close(hf_sin, naive_sin, rtol=0, atol=0)


def test_interleaved_tables_are_half_tables_permuted() -> None:
    positions, inv_freq = torch.arange(20), rope_inv_freq(12)
    perm = rotary_channel_permutation(12, "half", "interleaved")
    half_tables = rope_cos_sin(positions, inv_freq)
    interleaved_tables = rope_cos_sin(positions, inv_freq, layout="interleaved")
    for half, interleaved in zip(half_tables, interleaved_tables, strict=True):
        torch.testing.assert_close(interleaved, half[..., perm], rtol=0, atol=0)


def test_attention_factor_scales_tables() -> None:
    positions, inv_freq = torch.arange(10), rope_inv_freq(8)
    cos, sin = rope_cos_sin(positions, inv_freq, dtype=torch.float64)
    cos2, sin2 = rope_cos_sin(positions, inv_freq, dtype=torch.float64, attention_factor=1.25)
    torch.testing.assert_close(cos2, 1.25 * cos)
    torch.testing.assert_close(sin2, 1.25 * sin)
    assert RotaryEmbedding(8).attention_factor == 1.0


def test_rope_angles_are_float64_products() -> None:
    positions = torch.tensor([[0.5, 2**20], [3, 2**24 + 1]], dtype=torch.float64)
    inv_freq = rope_inv_freq(6)
    expected = torch.stack([positions * f for f in inv_freq], dim=-1)
    angles = rope_angles(positions, inv_freq)
    assert angles.dtype == torch.float64
    torch.testing.assert_close(angles, expected, rtol=0, atol=0)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_cos_sin_exact_to_float32_up_to_2_pow_20(base: float) -> None:
    head_dim = 128
    positions = torch.cat((torch.randint(0, 2**20, (2048,)), torch.tensor([2**20 - 1, 2**20])))
    theta = torch.tensor(
        [math.pow(base, -2 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64
    )
    angle = positions.double()[:, None] * theta  # float64 reference
    ref_cos, ref_sin = torch.cat((angle, angle), -1).cos(), torch.cat((angle, angle), -1).sin()
    cos, sin = rope_cos_sin(positions, rope_inv_freq(head_dim, base))
    assert cos.dtype == torch.float32
    torch.testing.assert_close(cos.double(), ref_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin.double(), ref_sin, rtol=0, atol=1e-6)
    # Why float64 phases: HF's fp32(m)·fp32(θ) is off by more than 1e-3 at these positions.
    naive_cos, naive_sin = hf_cos_sin(positions, theta.float())
    cos_error = (naive_cos.double() - ref_cos).abs().max().item()
    sin_error = (naive_sin.double() - ref_sin).abs().max().item()
    assert max(cos_error, sin_error) > 1e-3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_apply_rotary(layout: str) -> None:
    x = torch.randn(1, 2, 3, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = rope_cos_sin(torch.arange(3), rope_inv_freq(6), layout=layout, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: apply_rotary(t, cos, sin, layout=layout), (x,))


def test_functions_reject() -> None:
    x, pos, inv_freq = torch.randn(1, 2, 4, 8), torch.arange(4), rope_inv_freq(8)
    cos, sin = rope_cos_sin(pos, inv_freq)
    cases = [
        (lambda: rope_angles(torch.tensor([1.0, float("nan")]), inv_freq), "positions"),
        (lambda: rope_angles(pos.view(1, 1, 4), inv_freq), "positions"),
        (lambda: rope_angles(pos, inv_freq[None]), "inv_freq"),
        (lambda: rope_cos_sin(pos, inv_freq, layout="gptj"), "layout"),
        (lambda: rope_cos_sin(pos, inv_freq, attention_factor=0.0), "attention_factor"),
        (lambda: rope_cos_sin(pos, inv_freq, dtype=torch.int64), "dtype"),
        (lambda: apply_rotary(x, cos, sin, layout="gptj"), "layout"),
        (lambda: apply_rotary(x[0], cos, sin), r"\bx\b"),
        (lambda: apply_rotary(x[..., :6], cos, sin), "rotary_dim"),
        (lambda: apply_rotary(x, cos[..., :7], sin[..., :7]), "rotary_dim"),
        (lambda: apply_rotary(x, cos[:3], sin[:3]), "cos"),
        (lambda: apply_rotary(x, cos, sin[:, :4]), "sin"),
        (lambda: apply_rotary(x, cos.expand(3, 4, 8), sin.expand(3, 4, 8)), "cos"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

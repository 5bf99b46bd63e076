"""Additive GRAPE: the unipotent lift reproduces ALiBi and FoX exactly (float64, whole
tensors); ``GrapeAdditiveBias`` in attention, the KV cache, gradients, errors, meta builds."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache
from posenc.bias import AlibiBias
from posenc.bias.grape_additive import (
    GrapeAdditiveBias,
    grape_additive_logits,
    lift_key,
    lift_query,
    unipotent_action,
)
from posenc.token_state import ForgettingGate

F64 = torch.float64
HEADS, HEAD_DIM = 4, 6


def content(q: Tensor, k: Tensor) -> Tensor:
    return q.to(F64) @ k.to(F64).transpose(-1, -2)


def test_the_action_is_unipotent_and_a_group_homomorphism() -> None:
    s, t = torch.tensor(0.7, dtype=F64), torch.tensor(-2.5, dtype=F64)
    g = unipotent_action(s, 3)
    a = torch.zeros(5, 5, dtype=F64)
    a[3, 4] = 1.0
    assert torch.equal(a @ a, torch.zeros(5, 5, dtype=F64))  # A² = 0: exp(sA) = I + sA
    assert_close(g, torch.eye(5, dtype=F64) + s * a, rtol=0, atol=1e-15)
    assert_close(g @ unipotent_action(t, 3), unipotent_action(s + t, 3), rtol=0, atol=1e-15)
    q, k = torch.randn(2, 3, dtype=F64)
    assert torch.equal(lift_query(q)[3:], torch.tensor([1.0, 0.0], dtype=F64))
    assert torch.equal(lift_key(k)[3:], torch.tensor([0.0, 1.0], dtype=F64))
    assert_close(lift_query(q) @ lift_key(k), q @ k, rtol=0, atol=1e-15)


@pytest.mark.parametrize("batched", [False, True])
def test_alibi_is_the_phase_slope_times_position(batched: bool) -> None:
    """``s_n = m_h n`` gives causal ALiBi: q̂'ᵀk̂' = qᵀk + m_h (k_pos − q_pos), every pair."""
    torch.manual_seed(0)
    q, k = (
        torch.randn(2, HEADS, 3, HEAD_DIM, dtype=F64),
        torch.randn(2, HEADS, 7, HEAD_DIM, dtype=F64),
    )
    q_pos, k_pos = torch.arange(4, 7), torch.arange(7)  # a cache of 4, three new tokens
    if batched:
        q_pos, k_pos = torch.stack((q_pos, q_pos + 10)), torch.stack((k_pos, k_pos + 10))
    alibi = AlibiBias(HEADS, mode="causal")
    slopes = alibi.slopes.view(-1, 1)
    q_phase = (slopes * q_pos.to(F64)[..., None, :]).expand(2, HEADS, 3)
    k_phase = (slopes * k_pos.to(F64)[..., None, :]).expand(2, HEADS, 7)
    lifted = grape_additive_logits(q, k, q_phase, k_phase)
    assert_close(lifted, content(q, k) + alibi.bias(q_pos, k_pos, F64), rtol=0, atol=1e-13)
    grape = GrapeAdditiveBias(HEADS)
    assert torch.equal(grape.bias(q_pos, k_pos, F64), alibi.bias(q_pos, k_pos, F64))


def test_fox_is_the_phase_of_summed_log_forget_gates() -> None:
    """``s_n = −Σ_{t≤n} log f_t`` gives FoX: q̂'ᵀk̂' = qᵀk + c_i − c_j, every pair."""
    torch.manual_seed(1)
    fox = ForgettingGate(dim=8, num_heads=HEADS, dtype=F64)
    with torch.no_grad():
        fox.weight.normal_(std=0.5)
        fox.bias.uniform_(-1.0, 3.0)
    x = torch.randn(2, 9, 8, dtype=F64)
    q, k = (
        torch.randn(2, HEADS, 9, HEAD_DIM, dtype=F64),
        torch.randn(2, HEADS, 9, HEAD_DIM, dtype=F64),
    )
    with torch.no_grad():
        phase = -fox.token_state(x, None, None)  # (batch, heads, seq)
        want = content(q, k) + fox(x)
    assert_close(grape_additive_logits(q, k, phase, phase), want, rtol=0, atol=1e-12)


def test_the_module_is_the_lift_with_learned_slopes() -> None:
    torch.manual_seed(2)
    grape = GrapeAdditiveBias(HEADS)
    with torch.no_grad():
        grape.slopes.uniform_(0.0, 2.0)
    q, k = (
        torch.randn(1, HEADS, 5, HEAD_DIM, dtype=F64),
        torch.randn(1, HEADS, 5, HEAD_DIM, dtype=F64),
    )
    positions = torch.tensor([0.0, 1.5, 2.0, 7.25, 9.0], dtype=F64)  # fractional positions too
    phase = grape.slopes.detach()[:, None] * positions  # (heads, seq)
    want = grape_additive_logits(q, k, phase[None], phase[None]) - content(q, k)
    assert_close(grape.bias(positions, positions, F64), want[0], rtol=0, atol=1e-13)


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_attention_decodes_as_the_full_forward(backend: str) -> None:
    torch.manual_seed(3)
    grape = GrapeAdditiveBias(2)
    with torch.no_grad():
        grape.slopes.uniform_(0.0, 1.0)
    attn = Attention(8, 2, pos=grape, causal=True, backend=Backend(backend, block_size=4))  # type: ignore[arg-type]
    x = torch.randn(2, 7, 8)
    with torch.no_grad():
        full = attn(x)
        cache = KVCache()
        steps = [attn(x[:, :4], cache=cache)] + [
            attn(x[:, t : t + 1], cache=cache) for t in (4, 5, 6)
        ]
    assert_close(torch.cat(steps, dim=1), full)


def test_gradients_reach_the_slopes_and_gradcheck() -> None:
    grape = GrapeAdditiveBias(2, dtype=torch.float32)
    Attention(8, 2, pos=grape, causal=True)(torch.randn(2, 5, 8)).square().sum().backward()
    assert grape.slopes.grad is not None and grape.slopes.grad.abs().sum() > 0
    grape64 = GrapeAdditiveBias(3)
    positions = torch.arange(4, dtype=F64)  # float64 positions: a float64 bias

    def bias(slopes: Tensor) -> Tensor:
        return torch.func.functional_call(grape64, {"slopes": slopes}, (positions, positions))

    assert torch.autograd.gradcheck(bias, (grape64.slopes.detach().clone().requires_grad_(),))


def test_meta_build_then_reset_equals_a_normal_build() -> None:
    with torch.device("meta"):
        meta = GrapeAdditiveBias(5)
    assert meta.slopes.is_meta
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    assert torch.equal(meta.slopes, GrapeAdditiveBias(5).slopes)


def test_bad_arguments_and_calls_are_named() -> None:
    with pytest.raises(ValueError, match="num_heads"):
        GrapeAdditiveBias(0)
    with pytest.raises(ValueError, match="dtype"):
        GrapeAdditiveBias(2, dtype=torch.long)
    grape = GrapeAdditiveBias(2)
    with pytest.raises(ValueError, match="q_pos"):
        grape.bias(torch.tensor([0.0, float("nan")]), torch.arange(2))
    with torch.no_grad():
        grape.slopes[1] = float("inf")
    with pytest.raises(ValueError, match="slopes"):
        grape.bias(torch.arange(2), torch.arange(2))
    with pytest.raises(ValueError, match="pos"):
        Attention(8, 2, pos=GrapeAdditiveBias(2), causal=False)

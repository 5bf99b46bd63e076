"""PoPE: x-transformers parity, the formula in float64, backends, the KV cache, the model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.rotary.pope import PolarEmbedding, polar_frequencies

HEAD_DIM, HEADS = 8, 2


def trained(pope: PolarEmbedding, seed: int = 0) -> PolarEmbedding:
    """Phase biases spread over [−2π, 0] (and a few outside, which the clamp must catch)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        values = torch.rand(pope.phase_bias.shape, generator=generator) * -7.0 + 0.3
        pope.phase_bias.copy_(values)
    return pope


def loop_logits(q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, delta: Tensor) -> Tensor:
    """``Σ_c softplus(q_c) softplus(k_c) cos((i − j)θ_c − δ_hc)`` pair by pair, Python floats."""
    batch, heads, rows, dim = q.shape
    theta = [10000.0 ** (-c / dim) for c in range(dim)]
    d = delta.clamp(-2 * math.pi, 0.0).tolist()
    qs, ks = q.tolist(), k.tolist()
    out = torch.zeros(batch, heads, rows, k.shape[2], dtype=torch.float64)

    def softplus(x: float) -> float:
        return math.log1p(math.exp(x))

    for b in range(batch):
        for h in range(heads):
            for i in range(rows):
                for j in range(k.shape[2]):
                    gap = float(q_pos[i] - k_pos[j])
                    out[b, h, i, j] = sum(
                        softplus(qs[b][h][i][c])
                        * softplus(ks[b][h][j][c])
                        * math.cos(gap * theta[c] - d[h][c])
                        for c in range(dim)
                    )
    return out


def test_logits_equal_the_formula_in_float64() -> None:
    pope = trained(PolarEmbedding(HEAD_DIM, HEADS, dtype=torch.float64))
    q = torch.randn(2, HEADS, 5, HEAD_DIM, dtype=torch.float64)
    k = torch.randn(2, HEADS, 7, HEAD_DIM, dtype=torch.float64)
    q_pos, k_pos = torch.arange(2, 7), torch.arange(7)
    q2, k2 = pope(q, k, q_pos, k_pos)
    assert q2.shape[-1] == k2.shape[-1] == 2 * HEAD_DIM
    expected = loop_logits(q, k, q_pos, k_pos, pope.phase_bias.detach())
    assert_close(q2 @ k2.transpose(-1, -2), expected, rtol=0, atol=1e-12)


def test_matches_x_transformers_polar_embedding() -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    pope = trained(PolarEmbedding(HEAD_DIM, HEADS))
    reference = xt.PolarEmbedding(HEAD_DIM, HEADS)
    with torch.no_grad():  # x-transformers adds its bias to the key's phase: the same logit
        reference.learned_bias.copy_(pope.phase_bias.unsqueeze(1))
    assert_close(reference.inv_freq.double(), polar_frequencies(HEAD_DIM), rtol=1e-6, atol=0)
    q, k = torch.randn(2, 2, HEADS, 33, HEAD_DIM).unbind(0)
    positions = torch.arange(33)
    freqs, bias = reference(positions)
    expected = xt.apply_polar_pos_emb(q, freqs) @ xt.apply_polar_pos_emb(k, freqs + bias).mT
    q2, k2 = pope(q, k, positions, positions)
    assert_close(q2 @ k2.mT, expected, rtol=1e-5, atol=1e-5)


def test_logits_are_relative() -> None:
    pope = trained(PolarEmbedding(HEAD_DIM, HEADS, dtype=torch.float64))
    q = torch.randn(1, HEADS, 4, HEAD_DIM, dtype=torch.float64)
    k = torch.randn(1, HEADS, 6, HEAD_DIM, dtype=torch.float64)

    def logits(shift: int) -> Tensor:
        q2, k2 = pope(q, k, torch.arange(2, 6) + shift, torch.arange(6) + shift)
        return q2 @ k2.mT

    assert_close(logits(0), logits(1000))


BACKENDS = {
    "sdpa": Backend("sdpa"),
    "chunked": Backend("chunked", block_size=3),
    "flex": Backend("flex", compile=False),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("padding", [False, True])
def test_backends_equal_sdpa_and_decoding_the_full_forward(backend: str, padding: bool) -> None:
    dtype = torch.float32 if backend == "flex" else torch.float64  # flex: CPU float32
    torch.manual_seed(0)
    pope = trained(PolarEmbedding(HEAD_DIM, HEADS, dtype=dtype))
    dim = HEAD_DIM * HEADS
    attn = Attention(dim, HEADS, num_kv_heads=1, pos=pope, backend=BACKENDS[backend], dtype=dtype)
    x = torch.randn(2, 11, dim, dtype=dtype)
    real = torch.ones(2, 11, dtype=torch.bool)
    real[0, :3] = False  # left padding (the CPU flash kernel path refuses wider q and k)
    mask = {"key_padding_mask": real} if padding else {}
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    with torch.no_grad():
        full = attn(x, **mask)
        reference = Attention(dim, HEADS, num_kv_heads=1, pos=pope, backend="sdpa", dtype=dtype)
        reference.load_state_dict(attn.state_dict())
        assert_close(full, reference(x, **mask), **tol)
        cache = KVCache()
        steps = [attn(x[:, :5], key_padding_mask=real[:, :5] if padding else None, cache=cache)]
        for i in range(5, 11):
            step_mask = real[:, i : i + 1] if padding else None
            steps.append(attn(x[:, i : i + 1], key_padding_mask=step_mask, cache=cache))
    assert cache.k is not None and cache.k.shape[-1] == 2 * HEAD_DIM
    keep = real.unsqueeze(-1) if padding else torch.ones(1, 1, 1, dtype=torch.bool)
    assert_close(torch.cat(steps, dim=1) * keep, full * keep, **tol)


def test_gradcheck_of_the_phase_bias() -> None:
    pope = trained(PolarEmbedding(4, HEADS, dtype=torch.float64))
    q = torch.randn(1, HEADS, 3, 4, dtype=torch.float64)
    k = torch.randn(1, HEADS, 5, 4, dtype=torch.float64)

    def logits(delta: Tensor) -> Tensor:
        params = {"phase_bias": delta}
        q2, k2 = torch.func.functional_call(
            pope, params, (q, k, torch.arange(2, 5), torch.arange(5))
        )
        return q2 @ k2.mT

    delta = pope.phase_bias.detach().clone().clamp(-6.0, -0.1).requires_grad_(True)
    assert torch.autograd.gradcheck(logits, (delta,))


def test_model_decodes_as_the_full_forward_and_serves_encoders() -> None:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=32, dim=16, depth=2, num_heads=HEADS, pos="pope")
    model = DecoderLM(config).eval()
    tokens = torch.randint(0, 32, (2, 10))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(10)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    logits = EncoderClassifier(config, num_classes=3)(tokens)
    assert logits.shape == (2, 3)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"head_dim": 0, "num_heads": 2}, "head_dim"),
        ({"head_dim": 8, "num_heads": 0}, "num_heads"),
        ({"head_dim": 8, "num_heads": 2, "base": -1.0}, "base"),
        ({"head_dim": 8, "num_heads": 2, "bias_init": "normal"}, "bias_init"),
        ({"head_dim": 8, "num_heads": 2, "dtype": torch.long}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        PolarEmbedding(**kwargs)


def test_attention_refuses_other_heads_and_calls_name_bad_inputs() -> None:
    with pytest.raises(ValueError, match=r"^pos: PolarEmbedding has num_heads=3"):
        Attention(16, HEADS, pos=PolarEmbedding(HEAD_DIM, 3))
    pope = PolarEmbedding(HEAD_DIM, HEADS)
    q = torch.randn(1, HEADS, 4, HEAD_DIM)
    with pytest.raises(ValueError, match=r"^q has last dim 4"):
        pope(q[..., :4], q, torch.arange(4), torch.arange(4))
    with pytest.raises(ValueError, match=r"^k_pos has 3 positions"):
        pope(q, q, torch.arange(4), torch.arange(3))


def test_uniform_init_stays_in_range_and_meta_device_builds() -> None:
    pope = PolarEmbedding(HEAD_DIM, HEADS, bias_init="uniform")
    assert bool((pope.phase_bias <= 0).all() and (pope.phase_bias >= -2 * math.pi).all())
    with torch.device("meta"):
        lazy = PolarEmbedding(HEAD_DIM, HEADS)
    lazy.to_empty(device="cpu")
    lazy.reset_parameters()
    assert bool((lazy.phase_bias == 0).all())

"""FoPE: vLLM's ``FourierRotaryEmbedding`` re-derived in float64 (tables, rotated q and k,
the frequency clipping), properties (RoPE at identity mixing, when scores are relative and
when not), gradients, precision, state and bad input; attention, the cache and the models
are in ``test_fope_attention.py``."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.testing import assert_close

from posenc.rotary import FourierRotaryEmbedding, RotaryEmbedding, fope_inv_freq
from posenc.rotary.hope import hope_rotary

F64 = torch.float64
HEAD_DIM, HEADS, KV_HEADS, L = 16, 4, 2, 64


def make(seed: int = 0, **kw: Any) -> FourierRotaryEmbedding:
    """A float64 FoPE with visible (non-identity) mixing; 3 of 8 frequencies kept at L=64."""
    torch.manual_seed(seed)
    kw = {"train_length": L, **kw}
    fope = FourierRotaryEmbedding(HEAD_DIM, KV_HEADS, init_factor=1.0, dtype=F64, **kw)
    with torch.no_grad():
        for p in (fope.cos_coef, fope.sin_coef):
            p.add_(torch.randn_like(p) * 0.5)
    return fope


def set_coefficients(fope: FourierRotaryEmbedding, cos: Tensor, sin: Tensor) -> None:
    with torch.no_grad():
        fope.cos_coef.copy_(cos.expand_as(fope.cos_coef))
        fope.sin_coef.copy_(sin.expand_as(fope.sin_coef))


# ------------------------------------------------------------ vLLM, re-derived in float64


def vllm_cache(
    head_size: int,
    max_position: int,
    base: float,
    num_inv_freq: int | None,
    cos_coef: Tensor,
    sin_coef: Tensor,
    sep_head: bool,
) -> Tensor:
    """vLLM's ``cos_sin_cache`` ``(max_position, [kv_heads,] 2 · head_size)``: inverse
    frequencies ``1 / base^(arange(0, d, 2) / d)``, the first ``num_inv_freq`` or those
    ``> 2π / max_position``; per-head einsums of cos/sin of ``t · θ`` with the coefficients
    (``[0]`` of them without ``sep_head``); cos padded with 1, sin with 0, to ``head_size //
    2``; each duplicated (NeoX); cos then sin."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_size, 2, dtype=F64) / head_size))
    if num_inv_freq is not None:
        inv_freq = inv_freq[:num_inv_freq]
    else:
        inv_freq = inv_freq[inv_freq > 2.0 * torch.pi / max_position]
    t = torch.arange(max_position, dtype=F64)
    freqs = torch.einsum("j,i -> ji", t, inv_freq)
    if sep_head:
        heads = cos_coef.shape[0]
        pos_cos = freqs.cos().unsqueeze(0).expand(heads, -1, -1)
        pos_sin = freqs.sin().unsqueeze(0).expand(heads, -1, -1)
        sin = torch.einsum("htD, hDd -> thd", pos_sin, sin_coef)
        cos = torch.einsum("htD, hDd -> thd", pos_cos, cos_coef)
    else:
        sin = torch.einsum("tD, Dd -> td", freqs.sin(), sin_coef[0])
        cos = torch.einsum("tD, Dd -> td", freqs.cos(), cos_coef[0])
    sin = F.pad(sin, (0, head_size // 2 - sin.size(-1)), mode="constant", value=0)
    cos = F.pad(cos, (0, head_size // 2 - cos.size(-1)), mode="constant", value=1)
    return torch.cat((torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)), dim=-1)


def vllm_forward(
    cache: Tensor, positions: Tensor, query: Tensor, key: Tensor, head_size: int
) -> tuple[Tensor, Tensor]:
    """vLLM's ``forward_native``: tokens flattened, ``(tokens, heads · head_size)``; with a
    per-head cache the tokens × kv-heads rows each take their query group."""
    cos, sin = cache.index_select(0, positions.flatten()).chunk(2, dim=-1)
    query = query.unflatten(-1, (-1, head_size))
    key = key.unflatten(-1, (-1, head_size))
    q_shape, k_shape = query.shape, key.shape
    if cos.dim() == 3:
        cos, sin = cos.flatten(0, 1), sin.flatten(0, 1)
        query = query.view(cos.size(0), -1, head_size)
        key = key.view(cos.size(0), -1, head_size)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate_neox(x: Tensor) -> Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    query = query * cos + rotate_neox(query) * sin
    key = key * cos + rotate_neox(key) * sin
    return query.view(q_shape), key.view(k_shape)


CONFIGS = {
    "clipped-sep": {"sep": True, "num_inv_freq": None},
    "clipped-shared": {"sep": False, "num_inv_freq": None},
    "first-5-sep": {"sep": True, "num_inv_freq": 5},
}


def _pair(name: str) -> tuple[FourierRotaryEmbedding, Tensor]:
    cfg = CONFIGS[name]
    fope = make(separate_heads=cfg["sep"], num_frequencies=cfg["num_inv_freq"])
    # vLLM keeps (kv_heads, F, F) even when shared and reads [0]
    cos, sin = (p.detach().expand(KV_HEADS, -1, -1) for p in (fope.cos_coef, fope.sin_coef))
    cache = vllm_cache(HEAD_DIM, L, 10000.0, cfg["num_inv_freq"], cos, sin, cfg["sep"])
    return fope, cache


def test_frequency_clipping_matches_vllm_in_float32_and_float64() -> None:
    # vLLM selects in float32; the float64 selection keeps the same ones at these lengths
    for length in (16, 64, 100, 1000, 4096):
        theta32 = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float) / HEAD_DIM))
        kept32 = theta32[theta32 > 2.0 * torch.pi / length]
        assert_close(fope_inv_freq(HEAD_DIM, train_length=length).float(), kept32)
    assert fope_inv_freq(HEAD_DIM, train_length=L).tolist() == pytest.approx(
        [1.0, 10000**-0.125, 0.1]  # 2π/64 = 0.098: 0.0316 and slower are dropped
    )
    assert fope_inv_freq(HEAD_DIM, num_frequencies=5, train_length=L).numel() == 5
    assert fope_inv_freq(HEAD_DIM).numel() == HEAD_DIM // 2


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tables_equal_vllms_cache(name: str) -> None:
    fope, cache = _pair(name)
    positions = torch.arange(L)
    c, s = fope.rotary_tables(positions, F64)  # (sets, seq, half)
    half = HEAD_DIM // 2
    cos, sin = cache.chunk(2, dim=-1)
    if cos.dim() == 2:  # shared: vLLM's (t, d); ours one set
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    assert_close(c, cos[..., :half].transpose(0, 1), rtol=1e-13, atol=1e-13)
    assert_close(s, sin[..., :half].transpose(0, 1), rtol=1e-13, atol=1e-13)
    kept = fope.num_kept
    assert bool((c[..., kept:] == 1).all() and (s[..., kept:] == 0).all())  # dropped pairs


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rotated_q_and_k_equal_vllms_forward(name: str) -> None:
    fope, cache = _pair(name)
    seq = 9
    positions = torch.randint(0, L, (seq,), generator=torch.Generator().manual_seed(1))
    q = torch.randn(1, HEADS, seq, HEAD_DIM, dtype=F64)
    k = torch.randn(1, KV_HEADS, seq, HEAD_DIM, dtype=F64)
    q2, k2 = fope(q, k, positions, positions)
    flat_q = q[0].transpose(0, 1).reshape(seq, HEADS * HEAD_DIM)  # vLLM's token layout
    flat_k = k[0].transpose(0, 1).reshape(seq, KV_HEADS * HEAD_DIM)
    vq, vk = vllm_forward(cache, positions, flat_q, flat_k, HEAD_DIM)
    assert_close(q2[0], vq.transpose(0, 1), rtol=1e-13, atol=1e-13)
    assert_close(k2[0], vk.transpose(0, 1), rtol=1e-13, atol=1e-13)


def test_batched_positions_rotate_each_row_by_its_own() -> None:
    fope = make()
    positions = torch.tensor([[3, 4, 5, 6], [40, 41, 42, 63]])
    q = torch.randn(2, HEADS, 4, HEAD_DIM, dtype=F64)
    k = torch.randn(2, KV_HEADS, 4, HEAD_DIM, dtype=F64)
    q2, k2 = fope(q, k, positions, positions)
    for b in range(2):
        one_q, one_k = fope(q[b : b + 1], k[b : b + 1], positions[b], positions[b])
        # The tables mix the frequencies by a matmul: a batch of rows is another (batched)
        # matmul than one row's: equal to float64 rounding, not bitwise.
        assert_close(q2[b : b + 1], one_q, rtol=1e-12, atol=1e-14)
        assert_close(k2[b : b + 1], one_k, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------ properties


def _scores(fope: FourierRotaryEmbedding, q: Tensor, k: Tensor, shift: int) -> Tensor:
    positions = torch.arange(q.shape[-2]) + shift
    q2, k2 = fope(q, k, positions, positions)
    return q2 @ k2.repeat_interleave(q.shape[1] // k.shape[1], dim=1).mT


def test_identity_mixing_without_clipping_is_rope() -> None:
    fope = make(train_length=None)
    eye = torch.eye(HEAD_DIM // 2, dtype=F64)
    set_coefficients(fope, eye, eye)
    rope = RotaryEmbedding(HEAD_DIM, layout="half")
    q = torch.randn(2, HEADS, 7, HEAD_DIM, dtype=F64)
    k = torch.randn(2, HEADS, 7, HEAD_DIM, dtype=F64)
    positions = torch.tensor([0, 1, 5, 100, 1000, 4096, 70000])
    expected = rope(q, k, positions, positions)
    fope_heads = FourierRotaryEmbedding(HEAD_DIM, HEADS, dtype=F64, init_factor=0.0)
    got = fope_heads(q, k, positions, positions)
    assert_close(got[0], expected[0], rtol=1e-12, atol=1e-12)
    assert_close(got[1], expected[1], rtol=1e-12, atol=1e-12)


def test_identity_mixing_with_clipping_is_rope_with_the_slow_pairs_still() -> None:
    """Identity coefficients + clipping at L = HoPE's RoPE (slow pairs θ = 0) at L = 64."""
    fope = FourierRotaryEmbedding(HEAD_DIM, HEADS, train_length=L, init_factor=0.0, dtype=F64)
    hope = hope_rotary(HEAD_DIM, train_length=L)
    q = torch.randn(1, HEADS, 6, HEAD_DIM, dtype=F64)
    positions = torch.tensor([0, 3, 63, 64, 500, 10000])
    assert_close(fope(q, q, positions, positions)[0], hope(q, q, positions, positions)[0])


def test_dropped_pairs_pass_unrotated_with_any_mixing() -> None:
    fope = make()
    q = torch.randn(1, HEADS, 5, HEAD_DIM, dtype=F64)
    k = torch.randn(1, KV_HEADS, 5, HEAD_DIM, dtype=F64)
    q2, k2 = fope(q, k, torch.arange(5) * 37, torch.arange(5) * 37)
    half, kept = HEAD_DIM // 2, fope.num_kept
    for x, y in ((q, q2), (k, k2)):
        assert_close(y[..., kept:half], x[..., kept:half], rtol=0, atol=0)
        assert_close(y[..., half + kept :], x[..., half + kept :], rtol=0, atol=0)


@pytest.mark.parametrize("mixing", ["identity", "equal_diagonal"])
def test_scores_are_relative_when_c_and_s_are_one_scaled_rotation(mixing: str) -> None:
    """``C = S = diag(a)`` makes ``c + i s = a e^{itθ}``: ``q'·k'`` depends on ``i − j``."""
    fope = make()
    diag = torch.ones(fope.num_kept, dtype=F64)
    if mixing == "equal_diagonal":
        diag = torch.tensor([0.5, 2.0, -1.5], dtype=F64)
    set_coefficients(fope, torch.diag(diag), torch.diag(diag))
    q = torch.randn(1, HEADS, 8, HEAD_DIM, dtype=F64)
    k = torch.randn(1, KV_HEADS, 8, HEAD_DIM, dtype=F64)
    assert_close(_scores(fope, q, k, 1000), _scores(fope, q, k, 0), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mixing", ["learned", "c_equals_s_full", "c_differs_from_s_diag"])
def test_scores_are_not_relative_with_general_mixing(mixing: str) -> None:
    """Off-diagonal mixing adds cross terms ``e^{i(θ_a i − θ_b j)}``, and ``C ≠ S`` on the
    diagonal an ellipse instead of a circle: shifting both positions changes the scores."""
    fope = make()
    if mixing != "learned":
        torch.manual_seed(3)
        n = fope.num_kept
        full = torch.eye(n, dtype=F64) + 0.5 * torch.randn(n, n, dtype=F64)
        if mixing == "c_equals_s_full":
            set_coefficients(fope, full, full)
        else:
            set_coefficients(fope, torch.eye(n, dtype=F64), 0.5 * torch.eye(n, dtype=F64))
    q = torch.randn(1, HEADS, 8, HEAD_DIM, dtype=F64)
    k = torch.randn(1, KV_HEADS, 8, HEAD_DIM, dtype=F64)
    gap = (_scores(fope, q, k, 1000) - _scores(fope, q, k, 0)).abs().max()
    assert gap > 0.05


def test_gradcheck_of_the_coefficients() -> None:
    fope = FourierRotaryEmbedding(4, 2, init_factor=0.7, dtype=F64)
    q = torch.randn(1, 4, 3, 4, dtype=F64)
    k = torch.randn(1, 2, 5, 4, dtype=F64)

    def logits(cos_coef: Tensor, sin_coef: Tensor) -> Tensor:
        params = {"cos_coef": cos_coef, "sin_coef": sin_coef}
        q2, k2 = torch.func.functional_call(
            fope, params, (q, k, torch.arange(2, 5), torch.arange(5))
        )
        return q2 @ k2.repeat_interleave(2, dim=1).mT

    coefs = tuple(p.detach().clone().requires_grad_(True) for p in (fope.cos_coef, fope.sin_coef))
    assert torch.autograd.gradcheck(logits, coefs)


def test_half_precision_rotates_in_float32_and_rounds_once() -> None:
    fope = make()
    q = torch.randn(1, HEADS, 6, HEAD_DIM).bfloat16()
    k = torch.randn(1, KV_HEADS, 6, HEAD_DIM).bfloat16()
    positions = torch.arange(6) * 11
    fope.float()
    exact = fope.double()(q.double(), k.double(), positions, positions)  # float32 coefficients
    low = fope.float()(q, k, positions, positions)
    for got, want in zip(low, exact, strict=True):
        assert got.dtype == torch.bfloat16
        assert_close(got, want.bfloat16())  # one rounding of the (float32) exact values


# ------------------------------------------------------------ state, init, bad input


def test_meta_device_build_then_reset_and_init_statistics() -> None:
    with torch.device("meta"):
        lazy = FourierRotaryEmbedding(HEAD_DIM, KV_HEADS, train_length=L)
    lazy.to_empty(device="cpu")
    lazy.reset_parameters()
    assert bool(torch.isfinite(lazy.cos_coef).all() and torch.isfinite(lazy.sin_coef).all())
    plain = FourierRotaryEmbedding(HEAD_DIM, KV_HEADS, train_length=L, init_factor=0.0)
    eye = torch.eye(3).expand(KV_HEADS, 3, 3)
    assert_close(plain.cos_coef.detach(), eye, rtol=0, atol=0)
    assert_close(plain.sin_coef.detach(), eye, rtol=0, atol=0)
    torch.manual_seed(0)
    big = FourierRotaryEmbedding(256, 8, init_factor=0.5)  # F = 128: 131072 draws per matrix
    for coef in (big.cos_coef, big.sin_coef):
        noise = coef.detach() - torch.eye(128)
        assert abs(float(noise.std()) / (0.5 / math.sqrt(128)) - 1) < 0.02
        assert abs(float(noise.mean())) < 1e-3


def test_state_dict_round_trip() -> None:
    fope = make()
    assert set(fope.state_dict()) == {"cos_coef", "sin_coef"}
    fresh = FourierRotaryEmbedding(HEAD_DIM, KV_HEADS, train_length=L, dtype=F64)
    fresh.load_state_dict(fope.state_dict())
    q = torch.randn(1, HEADS, 4, HEAD_DIM, dtype=F64)
    k = torch.randn(1, KV_HEADS, 4, HEAD_DIM, dtype=F64)
    for a, b in zip(
        fope(q, k, torch.arange(4), torch.arange(4)),
        fresh(q, k, torch.arange(4), torch.arange(4)),
        strict=True,
    ):
        assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"head_dim": 0}, "head_dim"),
        ({"head_dim": 7}, "head_dim"),
        ({"num_kv_heads": 0}, "num_kv_heads"),
        ({"base": -1.0}, "base"),
        ({"train_length": 0}, "train_length"),
        ({"train_length": 6}, "train_length"),  # 2π/6 > θ_0 = 1: nothing kept
        ({"num_frequencies": 0}, "num_frequencies"),
        ({"num_frequencies": 9}, "num_frequencies"),
        ({"num_frequencies": 2.0}, "num_frequencies"),
        ({"num_frequencies": 2, "train_length": 0}, "train_length"),  # checked though unused
        ({"num_frequencies": 2, "train_length": 64.5}, "train_length"),
        ({"separate_heads": "yes"}, "separate_heads"),
        ({"init_factor": -0.1}, "init_factor"),
        ({"init_factor": math.nan}, "init_factor"),
        ({"dtype": torch.long}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        FourierRotaryEmbedding(**{"head_dim": HEAD_DIM, "num_kv_heads": KV_HEADS, **kwargs})


def test_bad_calls_are_named() -> None:
    fope = FourierRotaryEmbedding(HEAD_DIM, KV_HEADS)
    q = torch.randn(1, HEADS, 4, HEAD_DIM)
    k = torch.randn(1, KV_HEADS, 4, HEAD_DIM)
    with pytest.raises(ValueError, match=r"^q has last dim 4"):
        fope(q[..., :4], k, torch.arange(4), torch.arange(4))
    with pytest.raises(ValueError, match=r"^k_pos has 3 positions"):
        fope(q, k, torch.arange(4), torch.arange(3))
    with pytest.raises(ValueError, match=r"^k has 4 heads"):
        fope(q, q, torch.arange(4), torch.arange(4))


def test_one_key_head_set_refuses_more_key_heads() -> None:
    """num_kv_heads=1 with per-head sets must equal k's heads too (it used to be skipped for a
    single set, so one set silently served every key head); shared sets take any heads."""
    q = torch.randn(1, HEADS, 4, HEAD_DIM)
    k = torch.randn(1, KV_HEADS, 4, HEAD_DIM)
    with pytest.raises(ValueError, match=r"^k has 2 heads and q 4 .* num_kv_heads=1"):
        FourierRotaryEmbedding(HEAD_DIM, 1)(q, k, torch.arange(4), torch.arange(4))
    shared = FourierRotaryEmbedding(HEAD_DIM, 1, separate_heads=False)
    assert shared(q, k, torch.arange(4), torch.arange(4))[1].shape == k.shape

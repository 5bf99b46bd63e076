"""xPos: parity with rotary-embedding-torch, relative-distance and decay properties, KV-cache
consistency, range errors, gradients and argument checks."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.xpos import XPos, xpos_max_distance, xpos_scale, xpos_zeta

LAYOUTS = ["half", "interleaved"]


def reference_xpos(head_dim: int, rotary_dim: int):
    rotary = pytest.importorskip("rotary_embedding_torch")
    # No cache: the reference's scale cache is keyed on length only and centred at len // 2.
    return rotary.RotaryEmbedding(
        rotary_dim, use_xpos=True, xpos_scale_base=512, cache_if_possible=False
    )


# ------------------------------------------------------- parity with rotary-embedding-torch


@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(32, 32), (24, 16)])
@pytest.mark.parametrize("seq", [64, 333])
def test_matches_rotary_embedding_torch_with_its_centre(
    head_dim: int, rotary_dim: int, seq: int
) -> None:
    """Whole q and k tensors equal the reference when center = seq // 2 (its centring)."""
    ref = reference_xpos(head_dim, rotary_dim)
    q, k = torch.randn(2, 3, seq, head_dim), torch.randn(2, 3, seq, head_dim)
    want_q, want_k = ref.rotate_queries_and_keys(q, k)
    xpos = XPos(head_dim, rotary_dim=rotary_dim, center=seq // 2)
    got_q, got_k = xpos(q, k, torch.arange(seq), torch.arange(seq))
    # The reference forms float32 phases (error ≈ seq·2^-24 rad); posenc's are float64.
    assert_close(got_q, want_q, atol=3e-5, rtol=1e-5)
    assert_close(got_k, want_k, atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("center", [0.0, 1000.0, -77.5])
def test_score_matrix_matches_reference_for_any_centre(center: float) -> None:
    """q·kᵀ does not depend on the centre: it equals the reference's for every ``center``."""
    ref = reference_xpos(32, 32)
    q, k = torch.randn(1, 2, 50, 32), torch.randn(1, 2, 50, 32)
    want_q, want_k = ref.rotate_queries_and_keys(q, k)
    got_q, got_k = XPos(32, center=center)(q, k, torch.arange(50), torch.arange(50))
    assert_close(got_q @ got_k.mT, want_q @ want_k.mT, atol=1e-4, rtol=1e-5)


def test_zeta_and_scale_match_reference_buffers() -> None:
    ref = reference_xpos(16, 16)
    assert_close(xpos_zeta(16), ref.scale.double(), atol=1e-7, rtol=0)
    positions = torch.arange(40).float()
    want = ref.get_scale(positions)  # centred at 40 // 2, interleaved
    assert_close(xpos_scale(positions, 16, center=20.0).float(), want)


# ---------------------------------------------------------------- properties


def pair_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per-pair contributions of q_n · k_m for the interleaved layout: (..., n, m, d/2)."""
    prod = q[..., :, None, :] * k[..., None, :, :]
    return prod.unflatten(-1, (-1, 2)).sum(-1)


def test_each_pair_is_rope_times_zeta_power_of_distance() -> None:
    """Pair i of q'_n · k'_m equals RoPE's pair term times ζ_i^((n − m)/B), exactly."""
    q, k = (torch.randn(1, 1, 20, 16, dtype=torch.float64) for _ in range(2))
    positions = torch.arange(100, 120)
    xq, xk = XPos(16, scale_base=64.0, center=37.0)(q, k, positions, positions)
    rq, rk = RotaryEmbedding(16, layout="interleaved")(q, k, positions, positions)
    distance = (positions[:, None] - positions[None, :]).double()  # (n, m)
    decay = xpos_zeta(16) ** (distance[..., None] / 64.0)  # (n, m, d/2)
    assert_close(pair_scores(xq, xk), pair_scores(rq, rk) * decay)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scores_depend_only_on_relative_distance(layout: str) -> None:
    xpos = XPos(32, layout=layout, center=500.0)
    q, k = (torch.randn(1, 2, 64, 32, dtype=torch.float64) for _ in range(2))
    m = torch.randint(0, 2000, (64,))
    n = torch.randint(0, 2000, (64,))
    q0, k0 = xpos(q, k, m, n)
    q1, k1 = xpos(q, k, m + 3333, n + 3333)
    assert_close((q0 * k0).sum(-1), (q1 * k1).sum(-1))


def test_scores_decay_with_distance_for_keys_behind_the_query() -> None:
    """q = k = ones on the slow pairs (θ ≤ 1e-3: rotation < 0.2 rad): the score falls with n − m."""
    xpos = XPos(8, base=1e12, scale_base=16.0)
    ones = torch.ones(1, 1, 200, 8, dtype=torch.float64)
    ones[..., :2] = 0  # pair 0 turns at θ_0 = 1 whatever the base
    q, k = xpos(ones, ones, torch.arange(200), torch.arange(200))
    scores = (q[0, 0, -1] * k[0, 0]).sum(-1).flip(0)  # distance 0, 1, ..., 199
    assert (scores.diff() < 0).all()
    assert scores[-1] < 0.05 * scores[0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_centre_only_shifts_q_and_k_by_inverse_constants(layout: str) -> None:
    x = torch.randn(1, 2, 10, 16, dtype=torch.float64)
    positions = torch.arange(10)
    a, b = XPos(16, layout=layout, center=0.0), XPos(16, layout=layout, center=300.0)
    factor = xpos_scale(torch.tensor([300]), 16, layout=layout)[0]  # ζ^(300/B)
    assert_close(b.rotate_queries(x, positions), a.rotate_queries(x, positions) / factor)
    assert_close(b.rotate_keys(x, positions), a.rotate_keys(x, positions) * factor)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kv_cache_chunks_equal_full_forward(layout: str) -> None:
    """Keys cached when the sequence was short equal the full forward's keys (fixed centre)."""
    xpos = XPos(16, layout=layout)
    attn = Attention(32, 2, pos=xpos).double()
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    full = attn(x)
    cache = KVCache()
    parts = [attn(x[:, :5], cache=cache), attn(x[:, 5:6], cache=cache), attn(x[:, 6:], cache=cache)]
    assert_close(torch.cat(parts, dim=1), full)


def test_partial_rotary_leaves_tail_channels_alone() -> None:
    q, k = torch.randn(1, 1, 6, 12), torch.randn(1, 1, 6, 12)
    xq, xk = XPos(12, rotary_dim=8)(q, k, torch.arange(6), torch.arange(6))
    assert torch.equal(xq[..., 8:], q[..., 8:]) and torch.equal(xk[..., 8:], k[..., 8:])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_float64_result_rounded(dtype: torch.dtype) -> None:
    q = torch.randn(2, 2, 9, 16).to(dtype)
    positions = torch.arange(100, 109)
    xpos = XPos(16)
    want = xpos.rotate_queries(q.double(), positions).to(dtype)
    got = xpos.rotate_queries(q, positions)
    assert got.dtype == dtype
    assert_close(
        got.float(), want.float(), atol=0, rtol=2**-7 if dtype == torch.bfloat16 else 2**-10
    )


def test_gradcheck_float64() -> None:
    xpos = XPos(8, rotary_dim=6, scale_base=16.0, center=3.0)
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 7, 8, dtype=torch.float64, requires_grad=True)
    q_pos, k_pos = torch.arange(2, 7), torch.arange(7)
    assert torch.autograd.gradcheck(lambda a, b: xpos(a, b, q_pos, k_pos), (q, k))


# ---------------------------------------------------------------- range and argument checks


@pytest.mark.parametrize(
    ("dtype", "limit"), [(torch.float32, 18130), (torch.float16, 2266), (torch.float64, 145042)]
)
def test_max_distance_is_half_the_exponent_range(dtype: torch.dtype, limit: int) -> None:
    distance = xpos_max_distance(512.0, dtype)
    assert math.floor(distance) == limit
    # At the limit the largest scale (2/7)^(-distance/512) is 2^(e/2): finite, with headroom.
    largest = (2 / 7) ** (-distance / 512)
    assert largest == pytest.approx(2 ** (math.frexp(torch.finfo(dtype).max)[1] / 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_positions_past_the_range_raise_instead_of_overflowing(dtype: torch.dtype) -> None:
    xpos = XPos(8)
    limit = math.floor(xpos_max_distance(512.0, dtype))
    q = torch.randn(1, 1, 2, 8).to(dtype)
    inside = torch.tensor([limit - 1, limit])
    out_q, out_k = xpos(q, q, inside, inside)
    assert torch.isfinite(out_q).all() and torch.isfinite(out_k).all()
    assert (out_q != 0).all()
    with pytest.raises(ValueError, match=f"k_pos holds position {3 * limit},"):
        xpos(q, q, inside, inside + 2 * limit)
    with pytest.raises(ValueError, match="q_pos"):
        xpos(q, q, -inside - limit, inside)
    # A centre near the positions in use brings them back into range.
    far = inside + 10 * limit
    shifted = XPos(8, center=float(10 * limit))
    assert torch.isfinite(torch.cat(shifted(q, q, far, far))).all()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"head_dim": 0}, "head_dim"),
        ({"head_dim": 8, "rotary_dim": 3}, "rotary_dim"),
        ({"head_dim": 8, "rotary_dim": 10}, "rotary_dim"),
        ({"head_dim": 8, "base": -1.0}, "base"),
        ({"head_dim": 8, "scale_base": 0.0}, "scale_base"),
        ({"head_dim": 8, "center": float("nan")}, "center"),
        ({"head_dim": 8, "center": "middle"}, "center"),
        ({"head_dim": 8, "layout": "split"}, "layout"),
        ({"head_dim": 8, "dtype": torch.int32}, "dtype"),
    ],
)
def test_constructor_rejects(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        XPos(**kwargs)


def test_forward_rejects() -> None:
    xpos = XPos(8)
    q, pos = torch.randn(1, 1, 4, 8), torch.arange(4)
    with pytest.raises(ValueError, match="q must"):
        xpos(q[0], q, pos, pos)
    with pytest.raises(ValueError, match="k has last dim"):
        xpos(q, torch.randn(1, 1, 4, 6), pos, pos)
    with pytest.raises(ValueError, match="k_pos has 3 positions"):
        xpos(q, q, pos, pos[:3])
    with pytest.raises(ValueError, match="q_pos has batch 3"):
        xpos(q, q, pos.expand(3, 4), pos)
    with pytest.raises(ValueError, match="q_pos"):
        xpos(q, q, torch.tensor([0.0, 1.0, float("nan"), 3.0]), pos)


def test_functions_reject() -> None:
    with pytest.raises(ValueError, match="rotary_dim"):
        xpos_zeta(5)
    with pytest.raises(ValueError, match="scale_base"):
        xpos_scale(torch.arange(3), 8, scale_base=-2.0)
    with pytest.raises(ValueError, match="center"):
        xpos_scale(torch.arange(3), 8, center=float("inf"))
    with pytest.raises(ValueError, match="positions"):
        xpos_scale(torch.zeros(2, 2, 2), 8)
    with pytest.raises(ValueError, match="dtype"):
        xpos_max_distance(512.0, torch.int64)

"""Multiplicative GRAPE (``GrapeRotation``): RoPE as the exact special case, the module against
its generators in float64, the relative law, the KV cache, gradients, errors, meta builds."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import RotaryEmbedding
from posenc.rotary.grape import (
    GrapeRotation,
    grape_matrix,
    rank2_exp,
    rank2_generator,
)

F64 = torch.float64
LAYOUTS = ["half", "interleaved"]


def randomized(rot: GrapeRotation, seed: int = 0) -> GrapeRotation:
    """Parameters away from the initial RoPE: the spectrum scaled per pair, planes turned."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        rot.inv_freq.mul_(torch.rand(rot.inv_freq.shape, generator=generator, dtype=F64) + 0.5)
        if rot.plane_weight is not None:
            shape = rot.plane_weight.shape
            rot.plane_weight.copy_(torch.randn(shape, generator=generator, dtype=F64) * 0.5)
    return rot


def apply(matrices: Tensor, x: Tensor) -> Tensor:
    """``G x`` per position (and head): matrices ``([heads,] seq, d, d)``, x ``(b, h, s, d)``."""
    if matrices.dim() == 3:
        return torch.einsum("sij,bhsj->bhsi", matrices, x)
    return torch.einsum("hsij,bhsj->bhsi", matrices, x)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.bfloat16])
def test_default_is_rope_bit_for_bit(layout: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    grape = GrapeRotation(16, layout=layout)  # type: ignore[arg-type]
    rope = RotaryEmbedding(16, layout=layout)  # type: ignore[arg-type]
    q, k = torch.randn(2, 3, 6, 16, dtype=dtype), torch.randn(2, 3, 9, 16, dtype=dtype)
    q_pos = torch.tensor([[3, 4, 5, 6, 7, 8], [100, 101, 102, 103, 104, 105]])
    for k_pos in (torch.arange(9), torch.arange(9) * 37):
        got, want = grape(q, k, q_pos, k_pos), rope(q, k, q_pos, k_pos)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("planes", ["coordinate", "learned"])
@pytest.mark.parametrize("num_heads", [None, 3])
def test_module_equals_the_exponential_of_its_generators(
    layout: str, planes: str, num_heads: int | None
) -> None:
    rot = randomized(GrapeRotation(8, num_heads=num_heads, layout=layout, planes=planes))  # type: ignore[arg-type]
    x = torch.randn(2, 3, 7, 8, dtype=F64)
    positions = torch.tensor([0, 1, 2, 5, 11, 40, 1000])
    got, _ = rot(x, x, positions, positions)
    matrices = grape_matrix(positions, rot.inv_freq.detach(), layout, rot.basis())
    # matrix_exp's scaling and squaring of angles near 1000 rad carries ~1e-11 of its own
    assert_close(got, apply(matrices, x), rtol=1e-10, atol=1e-10)


def test_rope_is_the_coordinate_planes_with_the_log_uniform_spectrum() -> None:
    """G(n) built from the rank-2 generators of RoPE's planes is RoPE's rotation."""
    rope = RotaryEmbedding(8, base=500.0)
    x = torch.randn(1, 2, 5, 8, dtype=F64)
    positions = torch.arange(5) * 3
    matrices = grape_matrix(positions, rope.inv_freq(), "half")
    assert_close(apply(matrices, x), rope(x, x, positions, positions)[0], rtol=1e-13, atol=1e-13)


def test_rank2_exponential_in_closed_form() -> None:
    torch.manual_seed(1)
    u, v = torch.randn(2, 4, 6, dtype=F64)
    angle = torch.tensor([0.3, -2.0, 7.5, 0.0], dtype=F64)
    want = torch.linalg.matrix_exp(angle[:, None, None] * rank2_generator(u, v))
    assert_close(rank2_exp(u, v, angle), want, rtol=1e-12, atol=1e-12)
    # parallel vectors span no plane: the generator is 0 and the action the identity
    assert torch.equal(rank2_exp(u[0], 2 * u[0], 1.3), torch.eye(6, dtype=F64))
    # orthonormal planes: exp(θL) turns u towards v
    e = torch.eye(6, dtype=F64)
    turned = rank2_exp(e[0], e[3], 0.4) @ e[0]
    assert_close(turned, math.cos(0.4) * e[0] + math.sin(0.4) * e[3], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("planes", ["coordinate", "learned"])
def test_logits_depend_on_the_offset_alone(planes: str) -> None:
    """Commuting generators: q'ᵀk' at positions (i + s, j + s) equals that at (i, j), and
    G(n)ᵀ G(m) = G(m − n)."""
    rot = randomized(GrapeRotation(8, num_heads=2, planes=planes))  # type: ignore[arg-type]
    q, k = torch.randn(1, 2, 5, 8, dtype=F64), torch.randn(1, 2, 6, 8, dtype=F64)
    q_pos, k_pos = torch.tensor([4, 9, 2, 30, 7]), torch.tensor([0, 3, 8, 1, 25, 6])
    logits = []
    for shift in (0, 17, 1234):
        q2, k2 = rot(q, k, q_pos + shift, k_pos + shift)
        logits.append(q2 @ k2.transpose(-1, -2))
    assert_close(logits[1], logits[0], rtol=1e-10, atol=1e-10)
    assert_close(logits[2], logits[0], rtol=1e-10, atol=1e-10)
    n, m = torch.tensor([3.0]), torch.tensor([10.0])
    spectrum, basis = rot.inv_freq.detach(), rot.basis()
    gn, gm = (grape_matrix(p, spectrum, "half", basis)[:, 0] for p in (n, m))
    assert_close(gn.transpose(-1, -2) @ gm, grape_matrix(m - n, spectrum, "half", basis)[:, 0])


@pytest.mark.parametrize("planes", ["coordinate", "learned"])
@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_kv_cache_decoding_equals_the_full_forward(planes: str, backend: str) -> None:
    torch.manual_seed(0)
    rot = randomized(GrapeRotation(4, num_heads=4, planes=planes))  # type: ignore[arg-type]
    attn = Attention(16, 4, pos=rot, causal=True, backend=Backend(backend, block_size=4)).double()  # type: ignore[arg-type]
    x = torch.randn(2, 8, 16, dtype=F64)
    with torch.no_grad():
        full = attn(x)
        cache = KVCache()
        steps = [attn(x[:, :3], cache=cache)]
        steps += [attn(x[:, t : t + 1], cache=cache) for t in range(3, 8)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-12, atol=1e-12)


def test_gradcheck_through_the_spectrum_and_the_planes() -> None:
    rot = randomized(GrapeRotation(4, planes="learned"))
    q, k = torch.randn(1, 1, 2, 4, dtype=F64), torch.randn(1, 1, 2, 4, dtype=F64)
    positions = torch.tensor([0, 5])

    def logits(spectrum: Tensor, weight: Tensor, q: Tensor) -> Tensor:
        params = {"inv_freq": spectrum, "plane_weight": weight}
        q2, k2 = torch.func.functional_call(rot, params, (q, k, positions, positions))
        return q2 @ k2.transpose(-1, -2)

    spectrum = rot.inv_freq.detach().clone().requires_grad_()
    assert rot.plane_weight is not None
    weight = rot.plane_weight.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(logits, (spectrum, weight, q.requires_grad_()))


def test_gradients_reach_the_parameters_in_attention() -> None:
    rot = GrapeRotation(4, planes="learned", dtype=torch.float32)
    attn = Attention(8, 2, pos=rot, causal=True)
    attn(torch.randn(2, 5, 8)).square().sum().backward()
    assert rot.inv_freq.grad is not None and rot.inv_freq.grad.abs().sum() > 0
    assert rot.plane_weight is not None and rot.plane_weight.grad is not None
    assert rot.plane_weight.grad.abs().sum() > 0


def test_meta_build_then_reset_equals_a_normal_build() -> None:
    normal = GrapeRotation(8, num_heads=2, planes="learned")
    with torch.device("meta"):
        meta = GrapeRotation(8, num_heads=2, planes="learned")
    assert meta.inv_freq.is_meta
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    for (name, a), (_, b) in zip(normal.named_parameters(), meta.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_the_registry_builds_rope_at_initialization() -> None:
    grape = build_encoding("grape", ModelDims(dim=32, num_heads=4), {"layout": "interleaved"})
    assert isinstance(grape, GrapeRotation) and grape.head_dim == 8
    x, positions = torch.randn(1, 4, 5, 8), torch.arange(5)
    rope = RotaryEmbedding(8, layout="interleaved")
    assert torch.equal(grape(x, x, positions, positions)[0], rope(x, x, positions, positions)[0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"head_dim": 7}, "head_dim must be even"),
        ({"head_dim": 0}, "head_dim"),
        ({"num_heads": 0}, "num_heads"),
        ({"base": -1.0}, "base"),
        ({"layout": "pairs"}, "layout"),
        ({"planes": "random"}, "planes"),
        ({"dtype": torch.long}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GrapeRotation(**({"head_dim": 8} | kwargs))


def test_bad_calls_are_named() -> None:
    rot = GrapeRotation(8, num_heads=2)
    x, positions = torch.randn(1, 3, 4, 8), torch.arange(4)
    with pytest.raises(ValueError, match="q has 3 heads"):
        rot(x, x, positions, positions)
    with pytest.raises(ValueError, match="q has last dim"):
        rot(torch.randn(1, 2, 4, 6), x[:, :2], positions, positions)
    with torch.no_grad():
        rot.inv_freq[0, 1] = float("nan")
    with pytest.raises(ValueError, match="inv_freq"):
        rot(x[:, :2], x[:, :2], positions, positions)
    with pytest.raises(ValueError, match="num_kv_heads"):
        Attention(16, 2, num_kv_heads=1, pos=GrapeRotation(8, num_heads=2), causal=True)
    Attention(16, 2, num_kv_heads=1, pos=GrapeRotation(8), causal=True)  # shared: GQA is fine

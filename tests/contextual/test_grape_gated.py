"""Gated additive GRAPE (``GrapeGatedBias``): the formula, the lift in GL(d + 4) in float64,
ALiBi when the gates sum to one, attention and the KV cache, gradients, errors, meta builds."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache
from posenc.bias import AlibiBias, alibi_slopes
from posenc.contextual.grape_gated import GrapeGatedBias, grape_gated_logits

F64 = torch.float64
HEADS, HEAD_DIM = 4, 8
GATES = ["query_key", "query", "key"]


def trained(gated: GrapeGatedBias, seed: int = 0) -> GrapeGatedBias:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in gated.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return gated


def softplus(z: float) -> float:
    return math.log1p(math.exp(z))


@pytest.mark.parametrize("gate", GATES)
def test_the_term_equals_the_formula_in_python_floats(gate: str) -> None:
    gated = trained(GrapeGatedBias(2, 3, gate=gate, dtype=F64))  # type: ignore[arg-type]
    q, k = torch.randn(1, 2, 3, 3, dtype=F64), torch.randn(1, 2, 4, 3, dtype=F64)
    q_pos, k_pos = torch.tensor([5, 6, 7]), torch.tensor([1, 2, 6, 7])
    got = gated(q, k, q_pos, k_pos)
    rate, u, v = gated.rate.tolist(), gated.u.tolist(), gated.v.tolist()
    slopes = alibi_slopes(2).tolist()
    want = torch.zeros(1, 2, 3, 4, dtype=F64)
    for h in range(2):
        omega = softplus(rate[h]) * slopes[h]
        u_n, v_n = math.hypot(*u[h]), math.hypot(*v[h])
        for i in range(3):
            g = softplus(
                sum(a * b for a, b in zip(v[h], q[0, h, i].tolist(), strict=True))
                / v_n
                / math.sqrt(3)
            )
            for j in range(4):
                e = softplus(
                    sum(a * b for a, b in zip(u[h], k[0, h, j].tolist(), strict=True))
                    / u_n
                    / math.sqrt(3)
                )
                gates = {"query_key": g + e, "query": g, "key": e}[gate]
                want[0, h, i, j] = (k_pos[j] - q_pos[i]).item() * omega * gates
    assert_close(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("gate", GATES)
def test_the_term_is_the_unipotent_lift_in_gl_d_plus_4(gate: str) -> None:
    gated = trained(GrapeGatedBias(HEADS, HEAD_DIM, gate=gate, dtype=F64))  # type: ignore[arg-type]
    q, k = (
        torch.randn(2, HEADS, 3, HEAD_DIM, dtype=F64),
        torch.randn(2, HEADS, 7, HEAD_DIM, dtype=F64),
    )
    q_pos = torch.tensor([[4, 5, 6], [14, 15, 16]])
    k_pos = torch.stack((torch.arange(7), torch.arange(10, 17)))
    with torch.no_grad():
        omega = gated.omega(F64)[:, None]
        g, h = gated.gates(q, k, F64)
        lifted = grape_gated_logits(
            q, k, omega * q_pos[:, None].to(F64), omega * k_pos[:, None].to(F64), g, h
        )
        term = gated(q, k, q_pos, k_pos)
    assert_close(lifted, q @ k.transpose(-1, -2) + term, rtol=0, atol=1e-12)


def test_gates_summing_to_one_give_alibi() -> None:
    """``g = 0, h = 1`` in the lift: ALiBi's causal bias exactly."""
    q, k = (
        torch.randn(1, HEADS, 5, HEAD_DIM, dtype=F64),
        torch.randn(1, HEADS, 5, HEAD_DIM, dtype=F64),
    )
    positions = torch.arange(5)
    alibi = AlibiBias(HEADS)
    phase = (alibi.slopes[:, None] * positions)[None]
    zero, one = torch.zeros(1, HEADS, 5, dtype=F64), torch.ones(1, HEADS, 5, dtype=F64)
    lifted = grape_gated_logits(q, k, phase, phase, zero, one)
    want = q @ k.transpose(-1, -2) + alibi.bias(positions, positions, F64)
    assert_close(lifted, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_attention_decodes_as_the_full_forward(backend: str) -> None:
    torch.manual_seed(0)
    gated = trained(GrapeGatedBias(2, 4))
    attn = Attention(8, 2, pos=gated, causal=True, backend=Backend(backend, block_size=4))  # type: ignore[arg-type]
    x = torch.randn(2, 7, 8)
    with torch.no_grad():
        full = attn(x)
        cache = KVCache()
        steps = [attn(x[:, :4], cache=cache)] + [
            attn(x[:, t : t + 1], cache=cache) for t in (4, 5, 6)
        ]
    assert_close(torch.cat(steps, dim=1), full)


def test_gradients_reach_every_parameter_and_gradcheck() -> None:
    gated = GrapeGatedBias(2, 4)
    Attention(8, 2, pos=gated, causal=True)(torch.randn(2, 5, 8)).square().sum().backward()
    for name, p in gated.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    gated64 = trained(GrapeGatedBias(1, 3, dtype=F64))
    q, k = torch.randn(1, 1, 2, 3, dtype=F64), torch.randn(1, 1, 3, 3, dtype=F64)
    q_pos, k_pos = torch.tensor([2, 3]), torch.arange(3)

    def term(rate: Tensor, u: Tensor, v: Tensor, q: Tensor, k: Tensor) -> Tensor:
        params = {"rate": rate, "u": u, "v": v}
        return torch.func.functional_call(gated64, params, (q, k, q_pos, k_pos))

    params = [p.detach().clone().requires_grad_() for p in (gated64.rate, gated64.u, gated64.v)]
    inputs = (*params, q.requires_grad_(), k.requires_grad_())
    assert torch.autograd.gradcheck(term, inputs)


def test_meta_build_then_reset_equals_a_normal_build() -> None:
    torch.manual_seed(5)
    normal = GrapeGatedBias(3, 4)
    with torch.device("meta"):
        meta = GrapeGatedBias(3, 4)
    assert meta.u.is_meta
    meta.to_empty(device="cpu")
    torch.manual_seed(5)
    meta.reset_parameters()
    for (name, a), (_, b) in zip(normal.named_parameters(), meta.named_parameters(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"head_dim": 0}, "head_dim"),
        ({"gate": "value"}, "gate"),
        ({"dtype": torch.long}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GrapeGatedBias(**({"num_heads": 2, "head_dim": 4} | kwargs))


def test_bad_calls_are_named_and_bidirectional_attention_refuses_it() -> None:
    gated = GrapeGatedBias(2, 4)
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="q has last dim"):
        gated(torch.randn(1, 2, 3, 5), q, torch.arange(3), torch.arange(3))
    with pytest.raises(ValueError, match="k_pos"):
        gated(q, q, torch.arange(3), torch.arange(4))
    with pytest.raises(ValueError, match="pos"):
        Attention(8, 2, pos=GrapeGatedBias(2, 4), causal=False)

"""CARoPE (``ContextAwareRoPE``): the formula in float64, RoPE for a constant transform,
the relative law over accumulated phases, cached decoding, padding, gradients, errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.rotary import RotaryEmbedding
from posenc.rotary.carope import ContextAwareRoPE, carope_phases, carope_rates

F64 = torch.float64
DIM, HEADS, HEAD_DIM = 12, 3, 8


def make(seed: int = 0, **kw: Any) -> ContextAwareRoPE:
    torch.manual_seed(seed)
    return ContextAwareRoPE(DIM, HEADS, HEAD_DIM, dtype=F64, **kw)


def test_phases_equal_the_formula() -> None:
    carope = make(bias=True)
    x = torch.randn(2, 5, DIM, dtype=F64)
    w, b = carope.weight.detach(), carope.bias.detach()  # type: ignore[union-attr]
    want = torch.zeros(2, HEADS, 5, HEAD_DIM // 2, dtype=F64)
    for n in range(2):
        for h in range(HEADS):
            total = [0.0] * (HEAD_DIM // 2)
            for t in range(5):
                z = float(x[n, t] @ w[h] + b[h])
                f = 1.0 / (math.log1p(math.exp(z)) + 1.0)
                total = [s + f**i for i, s in enumerate(total)]
                want[n, h, t] = torch.tensor(total, dtype=F64)
    assert_close(carope.phases(x), want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_a_constant_transform_is_rope_from_position_one(layout: str) -> None:
    """W = 0: ``f ≡ θ``, phases ``(n + 1) θ^i``: RoPE of base ``θ^{−d/2}`` at ``n + 1``."""
    theta = 0.1
    carope = make(layout=layout, bias=True)
    with torch.no_grad():
        carope.weight.zero_()
        carope.bias.fill_(math.log(math.expm1(1.0 / theta - 1.0)))  # type: ignore[union-attr]
    rope = RotaryEmbedding(HEAD_DIM, base=theta ** (-HEAD_DIM / 2), layout=layout)  # type: ignore[arg-type]
    x = torch.randn(2, 6, DIM, dtype=F64)
    q, k = (
        torch.randn(2, HEADS, 6, HEAD_DIM, dtype=F64),
        torch.randn(2, HEADS, 6, HEAD_DIM, dtype=F64),
    )
    positions = torch.arange(1, 7)
    want = rope(q, k, positions, positions)
    got = carope(q, k, x)
    assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)


def test_logits_read_the_phases_accumulated_between_key_and_query() -> None:
    """``q_i'ᵀ k_j' = q_iᵀ R(φ(j) − φ(i)) k_j``: only the tokens between them count."""
    carope = make()
    x = torch.randn(1, 6, DIM, dtype=F64)
    q, k = (
        torch.randn(1, HEADS, 6, HEAD_DIM, dtype=F64),
        torch.randn(1, HEADS, 6, HEAD_DIM, dtype=F64),
    )
    q2, k2 = carope(q, k, x)
    phases = carope.phases(x).detach()
    want = torch.empty(1, HEADS, 6, 6, dtype=F64)
    for i in range(6):
        for j in range(6):
            k_rel = carope.rotate(
                k[:, :, j : j + 1], phases[:, :, j : j + 1] - phases[:, :, i : i + 1]
            )
            want[:, :, i, j] = (q[:, :, i : i + 1] * k_rel).sum(-1)[..., 0]
    assert_close(q2 @ k2.transpose(-1, -2), want, rtol=1e-12, atol=1e-12)
    # token 2 counts for the pairs it lies between (j < 2 ≤ i), and for no other
    x_changed = x.clone()
    x_changed[:, 2] += 3.0
    q3, k3 = carope(q, k, x_changed)
    logits, changed = q2 @ k2.transpose(-1, -2), q3 @ k3.transpose(-1, -2)
    assert_close(changed[..., 2:, 2:], logits[..., 2:, 2:], rtol=1e-12, atol=1e-12)
    assert_close(changed[..., :2, :2], logits[..., :2, :2], rtol=1e-12, atol=1e-12)
    assert not torch.isclose(changed[..., 2:, :2], logits[..., 2:, :2]).any()


def test_cached_decoding_equals_the_full_forward() -> None:
    """Rotated keys cached, phases continued from the last cached token."""
    carope = make(bias=True)
    x = torch.randn(2, 8, DIM, dtype=F64)
    q, k = (
        torch.randn(2, HEADS, 8, HEAD_DIM, dtype=F64),
        torch.randn(2, HEADS, 8, HEAD_DIM, dtype=F64),
    )
    with torch.no_grad():
        full_q, full_k = carope(q, k, x)
        phases = carope.phases(x[:, :3])
        keys, queries = [carope.rotate(k[:, :, :3], phases)], [carope.rotate(q[:, :, :3], phases)]
        for t in range(3, 8):
            phases = carope.phases(x[:, t : t + 1], previous=phases[:, :, -1:])
            keys.append(carope.rotate(k[:, :, t : t + 1], phases))
            queries.append(carope.rotate(q[:, :, t : t + 1], phases))
    assert_close(torch.cat(keys, dim=2), full_k, rtol=1e-13, atol=1e-13)
    assert_close(torch.cat(queries, dim=2), full_q, rtol=1e-13, atol=1e-13)


def test_padding_adds_no_phase() -> None:
    carope = make()
    x = torch.randn(1, 4, DIM, dtype=F64)
    padded = torch.cat((torch.randn(1, 2, DIM, dtype=F64), x), dim=1)  # left padding
    real = torch.tensor([[False, False, True, True, True, True]])
    assert_close(carope.phases(padded, real=real)[:, :, 2:], carope.phases(x), rtol=0, atol=0)


def test_document_starts_restart_the_phases() -> None:
    """With ``starts``, a token's sum runs from its document's start; ``previous`` carries
    only into the tokens before the first start."""
    rates = torch.rand(2, HEADS, 7, dtype=F64)
    previous = torch.randn(2, HEADS, 1, HEAD_DIM // 2, dtype=F64)
    starts = torch.tensor([[False, False, True, False, False, True, False]])
    got = carope_phases(rates, HEAD_DIM // 2, previous, starts=starts)
    pieces = (
        carope_phases(rates[..., :2], HEAD_DIM // 2, previous),
        carope_phases(rates[..., 2:5], HEAD_DIM // 2),
        carope_phases(rates[..., 5:], HEAD_DIM // 2),
    )
    assert_close(got, torch.cat(pieces, dim=-2), rtol=1e-13, atol=1e-13)


def test_gradcheck_through_the_transform() -> None:
    carope = ContextAwareRoPE(4, 1, 4, bias=True, dtype=F64)
    x = torch.randn(1, 3, 4, dtype=F64)
    q, k = torch.randn(1, 1, 3, 4, dtype=F64), torch.randn(1, 1, 3, 4, dtype=F64)

    def logits(weight: Tensor, bias: Tensor, x: Tensor) -> Tensor:
        params = {"weight": weight, "bias": bias}
        q2, k2 = torch.func.functional_call(carope, params, (q, k, x))
        return q2 @ k2.transpose(-1, -2)

    weight = carope.weight.detach().clone().requires_grad_()
    bias = carope.bias.detach().clone().requires_grad_()  # type: ignore[union-attr]
    assert torch.autograd.gradcheck(logits, (weight, bias, x.requires_grad_()))


def test_functions_and_float32() -> None:
    carope = ContextAwareRoPE(DIM, HEADS, HEAD_DIM)
    x = torch.randn(2, 5, DIM)
    rates = carope_rates(x, carope.weight)
    assert rates.dtype == torch.float32 and rates.shape == (2, HEADS, 5)
    assert bool(((rates > 0) & (rates < 1)).all())
    phases = carope_phases(rates, HEAD_DIM // 2)
    assert phases.dtype == F64
    assert torch.equal(phases[..., 0], torch.arange(1, 6, dtype=F64).expand(2, HEADS, 5))
    q = torch.randn(2, HEADS, 5, HEAD_DIM, dtype=torch.bfloat16)
    assert carope(q, q, x)[0].dtype == torch.bfloat16


def test_meta_build_then_reset_equals_a_normal_build() -> None:
    torch.manual_seed(4)
    normal = ContextAwareRoPE(DIM, HEADS, HEAD_DIM, bias=True)
    with torch.device("meta"):
        meta = ContextAwareRoPE(DIM, HEADS, HEAD_DIM, bias=True)
    assert meta.weight.is_meta
    meta.to_empty(device="cpu")
    torch.manual_seed(4)
    meta.reset_parameters()
    for (name, a), (_, b) in zip(normal.named_parameters(), meta.named_parameters(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": 0}, "dim"),
        ({"num_heads": 0}, "num_heads"),
        ({"head_dim": 5}, "head_dim must be even"),
        ({"layout": "pairs"}, "layout"),
        ({"bias": 1}, "bias must be a bool"),
        ({"dtype": torch.long}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ContextAwareRoPE(**({"dim": DIM, "num_heads": HEADS, "head_dim": HEAD_DIM} | kwargs))


def test_bad_calls_are_named() -> None:
    carope = ContextAwareRoPE(DIM, HEADS, HEAD_DIM)
    q, x = torch.randn(1, HEADS, 4, HEAD_DIM), torch.randn(1, 4, DIM)
    with pytest.raises(ValueError, match="x must be a floating"):
        carope(q, q, x[0])
    with pytest.raises(ValueError, match="x has last dim"):
        carope(q, q, torch.randn(1, 4, DIM + 1))
    with pytest.raises(ValueError, match="x must be finite"):
        carope(q, q, torch.full((1, 4, DIM), float("nan")))
    with pytest.raises(ValueError, match="k must be"):
        carope(q, q[:, :, :3], x)

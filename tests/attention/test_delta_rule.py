"""The gated delta rule (:mod:`posenc.attention.delta_rule`): the chunked form against the
token-by-token recurrence and against the paper's matrix update written out, gradients,
decoding with a :class:`DeltaState`, padding, bad input."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.attention import (
    DeltaState,
    GatedDeltaNet,
    gated_delta_rule,
    gated_delta_rule_recurrent,
)


def inputs(
    batch: int = 2, heads: int = 3, seq: int = 11, d_k: int = 5, d_v: int = 4, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq, d_k, generator=g, dtype=torch.float64)
    k = F.normalize(torch.randn(batch, heads, seq, d_k, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(batch, heads, seq, d_v, generator=g, dtype=torch.float64)
    log_alpha = -2.0 * torch.rand(batch, heads, seq, generator=g, dtype=torch.float64)
    beta = torch.rand(batch, heads, seq, generator=g, dtype=torch.float64)
    return q, k, v, log_alpha, beta


def paper_update(q: Any, k: Any, v: Any, log_alpha: Any, beta: Any, state: Any) -> Any:
    """Yang et al. 2024 eq. 10 in the paper's layout, one (batch, head) at a time: ``S_t =
    S_{t−1} α_t (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ`` with ``S ∈ R^{d_v × d_k}``, ``o_t = S_t
    q_t``."""
    batch, heads, seq, d_k = q.shape
    out = torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype)
    final = torch.empty_like(state)
    eye = torch.eye(d_k, dtype=q.dtype)
    for b in range(batch):
        for h in range(heads):
            s = state[b, h].T.clone()  # (d_v, d_k)
            for t in range(seq):
                k_t, alpha_t, beta_t = k[b, h, t], log_alpha[b, h, t].exp(), beta[b, h, t]
                s = s @ (alpha_t * (eye - beta_t * torch.outer(k_t, k_t)))
                s = s + beta_t * torch.outer(v[b, h, t], k_t)
                out[b, h, t] = s @ q[b, h, t]
            final[b, h] = s.T
    return out, final


def test_the_recurrence_is_the_papers_update() -> None:
    q, k, v, log_alpha, beta = inputs(batch=1, heads=2, seq=6)
    state = torch.randn(1, 2, 5, 4, dtype=torch.float64)
    out, final = gated_delta_rule_recurrent(q, k, v, log_alpha, beta, state)
    want, want_final = paper_update(q, k, v, log_alpha, beta, state)
    assert_close(out, want, atol=1e-12, rtol=0)
    assert_close(final, want_final, atol=1e-12, rtol=0)


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 11, 64])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunked_equals_the_recurrence(chunk_size: int, with_state: bool) -> None:
    q, k, v, log_alpha, beta = inputs()
    state = torch.randn(2, 3, 5, 4, dtype=torch.float64) if with_state else None
    out, final = gated_delta_rule(q, k, v, log_alpha, beta, state, chunk_size=chunk_size)
    want, want_final = gated_delta_rule_recurrent(q, k, v, log_alpha, beta, state)
    assert_close(out, want, atol=1e-12, rtol=0)
    assert_close(final, want_final, atol=1e-12, rtol=0)


def test_strong_forgetting_stays_finite_and_exact() -> None:
    """``ln α`` of -30 per token: the decays span e^{-120} within a chunk of 4."""
    q, k, v, _, beta = inputs(seq=9)
    log_alpha = torch.full_like(beta, -30.0)
    out, final = gated_delta_rule(q, k, v, log_alpha, beta, chunk_size=4)
    want, want_final = gated_delta_rule_recurrent(q, k, v, log_alpha, beta)
    assert torch.isfinite(out).all()
    assert_close(out, want, atol=1e-12, rtol=0)
    assert_close(final, want_final, atol=1e-12, rtol=0)


def test_prefix_then_rest_equals_the_whole() -> None:
    q, k, v, log_alpha, beta = inputs(seq=10)
    whole, whole_state = gated_delta_rule(q, k, v, log_alpha, beta, chunk_size=4)
    first, state = gated_delta_rule(
        q[:, :, :6], k[:, :, :6], v[:, :, :6], log_alpha[..., :6], beta[..., :6], chunk_size=4
    )
    rest, final = gated_delta_rule(
        q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], log_alpha[..., 6:], beta[..., 6:], state
    )
    assert_close(torch.cat([first, rest], dim=2), whole, atol=1e-12, rtol=0)
    assert_close(final, whole_state, atol=1e-12, rtol=0)


def test_gradcheck_chunked_and_gradients_equal_the_recurrence() -> None:
    q, k, v, log_alpha, beta = (
        t.requires_grad_() for t in inputs(batch=1, heads=1, seq=5, d_k=3, d_v=2)
    )
    state = torch.randn(1, 1, 3, 2, dtype=torch.float64, requires_grad=True)

    def chunked(*args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return gated_delta_rule(*args, chunk_size=2)

    assert torch.autograd.gradcheck(chunked, (q, k, v, log_alpha, beta, state))
    args = (q, k, v, log_alpha, beta, state)
    out, final = gated_delta_rule(*args, chunk_size=2)
    grads = torch.autograd.grad((out.sum() + final.square().sum()), args)
    out, final = gated_delta_rule_recurrent(*args)
    want = torch.autograd.grad((out.sum() + final.square().sum()), args)
    for got, expected in zip(grads, want, strict=True):
        assert_close(got, expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"q": torch.zeros(2, 3, 11)}, "q must be"),
        ({"v": torch.zeros(2, 3, 10, 4, dtype=torch.float64)}, "q and k"),
        ({"beta": torch.zeros(2, 3, 10, dtype=torch.float64)}, "beta must have shape"),
        ({"log_alpha": torch.zeros(2, 3, dtype=torch.float64)}, "log_alpha must have shape"),
        ({"state": torch.zeros(2, 3, 4, 4, dtype=torch.float64)}, "state must have shape"),
    ],
)
def test_bad_input_names_the_argument(change: dict[str, Any], name: str) -> None:
    q, k, v, log_alpha, beta = inputs()
    args: dict[str, Any] = {
        "q": q,
        "k": k,
        "v": v,
        "log_alpha": log_alpha,
        "beta": beta,
        "state": None,
    }
    args.update(change)
    for rule in (gated_delta_rule, gated_delta_rule_recurrent):
        with pytest.raises(ValueError, match=name):
            rule(**args)
    with pytest.raises(ValueError, match="chunk_size"):
        gated_delta_rule(q, k, v, log_alpha, beta, chunk_size=0)


def test_layer_decoding_with_its_state_equals_the_full_forward() -> None:
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, chunk_size=4).double()
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x)
        state = DeltaState()
        steps = [layer(x[:, :5], cache=state)]
        steps += [layer(x[:, t : t + 1], cache=state) for t in range(5, 11)]
    assert_close(torch.cat(steps, dim=1), full, atol=1e-12, rtol=0)
    assert state.length == 11
    assert state.state is not None and state.state.shape == (2, 2, 8, 8)


def test_padded_tokens_leave_the_state_unchanged() -> None:
    """Left padding: the real tokens' outputs equal the unpadded row's."""
    torch.manual_seed(1)
    layer = GatedDeltaNet(16, 2, chunk_size=4).double()
    x = torch.randn(1, 7, 16, dtype=torch.float64)
    padded = torch.cat([torch.randn(1, 3, 16, dtype=torch.float64), x], dim=1)
    mask = torch.tensor([[False] * 3 + [True] * 7])
    with torch.no_grad():
        assert_close(layer(padded, key_padding_mask=mask)[:, 3:], layer(x), atol=1e-12, rtol=0)


def test_layer_gradients_flow_and_reset_is_the_constructors_draw() -> None:
    torch.manual_seed(2)
    layer = GatedDeltaNet(8, 2)
    layer(torch.randn(1, 5, 8)).sum().backward()
    assert all(p.grad is not None for p in layer.parameters())
    torch.manual_seed(3)
    built = GatedDeltaNet(8, 2)
    with torch.device("meta"):
        meta = GatedDeltaNet(8, 2)
    meta.to_empty(device="cpu")
    torch.manual_seed(3)
    meta.reset_parameters()
    for name, want in built.state_dict().items():
        assert torch.equal(meta.state_dict()[name], want), name


def test_layer_bad_input() -> None:
    layer = GatedDeltaNet(8, 2)
    with pytest.raises(ValueError, match="x must have shape"):
        layer(torch.randn(1, 5, 7))
    with pytest.raises(ValueError, match="key_padding_mask"):
        layer(torch.randn(1, 5, 8), key_padding_mask=torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="DeltaState"):
        layer(torch.randn(1, 5, 8), cache=object())
    with pytest.raises(ValueError, match="divisible"):
        GatedDeltaNet(9, 2)

"""Transformer-XL relative logits vs a per-(i, j) evaluation; the relative shift; bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import attend
from posenc.contextual import TransformerXLRelative, relative_shift, xl_sinusoid

HEADS, HEAD_DIM, DIM = 2, 4, 6


def _make(**kwargs) -> TransformerXLRelative:
    xl = TransformerXLRelative(HEADS, HEAD_DIM, DIM, dtype=torch.float64, **kwargs)
    with torch.no_grad():  # larger than the init so u and v matter
        xl.u.normal_()
        xl.v.normal_()
    return xl


def _naive_scores(xl, q, k, q_pos, k_pos, scale) -> torch.Tensor:
    """A_ij = (q_i + u)·k_j + (q_i + v)·W_R R_{i-j}, scaled; one entry at a time."""
    batch, heads, q_len, d = q.shape
    k_len = k.shape[2]
    qp = q_pos.expand(batch, q_len) if q_pos.dim() == 1 else q_pos
    kp = k_pos.expand(batch, k_len) if k_pos.dim() == 1 else k_pos
    w_r = xl.w_r.weight.detach()  # (H*d, dim)
    out = torch.empty(batch, heads, q_len, k_len, dtype=torch.float64)
    for b in range(batch):
        for i in range(q_len):
            for j in range(k_len):
                r = float(qp[b, i] - kp[b, j])
                freqs = [xl.base ** (-2 * c / xl.dim) for c in range(xl.dim // 2)]
                rel = [math.sin(r * w) for w in freqs] + [math.cos(r * w) for w in freqs]
                proj = (w_r @ torch.tensor(rel, dtype=torch.float64)).view(heads, d)
                for h in range(heads):
                    ac = (q[b, h, i] + xl.u[h]) @ k[b, h, j]
                    bd = (q[b, h, i] + xl.v[h]) @ proj[h]
                    out[b, h, i, j] = scale * (ac + bd)
    return out


CASES = {
    "square": (torch.arange(5), torch.arange(5)),
    "mems": (torch.arange(4, 7), torch.arange(7)),
    "batched": (
        torch.tensor([[3, 4], [10, 11]]),
        torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]]),
    ),
    "gaps": (torch.tensor([2, 9]), torch.tensor([0, 5, 9, 20])),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_naive_formula(case: str) -> None:
    q_pos, k_pos = CASES[case]
    xl = _make()
    q = torch.randn(2, HEADS, q_pos.shape[-1], HEAD_DIM, dtype=torch.float64)
    k = torch.randn(2, HEADS, k_pos.shape[-1], HEAD_DIM, dtype=torch.float64)
    scale = HEAD_DIM**-0.5
    with torch.no_grad():
        full = scale * q @ k.transpose(-1, -2) + xl.logit_term(q, k, q_pos, k_pos, scale)
        expected = _naive_scores(xl, q, k, q_pos, k_pos, scale)
    assert_close(full, expected)


def test_sinusoid_layout() -> None:
    r = torch.tensor([-3, 0, 5])
    table = xl_sinusoid(r, 8, base=100.0)
    inv_freq = 100.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angles = r.double()[:, None] * inv_freq
    assert_close(table, torch.cat([angles.sin(), angles.cos()], -1))


@pytest.mark.parametrize(("q_len", "k_len"), [(5, 5), (3, 8), (1, 4)])
def test_relative_shift_equals_gather_on_causal_region(q_len: int, k_len: int) -> None:
    xl = _make()
    mlen = k_len - q_len
    q = torch.randn(2, HEADS, q_len, HEAD_DIM, dtype=torch.float64)
    with torch.no_grad():
        # The reference layout: scores against R ordered by descending distance klen-1 .. 0.
        projected = xl.projected(torch.arange(k_len - 1, -1, -1))  # (H, klen, d)
        scores = (q + xl.v[:, None]) @ projected.transpose(-1, -2)  # (b, H, qlen, klen)
        shifted = relative_shift(scores)
        gathered = xl.position_logits(q, torch.arange(mlen, k_len), torch.arange(k_len))
    causal = torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None] + mlen
    assert_close(shifted[..., causal], gathered[..., causal])


@pytest.mark.parametrize(
    ("q_pos", "k_pos"),
    [
        (torch.arange(5), torch.arange(5)),
        (torch.arange(4, 7), torch.arange(7)),
        (torch.tensor([[3, 9], [0, 2]]), torch.tensor([[0, 1, 3, 9], [0, 1, 2, 40]])),
        (torch.tensor([7]), torch.tensor([0, 2, 5, 7])),
    ],
)
def test_factorized_position_term_equals_per_distance_gather(q_pos, k_pos) -> None:
    xl = _make()
    batch = 2
    q = torch.randn(batch, HEADS, q_pos.shape[-1], HEAD_DIM, dtype=torch.float64)
    with torch.no_grad():
        got = xl.position_logits(q, q_pos, k_pos)
        want = xl.position_logits_by_distance(q, q_pos, k_pos)
    assert_close(got, want)


def test_fractional_positions_follow_the_formula() -> None:
    xl = _make()
    q_pos, k_pos = torch.tensor([0.25, 3.5]), torch.tensor([0.0, 1.75, 3.5])
    q = torch.randn(1, HEADS, 2, HEAD_DIM, dtype=torch.float64)
    with torch.no_grad():
        got = xl.position_logits(q, q_pos, k_pos)
        r = (q_pos[:, None] - k_pos[None, :]).reshape(-1)
        projected = xl.projected(r).view(HEADS, 2, 3, HEAD_DIM)  # W_R R_r per (i, j)
        want = ((q + xl.v[:, None])[:, :, :, None, :] * projected).sum(-1)
    assert_close(got, want)


def test_relative_shift_indexing() -> None:
    # x[i, c] = distance index c; after the shift, [i, j] holds c = qlen - 1 - i + j.
    q_len, k_len = 3, 5
    x = torch.arange(k_len, dtype=torch.float64).expand(q_len, k_len)
    i, j = torch.meshgrid(torch.arange(q_len), torch.arange(k_len), indexing="ij")
    causal = j <= i + (k_len - q_len)
    assert_close(relative_shift(x)[causal], (q_len - 1 - i + j)[causal].double())


def test_relative_shift_bad_shape() -> None:
    with pytest.raises(ValueError, match="qlen"):
        relative_shift(torch.zeros(4, 3))


def test_only_relative_distances_matter() -> None:
    xl = _make()
    q = torch.randn(1, HEADS, 3, HEAD_DIM, dtype=torch.float64)
    k = torch.randn(1, HEADS, 6, HEAD_DIM, dtype=torch.float64)
    q_pos, k_pos = torch.arange(3, 6), torch.arange(6)
    with torch.no_grad():
        base = xl.logit_term(q, k, q_pos, k_pos, 0.5)
        for shift in (7, 1000, -50):
            assert_close(xl.logit_term(q, k, q_pos + shift, k_pos + shift, 0.5), base)


class _Logits(nn.Module):
    def __init__(self, enc: TransformerXLRelative) -> None:
        super().__init__()
        self.enc = enc

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return self.enc.logit_term(q, k, torch.arange(2, 5), torch.arange(5), 0.5)


def test_gradcheck_parameters_and_inputs() -> None:
    xl = _make()
    wrapper = _Logits(xl)
    q = torch.randn(1, HEADS, 3, HEAD_DIM, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, HEADS, 5, HEAD_DIM, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_(True) for p in (xl.u, xl.v, xl.w_r.weight)]

    def fn(u, v, w, q, k):
        state = {"enc.u": u, "enc.v": v, "enc.w_r.weight": w}
        return torch.func.functional_call(wrapper, state, (q, k))

    assert torch.autograd.gradcheck(fn, (*params, q, k))


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((0, 4, 8), {}, "num_heads"),
        ((2, 0, 8), {}, "head_dim"),
        ((2, 4, 7), {}, "dim"),
        ((2, 4, 0), {}, "dim"),
        ((2, 4, 8), {"base": 0.0}, "base"),
    ],
)
def test_bad_constructor_arguments(args: tuple, kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        TransformerXLRelative(*args, **kwargs)


def _qk(q_len=3, k_len=3, head_dim=HEAD_DIM, heads=HEADS, k_heads=HEADS, batch=1):
    return torch.randn(batch, heads, q_len, head_dim), torch.randn(batch, k_heads, k_len, head_dim)


@pytest.mark.parametrize(
    ("q", "k", "q_pos", "k_pos", "name"),
    [
        (*_qk(head_dim=5), torch.arange(3), torch.arange(3), "q"),
        (*_qk(heads=3), torch.arange(3), torch.arange(3), "q"),
        (*_qk(k_heads=1), torch.arange(3), torch.arange(3), "k"),
        (*_qk(k_len=4), torch.arange(3), torch.arange(3), "k"),
    ],
)
def test_bad_logits_input(q, k, q_pos, k_pos, name: str) -> None:
    xl = TransformerXLRelative(HEADS, HEAD_DIM, DIM)
    with pytest.raises(ValueError, match=name):
        xl.logit_term(q, k, q_pos, k_pos, 0.5)


@pytest.mark.parametrize(
    ("q_pos", "k_pos", "name"),
    [
        (torch.arange(3), torch.tensor([0.0, float("nan"), 2.0]), "k_pos"),
        (torch.zeros(3, 3), torch.arange(3), "q_pos"),
    ],
)
def test_bad_positions_raise_at_the_attention_boundary(q_pos, k_pos, name: str) -> None:
    q, k = _qk()
    xl = TransformerXLRelative(HEADS, HEAD_DIM, DIM)
    with pytest.raises(ValueError, match=name):
        attend(q, k, k, pos=xl, q_pos=q_pos, k_pos=k_pos, causal=False)


def test_odd_dim_in_sinusoid() -> None:
    with pytest.raises(ValueError, match="dim"):
        xl_sinusoid(torch.arange(3), 5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("q_len", "k_len", "q_start", "k_start"),
    [(5, 5, 0, 0), (3, 8, 5, 0), (1, 6, 5, 0), (4, 4, 10, 10), (2, 7, 9, 3), (6, 2, 0, 0)],
)
def test_contiguous_term_equals_general_term(
    q_len: int, k_len: int, q_start: int, k_start: int, causal: bool
) -> None:
    """The per-distance + relative-shift form equals logit_term on every pair it must
    (all pairs, or those at or before the query under causal order), with gradients."""
    torch.manual_seed(0)
    xl = TransformerXLRelative(HEADS, HEAD_DIM, DIM).double()
    for p in xl.parameters():
        torch.nn.init.normal_(p)
    q = torch.randn(2, HEADS, q_len, HEAD_DIM, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, HEADS, k_len, HEAD_DIM, dtype=torch.float64, requires_grad=True)
    q_pos, k_pos = q_start + torch.arange(q_len), k_start + torch.arange(k_len)
    visible = (
        k_pos[None, :] <= q_pos[:, None] if causal else torch.ones(q_len, k_len, dtype=torch.bool)
    )
    weights = torch.randn(q_len, k_len, dtype=torch.float64) * visible
    grads = []
    for term in (
        xl.logit_term(q, k, q_pos, k_pos, 0.5),
        xl.logit_term_contiguous(q, k, q_start, k_start, 0.5, causal),
    ):
        assert term.shape == (2, HEADS, q_len, k_len) and torch.isfinite(term).all()
        grads.append(torch.autograd.grad((term * weights).sum(), [q, k, *xl.parameters()]))
        grads[-1] = (term.detach()[..., visible], *grads[-1])
    for want, got in zip(grads[0], grads[1], strict=True):
        assert_close(got, want, rtol=1e-10, atol=1e-10)

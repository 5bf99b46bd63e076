"""Shaw relative representations vs a direct loop over the paper's formulas."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import attend
from posenc.contextual import ShawRelative

HEAD_DIM = 4


def _naive(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    key_table: torch.Tensor,
    value_table: torch.Tensor,
    clip: int,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """e_ij = q_i (k_j + a^K_ij) / sqrt(d); z_i = sum_j alpha_ij (v_j + a^V_ij); per entry."""
    batch, heads, q_len, d = q.shape
    k_len = k.shape[2]
    qp = q_pos.expand(batch, q_len) if q_pos.dim() == 1 else q_pos
    kp = k_pos.expand(batch, k_len) if k_pos.dim() == 1 else k_pos
    e = torch.empty(batch, heads, q_len, k_len, dtype=q.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                for j in range(k_len):
                    r = int(kp[b, j]) - int(qp[b, i])
                    a_k = key_table[max(-clip, min(clip, r)) + clip]
                    e[b, h, i, j] = q[b, h, i] @ (k[b, h, j] + a_k) / math.sqrt(d)
    if causal:
        e = e.masked_fill(kp[:, None, None, :] > qp[:, None, :, None], float("-inf"))
    alpha = e.softmax(-1)
    z = torch.zeros(batch, heads, q_len, d, dtype=q.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                for j in range(k_len):
                    r = int(kp[b, j]) - int(qp[b, i])
                    a_v = value_table[max(-clip, min(clip, r)) + clip]
                    z[b, h, i] += alpha[b, h, i, j] * (v[b, h, j] + a_v)
    return e, z


CASES = {
    "square": (torch.arange(6), torch.arange(6), False),
    "kv_cache": (torch.arange(5, 8), torch.arange(8), True),
    "batched": (
        torch.tensor([[4, 5, 6], [0, 1, 2]]),
        torch.tensor([[0, 2, 4, 5, 6], [0, 1, 2, 7, 9]]),
        False,
    ),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("clip", [1, 2, 16])
def test_matches_paper_formulas(case: str, clip: int) -> None:
    q_pos, k_pos, causal = CASES[case]
    batch, heads, q_len, k_len = 2, 3, q_pos.shape[-1], k_pos.shape[-1]
    shaw = ShawRelative(HEAD_DIM, max_distance=clip, dtype=torch.float64)
    with torch.no_grad():  # larger than the init so the position term matters
        shaw.key_table.normal_()
        shaw.value_table.normal_()
    q = torch.randn(batch, heads, q_len, HEAD_DIM, dtype=torch.float64)
    k = torch.randn(batch, heads, k_len, HEAD_DIM, dtype=torch.float64)
    v = torch.randn(batch, heads, k_len, HEAD_DIM, dtype=torch.float64)
    e, z = _naive(q, k, v, q_pos, k_pos, shaw.key_table, shaw.value_table, clip, causal)
    scale = HEAD_DIM**-0.5
    with torch.no_grad():
        logits = scale * q @ k.transpose(-1, -2) + shaw.logit_term(q, k, q_pos, k_pos, scale)
        if causal:
            logits = logits.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
        probs = logits.softmax(-1)
        out = probs @ v + shaw.value_term(probs, q_pos, k_pos)
    assert_close(logits, e)
    assert_close(out, z)


def test_clipping_uses_edge_vectors() -> None:
    clip = 2
    shaw = ShawRelative(HEAD_DIM, max_distance=clip, dtype=torch.float64)
    q = torch.randn(1, 1, 1, HEAD_DIM, dtype=torch.float64)
    k_pos = torch.tensor([-100, -3, -2, 0, 2, 3, 100])
    q_pos = torch.tensor([0])
    with torch.no_grad():
        term = shaw.logit_term(
            q, torch.zeros(1, 1, 7, HEAD_DIM, dtype=torch.float64), q_pos, k_pos, 1.0
        )
    rows = torch.tensor([0, 0, 0, 2, 4, 4, 4])
    assert_close(term[0, 0, 0], shaw.key_table[rows].detach() @ q[0, 0, 0])
    probs = torch.zeros(1, 1, 1, 7, dtype=torch.float64)
    probs[..., 0] = 0.25
    probs[..., 6] = 0.75
    with torch.no_grad():
        out = shaw.value_term(probs, q_pos, k_pos)
    expected = 0.25 * shaw.value_table[0] + 0.75 * shaw.value_table[4]
    assert_close(out[0, 0, 0], expected.detach())


def test_key_only_variant() -> None:
    shaw = ShawRelative(HEAD_DIM, values=False)
    assert shaw.has_value_term is False
    assert shaw.value_table is None
    assert ShawRelative(HEAD_DIM).has_value_term is True
    pos = torch.arange(3)
    assert shaw.value_term(torch.rand(1, 1, 3, 3), pos, pos) is None


class _Both(nn.Module):
    def __init__(self, enc: ShawRelative, q_pos: torch.Tensor, k_pos: torch.Tensor) -> None:
        super().__init__()
        self.enc, self.q_pos, self.k_pos = enc, q_pos, k_pos

    def forward(self, q: torch.Tensor, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = torch.zeros(q.shape[0], q.shape[1], self.k_pos.shape[-1], q.shape[-1], dtype=q.dtype)
        logits = self.enc.logit_term(q, k, self.q_pos, self.k_pos, 0.5)
        return logits, self.enc.value_term(probs, self.q_pos, self.k_pos)


def test_gradcheck_tables_and_q() -> None:
    enc = ShawRelative(3, max_distance=2, dtype=torch.float64)
    wrapper = _Both(enc, torch.arange(2, 5), torch.arange(5))
    q = torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    probs = torch.rand(2, 2, 3, 5, dtype=torch.float64, requires_grad=True)
    key_table = enc.key_table.detach().clone().requires_grad_(True)
    value_table = enc.value_table.detach().clone().requires_grad_(True)

    def fn(kt, vt, q, probs):
        params = {"enc.key_table": kt, "enc.value_table": vt}
        return torch.func.functional_call(wrapper, params, (q, probs))

    assert torch.autograd.gradcheck(fn, (key_table, value_table, q, probs))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"head_dim": 0}, "head_dim"),
        ({"head_dim": 4, "max_distance": 0}, "max_distance"),
        ({"head_dim": 4, "values": "yes"}, "values"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        ShawRelative(**kwargs)


def _qk(q_len: int = 3, k_len: int = 3, head_dim: int = HEAD_DIM, batch: int = 2):
    return torch.randn(batch, 2, q_len, head_dim), torch.randn(batch, 2, k_len, head_dim)


@pytest.mark.parametrize(
    ("q", "k", "name"),
    [
        (*_qk(head_dim=5), "q"),
        (*_qk(q_len=4), "q"),
        (*_qk(k_len=4), "k"),
    ],
)
def test_bad_logit_term_shapes(q, k, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        ShawRelative(HEAD_DIM).logit_term(q, k, torch.arange(3), torch.arange(3), 0.5)


@pytest.mark.parametrize(
    ("q_pos", "k_pos", "name"),
    [
        (torch.tensor([0.0, 0.5, 1.0]), torch.arange(3), "q_pos"),
        (torch.arange(3), torch.tensor([0.0, 1.0, 2.5]), "k_pos"),
        (torch.tensor([0.0, float("nan"), 1.0]), torch.arange(3), "q_pos"),
        (torch.zeros(3, 3), torch.arange(3), "q_pos"),
    ],
)
def test_bad_positions_raise_at_the_attention_boundary(q_pos, k_pos, name: str) -> None:
    q, k = _qk()
    with pytest.raises(ValueError, match=name):
        attend(q, k, k, pos=ShawRelative(HEAD_DIM), q_pos=q_pos, k_pos=k_pos, causal=False)


def test_bad_value_term_input() -> None:
    shaw = ShawRelative(HEAD_DIM)
    with pytest.raises(ValueError, match="probs"):
        shaw.value_term(torch.rand(1, 2, 3, 4), torch.arange(3), torch.arange(3))

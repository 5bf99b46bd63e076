"""PaTH: the per-pair reference against the formula, the blockwise algorithm against the
reference, gradients, and the properties (NoPE at β = 0, a fixed transform, relative)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.testing import assert_close

from posenc.token_state.path import (
    PathTransform,
    path_attention,
    path_attention_reference,
    path_carried_keys,
    path_carry_keys,
    path_logits_reference,
)

F64 = torch.float64


def inputs(
    batch: int = 2, heads: int = 3, seq: int = 11, dim: int = 4, kv_heads: int | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """q ``(batch, heads, seq, dim)``; k, v, w (unit), β ∈ (0, 2) of ``kv_heads``."""
    generator = torch.Generator().manual_seed(0)
    kv = heads if kv_heads is None else kv_heads

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=F64)

    q, k, v = randn(batch, heads, seq, dim), randn(batch, kv, seq, dim), randn(batch, kv, seq, dim)
    w = F.normalize(randn(batch, kv, seq, dim), dim=-1)
    beta = 2 * torch.rand(batch, kv, seq, generator=generator, dtype=F64)
    return q, k, v, w, beta


def householder(w: Tensor, beta: Tensor) -> Tensor:
    """``I − β w wᵀ`` ``(..., d, d)`` of ``w`` ``(..., d)``."""
    eye = torch.eye(w.shape[-1], dtype=w.dtype)
    return eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]


def test_the_reference_is_the_product_of_the_transforms_between_key_and_query() -> None:
    """``q_iᵀ H_i ⋯ H_{j+1} k_j`` with the d × d matrices multiplied out, pair by pair."""
    q, k, _, w, beta = inputs(batch=1, heads=2, seq=6)
    got = path_logits_reference(q, k, w, beta)
    h = householder(w, beta)  # (1, 2, seq, d, d)
    want = torch.zeros(1, 2, 6, 6, dtype=F64)
    for i in range(6):
        product = torch.eye(4, dtype=F64).expand(1, 2, 4, 4)  # H_i ⋯ H_{j+1}, j from i down
        for j in range(i, -1, -1):
            want[..., i, j] = (q[:, :, i, None, :] @ product @ k[:, :, j, :, None])[..., 0, 0]
            product = product @ h[:, :, j]
    assert_close(got, want)


@pytest.mark.parametrize("block_size", [1, 3, 4, 11, 64])
def test_blockwise_equals_the_reference(block_size: int) -> None:
    q, k, v, w, beta = inputs()
    want = path_attention_reference(q, k, v, w, beta, scale=0.5)
    assert_close(path_attention(q, k, v, w, beta, scale=0.5, block_size=block_size), want)


def test_grouped_heads_share_the_key_heads_transforms() -> None:
    q, k, v, w, beta = inputs(heads=4, kv_heads=2)
    want = path_attention_reference(
        q, *(x.repeat_interleave(2, dim=1) for x in (k, v, w, beta)), scale=0.3
    )
    assert_close(path_attention(q, k, v, w, beta, scale=0.3, block_size=3), want)


def test_forget_gates_add_the_log_gates_between_key_and_query() -> None:
    """PaTH-FoX: ``c_i − c_j`` on top of the PaTH logits."""
    q, k, v, w, beta = inputs()
    log_gates = F.logsigmoid(torch.randn(2, 3, 11, dtype=F64, generator=torch.Generator()))
    c = log_gates.cumsum(-1)
    want = path_attention_reference(q, k, v, w, beta, scale=0.5, log_gates=log_gates)
    got = path_attention(q, k, v, w, beta, scale=0.5, q_states=c, k_states=c, block_size=4)
    assert_close(got, want)


def test_carried_keys_meet_the_last_query_as_the_reference_does() -> None:
    """What a KV cache holds: each key carried to the last token."""
    q, k, _, w, beta = inputs()
    carried = path_carried_keys(k, w, beta, block_size=3)
    logits = path_logits_reference(q, k, w, beta)
    assert_close(q[..., -1:, :] @ carried.transpose(-1, -2), logits[..., -1:, :])


@pytest.mark.parametrize("split", [1, 5, 10])
def test_prefix_keys_continue_the_sequence(split: int) -> None:
    """Keys carried to the end of a prefix, then the rest: equal to the whole sequence, and
    the prefix's keys carried through the rest equal the whole sequence's carried keys."""
    q, k, v, w, beta = inputs()
    want = path_attention_reference(q, k, v, w, beta, scale=0.5)
    prefix = path_carried_keys(k[..., :split, :], w[..., :split, :], beta[..., :split])
    rest = (slice(None), slice(None), slice(split, None))
    got = path_attention(
        q[rest], k[rest], v, w[rest], beta[rest], scale=0.5, prefix_keys=prefix, block_size=2
    )
    assert_close(got, want[rest])
    moved = path_carry_keys(prefix, w[rest], beta[rest], block_size=3)
    carried = torch.cat([moved, path_carried_keys(k[rest], w[rest], beta[rest])], dim=-2)
    assert_close(carried, path_carried_keys(k, w, beta))


def test_key_padding_and_documents() -> None:
    """The ``visible`` blocks mask as the reference's padding and packed documents do."""
    q, k, v, w, beta = inputs()
    padding = torch.ones(2, 11, dtype=torch.bool)
    padding[0, :3] = False
    padding[1, 7] = False
    docs = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    beta = beta.masked_fill(~padding[:, None], 0.0)
    want = path_attention_reference(
        q, k, v, w, beta, scale=0.5, key_padding=padding, document_ids=docs
    )

    def visible(q0: int, q1: int, k0: int, k1: int) -> Tensor:
        same = docs[q0:q1, None] == docs[None, k0:k1]
        return padding[:, None, None, k0:k1] & same

    got = path_attention(q, k, v, w, beta, scale=0.5, visible=visible, block_size=4)
    assert_close(got, want)
    assert bool((got[0, :, :3] == 0).all())  # queries that see no key


def test_gradients_match_finite_differences() -> None:
    args = tuple(x.requires_grad_() for x in inputs(batch=1, heads=1, seq=5, dim=2))
    c = torch.randn(1, 1, 5, dtype=F64).cumsum(-1).requires_grad_()

    def run(q: Tensor, k: Tensor, v: Tensor, w: Tensor, beta: Tensor, c: Tensor) -> Tensor:
        return path_attention(q, k, v, w, beta, scale=0.7, q_states=c, k_states=c, block_size=2)

    assert torch.autograd.gradcheck(run, (*args, c))


def test_beta_zero_is_attention_without_positions() -> None:
    """``H = I``: the logits are ``q·k`` exactly, the output causal softmax attention."""
    q, k, v, w, _ = inputs()
    beta = torch.zeros(2, 3, 11, dtype=F64)
    assert_close(path_logits_reference(q, k, w, beta), (q @ k.transpose(-1, -2)).tril())
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5)
    assert_close(path_attention(q, k, v, w, beta, scale=0.5, block_size=4), want)


@pytest.mark.parametrize("beta_value", [0.4, 2.0])
def test_the_same_transform_at_every_token_is_a_fixed_power(beta_value: float) -> None:
    """``w``, ``β`` fixed: the key meets ``H^{i−j}``, a function of the distance alone (at
    ``β = 2`` a reflection, ``H² = I``)."""
    q, k, _, w, _ = inputs(batch=1, heads=1, seq=7)
    w = w[..., :1, :].expand_as(w)
    beta = torch.full((1, 1, 7), beta_value, dtype=F64)
    h = householder(w[0, 0, 0], beta[0, 0, 0])
    logits = path_logits_reference(q, k, w, beta)
    for i in range(7):
        for j in range(i + 1):
            want = q[0, 0, i] @ torch.linalg.matrix_power(h, i - j) @ k[0, 0, j]
            assert_close(logits[0, 0, i, j], want)


def test_the_logit_reads_only_the_tokens_between_key_and_query() -> None:
    """Relative: changing the transforms at or before ``j`` or after ``i`` leaves
    ``ℓ_ij`` alone; the same tokens at other offsets give the same logits."""
    q, k, _, w, beta = inputs(batch=1, heads=1, seq=9)
    i, j = 6, 2
    w2, beta2 = w.clone(), beta.clone()
    outside = [0, 1, 2, 7, 8]
    w2[..., outside, :] = F.normalize(torch.randn(1, 1, 5, 4, dtype=F64), dim=-1)
    beta2[..., outside] = 1.3
    a, b = path_logits_reference(q, k, w, beta), path_logits_reference(q, k, w2, beta2)
    assert_close(a[..., i, j], b[..., i, j])
    inside = b.clone()
    w2[..., 4, :] = -w2[..., 5, :]
    beta2[..., 4] = 0.1
    assert not torch.allclose(path_logits_reference(q, k, w2, beta2)[..., i, j], inside[..., i, j])
    shifted = path_logits_reference(q[..., 3:, :], k[..., 3:, :], w[..., 3:, :], beta[..., 3:])
    assert_close(shifted, a[..., 3:, 3:])


def test_path_transform_reads_unit_w_and_beta_in_0_2_and_zero_beta_on_padding() -> None:
    path = PathTransform(dim=16, num_heads=4, num_kv_heads=2, dtype=F64)
    x = torch.randn(2, 5, 16, dtype=F64)
    real = torch.tensor([[False, True, True, True, True], [True] * 5])
    w, beta = path.transforms_of(x, real)
    assert w.shape == (2, 2, 5, 4) and beta.shape == (2, 2, 5)
    assert_close(w.norm(dim=-1)[real[:, None].expand(2, 2, 5)], torch.ones(18, dtype=F64))
    want = 2 * torch.sigmoid(x @ path.beta_weight.T + path.beta_bias).transpose(1, 2)
    assert_close(beta[1], want[1])
    assert bool((beta[0, :, 0] == 0).all()) and bool((beta[0, :, 1:] > 0).all())
    assert path.gate_states(x, None, real) is None
    gated = PathTransform(dim=16, num_heads=4, forget_gate=True, dtype=F64)
    c = gated.gate_states(x, None, None)
    assert c is not None
    want_c = F.logsigmoid(x @ gated.gate_weight.T + gated.gate_bias).transpose(1, 2).cumsum(-1)
    assert_close(c, want_c)


@pytest.mark.parametrize("conv_size", [1, 2, 4])
def test_w_is_a_causal_depthwise_convolution_then_silu_normalized(conv_size: int) -> None:
    """fla's short convolution: ``nn.Conv1d`` of one filter per channel, causal (padded on
    the left), SiLU, then unit length; ``conv_size=1`` reads each token's projection alone."""
    path = PathTransform(dim=16, num_heads=4, num_kv_heads=2, conv_size=conv_size, dtype=F64)
    x = torch.randn(2, 7, 16, dtype=F64)
    w, _ = path.transforms_of(x)
    u = x @ path.w_weight.T  # (2, 7, 8)
    if path.conv_weight is not None:
        conv = F.conv1d(
            u.transpose(1, 2), path.conv_weight[:, None], padding=conv_size - 1, groups=8
        )
        u = F.silu(conv[..., :7].transpose(1, 2))
    want = F.normalize(u.view(2, 7, 2, 4), dim=-1).transpose(1, 2)
    assert_close(w, want)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": 0, "num_heads": 2}, "dim"),
        ({"dim": 16, "num_heads": 3}, "dim"),
        ({"dim": 16, "num_heads": 4, "num_kv_heads": 3}, "num_kv_heads"),
        ({"dim": 16, "num_heads": 4, "forget_gate": 1}, "forget_gate"),
        ({"dim": 16, "num_heads": 4, "block_size": 0}, "block_size"),
        ({"dim": 16, "num_heads": 4, "conv_size": 0}, "conv_size"),
        ({"dim": 16, "num_heads": 4, "conv_size": True}, "conv_size"),
        ({"dim": 16, "num_heads": 4, "dtype": torch.int64}, "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PathTransform(**kwargs)


def test_forward_checks_x() -> None:
    path = PathTransform(dim=16, num_heads=4)
    with pytest.raises(ValueError, match="x must be a floating"):
        path(torch.ones(1, 3, 16, dtype=torch.long))
    with pytest.raises(ValueError, match="x has last dim 8"):
        path(torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match="x must be on"):
        path(torch.randn(1, 3, 16, device="meta"))


def test_blockwise_equals_the_reference_over_several_default_blocks() -> None:
    """130 tokens: two whole blocks of 64 and a partial one, grouped heads, head width 16."""
    q, k, v, w, beta = inputs(batch=1, heads=4, seq=130, dim=16, kv_heads=2)
    want = path_attention_reference(
        q, *(x.repeat_interleave(2, dim=1) for x in (k, v, w, beta)), scale=0.25
    )
    assert_close(path_attention(q, k, v, w, beta, scale=0.25), want)


@pytest.mark.parametrize("near_two", [False, True])
def test_float32_blocks_stay_within_float32_rounding_of_float64(near_two: bool) -> None:
    """1024 tokens, head width 64, blocks of 64: the triangular solves stay stable in
    float32, also with every β near 2 (reflections)."""
    q, k, v, w, beta = inputs(batch=1, heads=2, seq=1024, dim=64)
    if near_two:
        beta = 2 - 1e-3 * beta / 2
    want = path_attention(q, k, v, w, beta, scale=0.125)
    got = path_attention(*(x.float() for x in (q, k, v, w, beta)), scale=0.125)
    assert_close(got, want.float())

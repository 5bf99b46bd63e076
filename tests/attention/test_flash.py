"""The flash-parts engine: merging parts equals one softmax, in value and every gradient."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Backend, attend, flash, plans
from posenc.attention.flash import Part, merge_parts
from posenc.bias import AlibiBias, FireBias, T5RelativeBias
from posenc.contextual import ShawRelative, TransformerXLRelative

pytestmark = pytest.mark.skipif(not flash.available(torch.zeros(1)), reason="no CPU flash kernel")

SCALE = 0.35


def reference(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, allowed: Tensor) -> Tensor:
    logits = (q @ k.transpose(-1, -2)) * SCALE + bias
    return logits.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


def split(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor, shifts: tuple[Tensor, Tensor]
) -> tuple[list[Part], Tensor, Tensor]:
    """Three parts over 13 keys for 5 queries (the last 5 keys): a far part with a row
    shift and a key vector, a middle part with a dense (learnable) mask, and a causal
    diagonal square with a row shift."""
    far_vector = mask[..., :4]  # (1, heads, 1, 4)
    parts = [
        Part(k[:, :, :4], v[:, :, :4], mask=far_vector, shift=shifts[0]),
        Part(k[:, :, 4:8], v[:, :, 4:8], mask=mask[..., 4:8].expand(1, -1, 5, 4) * 1.0),
        Part(k[:, :, 8:], v[:, :, 8:], causal=True, shift=shifts[1]),
    ]
    bias = torch.cat(
        [
            far_vector.expand(1, -1, 5, 4) + shifts[0].unsqueeze(-1),
            mask[..., 4:8].expand(1, -1, 5, 4),
            shifts[1].unsqueeze(-1).expand(1, -1, 5, 5),
        ],
        dim=-1,
    )
    allowed = torch.ones(5, 13, dtype=torch.bool).tril(8)
    return parts, bias, allowed


def make(kv_heads: int, batch: int = 2, head_dim: int = 6) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(batch, 4, 5, head_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(batch, kv_heads, 13, head_dim, generator=generator, dtype=torch.float64)
    v = torch.randn(batch, kv_heads, 13, head_dim, generator=generator, dtype=torch.float64)
    mask = torch.randn(1, 4, 1, 13, generator=generator, dtype=torch.float64)
    shifts = (
        torch.randn(1, 4, 1, generator=generator, dtype=torch.float64),
        torch.randn(1, 4, 1, generator=generator, dtype=torch.float64),
    )
    return {"q": q, "k": k, "v": v, "mask": mask, "shifts": shifts}


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_merged_parts_equal_one_softmax_with_all_gradients(kv_heads: int) -> None:
    data = make(kv_heads)
    leaves = [data["q"], data["k"], data["v"], data["mask"], *data["shifts"]]
    for leaf in leaves:
        leaf.requires_grad_(True)
    q, k, v, mask, *shifts = leaves
    parts, bias, allowed = split(q, k, v, mask, (shifts[0], shifts[1]))
    got = merge_parts(q, parts, SCALE)
    group = 4 // kv_heads
    want = reference(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), bias, allowed)
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(got)
    got_grads = torch.autograd.grad((got * weights).sum(), leaves)
    want_grads = torch.autograd.grad((want * weights).sum(), leaves)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert_close(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("learnable_mask", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_a_part_with_a_value_term_merges_exactly(kv_heads: int, learnable_mask: bool) -> None:
    """A part with a value term Σ_j p_ij T[index_ij] (Shaw's a^V) merged with kernel parts
    equals one softmax over all keys plus that term, with every gradient (the table's too)."""
    data = make(kv_heads)
    generator = torch.Generator().manual_seed(5)
    table = torch.randn(3, 6, generator=generator, dtype=torch.float64)
    index = torch.randint(0, 3, (5, 4), generator=generator)
    leaves = [data["q"], data["k"], data["v"], data["mask"], data["shifts"][0], table]
    for leaf in leaves:
        leaf.requires_grad_(True)
    q, k, v, mask, shift, table = leaves
    band = mask[..., 4:8].expand(1, -1, 5, 4) * 1.0
    if not learnable_mask:
        band = band.detach()
    parts = [
        Part(k[:, :, :4], v[:, :, :4], shift=shift),
        Part(k[:, :, 4:8], v[:, :, 4:8], mask=band, value_index=index, value_table=table),
        Part(k[:, :, 8:], v[:, :, 8:], causal=True),
    ]
    got = merge_parts(q, parts, SCALE)
    group = 4 // kv_heads
    k_e, v_e = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    bias = torch.cat(
        [shift.unsqueeze(-1).expand(1, -1, 5, 4), band, torch.zeros(1, 4, 5, 5)], dim=-1
    )
    allowed = torch.ones(5, 13, dtype=torch.bool).tril(8)
    logits = ((q @ k_e.transpose(-1, -2)) * SCALE + bias).masked_fill(~allowed, float("-inf"))
    probs = logits.softmax(-1)
    want = probs @ v_e + torch.einsum("bhik,ikd->bhid", probs[..., 4:8], table[index])
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(got)
    # retain_graph: both results read the same band tensor.
    got_grads = torch.autograd.grad(
        (got * weights).sum(), leaves, retain_graph=True, allow_unused=True
    )
    want_grads = torch.autograd.grad((want * weights).sum(), leaves, allow_unused=True)
    assert (got_grads[3] is None) == (want_grads[3] is None) == (not learnable_mask)
    for g, w in zip(got_grads, want_grads, strict=True):
        if w is not None:
            assert_close(g, w, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="value term needs value_index and value_table"):
        merge_parts(q, [Part(k, v, value_index=index)], SCALE)


def test_gradcheck() -> None:
    data = make(2, batch=1, head_dim=3)

    def fn(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, s0: Tensor, s1: Tensor) -> Tensor:
        parts, _, _ = split(q, k, v, mask, (s0, s1))
        return merge_parts(q, parts, SCALE)

    inputs = tuple(
        t.requires_grad_(True)
        for t in (data["q"], data["k"], data["v"], data["mask"], *data["shifts"])
    )
    assert torch.autograd.gradcheck(fn, inputs)


def record_plans(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The name of the plan each chunked call chose (None: the blocked fallback)."""
    chosen: list[str | None] = []
    original = plans.choose_plan

    def recording(call: Any) -> Any:
        plan = original(call)
        chosen.append(None if plan is None else plan.name)
        return plan

    monkeypatch.setattr(plans, "choose_plan", recording)
    return chosen


T5 = {"bidirectional": False, "max_distance": 8, "num_buckets": 8}


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize(
    ("encoding", "positions", "plan"),
    [
        (AlibiBias(4), None, "linear bias"),
        (AlibiBias(4), torch.arange(40) * 3, "linear bias"),  # linear: any positions
        (AlibiBias(4, mode="symmetric"), None, "distance table"),  # not linear in k − q
        (T5RelativeBias(4, **T5), None, "distance table"),
        (T5RelativeBias(4, **T5), torch.arange(40), "materialized bias"),  # not by index
        (FireBias(4), None, "distance table"),  # 40 tokens, all below the threshold 512
        (FireBias(4, max_len=20.0), None, "materialized bias"),  # rows past it: (q, k)
        (FireBias(4), torch.arange(40) * 2, "materialized bias"),
        (ShawRelative(8, max_distance=3), None, "clipped relative"),
        (ShawRelative(8, max_distance=3), torch.arange(40), None),
        (TransformerXLRelative(4, 8, 32), None, "sinusoid relative"),
    ],
)
def test_structured_plans_apply_where_their_structure_holds(
    monkeypatch: pytest.MonkeyPatch,
    encoding: torch.nn.Module,
    positions: Tensor | None,
    plan: str | None,
    grad: bool,
) -> None:
    """Each plan where its structure holds; with a gradient, the materialized-bias and
    Transformer-XL plans (forward only) give way to the checkpointed blocks."""
    chosen = record_plans(monkeypatch)
    encoding = encoding.double()
    q, k, v = (torch.randn(1, 4, 40, 8, dtype=torch.float64) for _ in range(3))
    kwargs: dict[str, Any] = {} if positions is None else {"q_pos": positions, "k_pos": positions}
    chunked = Backend("chunked", block_size=8)
    with torch.set_grad_enabled(grad):
        got = attend(q, k, v, pos=encoding, causal=True, backend=chunked, **kwargs)
        want = attend(q, k, v, pos=encoding, causal=True, backend="sdpa", **kwargs)
    forward_only = plan in ("materialized bias", "sinusoid relative")
    assert chosen == [None if grad and forward_only else plan]
    assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_reversed_causal_parts_and_own_queries_equal_masked_ones(kv_heads: int) -> None:
    """A square visible on and above its diagonal run as the kernel's causal order on
    reversed rows and keys, and parts with queries of their own (a segment method's), give
    the outputs and gradients of the same parts with explicit masks (float64)."""
    generator = torch.Generator().manual_seed(3)

    def leaf(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()

    rows = 6
    q, q2 = leaf(1, 4, rows, 8), leaf(1, 4, rows, 8)
    k1, v1 = leaf(1, kv_heads, rows, 8), leaf(1, kv_heads, rows, 8)
    k2, v2 = leaf(1, kv_heads, 5, 8), leaf(1, kv_heads, 5, 8)
    padding = torch.zeros(1, 1, 1, rows, dtype=torch.float64)
    padding[..., 1] = torch.finfo(torch.float64).min  # a padded key inside the reversed square
    low = torch.finfo(torch.float64).min
    upper = torch.zeros(rows, rows, dtype=torch.float64).masked_fill(
        ~torch.ones(rows, rows, dtype=torch.bool).triu(), low
    )

    def run(fast: bool) -> list[Tensor]:
        square = (
            Part(k1, v1, causal=True, reverse=True, mask=padding)
            if fast
            else Part(k1, v1, mask=upper + padding)
        )
        out = merge_parts(q, [square, Part(k2, v2, q=q2)], 0.3)
        grads = torch.autograd.grad(out.square().sum(), (q, q2, k1, v1, k2, v2))
        return [out, *grads]

    for got, want in zip(run(True), run(False), strict=True):
        assert_close(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="reversed part must be causal"):
        merge_parts(q, [Part(k1, v1, reverse=True)], 0.3)


def test_flush_denormals_is_scoped_and_leaves_a_users_setting() -> None:
    from posenc.attention.flash import _flushing, flush_denormals

    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormal floats")
    tiny = torch.tensor(1e-40, dtype=torch.float32)
    assert not _flushing() and float(tiny * 1.0) > 0.0
    with flush_denormals():
        assert _flushing() and float(tiny * 1.0) == 0.0
    assert not _flushing() and float(tiny * 1.0) > 0.0  # restored
    torch.set_flush_denormal(True)
    try:
        with flush_denormals():
            assert _flushing()
        assert _flushing()  # a user's own setting stays on
    finally:
        torch.set_flush_denormal(False)

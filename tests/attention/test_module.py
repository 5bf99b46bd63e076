from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend, causal_mask, hooks_of
from posenc.positions import document_mask, packed_positions
from posenc.registry import ModelDims, build_encoding
from posenc.rotary.kernels import Impl, available_impls, rotary_impl
from tests.cases import CAUSAL_ONLY, attention_side_cases

DIM, HEADS = 32, 4
BACKENDS = ["sdpa", "chunked", "auto"]


def make(name: str, kwargs: dict[str, Any], **attn_kwargs: Any) -> Attention:
    pos = build_encoding(name, ModelDims(dim=DIM, num_heads=HEADS), kwargs)
    for p in pos.parameters():  # trained encodings are not near zero; make them visible
        nn.init.normal_(p, std=0.5)
    return Attention(DIM, HEADS, pos=pos, **attn_kwargs)


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pos: nn.Module | None,
    q_pos: Tensor,
    k_pos: Tensor,
    allowed: Tensor | None,
) -> Tensor:
    """softmax(scale q kᵀ + term) v (+ value term), written out without SDPA."""
    hooks = hooks_of(pos)
    scale = 1.0 / q.shape[-1] ** 0.5
    logits = q @ k.transpose(-1, -2) * scale
    if hooks.bias:
        logits = logits + pos.bias(q_pos, k_pos, dtype=q.dtype)  # type: ignore[union-attr]
    if hooks.contextual:
        logits = logits + pos.logit_term(q, k, q_pos, k_pos, scale)  # type: ignore[union-attr]
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    probs = logits.softmax(-1)
    out = probs @ v
    if hooks.value_term:
        out = out + pos.value_term(probs, q_pos, k_pos)  # type: ignore[union-attr]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_attend_equals_written_out_softmax(
    name: str, kwargs: dict, causal: bool, backend: str
) -> None:
    """float64 throughout, to 1e-12 (Shaw's softmax included: no float32 step)."""
    attn = make(name, kwargs).double()
    q, k, v = (torch.randn(2, HEADS, 7, DIM // HEADS, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(7)
    if not causal and name in CAUSAL_ONLY:
        with pytest.raises(ValueError, match=r"pos: .* causal attention only"):
            attend(q, k, v, pos=attn.pos, q_pos=pos, k_pos=pos, causal=False, backend=backend)
        return
    allowed = causal_mask(7, 7) if causal else None
    got = attend(q, k, v, pos=attn.pos, q_pos=pos, k_pos=pos, causal=causal, backend=backend)
    want = reference_attention(q, k, v, attn.pos, pos, pos, allowed)
    assert got.dtype == torch.float64
    assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_grouped_query_heads_equal_repeated_heads() -> None:
    q = torch.randn(2, 8, 5, 16, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 5, 16, dtype=torch.float64) for _ in range(2))
    got = attend(q, k, v, causal=True)
    want = attend(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), causal=True)
    assert_close(got, want)


@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_grouped_query_attention_module_runs_every_encoding(name: str, kwargs: dict) -> None:
    attn = make(name, kwargs, num_kv_heads=2)
    dense = make(name, kwargs)
    dense.pos.load_state_dict(attn.pos.state_dict())
    dense.q_proj.load_state_dict(attn.q_proj.state_dict())
    dense.out_proj.load_state_dict(attn.out_proj.state_dict())
    # Expand the grouped k/v projection so the dense module computes the same thing.
    head_dim = DIM // HEADS
    for proj in ("k_proj", "v_proj"):
        w = getattr(attn, proj).weight.view(2, head_dim, DIM).repeat_interleave(2, 0)
        getattr(dense, proj).weight.data.copy_(w.reshape(HEADS * head_dim, DIM))
    x = torch.randn(2, 6, DIM)
    assert_close(attn(x), dense(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_kv_cache_chunks_equal_full_forward(name: str, kwargs: dict, backend: str) -> None:
    attn = make(name, kwargs, backend=Backend(backend, block_size=4)).double()  # type: ignore[arg-type]
    x = torch.randn(2, 9, DIM, dtype=torch.float64)
    full = attn(x)
    cache = KVCache()
    parts = [attn(x[:, :4], cache=cache), attn(x[:, 4:5], cache=cache), attn(x[:, 5:], cache=cache)]
    assert cache.length == 9
    assert_close(torch.cat(parts, dim=1), full, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_key_padding_mask_hides_keys_and_empty_rows_are_zero(backend: str) -> None:
    attn = make("alibi", {}, causal=True, backend=backend)
    x = torch.randn(2, 6, DIM)
    mask = torch.tensor([[False, False, True, True, True, True], [True] * 6])
    out = attn(x, key_padding_mask=mask)
    x2 = x.clone()
    x2[0, :2] = torch.randn(2, DIM)  # change only the padded tokens
    out2 = attn(x2, key_padding_mask=mask)
    assert_close(out[0, 2:], out2[0, 2:])
    assert torch.isfinite(out).all()
    # The two leading pad queries see no key at all: their attention output is zero.
    zeros = attn.out_proj(torch.zeros(DIM))
    assert_close(out[0, :2], zeros.expand(2, DIM))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_packed_documents_equal_separate_runs(name: str, kwargs: dict, backend: str) -> None:
    attn = make(name, kwargs, causal=True, backend=Backend(backend, block_size=4)).double()  # type: ignore[arg-type]
    lengths = [3, 5, 2]
    x = torch.randn(1, sum(lengths), DIM, dtype=torch.float64)
    ids = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    separate = torch.cat([attn(part) for part in x.split(lengths, dim=1)], dim=1)
    packed = attn(x, packed_positions(ids), document_ids=ids)
    assert_close(packed, separate, rtol=1e-12, atol=1e-12)
    # The same through a user's dense mask.
    dense = attn(x, packed_positions(ids), attn_mask=document_mask(ids))
    assert_close(dense, separate, rtol=1e-12, atol=1e-12)


def test_document_ids_continue_through_the_cache() -> None:
    attn = make("t5", {}, causal=True).double()
    ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
    x = torch.randn(1, 7, DIM, dtype=torch.float64)
    positions = packed_positions(ids)
    full = attn(x, positions, document_ids=ids)
    cache = KVCache()
    first = attn(x[:, :5], positions[:, :5], document_ids=ids[:, :5], cache=cache)
    rest = attn(x[:, 5:], positions[:, 5:], document_ids=ids[:, 5:], cache=cache)
    assert_close(torch.cat([first, rest], dim=1), full)
    with pytest.raises(ValueError, match="document_ids"):
        attn(x[:, :1], cache=cache)


def test_predicate_mask_equals_dense_mask() -> None:
    attn = make("alibi", {}, causal=False).double()
    x = torch.randn(2, 8, DIM, dtype=torch.float64)
    band = (torch.arange(8)[:, None] - torch.arange(8)[None, :]).abs() <= 2
    assert_close(
        attn(x, attn_mask=lambda b, h, q, kv: (q - kv).abs() <= 2), attn(x, attn_mask=band)
    )


def test_bias_heads_must_match() -> None:
    pos = build_encoding("alibi", ModelDims(dim=DIM, num_heads=8))
    with pytest.raises(ValueError, match="num_heads"):
        Attention(DIM, HEADS, pos=pos)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_kv_heads": 3}, "num_kv_heads"),
        ({"num_heads": 5}, "divisible by num_heads"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": "0.1"}, "dropout"),
        ({"pos": nn.Linear(2, 2)}, "pos must be"),
        ({"pos": "rope"}, "pos must be"),
        ({"backend": "fast"}, "backend"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs: dict, match: str) -> None:
    args: dict[str, Any] = {"dim": DIM, "num_heads": HEADS, **kwargs}
    with pytest.raises(ValueError, match=match):
        Attention(**args)


def test_backend_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="block_size"):
        Backend("chunked", block_size=0)
    with pytest.raises(ValueError, match="backend must be one of"):
        Backend("fast")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "match"),
    [("shaw", "cannot serve ShawRelative"), ("xl", "cannot serve TransformerXLRelative")],
)
def test_flex_refuses_contextual_terms_at_construction(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make(name, {}, backend="flex")


def test_flex_refuses_dropout_at_construction() -> None:
    with pytest.raises(ValueError, match="dropout"):
        make("alibi", {}, backend="flex", dropout=0.1)


def test_flex_on_cpu_refuses_gradients_with_a_clear_error() -> None:
    # FlexAttention's eager mode still runs through dynamo; a guard cached by an earlier
    # test's score_mod can crash torch's guard evaluation (IndexError), so start clean.
    torch._dynamo.reset()
    attn = make("alibi", {}, backend=Backend("flex", compile=False))
    with pytest.raises(ValueError, match="forward only on the CPU"):
        attn(torch.randn(1, 4, DIM))
    with torch.no_grad():
        assert attn(torch.randn(1, 4, DIM)).shape == (1, 4, DIM)


def test_forward_errors_name_the_argument() -> None:
    attn = make("rope", {})
    x = torch.randn(2, 5, DIM)
    with pytest.raises(ValueError, match="x must have shape"):
        attn(torch.randn(2, 5, DIM + 1))
    with pytest.raises(ValueError, match="positions must have shape"):
        attn(x, torch.arange(4))
    with pytest.raises(ValueError, match="positions must have shape"):
        attn(x, torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="positions must be finite"):
        attn(x, torch.tensor([0.0, 1.0, float("nan"), 3.0, 4.0]))
    with pytest.raises(
        ValueError, match=r"key_padding_mask must have shape \(batch, seq\) = \(2, 5\)"
    ):
        attn(x, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="document_ids must have shape"):
        attn(x, document_ids=torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="document_ids must be an integer"):
        attn(x, document_ids=torch.zeros(5))
    with pytest.raises(ValueError, match="attn_mask must be a bool"):
        attn(x, attn_mask=torch.zeros(5, 5))
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(5, 5\)"):
        attn(x, attn_mask=torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="cache holds batch 1"):
        cache = KVCache()
        attn(x[:1], cache=cache)
        attn(x, cache=cache)


def test_additive_float_padding_mask_is_refused_not_inverted() -> None:
    attn = make("alibi", {})
    x = torch.randn(2, 4, DIM)
    additive = torch.tensor([[float("-inf"), 0.0, 0.0, 0.0], [0.0] * 4])  # 0 keep, -inf pad
    with pytest.raises(ValueError, match=r"key_padding_mask.*additive mask"):
        attn(x, key_padding_mask=additive)
    # 0/1 floats and integers are the boolean convention: the same as bool.
    bool_mask = torch.tensor([[False, True, True, True], [True] * 4])
    want = attn(x, key_padding_mask=bool_mask)
    assert_close(attn(x, key_padding_mask=bool_mask.float()), want)
    assert_close(attn(x, key_padding_mask=bool_mask.long()), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_sequence_gives_empty_output(backend: str) -> None:
    attn = make("t5", {}, backend=backend)
    out = attn(torch.randn(2, 0, DIM))
    assert out.shape == (2, 0, DIM)
    cache = KVCache()
    attn(torch.randn(2, 3, DIM), cache=cache)
    assert attn(torch.randn(2, 0, DIM), cache=cache).shape == (2, 0, DIM)
    assert cache.length == 3


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_compile_fullgraph(name: str, kwargs: dict, backend: str) -> None:
    torch._dynamo.reset()
    attn = make(name, kwargs, backend=Backend(backend, block_size=4))  # type: ignore[arg-type]
    x = torch.randn(2, 10, DIM)
    positions = torch.arange(10)
    compiled = torch.compile(attn, fullgraph=True, backend="aot_eager")
    assert_close(compiled(x, positions), attn(x, positions))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_compile_fullgraph_inductor(name: str, kwargs: dict, backend: str) -> None:
    torch._dynamo.reset()
    attn = make(name, kwargs, backend=Backend(backend, block_size=4))  # type: ignore[arg-type]
    x = torch.randn(2, 10, DIM)
    compiled = torch.compile(attn, fullgraph=True)
    assert_close(compiled(x, torch.arange(10)), attn(x, torch.arange(10)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("name", "kwargs"), [("rope", {}), ("xpos", {}), ("rope", {"rotary_dim": 4})]
)
@pytest.mark.parametrize("impl", available_impls())
def test_inference_rotates_in_place_with_the_training_result(
    name: str, kwargs: dict, impl: Impl
) -> None:
    # Without autograd the module rotates its fresh q and k in place (rotate_qk(inplace=True));
    # the output equals the differentiable path's, bit for bit, on every implementation.
    if impl == "triton":
        pytest.skip("triton serves CUDA tensors")
    torch.manual_seed(0)
    attn = make(name, kwargs, num_kv_heads=2)
    assert hooks_of(attn.pos).rotary is attn.pos
    x = torch.randn(2, 40, DIM)
    with rotary_impl(impl):
        with torch.no_grad():
            inference = attn(x)
        training = attn(x)
    assert training.requires_grad
    assert torch.equal(inference, training.detach())


def test_rotary_that_ignores_inplace_still_serves_inference() -> None:
    # rotate_qk(inplace=True) may return new tensors (the toy always does)
    from tests.attention.toys import ThreeAxisRotary

    pos = ThreeAxisRotary(8)
    assert hooks_of(pos).rotary is pos
    attn = Attention(DIM, HEADS, pos=pos)
    x = torch.randn(1, 6, DIM)
    positions = torch.stack([torch.arange(6)] * 3)
    with torch.no_grad():
        inference = attn(x, positions=positions)
    assert torch.equal(inference, attn(x, positions=positions).detach())

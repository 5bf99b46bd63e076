from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, KVCache, attend, causal_mask
from posenc.base import ContextualEncoding, PositionalEncoding
from posenc.positions import document_mask, packed_positions
from posenc.registry import ModelDims, build_encoding
from tests.cases import attention_side_cases

DIM, HEADS = 32, 4


def make(name: str, kwargs: dict[str, Any], **attn_kwargs: Any) -> Attention:
    pos = build_encoding(name, ModelDims(dim=DIM, num_heads=HEADS), kwargs)
    for p in pos.parameters():  # trained encodings are not near zero; make them visible
        nn.init.normal_(p, std=0.5)
    return Attention(DIM, HEADS, pos=pos, **attn_kwargs)


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pos: PositionalEncoding | None,
    q_pos: Tensor,
    k_pos: Tensor,
    allowed: Tensor | None,
) -> Tensor:
    """softmax(scale q kᵀ + term) v (+ value term), written out without SDPA."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    logits = q @ k.transpose(-1, -2) * scale
    if pos is not None and pos.family == "bias":
        logits = logits + pos.bias(q_pos, k_pos)
    if isinstance(pos, ContextualEncoding):
        logits = logits + pos.logits(q, k, q_pos, k_pos, scale)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    probs = logits.softmax(-1)
    out = probs @ v
    if isinstance(pos, ContextualEncoding) and pos.uses_values:
        out = out + pos.values(probs, q_pos, k_pos)
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_attend_equals_written_out_softmax(name: str, kwargs: dict, causal: bool) -> None:
    attn = make(name, kwargs).double()
    q, k, v = (torch.randn(2, HEADS, 7, DIM // HEADS, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(7)
    allowed = causal_mask(7, 7) if causal else None
    got = attend(q, k, v, pos=attn.pos, q_pos=pos, k_pos=pos, causal=causal)
    want = reference_attention(q, k, v, attn.pos, pos, pos, allowed)
    assert_close(got, want)


def test_grouped_query_heads_equal_repeated_heads() -> None:
    q = torch.randn(2, 8, 5, 16, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 5, 16, dtype=torch.float64) for _ in range(2))
    pos = torch.arange(5)
    got = attend(q, k, v, pos=None, q_pos=pos, k_pos=pos, causal=True)
    want = attend(
        q,
        k.repeat_interleave(4, 1),
        v.repeat_interleave(4, 1),
        pos=None,
        q_pos=pos,
        k_pos=pos,
        causal=True,
    )
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


@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_kv_cache_chunks_equal_full_forward(name: str, kwargs: dict) -> None:
    attn = make(name, kwargs).double()
    x = torch.randn(2, 9, DIM, dtype=torch.float64)
    full = attn(x)
    cache = KVCache()
    parts = [attn(x[:, :4], cache=cache), attn(x[:, 4:5], cache=cache), attn(x[:, 5:], cache=cache)]
    assert cache.length == 9
    assert_close(torch.cat(parts, dim=1), full)


def test_key_padding_mask_hides_keys_and_empty_rows_are_zero() -> None:
    attn = make("alibi", {}, causal=True)
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


@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_packed_documents_equal_separate_runs(name: str, kwargs: dict) -> None:
    attn = make(name, kwargs, causal=True).double()
    lengths = [3, 5, 2]
    x = torch.randn(1, sum(lengths), DIM, dtype=torch.float64)
    ids = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    packed = attn(x, packed_positions(ids), attn_mask=document_mask(ids))
    separate = torch.cat([attn(part) for part in x.split(lengths, dim=1)], dim=1)
    assert_close(packed, separate)


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
        ({"pos": nn.Linear(2, 2)}, "pos must be"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs: dict, match: str) -> None:
    args: dict[str, Any] = {"dim": DIM, "num_heads": HEADS, **kwargs}
    with pytest.raises(ValueError, match=match):
        Attention(**args)


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
    with pytest.raises(ValueError, match="key_padding_mask"):
        attn(x, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    q = torch.randn(1, 6, 3, 8)
    kv = torch.randn(1, 4, 3, 8)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attend(q, kv, kv, pos=None, q_pos=torch.arange(3), k_pos=torch.arange(3), causal=False)


@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_compile_fullgraph(name: str, kwargs: dict) -> None:
    torch._dynamo.reset()
    attn = make(name, kwargs)
    x = torch.randn(2, 6, DIM)
    positions = torch.arange(6)
    compiled = torch.compile(attn, fullgraph=True, backend="aot_eager")
    assert_close(compiled(x, positions), attn(x, positions))


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kwargs"), attention_side_cases())
def test_compile_fullgraph_inductor(name: str, kwargs: dict) -> None:
    torch._dynamo.reset()
    attn = make(name, kwargs)
    x = torch.randn(2, 6, DIM)
    compiled = torch.compile(attn, fullgraph=True)
    assert_close(compiled(x, torch.arange(6)), attn(x, torch.arange(6)), atol=1e-5, rtol=1e-5)

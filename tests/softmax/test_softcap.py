"""Tanh soft-capping (Gemma 2): HF parity, every backend, any inner encoding, the model."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Backend, attend, hooks_of
from posenc.attention.flex import flex_available
from posenc.bias import AlibiBias
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import RotaryEmbedding
from posenc.segments import SelfExtend
from posenc.softmax import SoftCap, tanh_softcap

BACKENDS = ["sdpa", "chunked", Backend("chunked", block_size=3)]
if flex_available():
    BACKENDS.append(Backend("flex", compile=False))


def qkv(dtype=torch.float32, heads=4, kv_heads=4, q_len=7, k_len=7, gain=8.0, seed=0):
    """Random q, k, v whose logits reach past the cap (gain: |s| of several times c)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, q_len, 16, generator=g, dtype=dtype) * gain
    k = torch.randn(2, kv_heads, k_len, 16, generator=g, dtype=dtype) * gain
    v = torch.randn(2, kv_heads, k_len, 16, generator=g, dtype=dtype)
    return q, k, v


def test_formula_and_bounds() -> None:
    s = torch.linspace(-500, 500, 1001, dtype=torch.float64)
    out = tanh_softcap(s, 50.0)
    assert_close(out, 50.0 * torch.tanh(s / 50.0), rtol=0, atol=0)
    assert bool((out.abs() < 50.0).all())
    small = torch.tensor([1e-3], dtype=torch.float64)
    assert_close(tanh_softcap(small, 50.0), small, rtol=1e-9, atol=0)  # ≈ identity near 0


@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_equals_hf_gemma2_eager_attention(backend, kv_heads: int) -> None:
    gemma2 = pytest.importorskip("transformers.models.gemma2.modeling_gemma2")
    q, k, v = qkv(kv_heads=kv_heads)
    scale = 16**-0.5
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    mask = torch.zeros(7, 7).masked_fill(~causal, torch.finfo(torch.float32).min)
    module = SimpleNamespace(num_key_value_groups=4 // kv_heads, training=False, head_dim=16)
    want, _ = gemma2.eager_attention_forward(
        module, q, k, v, mask[None, None], scaling=scale, softcap=50.0
    )  # (batch, q, heads, d)
    with torch.no_grad():
        got = attend(q, k, v, pos=SoftCap(None, cap=50.0), causal=True, backend=backend)
    # bit-equal on whole rows; blocks of 3 rows round their float32 matmuls differently
    blocks = isinstance(backend, Backend) and backend.block_size is not None
    assert_close(got.transpose(1, 2), want, rtol=0, atol=5e-6 if blocks else 1e-6)
    # the cap mattered: without it the result is far off
    plain = attend(q, k, v, causal=True)
    assert (plain.transpose(1, 2) - want).abs().max() > 1e-2


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("inner", ["alibi", "t5", "shaw", "cope", "sinusoidal", None])
def test_any_inner_encoding_is_capped_after_its_terms(backend, inner) -> None:
    """float64: the backends equal ``softmax(mask(c·tanh(reference scores / c))) v``, where
    the reference scores are the inner encoding's own (the cap applied to what it gives)."""
    dims = ModelDims(dim=64, num_heads=4)
    base = None if inner is None else build_encoding(inner, dims)
    if base is not None:
        for p in base.parameters():
            torch.nn.init.normal_(p)
    capped = SoftCap(base, cap=3.0)
    if isinstance(backend, Backend) and backend.name == "flex" and inner in ("shaw", "cope"):
        with pytest.raises(ValueError, match="flex"):
            backend.check(hooks_of(capped), dropout=0.0)
        return
    q, k, v = qkv(torch.float64, gain=2.0)
    with torch.no_grad():
        got = attend(q, k, v, pos=capped, causal=True, backend=backend)
        # the reference: the inner's scores read back from attention with a linear map
        want = _capped_reference(q, k, v, base, cap=3.0)
    assert_close(got, want, rtol=0, atol=1e-10)


def _capped_reference(q, k, v, base, cap):
    """Scores of ``base`` by the sdpa reference (probabilities of v = identity rows), then
    the cap, mask and softmax written out."""
    from posenc.attention.rows import expand_heads

    hooks = hooks_of(base)
    scale = hooks.scale(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    pos = torch.arange(7)
    if hooks.bias:
        scores = scores + hooks.materialized_bias(pos, pos, torch.float64)
    if hooks.contextual:
        scores = scores + base.logit_term(q, expand_heads(k, 4), pos, pos, scale)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    if hooks.scores:
        scores = base.transform_scores(scores, q=q, k=k, q_pos=pos, k_pos=pos, allowed=causal)
    scores = (cap * torch.tanh(scores / cap)).masked_fill(~causal, float("-inf"))
    probs = scores.softmax(-1)
    out = probs @ v
    if hooks.value_term:
        out = out + base.value_term(probs, pos, pos)
    return out


@pytest.mark.parametrize("backend", ["sdpa", Backend("chunked", block_size=2)], ids=str)
def test_gradcheck_through_the_cap(backend) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64) * 3 for _ in range(3))
    pe = SoftCap(AlibiBias(2), cap=2.0)

    def fn(q, k):
        return attend(q, k, v, pos=pe, causal=True, backend=backend)

    assert torch.autograd.gradcheck(fn, (q.requires_grad_(), k.requires_grad_()))


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize("inner", ["rope", "alibi"])
def test_model_kv_cache_decoding_equals_full_forward(backend: str, inner: str) -> None:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=32,
        dim=32,
        depth=2,
        num_heads=4,
        pos="softcap",
        pos_kwargs={"inner": inner, "cap": 0.5},
        backend=backend,
    )
    model = DecoderLM(config).double().eval()
    tokens = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :4], cache=cache)]
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(4, 9)]
        uncapped = DecoderLM(dataclasses.replace(config, pos=inner, pos_kwargs={})).double()
        uncapped.load_state_dict(model.state_dict(), strict=False)
    assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    # a cap of 0.5 changes the logits
    assert (uncapped.eval()(tokens) - full).abs().max() > 1e-3


@pytest.mark.parametrize("cap", [0, -1.0, float("inf"), float("nan"), "50", True, None])
def test_bad_cap_names_it(cap) -> None:
    with pytest.raises(ValueError, match="cap"):
        SoftCap(None, cap=cap)
    with pytest.raises(ValueError, match="cap"):
        build_encoding("softcap", ModelDims(dim=32, num_heads=4), cap=cap)


def test_bad_encoding_names_it() -> None:
    with pytest.raises(ValueError, match=r"encoding.*segments"):
        SoftCap(SelfExtend(RotaryEmbedding(8), window=4, group=2))
    with pytest.raises(ValueError, match=r"encoding.*already has map_scores"):
        SoftCap(SoftCap(None))
    with pytest.raises(ValueError, match="encoding must be"):
        SoftCap("rope")  # type: ignore[arg-type]
    dims = ModelDims(dim=32, num_heads=4)
    for inner in ("self_extend", "softcap", "nonexistent", 3):
        with pytest.raises(ValueError, match="inner"):
            build_encoding("softcap", dims, inner=inner)
    with pytest.raises(ValueError, match="inner_kwargs"):
        build_encoding("softcap", dims, inner_kwargs=[1])


def test_registered_with_rope_inside_by_default() -> None:
    pe = build_encoding("softcap", ModelDims(dim=32, num_heads=4))
    assert isinstance(pe.encoding, RotaryEmbedding) and pe.cap == 50.0
    assert pe.head_dim == 8 and pe.shared_across_layers  # delegated to RoPE

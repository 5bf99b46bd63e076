"""FoPE in attention: every backend against the formula written out in float64, the KV
cache (decode = full forward; a cache of unmapped keys after the coefficients change), the
models, the registry and torch.compile."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import FourierRotaryEmbedding
from tests.rotary.test_fope import F64, HEAD_DIM, HEADS, KV_HEADS, L, make

BACKENDS = {
    "sdpa": Backend("sdpa"),
    "chunked": Backend("chunked", block_size=3),
    "flex": Backend("flex", compile=False),
}


def _softmax_reference(attn: Attention, x: Tensor, padding: Tensor | None) -> Tensor:
    """Causal softmax attention on FoPE-mapped q and k, written out in float64."""
    batch, seq, _ = x.shape
    w = {name: getattr(attn, name).weight.double() for name in ("q_proj", "k_proj", "v_proj")}
    q = (x @ w["q_proj"].T).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
    k = (x @ w["k_proj"].T).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    v = (x @ w["v_proj"].T).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    fope = attn.pos
    assert isinstance(fope, FourierRotaryEmbedding)
    q, k = fope(q, k, torch.arange(seq), torch.arange(seq))  # float32 coefficients for flex
    k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
    visible = torch.ones(seq, seq, dtype=torch.bool).tril().expand(batch, 1, seq, seq)
    if padding is not None:
        visible = visible & padding[:, None, None, :]
    scores = (q @ k.mT / math.sqrt(HEAD_DIM)).masked_fill(~visible, -math.inf)
    out = scores.softmax(-1).nan_to_num() @ v
    out = out.transpose(1, 2).reshape(batch, seq, HEADS * HEAD_DIM)
    return out @ attn.out_proj.weight.double().T  # no bias


def _decode(attn: Attention, x: Tensor, padding: Tensor | None, first: int = 5) -> Tensor:
    cache = KVCache()
    mask = (lambda a, b: None) if padding is None else (lambda a, b: padding[:, a:b])
    steps = [attn(x[:, :first], key_padding_mask=mask(0, first), cache=cache)]
    for i in range(first, x.shape[1]):
        steps.append(attn(x[:, i : i + 1], key_padding_mask=mask(i, i + 1), cache=cache))
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("padding", [False, True])
def test_softmax_backends_equal_the_formula_and_decode_as_the_full_forward(
    backend: str, padding: bool
) -> None:
    dtype = torch.float32 if backend == "flex" else F64  # flex: CPU float32
    fope = make().to(dtype)
    torch.manual_seed(0)
    attn = Attention(
        HEADS * HEAD_DIM, HEADS, num_kv_heads=KV_HEADS, pos=fope, backend=BACKENDS[backend]
    ).to(dtype)
    x = torch.randn(2, 11, HEADS * HEAD_DIM, dtype=dtype)
    real = torch.ones(2, 11, dtype=torch.bool)
    real[0, :3] = False
    mask = real if padding else None
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    keep = real.unsqueeze(-1) if padding else torch.ones(1, 1, 1, dtype=torch.bool)
    with torch.no_grad():
        full = attn(x, key_padding_mask=mask)
        expected = _softmax_reference(attn, x.double(), mask)
        assert_close((full.double() * keep), expected * keep, **tol)
        assert_close(_decode(attn, x, mask) * keep, full * keep, **tol)


def _linear_reference(attn: Attention, x: Tensor) -> Tensor:
    """RoFormer eq. 19 with FoPE's map in place of the rotation: numerator on the mapped
    features φ, denominator on the unmapped ones, causal, float64."""
    batch, seq, _ = x.shape
    q = (x @ attn.q_proj.weight.T).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    v = (x @ attn.v_proj.weight.T).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    rq, rk = attn.pos(fq, fk, torch.arange(seq), torch.arange(seq))
    rk, fk, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (rk, fk, v))
    visible = torch.ones(seq, seq, dtype=torch.bool).tril()
    num = ((rq @ rk.mT) * visible) @ v
    den = ((fq @ fk.mT) * visible).sum(-1, keepdim=True)
    return attn.out_proj(((num / den).transpose(1, 2)).reshape(batch, seq, HEADS * HEAD_DIM))


def test_linear_backend_serves_fope_and_reads_new_coefficients_from_its_cache() -> None:
    fope = make()
    torch.manual_seed(0)
    attn = Attention(
        HEADS * HEAD_DIM,
        HEADS,
        num_kv_heads=KV_HEADS,
        pos=fope,
        backend=Backend("linear", block_size=4),
        dtype=F64,
    )
    x = torch.randn(2, 11, HEADS * HEAD_DIM, dtype=F64)
    with torch.no_grad():
        full = attn(x)
        assert_close(full, _linear_reference(attn, x), rtol=1e-12, atol=1e-12)
        assert_close(_decode(attn, x, None), full, rtol=1e-12, atol=1e-12)
        # the cache keeps unmapped keys: after the coefficients change, a step maps every
        # key with the new ones (the memo keys on `rebuilds`)
        cache = KVCache()
        attn(x[:, :10], cache=cache)
        before = fope.rebuilds
        fope.cos_coef.mul_(0.5)
        assert fope.rebuilds != before
        last = attn(x[:, 10:], cache=cache)
        assert_close(last, attn(x)[:, 10:], rtol=1e-12, atol=1e-12)


def test_linear_cache_remaps_after_coefficients_are_replaced() -> None:
    """load_state_dict(assign=True) puts new coefficient tensors in; whatever their versions
    (here the old ones', so a sum of versions would not move) the cached keys are remapped."""
    fope = make()
    torch.manual_seed(0)
    attn = Attention(
        HEADS * HEAD_DIM,
        HEADS,
        num_kv_heads=KV_HEADS,
        pos=fope,
        backend=Backend("linear", block_size=4),
        dtype=F64,
    )
    x = torch.randn(2, 11, HEADS * HEAD_DIM, dtype=F64)
    with torch.no_grad():
        cache = KVCache()
        attn(x[:, :10], cache=cache)
        new = {}
        for name in ("cos_coef", "sin_coef"):
            old = getattr(fope, name)
            tensor = old.detach().clone().mul(0.5)
            while tensor._version < old._version:
                tensor.add_(0.0)  # the old tensor's version count
            new[name] = tensor
        fope.load_state_dict(new, assign=True)
        last = attn(x[:, 10:], cache=cache)
        assert_close(last, attn(x)[:, 10:], rtol=1e-12, atol=1e-12)


def test_attention_with_other_kv_heads_raises_naming_num_kv_heads() -> None:
    fope = FourierRotaryEmbedding(HEAD_DIM, 4)
    attn = Attention(HEADS * HEAD_DIM, HEADS, num_kv_heads=KV_HEADS, pos=fope)
    with pytest.raises(ValueError, match=r"num_kv_heads=4"):
        attn(torch.randn(1, 3, HEADS * HEAD_DIM))
    shared = FourierRotaryEmbedding(HEAD_DIM, 4, separate_heads=False)  # one set: any heads
    Attention(HEADS * HEAD_DIM, HEADS, num_kv_heads=KV_HEADS, pos=shared)(
        torch.randn(1, 3, HEADS * HEAD_DIM)
    )


@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_models_decode_as_the_full_forward(num_kv_heads: int | None) -> None:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=32,
        dim=32,
        depth=2,
        num_heads=HEADS,
        num_kv_heads=num_kv_heads,
        pos="fope",
        max_seq_len=64,
    )
    model = DecoderLM(config).eval()
    assert isinstance(model.encoding, FourierRotaryEmbedding)
    # the registry reads the model's key/value heads (ModelConfig.dims → ModelDims)
    assert model.encoding.num_kv_heads == (num_kv_heads or HEADS)
    assert model.encoding.train_length == 64 and model.encoding.num_kept == 2  # head_dim 8
    tokens = torch.randint(0, 32, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(12)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert EncoderClassifier(config, num_classes=3)(tokens).shape == (2, 3)


def test_registry_fills_the_model_dims() -> None:
    fope = build_encoding("fope", ModelDims(dim=64, num_heads=4, max_seq_len=128))
    assert isinstance(fope, FourierRotaryEmbedding)
    assert (fope.head_dim, fope.num_kv_heads, fope.train_length) == (16, 4, 128)
    assert fope.cos_coef.shape == (4, 3, 3)  # 2π/128 = 0.049: θ = 1, 0.32, 0.1 kept
    other = build_encoding("fope", ModelDims(dim=64, num_heads=4), num_kv_heads=1, base=500.0)
    assert other.cos_coef.shape[0] == 1


def test_compiled_attention_equals_eager_and_trains_the_coefficients() -> None:
    torch.manual_seed(0)
    fope = FourierRotaryEmbedding(HEAD_DIM, KV_HEADS, train_length=L)
    attn = Attention(HEADS * HEAD_DIM, HEADS, num_kv_heads=KV_HEADS, pos=fope)
    x = torch.randn(2, 20, HEADS * HEAD_DIM)
    eager = attn(x)
    compiled = torch.compile(attn)(x)
    assert_close(compiled, eager, rtol=1e-6, atol=1e-6)
    compiled.square().sum().backward()
    assert fope.cos_coef.grad is not None and bool(fope.cos_coef.grad.abs().sum() > 0)
    assert fope.sin_coef.grad is not None and bool(fope.sin_coef.grad.abs().sum() > 0)

"""Linear attention with rotary features (RoFormer §3.4.3): the formula written out in
float64, its properties, the KV cache, the models and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention import Attention, Backend, KVCache
from posenc.attention.linear import feature_map, linear_attention
from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import RotaryEmbedding

F64 = torch.float64
DIM, HEADS = 32, 4
HEAD = DIM // HEADS


def _rope_reference(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """RoPE in the "half" layout, from its definition: channel i and i + d/2 form pair i,
    turned by ``p · base^(−2i/d)``."""
    half = x.shape[-1] // 2
    freq = base ** (-torch.arange(half, dtype=F64) * 2 / x.shape[-1])
    angle = positions.to(F64)[:, None] * freq  # (seq, half)
    cos, sin = angle.cos(), angle.sin()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def _reference(
    attn: Attention,
    x: Tensor,
    *,
    rope: bool,
    causal: bool,
    positions: Tensor | None = None,
    padding: Tensor | None = None,
    kind: str = "elu",
) -> Tensor:
    """RoFormer eq. 19, every pair written out in float64."""
    batch, seq, _ = x.shape
    heads, kv_heads = attn.num_heads, attn.num_kv_heads
    q = (x @ attn.q_proj.weight.T).view(batch, seq, heads, HEAD).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(batch, seq, kv_heads, HEAD).transpose(1, 2)
    v = (x @ attn.v_proj.weight.T).view(batch, seq, kv_heads, HEAD).transpose(1, 2)
    k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
    phi = {"elu": lambda t: F.elu(t) + 1, "relu": F.relu}[kind]
    fq, fk = phi(q), phi(k)
    pos = torch.arange(seq) if positions is None else positions
    rq, rk = (_rope_reference(fq, pos), _rope_reference(fk, pos)) if rope else (fq, fk)
    visible = torch.ones(seq, seq, dtype=torch.bool)
    if causal:
        visible = visible.tril()
    visible = visible.expand(batch, 1, seq, seq)
    if padding is not None:
        visible = visible & padding[:, None, None, :]
    num = ((rq @ rk.transpose(-1, -2)) * visible) @ v
    den = ((fq @ fk.transpose(-1, -2)) * visible).sum(-1, keepdim=True)
    out = torch.where(den == 0, 0.0, num / den.where(den != 0, 1.0))
    return attn.out_proj(out.transpose(1, 2).reshape(batch, seq, heads * HEAD))


def _attention(rope: bool, *, causal: bool = True, kv_heads: int = HEADS, **backend) -> Attention:
    torch.manual_seed(0)
    pos = RotaryEmbedding(HEAD) if rope else None
    return Attention(
        DIM,
        HEADS,
        num_kv_heads=kv_heads,
        pos=pos,
        causal=causal,
        backend=Backend("linear", **backend),
        dtype=F64,
    )


@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [HEADS, 1])
def test_equals_the_formula_in_float64(rope: bool, causal: bool, kv_heads: int) -> None:
    attn = _attention(rope, causal=causal, kv_heads=kv_heads, block_size=5)
    x = torch.randn(2, 13, DIM, dtype=F64)
    expected = _reference(attn, x, rope=rope, causal=causal)
    torch.testing.assert_close(attn(x), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block_size", [1, 4, 13, 64])
def test_causal_blocks_do_not_change_the_result(block_size: int) -> None:
    x = torch.randn(2, 13, DIM, dtype=F64)
    whole = _attention(True, block_size=64)(x)
    torch.testing.assert_close(_attention(True, block_size=block_size)(x), whole)


def test_relu_features_and_rows_without_keys_are_zero() -> None:
    attn = _attention(True, causal=False, feature_map="relu")
    x = torch.randn(2, 9, DIM, dtype=F64)
    padding = torch.ones(2, 9, dtype=torch.bool)
    padding[1] = False  # the second row of the batch has no key at all
    out = attn(x, key_padding_mask=padding)
    expected = _reference(attn, x, rope=True, causal=False, padding=padding, kind="relu")
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[1], attn.out_proj(torch.zeros(9, DIM, dtype=F64)))


def test_rotary_numerator_is_relative_denominator_untouched() -> None:
    """Shifting every position leaves the output unchanged (R_iᵀR_j = R_{j−i}); with rotary
    the numerator differs from NoPE's but the weights still sum as the un-rotated ones."""
    attn = _attention(True)
    x = torch.randn(1, 11, DIM, dtype=F64)
    base = attn(x, torch.arange(11))
    torch.testing.assert_close(attn(x, torch.arange(11) + 1000), base, rtol=1e-9, atol=1e-11)
    plain = _attention(False)
    assert not torch.allclose(base, plain(x))


def test_positions_other_than_arange_follow_the_formula() -> None:
    attn = _attention(True, causal=False)
    x = torch.randn(1, 7, DIM, dtype=F64)
    positions = torch.tensor([0, 3, 4, 9, 10, 11, 40])
    expected = _reference(attn, x, rope=True, causal=False, positions=positions)
    torch.testing.assert_close(attn(x, positions), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rope", [False, True])
def test_key_padding_leaves_real_tokens_as_unpadded(rope: bool) -> None:
    attn = _attention(rope, causal=False)
    x = torch.randn(1, 6, DIM, dtype=F64)
    padded = torch.cat([x, torch.randn(1, 3, DIM, dtype=F64)], dim=1)
    mask = torch.tensor([[True] * 6 + [False] * 3])
    torch.testing.assert_close(attn(padded, key_padding_mask=mask)[:, :6], attn(x))


@pytest.mark.parametrize("steps", [(1,) * 10, (4, 1, 5)])
def test_kv_cache_decoding_equals_the_full_forward(steps: tuple[int, ...]) -> None:
    attn = _attention(True, kv_heads=2, block_size=3)
    x = torch.randn(2, sum(steps), DIM, dtype=F64)
    cache, parts, start = KVCache(), [], 0
    for step in steps:
        parts.append(attn(x[:, start : start + step], cache=cache))
        start += step
    assert cache.rotated is False
    torch.testing.assert_close(torch.cat(parts, dim=1), attn(x), rtol=1e-12, atol=1e-12)


def test_gradcheck_through_the_blocks() -> None:
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=F64, requires_grad=True) for _ in range(3))

    def run(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        fq, fk = feature_map(q, "elu"), feature_map(k, "elu")
        rq, rk = torch.cat([fq, -fq], -1), torch.cat([fk, fk], -1)  # any wider map
        return linear_attention(rq, rk, fq, fk, v, causal=True, block_size=4)

    assert torch.autograd.gradcheck(run, (q, k, v))


def test_bfloat16_computes_in_float32() -> None:
    attn = _attention(True)
    x = torch.randn(2, 12, DIM, dtype=F64)
    low = attn.to(torch.bfloat16)(x.to(torch.bfloat16))
    high = attn.to(F64)(x)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.to(F64), high, rtol=0.05, atol=0.05)


def test_decoder_and_encoder_models_take_the_backend() -> None:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=17, dim=DIM, depth=2, num_heads=HEADS, pos="rope")
    lm = DecoderLM(ModelConfig(**{**config.__dict__, "backend": "linear"}))
    tokens = torch.randint(0, 17, (2, 10))
    logits = lm(tokens)
    logits[:, :5].sum().backward()
    assert all(p.grad is not None for p in lm.parameters() if p.requires_grad)
    # causal: the first five logits do not read later tokens
    changed = tokens.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 17
    torch.testing.assert_close(lm(changed)[:, :7], logits[:, :7])
    encoder = EncoderClassifier(ModelConfig(**{**config.__dict__, "backend": "linear"}), 3)
    assert encoder(tokens).shape == (2, 3)


@pytest.mark.parametrize("name", ["alibi", "t5", "fox", "stick_breaking", "learned_sinks"])
def test_encodings_with_logit_terms_are_refused(name: str) -> None:
    pos = build_encoding(name, ModelDims(dim=DIM, num_heads=HEADS))
    with pytest.raises(ValueError, match="backend 'linear' cannot serve"):
        Attention(DIM, HEADS, pos=pos, backend="linear")


def test_segment_methods_dropout_masks_and_caches_are_refused() -> None:
    segmented = build_encoding("self_extend", ModelDims(dim=DIM, num_heads=HEADS))
    with pytest.raises(ValueError, match="pair lies"):
        Attention(DIM, HEADS, pos=segmented, backend="linear")
    with pytest.raises(ValueError, match="dropout"):
        Attention(DIM, HEADS, backend="linear", dropout=0.1)
    with pytest.raises(ValueError, match="feature_map"):
        Backend("linear", feature_map="softmax")  # type: ignore[arg-type]
    attn = _attention(True)
    x = torch.randn(1, 4, DIM, dtype=F64)
    with pytest.raises(ValueError, match="document_ids / attn_mask"):
        attn(x, document_ids=torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="document_ids / attn_mask"):
        attn(x, attn_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="unrotated"):
        attn(x, cache=KVCache(keys="rotated"))


def test_the_numerator_weights_are_rope_dot_products() -> None:
    """On one pair of tokens the numerator weight is the rotated features' product, which is
    ``|φ(q)||φ(k)|`` times a cosine of the position difference for a single frequency."""
    fq = torch.tensor([[[[1.0, 0.0]]]], dtype=F64)
    fk = torch.tensor([[[[1.0, 0.0]]]], dtype=F64)
    for gap in (0, 1, 2):
        rq = _rope_reference(fq, torch.tensor([gap]))
        rk = _rope_reference(fk, torch.tensor([0]))
        v = torch.ones(1, 1, 1, 1, dtype=F64)
        out = linear_attention(rq, rk, fq, fk, v, causal=False)
        torch.testing.assert_close(out.flatten(), torch.tensor([math.cos(gap)], dtype=F64))


@pytest.mark.parametrize("name", ["rope", "xpos", "pope", "hope", "mrope", "videorope"])
def test_every_rotary_encoding_decodes_as_the_full_forward(name: str) -> None:
    """The registry's rotary encodings through the linear backend: numerator rotated by the
    encoding's own rotation (checked against ``rotate_qk`` on the features), and a KV cache
    giving the full forward."""
    torch.manual_seed(0)
    pos = build_encoding(name, ModelDims(dim=DIM, num_heads=HEADS))
    attn = Attention(DIM, HEADS, pos=pos, backend="linear", dtype=F64)
    x = torch.randn(2, 9, DIM, dtype=F64)
    full = attn(x)
    cache = KVCache()
    steps = torch.cat([attn(x[:, :4], cache=cache), attn(x[:, 4:], cache=cache)], dim=1)
    torch.testing.assert_close(steps, full, rtol=1e-10, atol=1e-12)
    q = (x @ attn.q_proj.weight.T).view(2, 9, HEADS, HEAD).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(2, 9, HEADS, HEAD).transpose(1, 2)
    v = (x @ attn.v_proj.weight.T).view(2, 9, HEADS, HEAD).transpose(1, 2)
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    positions = torch.arange(9) if pos.num_axes == 1 else torch.arange(9).expand(pos.num_axes, 9)
    tables = pos.rotary_tables(positions, F64)
    rq, rk = pos.rotate_qk(fq, fk, tables, tables)
    visible = torch.ones(9, 9, dtype=torch.bool).tril()
    num = ((rq @ rk.transpose(-1, -2)) * visible) @ v
    den = ((fq @ fk.transpose(-1, -2)) * visible).sum(-1, keepdim=True)
    expected = attn.out_proj((num / den).transpose(1, 2).reshape(2, 9, DIM))
    torch.testing.assert_close(full, expected, rtol=1e-10, atol=1e-12)

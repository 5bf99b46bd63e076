"""Attention served by a token-phase encoding (CARoPE): a per-pair float64 reference built from
``carope_phases``, RoPE for a constant transform, the KV cache, padding, packed documents,
gradients, the model, and the refusals."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend
from posenc.models import DecoderLM, ModelConfig
from posenc.rotary import ContextAwareRoPE, RotaryEmbedding, carope_phases, carope_rates

F64 = torch.float64
DIM, HEADS, HEAD_DIM = 32, 4, 8
BACKENDS = [
    "sdpa",
    "chunked",
    Backend("chunked", block_size=2),
    "auto",
    Backend("flex", compile=False),
]


def layer(kv_heads: int = HEADS, *, seed: int = 0, **kw: Any) -> Attention:
    torch.manual_seed(seed)
    pe = ContextAwareRoPE(DIM, kv_heads, HEAD_DIM, dtype=F64, **kw)
    return Attention(DIM, HEADS, num_kv_heads=kv_heads, pos=pe, dtype=F64).eval()


def carope_of(module: torch.nn.Module) -> ContextAwareRoPE:
    pe = module.pos
    assert isinstance(pe, ContextAwareRoPE)
    return pe


def rotate_pairs(t: Tensor, phases: Tensor, layout: str) -> Tensor:
    """``t`` ``(batch, heads, seq, d)`` with pair ``i`` as a complex number times ``e^{iφ_i}``."""
    half = t.shape[-1] // 2
    if layout == "half":
        a, b = t[..., :half], t[..., half:]
    else:
        a, b = t[..., 0::2], t[..., 1::2]
    z = torch.complex(a, b) * torch.polar(torch.ones_like(phases), phases)
    if layout == "half":
        return torch.cat((z.real, z.imag), dim=-1)
    return torch.stack((z.real, z.imag), dim=-1).flatten(-2)


def reference(
    attn: Attention,
    x: Tensor,
    real: Tensor | None = None,
    documents: Tensor | None = None,
) -> Tensor:
    """Every (query, key) pair in float64: q and k rotated by ``carope_phases`` (the key head's
    for each query head), softmax over the visible keys, one row at a time for documents."""
    pe = carope_of(attn)
    batch, seq, _ = x.shape
    group = attn.num_heads // attn.num_kv_heads
    q = attn.q_proj(x).view(batch, seq, attn.num_heads, HEAD_DIM).transpose(1, 2)
    k = attn.k_proj(x).view(batch, seq, attn.num_kv_heads, HEAD_DIM).transpose(1, 2)
    v = attn.v_proj(x).view(batch, seq, attn.num_kv_heads, HEAD_DIM).transpose(1, 2)
    rates = carope_rates(x, pe.weight, pe.bias)
    phases = torch.zeros(batch, attn.num_kv_heads, seq, HEAD_DIM // 2, dtype=F64)
    docs = torch.zeros(batch, seq, dtype=torch.long) if documents is None else documents
    for b in range(batch):  # each document on its own, from zero
        for d in docs[b].unique():
            idx = (docs[b] == d).nonzero().flatten()
            r = None if real is None else real[b : b + 1, idx]
            phases[b, :, idx] = carope_phases(rates[b : b + 1, :, idx], HEAD_DIM // 2, real=r)[0]
    q = rotate_pairs(q, phases.repeat_interleave(group, dim=1), pe.layout)
    k = rotate_pairs(k, phases, pe.layout).repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    logits = q @ k.transpose(-1, -2) * HEAD_DIM**-0.5
    visible = torch.ones(seq, seq, dtype=torch.bool).tril()[None] & (
        docs[:, :, None] == docs[:, None]
    )
    if real is not None:
        visible = visible & real[:, None, :]
    logits = logits.masked_fill(~visible[:, None], -math.inf)
    out = torch.softmax(logits, dim=-1).nan_to_num(0.0) @ v
    return attn.out_proj(out.transpose(1, 2).reshape(batch, seq, -1))


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize(("kv_heads", "layout"), [(HEADS, "half"), (2, "interleaved"), (1, "half")])
def test_attention_equals_the_per_pair_reference(backend: Any, kv_heads: int, layout: str) -> None:
    attn = layer(kv_heads, layout=layout, bias=True)
    attn.backend = Backend(backend) if isinstance(backend, str) else backend  # type: ignore[arg-type]
    x = torch.randn(2, 9, DIM, dtype=F64)
    with torch.no_grad():
        assert_close(attn(x), reference(attn, x))


def test_a_constant_transform_is_rope_at_positions_from_one() -> None:
    theta = 10000.0 ** (-2 / HEAD_DIM)  # f ≡ θ: φ_i(n) = (n + 1) θ^i, RoPE's inv_freq θ^i
    attn = layer(bias=True)
    with torch.no_grad():
        pe = carope_of(attn)
        pe.weight.zero_()
        assert pe.bias is not None
        pe.bias.fill_(math.log(math.expm1(1.0 / theta - 1.0)))
    rope = Attention(DIM, HEADS, pos=RotaryEmbedding(HEAD_DIM, dtype=F64), dtype=F64).eval()
    rope.load_state_dict(attn.state_dict(), strict=False)
    x = torch.randn(2, 7, DIM, dtype=F64)
    with torch.no_grad():
        assert_close(attn(x), rope(x, torch.arange(1, 8)))


@pytest.mark.parametrize("kv_heads", [HEADS, 2])
@pytest.mark.parametrize("steps", [[1] * 7, [3, 1, 2, 1], [7]])
def test_cached_decoding_equals_the_full_forward(kv_heads: int, steps: list[int]) -> None:
    attn = layer(kv_heads, bias=True)
    x = torch.randn(2, 7, DIM, dtype=F64)
    real = torch.tensor([[False, False, True, True, True, True, True], [True] * 7])
    docs = torch.tensor([[0, 0, 0, 1, 1, 1, 2], [5, 5, 6, 6, 6, 6, 6]])
    with torch.no_grad():
        for kwargs in ({}, {"key_padding_mask": real}, {"document_ids": docs}):
            full = attn(x, **kwargs)
            cache, outs, start = KVCache(), [], 0
            for size in steps:
                part = {name: t[:, start : start + size] for name, t in kwargs.items()}
                outs.append(attn(x[:, start : start + size], cache=cache, **part))
                start += size
            assert_close(torch.cat(outs, dim=1), full)
            assert cache.token_phases.shape == (2, kv_heads, 7, HEAD_DIM // 2)


def test_truncating_the_cache_continues_from_the_kept_phases() -> None:
    attn = layer()
    x = torch.randn(1, 6, DIM, dtype=F64)
    with torch.no_grad():
        full = attn(x)
        cache = KVCache()
        attn(
            torch.randn(1, 5, DIM, dtype=F64).index_copy(1, torch.arange(3), x[:, :3]), cache=cache
        )
        cache.truncate(3)
        assert_close(attn(x[:, 3:], cache=cache), full[:, 3:])


@pytest.mark.parametrize("side", ["left", "middle", "right"])
def test_padding_moves_no_real_token(side: str) -> None:
    """Padding adds no phase: a padded row's real tokens get the phases, and the outputs,
    they get unpadded (padding between real tokens would otherwise turn the pairs across
    it), and a padded token carries the last real token's phases."""
    attn = layer(2)
    x = torch.randn(1, 5, DIM, dtype=F64)
    pad = torch.randn(1, 3, DIM, dtype=F64)
    where = {"left": 0, "middle": 2, "right": 5}[side]
    padded = torch.cat((x[:, :where], pad, x[:, where:]), dim=1)
    real = torch.ones(1, 8, dtype=torch.bool)
    real[:, where : where + 3] = False
    with torch.no_grad():
        cache, alone = KVCache(), KVCache()
        got = attn(padded, key_padding_mask=real, cache=cache)
        assert_close(got[:, real[0]], attn(x, cache=alone))
        assert_close(got[:, real[0]], reference(attn, padded, real=real)[:, real[0]])
    phases = cache.token_phases
    assert_close(phases[:, :, real[0]], alone.token_phases)
    carried = (
        alone.token_phases[:, :, where - 1 : where] if where else torch.zeros_like(phases[:, :, :1])
    )
    assert_close(phases[:, :, ~real[0]], carried.expand(-1, -1, 3, -1))


def test_packed_documents_restart_the_phases() -> None:
    """Each document's phases (and so its cache) are those of its own run; its outputs too
    (the logits read φ(i) − φ(j) within a document, so they would be without the restart)."""
    attn = layer(bias=True)
    a, b = torch.randn(1, 4, DIM, dtype=F64), torch.randn(1, 3, DIM, dtype=F64)
    docs = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    x = torch.cat((a, b), dim=1)
    with torch.no_grad():
        cache, cache_a, cache_b = KVCache(), KVCache(), KVCache()
        packed = attn(x[:, :2], document_ids=docs[:2], cache=cache)
        packed = torch.cat((packed, attn(x[:, 2:], document_ids=docs[2:], cache=cache)), 1)
        assert_close(packed, torch.cat((attn(a, cache=cache_a), attn(b, cache=cache_b)), 1))
        assert_close(packed, reference(attn, x, documents=docs[None]))
    both = torch.cat((cache_a.token_phases, cache_b.token_phases), dim=2)
    assert_close(cache.token_phases, both)


def test_gradients_match_the_reference_and_gradcheck() -> None:
    attn = layer(2, bias=True)
    x = torch.randn(2, 5, DIM, dtype=F64, requires_grad=True)
    got = torch.autograd.grad(attn(x).square().sum(), [x, *attn.parameters()])
    want = torch.autograd.grad(reference(attn, x).square().sum(), [x, *attn.parameters()])
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)
    tiny = Attention(4, 2, pos=ContextAwareRoPE(4, 2, 2, bias=True, dtype=F64), dtype=F64)
    names = ("pos.weight", "pos.bias")

    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        out: Tensor = torch.func.functional_call(
            tiny, dict(zip(names, (weight, bias), strict=True)), (x,)
        )
        return out

    params = [tiny.get_parameter(n).detach().clone().requires_grad_() for n in names]
    small = torch.randn(1, 3, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(forward, (small, *params))


def test_the_model_trains_and_decodes_with_carope() -> None:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=32, dim=16, depth=2, num_heads=4, num_kv_heads=2, pos="carope")
    model = DecoderLM(config)
    pes = [carope_of(module) for module in model.modules() if isinstance(module, Attention)]
    assert all(pe.num_heads == 2 for pe in pes)
    assert pes[0] is not pes[1]  # one transform per layer
    tokens = torch.randint(0, 32, (2, 9))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = pes[0].weight.detach().clone()
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    assert not torch.equal(pes[0].weight, before)
    model.eval()
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :4], cache=cache)]
        steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(4, 9)]
        assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_refusals_name_the_argument_and_the_reason() -> None:
    pe = ContextAwareRoPE(DIM, HEADS, HEAD_DIM)
    with pytest.raises(
        ValueError, match=r"backend 'linear' cannot serve ContextAwareRoPE.*token_phases"
    ):
        Attention(DIM, HEADS, pos=pe, backend="linear")
    with pytest.raises(
        ValueError, match=r"^pos: ContextAwareRoPE has num_heads=4 .*num_kv_heads=2"
    ):
        Attention(DIM, HEADS, num_kv_heads=2, pos=pe)
    with pytest.raises(ValueError, match=r"^pos: ContextAwareRoPE has dim=32"):
        Attention(2 * DIM, HEADS, head_dim=HEAD_DIM, pos=pe)
    with pytest.raises(ValueError, match=r"^pos: .*causal attention only"):
        Attention(DIM, HEADS, pos=pe, causal=False)
    q = torch.randn(1, HEADS, 3, HEAD_DIM)
    with pytest.raises(ValueError, match=r"^pos: ContextAwareRoPE .*token_phases.*attend"):
        attend(q, q, q, pos=pe, causal=True)
    attn = Attention(DIM, HEADS, pos=pe)
    with pytest.raises(ValueError, match=r"^cache: .*KVCache\(keys='rotated'\)"):
        attn(torch.randn(1, 3, DIM), cache=KVCache(keys="unrotated"))

"""Learned attention sinks (gpt-oss): HF parity, every backend, gradients, the model, cache."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import Backend, attend
from posenc.attention.flex import flex_available
from posenc.bias import AlibiBias
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import RotaryEmbedding
from posenc.segments import SelfExtend
from posenc.softmax import LearnedSinks, SoftCap

BACKENDS = ["sdpa", "chunked", Backend("chunked", block_size=3)]
if flex_available():
    BACKENDS.append(Backend("flex", compile=False))


def qkv(dtype=torch.float32, heads=4, kv_heads=4, q_len=7, k_len=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, q_len, 16, generator=g, dtype=dtype)
    k = torch.randn(2, kv_heads, k_len, 16, generator=g, dtype=dtype)
    v = torch.randn(2, kv_heads, k_len, 16, generator=g, dtype=dtype)
    return q, k, v


def sinks_of(heads: int = 4, dtype=torch.float32) -> LearnedSinks:
    pe = LearnedSinks(heads, None, dtype=dtype)
    with torch.no_grad():  # large enough to take a visible share of each row
        pe.sinks.copy_(torch.linspace(-1.0, 2.0, heads, dtype=dtype))
    return pe


@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_equals_hf_gpt_oss_eager_attention(backend, kv_heads: int) -> None:
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    q, k, v = qkv(kv_heads=kv_heads)
    pe = sinks_of()
    padding = torch.ones(2, 7, dtype=torch.bool)
    padding[1, :3] = False  # row 1's first queries see no key at all: all weight to the sink
    allowed = torch.ones(7, 7, dtype=torch.bool).tril() & padding[:, None, None, :]
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    module = SimpleNamespace(num_key_value_groups=4 // kv_heads, training=False, sinks=pe.sinks)
    with torch.no_grad():
        want, _ = gpt_oss.eager_attention_forward(module, q, k, v, mask, scaling=0.25)
        got = attend(q, k, v, pos=pe, causal=True, key_padding_mask=padding, backend=backend)
    blocks = isinstance(backend, Backend) and backend.block_size is not None
    assert_close(got.transpose(1, 2), want, rtol=0, atol=5e-6 if blocks else 1e-6)
    assert float(got[1, :, :3].abs().max()) == 0.0  # rows that see no key
    # the sinks mattered
    assert (attend(q, k, v, causal=True).transpose(1, 2) - want).abs().max() > 1e-2


def test_sink_takes_its_share_of_each_row() -> None:
    """float64: o = o_keys · σ(LSE − s_h), the log-sum-exp form FlexAttention uses."""
    q, k, v = qkv(torch.float64)
    pe = sinks_of(dtype=torch.float64)
    got = attend(q, k, v, pos=pe, causal=False)
    plain = attend(q, k, v, causal=False)
    lse = torch.logsumexp((q @ k.transpose(-1, -2)) * 0.25, dim=-1, keepdim=True)
    keep = torch.sigmoid(lse - pe.sinks.detach().view(1, -1, 1, 1))
    assert_close(got, plain * keep, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("inner", ["alibi", "t5", "xl", "rope", None])
def test_backends_equal_sdpa_with_any_inner_encoding(backend, inner) -> None:
    dims = ModelDims(dim=64, num_heads=4)
    # float64 parameters, as the sinks and q, k, v: Transformer-XL's relative projection is
    # computed in its parameters' dtype, and float32 tables built for other row counts (the
    # blocks) differ by float32 rounding (2e-6 in the output with 2 threads or other MKL
    # paths), which the float64 tolerance below is not about.
    base = None if inner is None else build_encoding(inner, dims).to(torch.float64)
    if base is not None:
        for p in base.parameters():
            nn.init.normal_(p)
    pe = LearnedSinks(4, base, init_std=1.0, dtype=torch.float64)
    if isinstance(backend, Backend) and backend.name == "flex" and inner == "xl":
        with pytest.raises(ValueError, match="flex"):
            attend(*qkv(torch.float64), pos=pe, causal=True, backend=backend)
        return
    q, k, v = qkv(torch.float64)
    padding = torch.tensor([[True] * 7, [False, False] + [True] * 5])
    with torch.no_grad():
        want = attend(q, k, v, pos=pe, causal=True, key_padding_mask=padding)
        got = attend(q, k, v, pos=pe, causal=True, key_padding_mask=padding, backend=backend)
    assert_close(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("backend", ["sdpa", Backend("chunked", block_size=2)], ids=str)
def test_gradcheck_of_the_sinks(backend) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64) for _ in range(3))
    pe = LearnedSinks(2, AlibiBias(2), init_std=1.0, dtype=torch.float64)

    def fn(sinks, q):
        with torch.no_grad():
            pe.sinks.copy_(sinks)
        return attend(q, k, v, pos=pe, causal=True, backend=backend)

    # the sinks' own gradient: through the parameter, checked against finite differences
    sinks = pe.sinks.detach().clone()
    out = attend(q, k, v, pos=pe, causal=True, backend=backend)
    (grad,) = torch.autograd.grad(out.sum(), pe.sinks)
    eps = 1e-6
    for h in range(2):
        step = torch.zeros(2, dtype=torch.float64)
        step[h] = eps
        with torch.no_grad():
            up = fn(sinks + step, q).sum()
            down = fn(sinks - step, q).sum()
        assert_close(grad[h], (up - down) / (2 * eps), rtol=1e-6, atol=1e-9)
    with torch.no_grad():
        pe.sinks.copy_(sinks)
    assert torch.autograd.gradcheck(
        lambda q: attend(q, k, v, pos=pe, causal=True, backend=backend), (q.requires_grad_(),)
    )


def test_compiled_flex_refuses_sinks_on_the_cpu() -> None:
    """Compiled FlexAttention on the CPU returns no log-sum-exp (torch 2.13)."""
    if not flex_available():
        pytest.skip("torch has no FlexAttention")
    q, k, v = qkv()
    with torch.no_grad(), pytest.raises(ValueError, match=r"backend 'flex'.*log-sum-exp"):
        attend(q, k, v, pos=sinks_of(), causal=True, backend=Backend("flex"))


def test_flex_needs_no_grad_on_the_cpu() -> None:
    if not flex_available():
        pytest.skip("torch has no FlexAttention")
    q, k, v = qkv()
    with pytest.raises(ValueError, match="forward only on the CPU"):
        attend(q, k, v, pos=sinks_of(), causal=True, backend=Backend("flex", compile=False))


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize("inner", ["rope", "t5"])
def test_model_layers_own_sinks_and_the_cache_decodes_as_the_full_forward(backend, inner):
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=32,
        dim=32,
        depth=3,
        num_heads=4,
        pos="learned_sinks",
        pos_kwargs={"inner": inner, "init_std": 1.0},
        backend=backend,
    )
    model = DecoderLM(config).double().eval()
    layers = [block.attn.pos for block in model.trunk.blocks]
    assert len({id(p) for p in layers}) == 3  # each layer its own sinks
    assert len({id(p.sinks) for p in layers}) == 3
    assert len({id(p.encoding) for p in layers}) == 1  # RoPE / T5's table shared
    tokens = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :4], cache=cache)]
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(4, 9)]
    assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    # meta build + reset_parameters draws as the constructor did (T5's table once)
    torch.manual_seed(1)
    normal = DecoderLM(config)
    with torch.device("meta"):
        meta = DecoderLM(config)
    meta.to_empty(device="cpu")
    torch.manual_seed(1)
    meta.reset_parameters()
    for (name, a), b in zip(normal.state_dict().items(), meta.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_composes_with_softcap() -> None:
    q, k, v = qkv(torch.float64)
    pe = SoftCap(sinks_of(dtype=torch.float64), cap=1.0)
    got = attend(q, k, v, pos=pe, causal=False)
    scores = torch.tanh((q @ k.transpose(-1, -2)) * 0.25)
    column = pe.encoding.sinks.detach().view(1, -1, 1, 1).expand(2, 4, 7, 1)
    probs = torch.cat([scores, column], -1).softmax(-1)[..., :-1]
    assert_close(got, probs @ v, rtol=0, atol=1e-12)


def test_bad_inputs_name_the_argument() -> None:
    for heads in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="num_heads"):
            LearnedSinks(heads)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_heads"):
        LearnedSinks(8, AlibiBias(4))
    for std in (-1.0, float("inf"), "0.02"):
        with pytest.raises(ValueError, match="init_std"):
            LearnedSinks(4, init_std=std)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"encoding.*already has sink_logits"):
        LearnedSinks(4, LearnedSinks(4))
    with pytest.raises(ValueError, match=r"encoding.*segments"):
        LearnedSinks(4, SelfExtend(RotaryEmbedding(8), window=4, group=2))
    dims = ModelDims(dim=32, num_heads=4)
    for inner in ("sinks", "learned_sinks", "nonexistent"):
        with pytest.raises(ValueError, match="inner"):
            build_encoding("learned_sinks", dims, inner=inner)
    # attention with another number of heads
    with pytest.raises(ValueError, match=r"pos.*num_heads"):
        attend(*qkv(heads=2, kv_heads=2), pos=LearnedSinks(4), causal=True)

"""PaTH served by attention: the backends, the KV cache, masks, the model, refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, KVCache, attend
from posenc.models import DecoderLM, ModelConfig
from posenc.token_state.path import PathTransform, path_attention_reference

F64 = torch.float64
DIM, HEADS, KV = 16, 4, 2


def layer(forget_gate: bool = False, backend: str = "auto", block_size: int = 3) -> Attention:
    """A float64 attention with PaTH (grouped heads), its parameters seeded."""
    torch.manual_seed(0)
    path = PathTransform(
        DIM, HEADS, num_kv_heads=KV, forget_gate=forget_gate, block_size=block_size, dtype=F64
    )
    return Attention(DIM, HEADS, num_kv_heads=KV, pos=path, backend=backend, dtype=F64).eval()


def by_reference(attn: Attention, x: Tensor, real: Tensor | None = None) -> Tensor:
    """The layer computed with :func:`path_attention_reference` (per-pair products)."""
    path = attn.pos
    assert isinstance(path, PathTransform)
    batch, seq, _ = x.shape
    q = attn.q_proj(x).view(batch, seq, HEADS, -1).transpose(1, 2)
    k, v = (p(x).view(batch, seq, KV, -1).transpose(1, 2) for p in (attn.k_proj, attn.v_proj))
    w, beta = path.transforms_of(x, real)
    log_gates = None
    if path.gate_weight is not None and path.gate_bias is not None:
        log_gates = F.logsigmoid(x @ path.gate_weight.T + path.gate_bias).transpose(1, 2)
        if real is not None:
            log_gates = log_gates.masked_fill(~real[:, None], 0.0)
    groups = HEADS // KV
    out = path_attention_reference(
        q,
        *(t.repeat_interleave(groups, dim=1) for t in (k, v, w, beta)),
        scale=attn.scale,
        key_padding=real,
        log_gates=log_gates,
    )
    return attn.out_proj(out.transpose(1, 2).reshape(batch, seq, -1))


@pytest.mark.parametrize("forget_gate", [False, True])
@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_the_layer_equals_the_reference(forget_gate: bool, backend: str) -> None:
    attn = layer(forget_gate, backend)
    x = torch.randn(2, 11, DIM, dtype=F64)
    assert_close(attn(x), by_reference(attn, x))


@pytest.mark.parametrize("forget_gate", [False, True])
def test_decoding_with_a_kv_cache_equals_the_full_forward(forget_gate: bool) -> None:
    """The cache holds keys carried to its newest token: a prefill, steps of one token and
    a chunk of several give the full forward's outputs."""
    attn = layer(forget_gate)
    x = torch.randn(2, 11, DIM, dtype=F64)
    cache = KVCache()
    parts = [attn(x[:, :4], cache=cache)]
    parts += [attn(x[:, t : t + 1], cache=cache) for t in range(4, 7)]
    parts.append(attn(x[:, 7:], cache=cache))
    assert_close(torch.cat(parts, dim=1), attn(x))
    assert cache.length == 11


def test_left_padding_leaves_the_real_tokens_as_without_it() -> None:
    """Padding tokens get β = 0 (and forget nothing): the real tokens of a left-padded row
    are those of the row alone, in a full forward and when decoding."""
    attn = layer(forget_gate=True)
    x = torch.randn(1, 8, DIM, dtype=F64)
    padded = torch.cat([torch.randn(1, 3, DIM, dtype=F64), x], dim=1)
    real = torch.tensor([[False] * 3 + [True] * 8])
    assert_close(attn(padded, key_padding_mask=real)[:, 3:], attn(x))
    assert_close(attn(padded, key_padding_mask=real), by_reference(attn, padded, real))
    cache = KVCache()
    first = attn(padded[:, :6], key_padding_mask=real[:, :6], cache=cache)
    rest = attn(padded[:, 6:], key_padding_mask=real[:, 6:], cache=cache)
    assert_close(torch.cat([first, rest], dim=1)[:, 3:], attn(x))


def test_packed_documents_equal_separate_sequences() -> None:
    """Transforms never cross a document: each packed document is the sequence alone."""
    attn = layer(forget_gate=True)
    docs = [torch.randn(1, n, DIM, dtype=F64) for n in (4, 6, 3)]
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate((4, 6, 3))])
    packed = attn(torch.cat(docs, dim=1), document_ids=ids)
    assert_close(packed, torch.cat([attn(d) for d in docs], dim=1))


def test_beta_zero_is_attention_without_positions() -> None:
    """With β = 0 (``H = I``) the layer is the same layer without an encoding (NoPE)."""
    attn = layer()
    path = attn.pos
    assert isinstance(path, PathTransform)
    with torch.no_grad():
        path.beta_weight.zero_()
        path.beta_bias.fill_(-1e4)  # 2σ(−10⁴) = 0 in float64
    plain = Attention(DIM, HEADS, num_kv_heads=KV, dtype=F64).eval()
    plain.load_state_dict(attn.state_dict(), strict=False)
    x = torch.randn(2, 9, DIM, dtype=F64)
    assert_close(attn(x), plain(x))


def test_the_model_trains_and_decodes_by_name() -> None:
    """``DecoderLM(ModelConfig(pos="path"))``: gradients reach w and β, decoding matches."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=32, dim=DIM, depth=2, num_heads=HEADS, pos="path")
    model = DecoderLM(config).double()
    tokens = torch.randint(0, 32, (2, 10))
    model(tokens).logsumexp(-1).mean().backward()
    path = model.trunk.blocks[0].attn.pos
    assert isinstance(path, PathTransform)
    assert path.w_weight.grad is not None and bool(path.w_weight.grad.abs().sum() > 0)
    assert path.beta_weight.grad is not None and bool(path.beta_weight.grad.abs().sum() > 0)
    model.eval()
    with torch.no_grad():
        cache = model.new_cache()
        steps = [model(tokens[:, :6], cache=cache)]
        steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(6, 10)]
        assert_close(torch.cat(steps, dim=1), model(tokens))


@pytest.mark.parametrize("backend", ["flex", "linear"])
def test_backends_that_cannot_serve_it_refuse(backend: str) -> None:
    with pytest.raises(ValueError, match=f"backend '{backend}' cannot serve PathTransform"):
        Attention(DIM, HEADS, pos=PathTransform(DIM, HEADS), backend=backend)


def test_refusals_name_pos() -> None:
    with pytest.raises(ValueError, match="causal"):
        Attention(DIM, HEADS, pos=PathTransform(DIM, HEADS), causal=False)
    with pytest.raises(ValueError, match="num_kv_heads=4 but this attention has 2"):
        Attention(DIM, HEADS, num_kv_heads=2, pos=PathTransform(DIM, HEADS))
    with pytest.raises(ValueError, match="dim=32 but this attention has 16"):
        Attention(DIM, HEADS, pos=PathTransform(32, HEADS, head_dim=4))
    q = torch.randn(1, HEADS, 5, 4)
    with pytest.raises(ValueError, match="token_transforms"):
        attend(q, q, q, pos=PathTransform(DIM, HEADS), causal=True)


def test_replace_keys_checks_the_shape() -> None:
    cache = KVCache()
    with pytest.raises(ValueError, match="cached keys' shape"):
        cache.replace_keys(torch.zeros(1, 2, 3, 4))


def test_a_cache_of_carried_keys_refuses_to_roll_back() -> None:
    """Truncating would keep keys carried through the dropped tokens' transforms."""
    attn = layer()
    cache = KVCache()
    attn(torch.randn(1, 5, DIM, dtype=F64), cache=cache)
    cache.truncate(5)  # no change: allowed
    with pytest.raises(ValueError, match=r"length must be 5 .* carried"):
        cache.truncate(3)


def test_other_logit_places_are_refused_beside_it() -> None:
    """Soft-capping around PaTH would be silently skipped by its blockwise attention."""
    from posenc.registry import ModelDims, build_encoding

    capped = build_encoding("softcap", ModelDims(dim=DIM, num_heads=HEADS), {"inner": "path"})
    with pytest.raises(ValueError, match="no other logit terms; it also has a score map"):
        Attention(DIM, HEADS, pos=capped)


def test_an_empty_chunk_gives_an_empty_output() -> None:
    attn = layer()
    assert attn(torch.randn(2, 0, DIM, dtype=F64)).shape == (2, 0, DIM)

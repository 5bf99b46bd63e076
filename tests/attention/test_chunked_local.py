"""Chunked local attention (Llama-4's ``attention_chunk_size``) as a structural mask piece."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.attention import Attention, AttentionMask, Backend, KVCache
from posenc.attention.backends import NAMES
from posenc.bias import AlibiBias
from posenc.rotary import RotaryEmbedding

CPU = torch.device("cpu")
DIM, HEADS, KV_HEADS = 32, 4, 2


def reference(
    q_len: int, k_len: int, chunk: int, *, causal: bool, padding: Tensor | None, batch: int
) -> Tensor:
    """Loop over the definition: ``(batch, q_len, k_len)`` bool."""
    out = torch.zeros(batch, q_len, k_len, dtype=torch.bool)
    for b in range(batch):
        row = None if padding is None else padding[b].tolist()
        lead = 0
        while row is not None and lead < k_len and not row[lead]:
            lead += 1
        for i in range(q_len):
            qi = i + k_len - q_len
            for j in range(k_len):
                ok = (qi - lead) // chunk == (j - lead) // chunk
                ok = ok and (not causal or j <= qi) and (row is None or row[j])
                out[b, i, j] = ok
    return out


def chunk_start(padding: Tensor) -> Tensor:
    return (padding.long().cumsum(-1) == 0).sum(-1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_len", [11, 4, 1])
@pytest.mark.parametrize("padded", [False, True])
def test_block_and_mask_mod_equal_the_definition(causal: bool, q_len: int, padded: bool) -> None:
    k_len, chunk, batch = 11, 3, 2
    padding = torch.ones(batch, k_len, dtype=torch.bool)
    padding[0, :4] = False  # left padding: row 0's chunks start at key 4
    padding[1, 9:] = False  # right padding starts no chunk
    pad = padding if padded else None
    mask = AttentionMask(
        batch=batch,
        q_len=q_len,
        k_len=k_len,
        device=CPU,
        causal=causal,
        key_padding=pad,
        chunk_size=chunk,
        chunk_start=None if pad is None else chunk_start(pad),
    )
    want = reference(q_len, k_len, chunk, causal=causal, padding=pad, batch=batch)
    block = mask.block(0, q_len, 0, k_len, heads=2)
    assert block is not None
    assert torch.equal(block.expand(batch, 2, q_len, k_len), want[:, None].expand(-1, 2, -1, -1))
    part = mask.block(q_len // 2, q_len, 2, 9, heads=2)
    assert part is not None
    assert torch.equal(part.expand(batch, 2, -1, -1)[:, 0], want[:, q_len // 2 :, 2:9])
    b, h = torch.arange(batch).view(-1, 1, 1, 1), torch.arange(2).view(1, -1, 1, 1)
    qi, kj = torch.arange(q_len).view(1, 1, -1, 1), torch.arange(k_len).view(1, 1, 1, -1)
    visible = mask.mask_mod()(b, h, qi, kj).expand(batch, 2, q_len, k_len)
    assert torch.equal(visible[:, 0], want)
    assert mask.has_pairwise and not mask.is_trivial


def test_mask_equals_hf_chunked_overlay() -> None:
    """HF's ``chunked_causal_mask_function`` with its left-padding count, pair by pair."""
    masking = pytest.importorskip("transformers.masking_utils")
    padding = torch.ones(3, 20, dtype=torch.bool)
    padding[0, :5] = False
    padding[2, :13] = False
    left = (padding.long().cumsum(-1) == 0).sum(-1)
    hf = masking.chunked_causal_mask_function(4, left)
    mask = AttentionMask(
        batch=3, q_len=20, k_len=20, device=CPU, causal=True, chunk_size=4, chunk_start=left
    )
    block = mask.block(0, 20, 0, 20, heads=1)
    assert block is not None
    for b in range(3):
        for i in range(20):
            for j in range(20):
                want = bool(hf(torch.tensor(b), torch.tensor(0), torch.tensor(i), torch.tensor(j)))
                assert bool(block[b, 0, i, j]) == want, (b, i, j)


def _layers(seed: int, **kwargs: object) -> tuple[Attention, Attention]:
    """An attention with ``chunk_size`` and one without, with the same weights."""
    torch.manual_seed(seed)
    chunked = Attention(DIM, HEADS, num_kv_heads=KV_HEADS, dtype=torch.float64, **kwargs)  # type: ignore[arg-type]
    kwargs = {k: v for k, v in kwargs.items() if k != "chunk_size"}
    plain = Attention(DIM, HEADS, num_kv_heads=KV_HEADS, dtype=torch.float64, **kwargs)  # type: ignore[arg-type]
    plain.load_state_dict(chunked.state_dict())
    return chunked, plain


ENCODINGS = {
    "nope": lambda: None,
    "rope": lambda: RotaryEmbedding(DIM // HEADS),
    "alibi": lambda: AlibiBias(HEADS),
}


@pytest.mark.parametrize("name", list(ENCODINGS))
@pytest.mark.parametrize("causal", [True, False])
def test_equals_a_dense_mask(name: str, causal: bool) -> None:
    """``chunk_size`` equals the same layer with the chunk mask given as a dense tensor."""
    chunked, plain = _layers(0, pos=ENCODINGS[name](), chunk_size=5, causal=causal)
    x = torch.randn(2, 17, DIM, dtype=torch.float64)
    padding = torch.ones(2, 17, dtype=torch.bool)
    padding[1, :3] = False
    dense = reference(17, 17, 5, causal=False, padding=None, batch=2)
    shifted = reference(17, 17, 5, causal=False, padding=padding, batch=2) | ~padding[:, None]
    assert_close(chunked(x), plain(x, attn_mask=dense), atol=1e-12, rtol=0)
    got = chunked(x, key_padding_mask=padding)
    want = plain(x, key_padding_mask=padding, attn_mask=shifted)
    assert_close(got, want, atol=1e-12, rtol=0)


BACKENDS = {
    "chunked": Backend("chunked", block_size=4),
    "blocked": Backend("chunked", block_size=4, structured=False),
    "flex": Backend("flex", compile=False),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_every_backend_equals_sdpa(backend: str, name: str) -> None:
    torch.manual_seed(1)
    pos = ENCODINGS[name]()
    reference_layer = Attention(DIM, HEADS, num_kv_heads=KV_HEADS, pos=pos, chunk_size=6)
    layer = Attention(
        DIM, HEADS, num_kv_heads=KV_HEADS, pos=pos, chunk_size=6, backend=BACKENDS[backend]
    )
    layer.load_state_dict(reference_layer.state_dict())
    x = torch.randn(2, 23, DIM)
    padding = torch.ones(2, 23, dtype=torch.bool)
    padding[0, :7] = False
    for kwargs in ({}, {"key_padding_mask": padding}):
        want = Backend("sdpa")
        reference_layer.backend = want
        with torch.no_grad():
            assert_close(layer(x, **kwargs), reference_layer(x, **kwargs), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_decoding_with_a_cache_equals_the_full_forward(backend: str, name: str) -> None:
    torch.manual_seed(2)
    layer = Attention(
        DIM,
        HEADS,
        num_kv_heads=KV_HEADS,
        pos=ENCODINGS[name](),
        chunk_size=4,
        backend=Backend(backend, block_size=3) if backend == "chunked" else backend,
        dtype=torch.float64,
    )
    x = torch.randn(2, 15, DIM, dtype=torch.float64)
    padding = torch.ones(2, 15, dtype=torch.bool)
    padding[1, :2] = False  # left padding moves row 1's chunks
    full = layer(x, key_padding_mask=padding)
    cache = KVCache()
    steps = [layer(x[:, :6], key_padding_mask=padding[:, :6], cache=cache)]
    for t in range(6, 15):
        steps.append(layer(x[:, t : t + 1], key_padding_mask=padding[:, t : t + 1], cache=cache))
    assert_close(torch.cat(steps, dim=1), full, atol=1e-12, rtol=0)


def test_chunk_of_one_and_of_the_whole_length() -> None:
    """``C = 1``: each query sees itself only (output = its value); ``C ≥ L``: no change."""
    chunked, plain = _layers(3, chunk_size=1)
    x = torch.randn(1, 9, DIM, dtype=torch.float64)
    v = chunked.v_proj(x).view(1, 9, KV_HEADS, -1).repeat_interleave(HEADS // KV_HEADS, dim=2)
    assert_close(chunked(x), chunked.out_proj(v.reshape(1, 9, DIM)), atol=1e-12, rtol=0)
    wide, plain = _layers(3, chunk_size=9)
    assert_close(wide(x), plain(x), atol=1e-12, rtol=0)


@pytest.mark.parametrize("bad", [0, -4, 2.5, True, "8"])
def test_bad_chunk_size_raises(bad: object) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        Attention(DIM, HEADS, chunk_size=bad)  # type: ignore[arg-type]


def test_a_cache_that_dropped_keys_raises() -> None:
    layer = Attention(DIM, HEADS, chunk_size=4)
    cache = KVCache()
    layer(torch.randn(1, 3, DIM), cache=cache)
    cache.evicted = 2  # as a rolling cache leaves it
    with pytest.raises(ValueError, match="chunk_size=4"):
        layer(torch.randn(1, 1, DIM), cache=cache)


def test_a_context_chunked_by_another_size_raises() -> None:
    """A layer's chunk_size on a context built with another one would drop the context's
    (one mask, one chunk size): it raises; the same size is the layer's alone."""
    from posenc.attention import AttentionContext, build_context

    torch.manual_seed(6)
    layer = Attention(DIM, HEADS, chunk_size=3, dtype=torch.float64)
    x = torch.randn(1, 12, DIM, dtype=torch.float64)

    def context(chunk_size: int) -> AttentionContext:
        return build_context(
            batch=1, seq=12, device=CPU, causal=True, hooks=layer.hooks, chunk_size=chunk_size
        )

    assert_close(layer(x, context=context(3)), layer(x), atol=0, rtol=0)
    with pytest.raises(ValueError, match="chunk_size"):
        layer(x, context=context(8))


@pytest.mark.skipif("linear" not in NAMES, reason="no linear backend")
def test_linear_backend_refuses_chunks() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        Attention(DIM, HEADS, chunk_size=4, backend="linear")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("q_len", "k_len", "chunk"), [(17, 17, 5), (7, 19, 4), (3, 10, 4), (5, 14, 4), (1, 9, 3)]
)
def test_chunk_by_chunk_equals_the_mask(causal: bool, q_len: int, k_len: int, chunk: int) -> None:
    """The sdpa fast path (one SDPA call per chunk) equals softmax under ``block()``'s mask,
    for queries that start mid-chunk (a cache step of several tokens) too."""
    from posenc.attention.local_chunks import chunk_by_chunk, serves

    torch.manual_seed(q_len + k_len)
    q = torch.randn(2, 4, q_len, 8, dtype=torch.float64)
    k, v = (
        torch.randn(2, 2, k_len, 8, dtype=torch.float64),
        torch.randn(2, 2, k_len, 8, dtype=torch.float64),
    )
    mask = AttentionMask(
        batch=2, q_len=q_len, k_len=k_len, device=CPU, causal=causal, chunk_size=chunk
    )
    assert serves(mask)
    allowed = mask.block(0, q_len, 0, k_len, heads=4)
    assert allowed is not None
    scores = (q @ k.repeat_interleave(2, dim=1).transpose(-1, -2)) * 0.3
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    want = probs @ v.repeat_interleave(2, dim=1)
    got = chunk_by_chunk(q, k, v, mask=mask, scale=0.3, dropout_p=0.0)
    assert_close(got, want, atol=1e-12, rtol=0)


def test_several_tokens_per_cache_step() -> None:
    torch.manual_seed(5)
    layer = Attention(DIM, HEADS, num_kv_heads=KV_HEADS, chunk_size=4, dtype=torch.float64)
    x = torch.randn(2, 16, DIM, dtype=torch.float64)
    cache = KVCache()
    steps = [layer(x[:, a:b], cache=cache) for a, b in ((0, 6), (6, 9), (9, 10), (10, 16))]
    assert_close(torch.cat(steps, dim=1), layer(x), atol=1e-12, rtol=0)


@pytest.mark.slow
def test_compiled_flex_equals_sdpa() -> None:
    """The chunk ``mask_mod`` (with a per-row chunk start) in compiled FlexAttention."""
    torch.manual_seed(6)
    reference = Attention(DIM, HEADS, pos=AlibiBias(HEADS), chunk_size=16)
    flex = Attention(DIM, HEADS, pos=AlibiBias(HEADS), chunk_size=16, backend=Backend("flex"))
    flex.load_state_dict(reference.state_dict())
    x = torch.randn(2, 200, DIM)
    padding = torch.ones(2, 200, dtype=torch.bool)
    padding[1, :37] = False
    with torch.no_grad():
        for kwargs in ({}, {"key_padding_mask": padding}):
            assert_close(flex(x, **kwargs), reference(x, **kwargs), atol=1e-5, rtol=1e-5)

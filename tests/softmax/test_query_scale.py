"""Position-dependent query temperature: Llama-4's, Ministral 3's and Qwen-1's log-n."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, QueryScale
from posenc.bias import AlibiBias
from posenc.rotary import RotaryEmbedding
from posenc.segments.base import log_scale
from tests.attention.toys import ThreeAxisRotary

DIM, HEADS, KV_HEADS = 32, 4, 2
POSITIONS = torch.tensor([0, 1, 6, 7, 8, 15, 16, 100, 8190, 8191, 8192, 70000])


def test_llama4_equals_hf_formula_in_float64() -> None:
    """HF ``Llama4TextAttention``: ``log1p(floor((p + 1) / floor_scale)) · attn_scale + 1``."""
    got = QueryScale.llama4().factor(POSITIONS)
    want = [math.log1p(math.floor((p + 1) / 8192)) * 0.1 + 1 for p in POSITIONS.tolist()]
    assert got.dtype == torch.float64
    assert got.tolist() == pytest.approx(want, rel=1e-15, abs=0)
    assert got[POSITIONS < 8191].eq(1.0).all()  # temperature 1 below floor_scale
    # torch's log1p against the C library's log: equal to float64 rounding, not bitwise
    assert got[POSITIONS == 8191].item() == pytest.approx(1 + 0.1 * math.log(2), rel=1e-15, abs=0)


def test_ministral3_equals_hf_formula() -> None:
    """HF ``get_llama_4_attn_scale``: ``1 + β log(1 + floor(p / L0))`` (no +1 on p)."""
    got = QueryScale.ministral3(0.25, 16).factor(POSITIONS)
    want = [1 + 0.25 * math.log(1 + math.floor(p / 16)) for p in POSITIONS.tolist()]
    assert got.tolist() == pytest.approx(want, rel=1e-15, abs=0)


def test_logn_equals_qwen_table() -> None:
    """Qwen-1 ``logn_list = [log(i, seq_length) if i > seq_length else 1 for i in
    range(1, 32768)]``, row ``i - 1`` scaling the query at cache index ``i - 1``."""
    seq_length = 8
    table = [math.log(i, seq_length) if i > seq_length else 1 for i in range(1, 200)]
    positions = torch.arange(199)
    got = QueryScale.logn(seq_length).factor(positions)
    assert got.tolist() == pytest.approx(table, rel=1e-15, abs=0)
    assert_close(got, log_scale(positions, seq_length), atol=0, rtol=0)  # ReRoPE's log-n


def _reference(layer: Attention, x: torch.Tensor, scale: QueryScale, causal: bool) -> torch.Tensor:
    """Scale the projected q by hand, then plain causal SDPA with the layer's weights."""
    batch, seq, _ = x.shape
    hd = DIM // HEADS
    q = layer.q_proj(x).view(batch, seq, HEADS, hd).transpose(1, 2)
    k = layer.k_proj(x).view(batch, seq, KV_HEADS, hd).transpose(1, 2)
    v = layer.v_proj(x).view(batch, seq, KV_HEADS, hd).transpose(1, 2)
    q = q * scale.factor(torch.arange(seq)).view(1, 1, seq, 1)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return layer.out_proj(out.transpose(1, 2).reshape(batch, seq, DIM))


@pytest.mark.parametrize("scale", [QueryScale.llama4(4, 0.5), QueryScale.logn(3)])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_scales_each_query_by_its_position(scale: QueryScale, causal: bool) -> None:
    torch.manual_seed(0)
    layer = Attention(
        DIM, HEADS, num_kv_heads=KV_HEADS, query_scale=scale, causal=causal, dtype=torch.float64
    )
    x = torch.randn(2, 19, DIM, dtype=torch.float64)
    assert_close(layer(x), _reference(layer, x, scale, causal), atol=1e-12, rtol=0)
    plain = Attention(DIM, HEADS, num_kv_heads=KV_HEADS, causal=causal, dtype=torch.float64)
    plain.load_state_dict(layer.state_dict())
    assert not torch.allclose(layer(x), plain(x))  # the scale is not a no-op here
    assert_close(layer(x[:, :3]), plain(x[:, :3]), atol=1e-12, rtol=0)  # s = 1 early on


@pytest.mark.parametrize(
    "scale", [QueryScale.ministral3(0.5, 4), QueryScale.llama4(4, 0.5), QueryScale.logn(4)]
)
def test_positions_before_zero_take_the_first_factor(scale: QueryScale) -> None:
    """A negative position (padding at -1 or below) takes s = 1, the formula's first step,
    not -inf or NaN: right padding at position -5 then leaves the real rows of a two-layer
    model as padding at any other position (a NaN padded row reached them through its
    value in the next layer)."""
    from posenc.models import DecoderLM, ModelConfig

    assert scale.factor(torch.tensor([-9, -5, -2, -1, 0])).tolist() == [1.0] * 5
    torch.manual_seed(6)
    model = DecoderLM(
        ModelConfig(vocab_size=16, dim=DIM, depth=2, num_heads=HEADS, query_scale=scale)
    ).double()
    tokens = torch.randint(0, 16, (2, 7))
    real = torch.ones(2, 7, dtype=torch.bool)
    real[1, 4:] = False
    got = model(tokens, torch.where(real, torch.arange(7), -5), key_padding_mask=real)
    want = model(tokens, torch.where(real, torch.arange(7), 0), key_padding_mask=real)
    assert_close(got[real], want[real], atol=1e-12, rtol=0)


def test_positions_given_per_row() -> None:
    """Factors follow the given positions, row by row (``(batch, seq)``)."""
    torch.manual_seed(1)
    scale = QueryScale.llama4(2, 1.0)
    layer = Attention(DIM, HEADS, query_scale=scale, dtype=torch.float64)
    x = torch.randn(2, 5, DIM, dtype=torch.float64)
    positions = torch.stack([torch.arange(5), torch.arange(5) + 40])
    got = layer(x, positions)
    for row in range(2):
        assert_close(
            got[row : row + 1], layer(x[row : row + 1], positions[row]), atol=1e-12, rtol=0
        )


ENCODINGS = {
    "nope": lambda: None,
    "rope": lambda: RotaryEmbedding(DIM // HEADS),
    "alibi": lambda: AlibiBias(HEADS),
}


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_decoding_with_a_cache_equals_the_full_forward(backend: str, name: str) -> None:
    torch.manual_seed(2)
    layer = Attention(
        DIM,
        HEADS,
        num_kv_heads=KV_HEADS,
        pos=ENCODINGS[name](),
        query_scale=QueryScale.llama4(3, 0.3),
        chunk_size=5,
        backend=Backend(backend, block_size=4) if backend == "chunked" else backend,
        dtype=torch.float64,
    )
    x = torch.randn(2, 14, DIM, dtype=torch.float64)
    full = layer(x)
    cache = KVCache()
    steps = [layer(x[:, :4], cache=cache)]
    steps += [layer(x[:, t : t + 1], cache=cache) for t in range(4, 14)]
    assert_close(torch.cat(steps, dim=1), full, atol=1e-12, rtol=0)


@pytest.mark.parametrize("positions", [None, torch.zeros(2, 0, dtype=torch.long)])
def test_a_step_of_no_tokens_is_empty_and_leaves_the_cache(positions: torch.Tensor | None) -> None:
    """q_len 0 (an empty step, default or ``(batch, 0)`` positions) scales nothing: empty
    output, and decoding around it still equals the full forward."""
    torch.manual_seed(5)
    scale = QueryScale.llama4(3, 0.3)
    layer = Attention(DIM, HEADS, query_scale=scale, chunk_size=4, dtype=torch.float64)
    x = torch.randn(2, 9, DIM, dtype=torch.float64)
    assert layer(x[:, :0], positions).shape == (2, 0, DIM)
    cache = KVCache()
    first = layer(x[:, :5], cache=cache)
    empty = layer(x[:, 5:5], None if positions is None else positions + 5, cache=cache)
    assert empty.shape == (2, 0, DIM)
    last = layer(x[:, 5:], cache=cache)
    assert_close(torch.cat([first, last], dim=1), layer(x), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "backend", [Backend("chunked", block_size=4), Backend("flex", compile=False)]
)
def test_backends_equal_sdpa(backend: Backend) -> None:
    torch.manual_seed(3)
    scale = QueryScale.logn(4)
    reference = Attention(DIM, HEADS, pos=RotaryEmbedding(DIM // HEADS), query_scale=scale)
    layer = Attention(
        DIM, HEADS, pos=RotaryEmbedding(DIM // HEADS), query_scale=scale, backend=backend
    )
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(2, 21, DIM)
    with torch.no_grad():
        assert_close(layer(x), reference(x), atol=2e-6, rtol=1e-5)


def test_half_precision_rounds_once() -> None:
    scale = QueryScale.llama4(2, 0.7)
    q = torch.randn(1, 2, 9, 8, dtype=torch.bfloat16)
    want = (q.float() * scale.factor(torch.arange(9)).float().view(1, 1, 9, 1)).bfloat16()
    assert torch.equal(scale.apply(q, torch.arange(9)), want)


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: QueryScale("cubic", 8), "mode"),  # type: ignore[arg-type]
        (lambda: QueryScale.llama4(0), "length"),
        (lambda: QueryScale.logn(1), "length"),
        (lambda: QueryScale.llama4(8, -0.1), "beta"),
        (lambda: QueryScale.llama4(8, float("nan")), "beta"),
        (lambda: QueryScale.llama4(8, True), "beta"),  # type: ignore[arg-type]
        (lambda: QueryScale("floor_log", 8, shift=-1), "shift"),
        (lambda: Attention(DIM, HEADS, query_scale=1.5), "query_scale"),  # type: ignore[arg-type]
        (
            lambda: Attention(
                DIM, HEADS, pos=ThreeAxisRotary(DIM // HEADS), query_scale=QueryScale.logn(8)
            ),
            "query_scale",
        ),
    ],
)
def test_bad_arguments_raise(build: object, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        build()  # type: ignore[operator]


@pytest.mark.parametrize("chunk_size", [None, 6])
def test_with_a_segment_method_decoding_equals_the_full_forward(chunk_size: int | None) -> None:
    """q is scaled before the rotate-on-read path of a segment method (Self-Extend), and the
    chunk mask reaches its segments: decoding through its unrotated cache stays exact."""
    from posenc.segments import SelfExtend

    torch.manual_seed(4)
    pos = SelfExtend(RotaryEmbedding(DIM // HEADS), window=4, group=2)
    layer = Attention(
        DIM,
        HEADS,
        pos=pos,
        query_scale=QueryScale.logn(5),
        chunk_size=chunk_size,
        dtype=torch.float64,
    )
    x = torch.randn(2, 13, DIM, dtype=torch.float64)
    full = layer(x)
    cache = KVCache(evict=False)
    steps = [layer(x[:, :5], cache=cache)]
    steps += [layer(x[:, t : t + 1], cache=cache) for t in range(5, 13)]
    assert_close(torch.cat(steps, dim=1), full, atol=1e-12, rtol=0)
    plain = Attention(DIM, HEADS, pos=pos, chunk_size=chunk_size, dtype=torch.float64)
    plain.load_state_dict(layer.state_dict())
    assert not torch.allclose(plain(x), full)  # the scale acts (positions 5.. exceed L = 5)
    if chunk_size is not None:  # the chunk mask reaches the segments: rows of chunk 0 only
        unchunked = Attention(
            DIM, HEADS, pos=pos, query_scale=QueryScale.logn(5), dtype=torch.float64
        )
        unchunked.load_state_dict(layer.state_dict())
        other = unchunked(x)
        assert_close(other[:, :chunk_size], full[:, :chunk_size], atol=1e-12, rtol=0)
        assert not torch.allclose(other[:, chunk_size:], full[:, chunk_size:])

"""VideoRoPE (MultiAxisRotary.videorope) and V2PE positions through the rotary encodings:
parity with the reference's frequency allocation, relative scores, the 1D reduction on text,
every attention backend and the KV cache with float positions, the registry entry, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache
from posenc.positions.multimodal import IMAGE, TEXT, VIDEO
from posenc.positions.multimodal_layouts import v2pe_position_ids, videorope_position_ids
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import RotaryEmbedding
from posenc.rotary.multi_axis import MultiAxisRotary, videorope_axes

F64 = torch.float64


def qk(head_dim: int, seq: int, heads: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    shape = (1, heads, seq, head_dim)
    return torch.randn(shape, generator=g, dtype=F64), torch.randn(shape, generator=g, dtype=F64)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def reference_videorope(q, k, positions, sections, base):
    """Float64 re-derivation of Wiselnn570/VideoRoPE ``videorope-transformer/
    modeling_videorope.py``: ``Qwen2VLRotaryEmbedding.forward`` (per-axis angles, ``emb =
    cat(freqs, freqs)``) then ``apply_m_modify_multimodal_rotary_pos_emb`` (its channel
    selection loop over ``[t, h + w] * 2`` reversed)."""
    head_dim = q.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=F64) / head_dim)
    freqs = positions.double()[..., None] * inv_freq  # (3, seq, head_dim / 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    section = [sections[0], sections[1] + sections[2]] * 2
    section = section[::-1]
    index, out_cos, out_sin = 0, [], []
    for i, size in enumerate(section):
        if i % 2 == 0:
            for j in range(size):
                row = 1 if j % 2 == 0 else 2
                out_cos.append(cos[row, ..., index : index + 1])
                out_sin.append(sin[row, ..., index : index + 1])
                index += 1
        else:
            out_cos.append(cos[0, ..., index : index + size])
            out_sin.append(sin[0, ..., index : index + size])
            index += size
    cos, sin = torch.cat(out_cos, dim=-1)[None, None], torch.cat(out_sin, dim=-1)[None, None]
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def mixed_positions() -> torch.Tensor:
    """(3, 20) VideoRoPE ids of [text 3 | video (2, 4, 4) merged by 2 | text 9], δ = 2."""
    types = torch.tensor([TEXT] * 3 + [VIDEO] * 8 + [TEXT] * 9)
    ids, _ = videorope_position_ids(types, video_grid_thw=[(2, 4, 4)])
    return ids


# ---- the frequency allocation (LTA) -------------------------------------------------------


def test_axes_are_the_references_at_head_dim_128():
    axes = videorope_axes([16, 24, 24])
    assert axes[:48] == [1, 2] * 24 and axes[48:] == [0] * 16
    assert videorope_axes([1, 2, 1]) == [1, 2, 1, 0]


@pytest.mark.parametrize(
    ("head_dim", "sections", "base"),
    [(128, (16, 24, 24), 1e6), (16, (2, 3, 3), 1e4), (12, (2, 2, 2), 100.0), (10, (2, 2, 1), 50.0)],
)
def test_rotation_equals_the_reference(head_dim, sections, base):
    q, k = qk(head_dim, 20)
    pos = mixed_positions() + torch.linspace(0, 3, 20, dtype=F64)  # distinct axes, floats
    rope = MultiAxisRotary.videorope(head_dim, sections, base=base)
    got_q, got_k = rope(q, k, pos, pos)
    want_q, want_k = reference_videorope(q, k, pos, sections, base)
    assert_close(got_q, want_q, rtol=1e-12, atol=1e-12)
    assert_close(got_k, want_k, rtol=1e-12, atol=1e-12)


def test_time_reads_the_lowest_frequencies():
    freqs = MultiAxisRotary.videorope(128).frequencies
    time, space = freqs[:, 0][freqs[:, 0] > 0], freqs[:, 1:][freqs[:, 1:] > 0]
    assert len(time) == 16 and len(space) == 48 and time.max() < space.min()
    mrope = MultiAxisRotary.mrope(128).frequencies  # M-RoPE gives time the highest instead
    assert mrope[:, 0][mrope[:, 0] > 0].min() > mrope[:, 1:][mrope[:, 1:] > 0].max()


# ---- properties ---------------------------------------------------------------------------


def test_scores_depend_on_position_differences_only():
    rope = MultiAxisRotary.videorope(16, (2, 3, 3), base=1e4)
    q, k = qk(16, 20)
    pos = mixed_positions()
    shifted = pos + torch.tensor([3.5, -2.0, 7.25], dtype=F64)[:, None]
    a = rope(q, k, pos, pos)
    b = rope(q, k, shifted, shifted)
    assert_close(a[0] @ a[1].transpose(-1, -2), b[0] @ b[1].transpose(-1, -2))


def test_on_text_it_is_1d_rope_of_the_same_frequencies():
    rope = MultiAxisRotary.videorope(16, (2, 3, 3), base=1e4)
    q, k = qk(16, 9)
    text = torch.arange(9.0, dtype=F64)
    got = rope(q, k, text.expand(3, 9), text.expand(3, 9))
    want = RotaryEmbedding(16, base=1e4)(q, k, text, text)
    assert_close(got, want, rtol=0, atol=1e-15)


def test_v2pe_positions_feed_1d_rope_and_three_equal_axes_alike():
    types = torch.tensor([TEXT] * 2 + [IMAGE] * 6 + [TEXT] * 3)
    pos = v2pe_position_ids(types, 0.25)
    q, k = qk(16, 11)
    one_d = RotaryEmbedding(16, base=1e4)(q, k, pos, pos)
    three = pos.expand(3, -1)
    assert_close(MultiAxisRotary.mrope(16, (2, 3, 3), base=1e4)(q, k, three, three), one_d)


# ---- attention backends and the KV cache ----------------------------------------------------


def explicit_attention(attn: Attention, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / √d + causal) v with q, k rotated by ``attn.pos``: no backend."""
    batch, seq, _ = x.shape
    heads, dim = attn.num_heads, attn.head_dim
    q = attn.q_proj(x).view(batch, seq, heads, dim).transpose(1, 2)
    k = attn.k_proj(x).view(batch, seq, heads, dim).transpose(1, 2)
    v = attn.v_proj(x).view(batch, seq, heads, dim).transpose(1, 2)
    q, k = attn.pos(q, k, positions, positions)
    logits = q @ k.transpose(-1, -2) / math.sqrt(dim)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    weights = logits.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    return attn.out_proj((weights @ v).transpose(1, 2).reshape(batch, seq, heads * dim))


def v2pe_ids() -> torch.Tensor:
    types = torch.tensor([TEXT] * 3 + [IMAGE] * 8 + [TEXT] * 9)
    return v2pe_position_ids(types, 0.125)


@pytest.mark.parametrize("backend", ["sdpa", "chunked", "flex"])
@pytest.mark.parametrize("method", ["videorope", "v2pe"])
def test_every_backend_equals_an_explicit_softmax(backend, method):
    torch._dynamo.reset()  # FlexAttention's eager mode runs through dynamo
    if method == "videorope":
        pos, positions = MultiAxisRotary.videorope(16, (2, 3, 3), base=1e4), mixed_positions()
    else:
        pos, positions = RotaryEmbedding(16, base=1e4), v2pe_ids()
    chosen = {"flex": Backend("flex", compile=False), "chunked": Backend("chunked", block_size=8)}
    torch.manual_seed(0)
    attn = Attention(64, 4, pos=pos, backend=chosen.get(backend, backend)).double()
    x = torch.randn(1, 20, 64, dtype=F64)
    batched = positions[..., None, :]  # (3, 1, seq) or (1, seq)
    with torch.no_grad():
        assert_close(attn(x, batched), explicit_attention(attn, x, positions))


@pytest.mark.parametrize("method", ["videorope", "v2pe"])
def test_kv_cache_decoding_token_by_token_equals_the_full_forward(method):
    if method == "videorope":
        pos, positions = MultiAxisRotary.videorope(16, (2, 3, 3), base=1e4), mixed_positions()
    else:
        pos, positions = RotaryEmbedding(16, base=1e4), v2pe_ids()
    torch.manual_seed(0)
    attn = Attention(64, 4, pos=pos).double()
    x = torch.randn(1, 20, 64, dtype=F64)
    batched = positions[..., None, :]
    full = attn(x, batched)
    cache = KVCache()
    parts = [attn(x[:, :5], batched[..., :5], cache=cache)]  # the prefix, into the video
    parts += [attn(x[:, i : i + 1], batched[..., i : i + 1], cache=cache) for i in range(5, 20)]
    assert_close(torch.cat(parts, dim=1), full, rtol=1e-12, atol=1e-12)


def test_decoding_after_a_video_continues_at_the_deltas():
    # the next token sits at L + delta on every axis: the last time id + 1
    types = torch.tensor([[TEXT] * 3 + [VIDEO] * 8])
    ids, deltas = videorope_position_ids(types, video_grid_thw=[(2, 4, 4)])
    assert deltas.tolist() == [[6.0 - 11]]  # frames at t = 3 and 5 (δ = 2): next at 6
    assert float(ids[0].max()) + 1 == 11 + float(deltas[0, 0])
    assert float(ids.max()) + 1 > 6  # a frame's h, w ids pass it: KVCache's max + 1 would
    longer = torch.tensor([[TEXT] * 3 + [VIDEO] * 8 + [TEXT]])
    after, _ = videorope_position_ids(longer, video_grid_thw=[(2, 4, 4)])
    assert_close(after[:, 0, -1], torch.full((3,), 11 + float(deltas[0, 0]), dtype=F64))


# ---- the registry and errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("head_dim", "sections"), [(128, (16, 24, 24)), (64, (8, 12, 12)), (16, (2, 3, 3))]
)
def test_registry_fills_the_sections_from_the_head_width(head_dim, sections):
    built = build_encoding("videorope", ModelDims(dim=4 * head_dim, num_heads=4))
    assert isinstance(built, MultiAxisRotary)
    assert_close(built.frequencies, MultiAxisRotary.videorope(head_dim, sections).frequencies)
    with pytest.raises(ValueError, match="videorope needs head_dim >= 6"):
        build_encoding("videorope", ModelDims(dim=8, num_heads=2))


@pytest.mark.parametrize(
    ("head_dim", "sections", "match"),
    [
        (16, (2, 3, 2), "sections must sum to head_dim / 2"),
        (16, (2, 4, 2), "h = w or h = w \\+ 1"),
        (16, (2, 2, 3), "h = w or h = w \\+ 1"),
        (16, (8,), "sections must give \\(t, h, w\\)"),
        (16, (0, 4, 4), "sections\\[0\\]"),
    ],
)
def test_sections_that_do_not_fit_are_refused(head_dim, sections, match):
    with pytest.raises(ValueError, match=match):
        MultiAxisRotary.videorope(head_dim, sections)


def test_bad_base_is_refused():
    with pytest.raises(ValueError, match="base"):
        MultiAxisRotary.videorope(16, (2, 3, 3), base=-1.0)


def test_a_scaling_scales_the_same_1d_frequencies_as_mrope():
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    video = MultiAxisRotary.videorope(16, (2, 3, 3), base=1e4, scaling=yarn)
    mrope = MultiAxisRotary.mrope(16, (2, 3, 3), base=1e4, scaling=yarn)
    assert_close(video.frequencies.sum(-1), mrope.frequencies.sum(-1))  # one per pair, placed
    assert video.attention_factor == mrope.attention_factor != 1.0
    plain = MultiAxisRotary.videorope(16, (2, 3, 3), base=1e4)
    assert not torch.equal(video.frequencies, plain.frequencies)
    assert torch.equal(video.frequencies != 0, plain.frequencies != 0)  # the same pair → axis map

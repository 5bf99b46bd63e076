"""Multi-axis rotary: axial 2D/3D (AxialRotary2D, rotary-embedding-torch), M-RoPE (HF Qwen2-VL
and Qwen3-VL), RoPE-Mixed; relative-position property, 1D reductions, errors."""

from __future__ import annotations

import math
import types

import pytest
import torch
from torch.testing import assert_close

from posenc.positions import grid_positions
from posenc.rotary import AxialRotary2D, RotaryEmbedding
from posenc.rotary.multi_axis import MultiAxisRotary, mrope_axes, rescaled_grid_positions


def qk(head_dim, seq, heads=2, batch=1, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (batch, heads, seq, head_dim)
    return torch.randn(shape, generator=g, dtype=dtype), torch.randn(
        shape, generator=g, dtype=dtype
    )


def scores(rope, q, k, q_pos, k_pos):
    q2, k2 = rope(q, k, q_pos, k_pos)
    return q2 @ k2.transpose(-1, -2)


# ---- axial -------------------------------------------------------------------------------


def test_axial_2d_equals_axial_rotary_2d():
    q, k = qk(16, 12)
    ours = MultiAxisRotary.axial(16, 2, base=100.0)
    theirs = AxialRotary2D(16, height=3, width=4, base=100.0)
    index = torch.arange(12)
    assert_close(ours(q, k, grid_positions(3, 4), grid_positions(3, 4)), theirs(q, k, index, index))


def test_axial_3d_matches_rotary_embedding_torch():
    ret = pytest.importorskip("rotary_embedding_torch")
    t, h, w, head_dim = 2, 3, 4, 24
    reference = ret.RotaryEmbedding(dim=head_dim // 3, theta=100)
    freqs = reference.get_axial_freqs(t, h, w).reshape(t * h * w, head_dim)
    q, _ = qk(head_dim, t * h * w, dtype=torch.float32)
    want = ret.apply_rotary_emb(freqs, q)
    rope = MultiAxisRotary.axial(head_dim, 3, base=100.0, axis_order=(0, 1, 2))
    pos = grid_positions(t, h, w)
    assert_close(rope(q, q, pos, pos)[0], want, rtol=1e-5, atol=1e-5)


def test_axial_on_one_row_is_1d_rope_of_half_the_channels():
    q, k = qk(16, 7)
    axial = MultiAxisRotary.axial(16, 2, base=100.0)
    row = torch.stack((torch.zeros(7, dtype=torch.long), torch.arange(7)))
    one_d = RotaryEmbedding(16, rotary_dim=8, base=100.0, layout="interleaved")
    assert_close(axial(q, k, row, row), one_d(q, k, torch.arange(7), torch.arange(7)))


@pytest.mark.parametrize(
    "rope",
    [
        MultiAxisRotary.axial(24, 3, base=100.0),
        MultiAxisRotary.mrope(16, (2, 3, 3), base=1e4),
        MultiAxisRotary.mrope(16, (4, 2, 2), base=1e4, interleaved=True),
        MultiAxisRotary.mixed(16, 2, generator=torch.Generator().manual_seed(0)),
    ],
    ids=["axial3d", "mrope", "mrope_interleaved", "mixed"],
)
def test_scores_depend_only_on_position_differences(rope):
    axes = rope.num_axes
    sizes = (2, 3, 4)[:axes] if axes == 3 else (3, 4)
    pos = grid_positions(*sizes)
    q, k = qk(rope.head_dim, pos.shape[1], dtype=torch.float64)
    if rope.learnable:
        rope = rope.double()
    shift = torch.tensor([5, -2, 7][:axes])[:, None]
    with torch.no_grad():
        assert_close(scores(rope, q, k, pos + shift, pos + shift), scores(rope, q, k, pos, pos))
        # a query at another place changes the scores (the test can fail)
        assert not torch.allclose(
            scores(rope, q, k, pos + shift, pos), scores(rope, q, k, pos, pos)
        )


def test_eva_rescaled_positions():
    pos = rescaled_grid_positions(2, 4, reference=(4, 4))
    assert_close(pos, grid_positions(2, 4).double() * torch.tensor([[2.0], [1.0]]))
    q, k = qk(16, 8)
    rope = MultiAxisRotary.axial(16, 2, base=10000.0)
    # a 2×4 grid scaled to the 4×4 reference: rows 0 and 1 rotate like rows 0 and 2 of it
    ref = grid_positions(4, 4)[:, [0, 1, 2, 3, 8, 9, 10, 11]]
    assert_close(rope(q, k, pos, pos), rope(q, k, ref, ref))


# ---- M-RoPE --------------------------------------------------------------------------------


def test_mrope_axes_sections():
    assert mrope_axes([16, 24, 24]) == [0] * 16 + [1] * 24 + [2] * 24
    axes = mrope_axes([24, 20, 20], interleaved=True)
    assert axes[:6] == [0, 1, 2, 0, 1, 2] and axes[60:] == [0, 0, 0, 0]
    assert axes.count(1) == 20 and axes.count(2) == 20


def hf_mrope(version, head_dim, sections, base):
    module = pytest.importorskip(f"transformers.models.{version}.modeling_{version}")
    name = {
        "qwen2_vl": "Qwen2VLRotaryEmbedding",
        "qwen2_5_vl": "Qwen2_5_VLRotaryEmbedding",
        "qwen3_vl": "Qwen3VLTextRotaryEmbedding",
    }[version]
    cls = getattr(module, name)
    config = types.SimpleNamespace(
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": base, "mrope_section": sections},
        head_dim=head_dim,
        hidden_size=head_dim * 2,
        num_attention_heads=2,
    )
    return cls(config), module.apply_rotary_pos_emb


@pytest.mark.parametrize(
    ("version", "sections", "interleaved"),
    [
        ("qwen2_vl", [4, 6, 6], False),
        ("qwen2_5_vl", [4, 6, 6], False),
        ("qwen3_vl", [6, 5, 5], True),
    ],
)
def test_mrope_matches_transformers(version, sections, interleaved):
    head_dim = 32
    rotary, apply = hf_mrope(version, head_dim, sections, 10000.0)
    # text 0..3, a 2×3×3 video block at 4, text after
    t = torch.tensor([0, 1, 2, 3] + [4] * 9 + [5] * 9 + [7, 8])
    h = torch.tensor([0, 1, 2, 3] + [4, 4, 4, 5, 5, 5, 6, 6, 6] * 2 + [7, 8])
    w = torch.tensor([0, 1, 2, 3] + [4, 5, 6] * 6 + [7, 8])
    pos = torch.stack((t, h, w))[:, None]  # (3, batch 1, seq)
    q, k = qk(head_dim, pos.shape[-1], dtype=torch.float32)
    cos, sin = rotary(q, pos)
    want_q, want_k = apply(q, k, cos, sin)
    rope = MultiAxisRotary.mrope(head_dim, sections, base=10000.0, interleaved=interleaved)
    got_q, got_k = rope(q, k, pos, pos)
    assert_close(got_q, want_q)
    assert_close(got_k, want_k)


@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_on_text_is_1d_rope(interleaved):
    q, k = qk(16, 9)
    rope = MultiAxisRotary.mrope(16, (2, 3, 3), base=1e4, interleaved=interleaved)
    text = torch.arange(9).expand(3, 9)
    one_d = RotaryEmbedding(16, base=1e4)
    assert_close(
        rope(q, k, text, text), one_d(q, k, torch.arange(9), torch.arange(9)), rtol=0, atol=0
    )


def test_kv_cache_decoding_equals_the_full_forward():
    # rotate the prefix and the next token separately: same as rotating the whole sequence
    rope = MultiAxisRotary.mrope(16, (2, 3, 3), base=1e4)
    pos = torch.stack(
        (
            torch.tensor([0, 1, 2, 2, 2, 2, 4]),
            torch.tensor([0, 1, 2, 2, 3, 3, 4]),
            torch.tensor([0, 1, 2, 3, 2, 3, 4]),
        )
    )
    q, k = qk(16, 7)
    full_q, full_k = rope(q, k, pos, pos)
    step_q, step_k = rope(q[:, :, 6:], k[:, :, 6:], pos[:, 6:], pos[:, 6:])
    assert_close(step_q, full_q[:, :, 6:], rtol=0, atol=0)
    assert_close(step_k, full_k[:, :, 6:], rtol=0, atol=0)


# ---- mixed ---------------------------------------------------------------------------------


def test_mixed_initialization_is_rope_vits():
    g = torch.Generator().manual_seed(3)
    rope = MultiAxisRotary.mixed(16, 3, base=10.0, generator=g)
    phi = torch.rand(3, 1, generator=torch.Generator().manual_seed(3)) * 2 * math.pi
    mag = torch.tensor([10.0 ** (-4 * k / 16) for k in range(4)])
    row, col = rope.frequencies.unbind(-1)  # (heads, pairs) each
    assert_close(col, torch.cat((mag * phi.cos(), -mag * phi.sin()), dim=-1))
    assert_close(row, torch.cat((mag * phi.sin(), mag * phi.cos()), dim=-1))
    assert rope.learnable and rope.per_head and not rope.shared_across_layers


def test_mixed_trains_its_frequencies_and_rotates_each_head_its_own_way():
    rope = MultiAxisRotary.mixed(8, 2, generator=torch.Generator().manual_seed(0))
    q, k = qk(8, 6, dtype=torch.float32)
    pos = grid_positions(2, 3)
    q2, k2 = rope(q.requires_grad_(), k, pos, pos)
    (q2 @ k2.transpose(-1, -2)).square().sum().backward()
    assert rope.frequencies.grad is not None and rope.frequencies.grad.abs().sum() > 0
    same_input = q.detach()[:, :1].expand(1, 2, 6, 8)
    with torch.no_grad():
        rotated, _ = rope(same_input, same_input, pos, pos)
    assert not torch.allclose(rotated[:, 0], rotated[:, 1])


def test_bf16_rotates_in_float32():
    rope = MultiAxisRotary.axial(16, 2)
    q, k = qk(16, 6, dtype=torch.float32)
    pos = grid_positions(2, 3)
    want = rope(q, k, pos, pos)
    got = rope(q.bfloat16(), k.bfloat16(), pos, pos)
    assert got[0].dtype == torch.bfloat16
    assert_close(got[0].float(), want[0], rtol=1e-2, atol=1e-2)


# ---- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: MultiAxisRotary.axial(18, 2), "head_dim must be divisible by 4"),
        (lambda: MultiAxisRotary.axial(16, 2, axis_order=(0, 0)), "axis_order"),
        (lambda: MultiAxisRotary.mrope(16, (2, 2, 2)), "sections must sum to head_dim / 2 = 8"),
        (lambda: MultiAxisRotary.mrope(16, (4, 4)), r"sections must give \(t, h, w\)"),
        (lambda: MultiAxisRotary.mixed(10, 2), "head_dim must be divisible by 4"),
        (lambda: MultiAxisRotary(8, torch.zeros(5, 2)), "pairs"),
        (lambda: MultiAxisRotary(8, torch.zeros(4, 2), layout="odd"), "layout"),
        (lambda: rescaled_grid_positions(2, 2, reference=(4,)), "reference"),
    ],
)
def test_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_positions_with_the_wrong_axis_count_are_named():
    rope = MultiAxisRotary.mrope(16, (2, 3, 3))
    q, k = qk(16, 4)
    with pytest.raises(ValueError, match="q_pos"):
        rope(q, k, grid_positions(2, 2), grid_positions(2, 2))


@pytest.mark.parametrize(
    ("hf_params", "ours"),
    [
        ({"rope_type": "linear", "factor": 4.0}, {"type": "linear", "factor": 4.0}),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
            {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
        ),
    ],
    ids=["linear", "yarn"],
)
def test_scaled_mrope_matches_transformers(hf_params, ours):
    module = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

    head_dim, sections = 32, [4, 6, 6]
    config = Qwen2VLTextConfig(
        hidden_size=head_dim * 2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_parameters={"rope_theta": 10000.0, "mrope_section": sections, **hf_params},
    )
    rotary = module.Qwen2VLRotaryEmbedding(config)
    pos = torch.stack((torch.arange(40), torch.arange(40) // 3, torch.arange(40) % 7))[:, None]
    q, k = qk(head_dim, 40, dtype=torch.float32)
    cos, sin = rotary(q, pos)
    want_q, want_k = module.apply_rotary_pos_emb(q, k, cos, sin)
    rope = MultiAxisRotary.mrope(head_dim, sections, base=10000.0, scaling=ours)
    got_q, got_k = rope(q, k, pos, pos)
    assert_close(got_q, want_q)
    assert_close(got_k, want_k)
    if hf_params["rope_type"] == "yarn":
        assert rope.attention_factor == pytest.approx(0.1 * math.log(4.0) + 1)


LONG = {
    "short_factor": [1.0 + 0.1 * i for i in range(16)],
    "long_factor": [1.5 + 0.5 * i for i in range(16)],
    "original_max_position_embeddings": 32,
}


@pytest.mark.parametrize(
    ("hf_params", "ours"),
    [
        (
            {"rope_type": "dynamic", "factor": 2.0},
            {"type": "dynamic", "factor": 2.0, "max_position_embeddings": 32},
        ),
        (
            {"rope_type": "longrope", **LONG},
            {"type": "longrope", **LONG, "max_position_embeddings": 32 * 4},
        ),
    ],
    ids=["dynamic", "longrope"],
)
def test_length_dependent_mrope_follows_transformers_call_by_call(hf_params, ours):
    # transformers' Qwen2-VL rotary updates its frequencies per call (dynamic_rope_update)
    # from max(position_ids) + 1 over all axes: grow, stay, reset; long/short factors.
    module = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

    head_dim, sections = 32, [4, 6, 6]
    config = Qwen2VLTextConfig(
        hidden_size=head_dim * 2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32 * 4 if hf_params["rope_type"] == "longrope" else 32,
        rope_parameters={"rope_theta": 10000.0, "mrope_section": sections, **hf_params},
    )
    rotary = module.Qwen2VLRotaryEmbedding(config)
    rope = MultiAxisRotary.mrope(head_dim, sections, base=10000.0, scaling=ours)
    assert rope.depends_on_length
    # (start, length): short, long (grows: max h position 50 + 1 > 32), longer, shorter
    # than the original (dynamic resets), long again; the h axis holds the largest position.
    changed = []
    for start, length in [(0, 20), (10, 41), (0, 60), (0, 12), (30, 5)]:
        t = torch.arange(start, start + length)
        pos = torch.stack((t, t + 10, t // 2))[:, None]  # (3, batch 1, seq)
        q, k = qk(head_dim, length, dtype=torch.float32, seed=start + length)
        before = rope.rebuilds
        cos, sin = rotary(q, pos)
        want_q, want_k = module.apply_rotary_pos_emb(q, k, cos, sin)
        got_q, got_k = rope(q, k, pos, pos)
        assert_close(got_q, want_q)
        assert_close(got_k, want_k)
        changed.append(rope.rebuilds > before)
    if hf_params["rope_type"] == "dynamic":
        # grow at 51, grow at 70, reset at 22 (< 32 < 70), grow at 45
        assert changed == [False, True, True, True, True]
        assert rope.max_seq_len_cached == 45
    else:
        # long factors above 32: 51, 70 keep them; 22 goes short; 45 long again
        assert changed == [False, True, False, True, True]
        assert rope.attention_factor == pytest.approx(math.sqrt(1 + math.log(4) / math.log(32)))


def test_length_dependent_mrope_updates_once_per_forward_in_attention():
    # the attention's rotary hook builds the tables once per forward from the query
    # positions: a long forward switches a LongRoPE M-RoPE to its long factors
    from posenc.attention import Attention

    rope = MultiAxisRotary.mrope(
        16, (2, 3, 3), base=1e4, scaling={"type": "longrope", **_long(8), "factor": 4.0}
    )
    attn = Attention(32, 2, pos=rope).double()
    x = torch.randn(1, 12, 32, dtype=torch.float64)
    short = torch.arange(12).expand(3, 1, 12)
    attn(x, short + 0)  # max position 11 + 1 > 8: long factors
    assert rope.rebuilds == 1
    want = RotaryEmbedding(16, base=1e4, scaling=rope._length_source.scaling)
    q, k = qk(16, 12)
    text = torch.arange(12)
    assert_close(rope(q, k, text.expand(3, 12), text.expand(3, 12)), want(q, k, text, text))


def _long(original):
    return {
        "short_factor": [1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4],
        "long_factor": [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        "original_max_position_embeddings": original,
    }


def test_kv_cache_decoding_after_a_vision_block_through_attention():
    from posenc.attention import Attention, KVCache
    from posenc.positions.multimodal import sequence_position_ids

    torch.manual_seed(0)
    ids, _ = sequence_position_ids([("text", 3), ("image", (1, 4, 6)), ("text", 4)])
    positions = ids[:, None]  # (3, batch 1, 13)
    attn = Attention(64, 4, pos=MultiAxisRotary.mrope(16, (2, 3, 3), base=1e4)).double()
    x = torch.randn(1, 13, 64, dtype=torch.float64)
    full = attn(x, positions)
    cache = KVCache()
    parts = [attn(x[:, :9], positions[..., :9], cache=cache)]
    parts += [attn(x[:, i : i + 1], positions[..., i : i + 1], cache=cache) for i in range(9, 13)]
    assert_close(torch.cat(parts, dim=1), full, rtol=1e-12, atol=1e-12)
    # without explicit positions the next token sits at max + 1 on every axis: the text rule
    cache = KVCache()
    attn(x[:, :9], positions[..., :9], cache=cache)
    assert_close(attn(x[:, 9:10], cache=cache), full[:, 9:10], rtol=1e-12, atol=1e-12)

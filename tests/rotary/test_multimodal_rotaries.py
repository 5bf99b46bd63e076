"""Frequency allocations of the multimodal RoPE study (MHRoPE, MM-RoPE, MRoPE-I, IL-RoPE,
OmniRoPE, CircleRoPE) and Qwen3.5's partial MRoPE-I: parity with JJJYmmm/Multimodal-RoPEs'
golden tables and with transformers' ``qwen3_5``, properties, errors."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from posenc.positions.multimodal import IMAGE, TEXT, VIDEO, mrope_position_ids
from posenc.rotary import MultiAxisRotary, qwen_image_rotary
from posenc.rotary.multi_axis import mhrope_head_axes, mmrope_axes

safetensors = pytest.importorskip("safetensors.torch")
GOLDEN = safetensors.load_file(
    str(Path(__file__).parents[1] / "data" / "multimodal_ropes" / "golden.safetensors")
)
BASE = 5_000_000.0  # the golden's (head_dim 128)

# name → the rotary the library pairs with its layout (positions: the golden's own)
ROTARIES = {
    "mrope-interleave": lambda: MultiAxisRotary.mrope(128, (24, 20, 20), base=BASE,
                                                      interleaved=True),
    "ilrope": lambda: MultiAxisRotary.mrope(128, (24, 20, 20), base=BASE, interleaved=True),
    "omnirope": lambda: MultiAxisRotary.mrope(128, (16, 24, 24), base=BASE),
    "circlerope": lambda: MultiAxisRotary.mrope(128, (16, 24, 24), base=BASE),
    "mmrope": lambda: MultiAxisRotary.mmrope(128, base=BASE),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ROTARIES))
def test_tables_equal_the_library_golden(name):
    """cos/sin of the golden's positions (the library's float32 tables; the float64 angles
    rounded once here)."""
    rope = ROTARIES[name]()
    cos, sin = rope.rotary_tables(GOLDEN[f"{name}.position_ids"], torch.float32)
    torch.testing.assert_close(cos, GOLDEN[f"{name}.cos"])  # (seq, pairs): cat(c, c) in HF
    torch.testing.assert_close(sin, GOLDEN[f"{name}.sin"])


def test_mhrope_tables_equal_the_library_golden():
    """MHRoPE over 8 key/value heads, [2, 3, 3]: heads 0, 2, 5 (t, h, w; the golden's others
    repeat them) and their copies."""
    rope = MultiAxisRotary.mhrope(128, 8, (2, 3, 3), base=BASE)
    cos, sin = rope.rotary_tables(GOLDEN["mhrope.position_ids"], torch.float32)  # (8, seq, 64)
    assert cos.shape == (8, 29, 64)
    for index, heads in enumerate(((0, 1), (2, 3, 4), (5, 6, 7))):
        for head in heads:
            torch.testing.assert_close(cos[head], GOLDEN["mhrope.cos"][index])
            torch.testing.assert_close(sin[head], GOLDEN["mhrope.sin"][index])


def test_v2pe_tables_equal_the_library_golden():
    """V2PE: 1D RoPE on the fractional positions."""
    from posenc.rotary import RotaryEmbedding

    cos, sin = RotaryEmbedding(128, base=BASE).rotary_tables(
        GOLDEN["v2pe.position_ids"][0], torch.float32
    )
    torch.testing.assert_close(cos.reshape(29, 64), GOLDEN["v2pe.cos"])
    torch.testing.assert_close(sin.reshape(29, 64), GOLDEN["v2pe.sin"])


def test_library_videorope_allocation_is_not_the_official_one():
    """The library's VideoRoPE pairs: t at pair 0 and the last 16, h at odd pairs 1..47, w at
    even pairs 2..46; the official reference (posenc's ``videorope``, tested against it in
    test_video_rope.py) alternates h, w from pair 0 with t on the last 16 only."""
    from posenc.rotary.frequencies import rope_inv_freq
    from posenc.rotary.multi_axis.maps import place_frequencies

    axes = [0] + [1 if i % 2 else 2 for i in range(1, 48)] + [0] * 16
    frequencies = place_frequencies(rope_inv_freq(128, BASE), torch.tensor(axes), 3)
    library = MultiAxisRotary(128, frequencies)
    positions = GOLDEN["videorope.position_ids"]
    cos, sin = library.rotary_tables(positions, torch.float32)
    torch.testing.assert_close(cos, GOLDEN["videorope.cos"])
    torch.testing.assert_close(sin, GOLDEN["videorope.sin"])
    official, _ = MultiAxisRotary.videorope(128, (16, 24, 24), base=BASE).rotary_tables(
        positions, torch.float32
    )
    assert (official - GOLDEN["videorope.cos"]).abs().max() > 0.5


def test_qwen35_partial_mrope_i_equals_the_library_golden():
    """Qwen3.5: head_dim 256, partial 0.25 (64 rotary channels), interleaved [11, 11, 10],
    θ = 1e7; the golden holds transformers' ``Qwen3_5TextRotaryEmbedding`` tables."""
    rope = MultiAxisRotary.mrope(256, (11, 11, 10), base=1e7, interleaved=True, rotary_dim=64)
    assert rope.rotary_dim == 64
    cos, sin = rope.rotary_tables(GOLDEN["qwen35.position_ids"], torch.float32)
    torch.testing.assert_close(cos, GOLDEN["qwen35.hf_cos"])
    torch.testing.assert_close(sin, GOLDEN["qwen35.hf_sin"])


def _qwen35():
    config_module = pytest.importorskip("transformers.models.qwen3_5.configuration_qwen3_5")
    modeling = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    config = config_module.Qwen3_5TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        num_hidden_layers=1, intermediate_size=32, vocab_size=64,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    )  # fmt: skip
    return config, modeling


def test_qwen35_tables_and_rotation_equal_transformers():
    """A tiny Qwen3.5 text config (head_dim 64, 16 rotary channels, [3, 3, 2]) on mixed text,
    image and video ids: HF's tables (float32) and HF's ``apply_rotary_pos_emb`` with
    posenc's tables (float64) against posenc's rotation."""
    config, modeling = _qwen35()
    from posenc.integrations.hf import mrope_from_config

    token_types = torch.tensor([[TEXT] * 3 + [IMAGE] * 6 + [TEXT] * 2 + [VIDEO] * 4 + [TEXT]])
    positions, _ = mrope_position_ids(token_types, [[1, 4, 6]], [[1, 4, 4]], version="qwen3_vl")
    hf = modeling.Qwen3_5TextRotaryEmbedding(config)
    hf_cos, hf_sin = hf(torch.zeros(1, dtype=torch.float32), positions)
    rope = MultiAxisRotary.mrope(64, (3, 3, 2), base=1e7, interleaved=True, rotary_dim=16)
    from_config = mrope_from_config(config)  # the rotary slice, as patch_rotary feeds HF
    for r in (rope, from_config):
        cos, sin = r.rotary_tables(positions, torch.float32)
        torch.testing.assert_close(torch.cat((cos, cos), -1)[:, 0], hf_cos)
        torch.testing.assert_close(torch.cat((sin, sin), -1)[:, 0], hf_sin)
    q = torch.randn(1, 4, positions.shape[-1], 64, dtype=torch.float64)
    k = torch.randn(1, 2, positions.shape[-1], 64, dtype=torch.float64)
    cos, sin = rope.rotary_tables(positions, torch.float64)
    expected = modeling.apply_rotary_pos_emb(
        q, k, torch.cat((cos, cos), -1)[:, 0], torch.cat((sin, sin), -1)[:, 0]
    )
    got = rope(q, k, positions, positions)
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=1e-14)
    torch.testing.assert_close(got[1], expected[1], rtol=0, atol=1e-14)


def test_qwen35_position_ids_equal_transformers():
    """Qwen3.5's ``get_rope_index`` (no spatial reset; videos split per frame) is posenc's
    ``version="qwen3_vl"`` on a padded batch."""
    _, modeling = _qwen35()
    token_types = torch.tensor([[TEXT] * 2 + [IMAGE] * 6 + [TEXT] * 2 + [VIDEO] * 4 + [TEXT] * 2
                                + [VIDEO] * 4 + [TEXT],
                                [TEXT] * 14 + [IMAGE] * 4 + [TEXT] * 3]).long()  # fmt: skip
    mask = torch.ones_like(token_types)
    mask[1, :3] = 0
    token_types[1, :3] = TEXT
    image_grid = torch.tensor([[1, 4, 6], [1, 4, 4]])
    video_grid = torch.tensor([[2, 4, 4]])
    stub = types.SimpleNamespace(
        config=types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=2))
    )
    stub.get_vision_position_ids = types.MethodType(
        modeling.Qwen3_5Model.get_vision_position_ids, stub
    )
    expected, expected_delta = modeling.Qwen3_5Model.get_rope_index(
        stub, torch.ones_like(token_types), token_types, image_grid, video_grid.clone(), mask
    )
    ids, delta = mrope_position_ids(
        token_types, image_grid, video_grid, attention_mask=mask, version="qwen3_vl"
    )
    torch.testing.assert_close(ids, expected, rtol=0, atol=0)
    torch.testing.assert_close(delta, expected_delta, rtol=0, atol=0)


def test_qwen35_model_patched_equals_transformers():
    """A tiny hybrid Qwen3.5 (linear + full attention) with posenc's partial MRoPE-I through
    ``patch_rotary``: logits on (3, batch, seq) text/image/video ids equal the unpatched
    model's (≤ 5e-6 in float32, the adapter's bound)."""
    config_module = pytest.importorskip("transformers.models.qwen3_5.configuration_qwen3_5")
    modeling = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    from posenc.integrations.hf import patch_rotary

    config = config_module.Qwen3_5TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_hidden_layers=2, intermediate_size=64, vocab_size=64,
        layer_types=["linear_attention", "full_attention"], linear_num_value_heads=2,
        linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    )  # fmt: skip
    torch.manual_seed(0)
    model = modeling.Qwen3_5ForCausalLM(config).eval()
    token_types = torch.tensor([[TEXT] * 3 + [IMAGE] * 6 + [TEXT] * 2 + [VIDEO] * 4 + [TEXT]])
    positions, _ = mrope_position_ids(token_types, [[1, 4, 6]], [[1, 4, 4]], version="qwen3_vl")
    input_ids = torch.randint(0, 64, token_types.shape)
    with torch.no_grad():
        expected = model(input_ids=input_ids, position_ids=positions).logits
        patch_rotary(model)
        got = model(input_ids=input_ids, position_ids=positions).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=5e-6)


def test_maps():
    assert mmrope_axes(16) == [0, 0, 1, 2, 1, 2, 1, 2] * 2
    assert mhrope_head_axes([2, 3, 3], 8) == [0, 0, 1, 1, 1, 2, 2, 2]
    assert mhrope_head_axes([1, 1, 1], 5) == [0, 1, 2, -1, -1]


@pytest.mark.parametrize(
    "rope",
    [
        MultiAxisRotary.mmrope(32, base=100.0),
        MultiAxisRotary.mhrope(32, 4, (1, 1, 1), base=100.0),
        MultiAxisRotary.mrope(32, (6, 5, 5), base=100.0, interleaved=True),
    ],
    ids=["mmrope", "mhrope", "mrope_i"],
)
def test_text_tokens_are_one_axis_rope(rope):
    """On text (t = h = w) every rotated head is plain 1D RoPE; MHRoPE's spare head is NoPE."""
    from posenc.rotary import RotaryEmbedding

    q = torch.randn(2, 4, 9, 32, dtype=torch.float64)
    k = torch.randn(2, 4, 9, 32, dtype=torch.float64)
    pos = torch.arange(3, 12)
    got_q, got_k = rope(q, k, pos.expand(3, 9), pos.expand(3, 9))
    want_q, want_k = RotaryEmbedding(32, base=100.0)(q, k, pos, pos)
    rotated = slice(0, 3) if rope.per_head else slice(None)
    torch.testing.assert_close(got_q[:, rotated], want_q[:, rotated])
    torch.testing.assert_close(got_k[:, rotated], want_k[:, rotated])
    if rope.per_head:  # head 3 reads no axis
        torch.testing.assert_close(got_q[:, 3], q[:, 3], rtol=0, atol=0)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_mhrope_and_mmrope_scores_are_relative_per_axis(axis):
    """Shifting one axis of every query and key position leaves q·k unchanged."""
    torch.manual_seed(0)
    for rope in (MultiAxisRotary.mhrope(16, 3, (1, 1, 1)), MultiAxisRotary.mmrope(16)):
        q = torch.randn(1, 3, 5, 16, dtype=torch.float64)
        k = torch.randn(1, 3, 5, 16, dtype=torch.float64)
        pos = torch.randint(0, 40, (3, 5)).double()
        shifted = pos.clone()
        shifted[axis] += 17.0
        a = rope(q, k, pos, pos)
        b = rope(q, k, shifted, shifted)
        torch.testing.assert_close(a[0] @ a[1].transpose(-1, -2), b[0] @ b[1].transpose(-1, -2))


def test_mhrope_head_reads_only_its_axis():
    """Head n's rotation depends on axis a(n) only."""
    rope = MultiAxisRotary.mhrope(16, 3, (1, 1, 1))
    q = torch.randn(1, 3, 4, 16, dtype=torch.float64)
    pos = torch.randint(0, 30, (3, 4)).double()
    for head, axis in enumerate(mhrope_head_axes((1, 1, 1), 3)):
        moved = pos.clone()
        moved[[a for a in range(3) if a != axis]] += 5.0
        torch.testing.assert_close(
            rope(q, q, moved, moved)[0][:, head], rope(q, q, pos, pos)[0][:, head]
        )


def test_mhrope_grouped_query_heads_take_their_key_head():
    """8 query heads over 4 key/value heads: query head n is rotated as key head n // 2."""
    rope = MultiAxisRotary.mhrope(16, 4, (1, 1, 2), base=100.0)
    pos = torch.randint(0, 30, (3, 6)).double()
    q = torch.randn(1, 8, 6, 16, dtype=torch.float64)
    k = torch.randn(1, 4, 6, 16, dtype=torch.float64)
    got_q, _ = rope(q, k, pos, pos)
    for head in range(8):
        want, _ = rope(q[:, head : head + 1].expand(1, 4, 6, 16), k, pos, pos)
        torch.testing.assert_close(got_q[:, head], want[:, head // 2])


@pytest.mark.parametrize(
    "build",
    [
        lambda: MultiAxisRotary.mhrope(16, 4, (1, 1, 1)),
        lambda: MultiAxisRotary.mmrope(16),
        lambda: qwen_image_rotary(16, axes_dim=(4, 6, 6)),
        lambda: MultiAxisRotary.mrope(32, (3, 3, 2), interleaved=True, rotary_dim=16),
    ],
    ids=["mhrope", "mmrope", "msrope", "partial_mrope"],
)
def test_meta_build_rotates_as_a_cpu_build(build):
    """Frequencies are constants kept on the CPU: a module built under the meta device and
    ``to_empty`` rotates exactly as one built on the CPU."""
    with torch.device("meta"):
        meta = build()
    meta = meta.to_empty(device="cpu")
    head_dim = meta.head_dim
    q = torch.randn(1, 4, 6, head_dim, dtype=torch.float64)
    pos = torch.randint(0, 20, (3, 6))
    torch.testing.assert_close(meta(q, q, pos, pos)[0], build()(q, q, pos, pos)[0], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "rope",
    [MultiAxisRotary.mhrope(16, 4, (1, 1, 1)), MultiAxisRotary.mmrope(16),
     qwen_image_rotary(16, axes_dim=(4, 6, 6))],
    ids=["mhrope", "mmrope", "msrope"],
)  # fmt: skip
def test_low_precision_is_one_rounding_of_float64(rope, dtype):
    """q in float32/bf16/fp16 comes back in its dtype, within that dtype's tolerance of the
    float64 rotation of the same (rounded) q and k (8 query heads on 4 key heads for MHRoPE)."""
    q = torch.randn(2, 8, 5, 16).to(dtype)
    k = torch.randn(2, 4, 5, 16).to(dtype)
    pos = torch.randint(0, 50, (3, 2, 5))
    want = rope(q.double(), k.double(), pos, pos)
    got = rope(q, k, pos, pos)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype
        torch.testing.assert_close(g, w.to(dtype))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: MultiAxisRotary.mhrope(16, 4, (2, 2, 2)), "num_heads"),
        (lambda: MultiAxisRotary.mhrope(16, 4, (1, 1)), "sections"),
        (lambda: MultiAxisRotary.mhrope(15, 4), "head_dim"),
        (lambda: MultiAxisRotary.mmrope(15), "head_dim"),
        (lambda: qwen_image_rotary(128, axes_dim=(16, 56, 58)), "axes_dim"),
        (lambda: qwen_image_rotary(30, axes_dim=(10, 9, 11)), r"axes_dim\[1\]"),
        (lambda: MultiAxisRotary.mrope(64, (3, 3, 2), rotary_dim=80), "rotary_dim"),
        (lambda: MultiAxisRotary.mrope(64, (3, 3, 2), rotary_dim=18), "rotary_dim / 2 = 9"),
        (lambda: MultiAxisRotary.mhrope(16, 3, (1, 1, 1))(
            torch.zeros(1, 4, 2, 16), torch.zeros(1, 3, 2, 16), torch.zeros(3, 2),
            torch.zeros(3, 2)), "q has 4 heads"),
    ],
)  # fmt: skip
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()

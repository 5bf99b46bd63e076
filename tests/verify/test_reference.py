"""The verify reference against posenc's rotary modules (float64: equal) and its conventions."""

from __future__ import annotations

import pytest
import torch

from posenc.integrations.hf import mrope_from_config, rope_from_config
from posenc.rotary import RotaryEmbedding
from posenc.rotary.functional import apply_rotary
from posenc.verify import reference_arrays, rope_spec
from posenc.verify.reference import tables
from tools.verify_cases import (
    DEEPSEEK_V3,
    DEEPSEEK_V4,
    GEMMA4,
    LLAMA31,
    QWEN35,
    family,
    positions_of,
)

POSITIONS = torch.arange(0, 4096, 37)


def test_tables_equal_posencs_rotary_embedding_in_float64() -> None:
    ref = reference_arrays(LLAMA31, POSITIONS)
    cos, sin = rope_from_config(LLAMA31).cos_sin(POSITIONS, dtype=torch.float64)
    torch.testing.assert_close(ref["cos"], cos, rtol=0, atol=1e-15)
    torch.testing.assert_close(ref["sin"], sin, rtol=0, atol=1e-15)


def test_both_layouts_and_pairs_hold_the_same_values() -> None:
    ref = reference_arrays(LLAMA31, POSITIONS, layout="both")
    assert set(ref) == {"positions", "cos_half", "sin_half", "cos_interleaved", "sin_interleaved"}
    pairs, _ = tables(rope_spec(LLAMA31), POSITIONS, "pairs")
    torch.testing.assert_close(ref["cos_half"], torch.cat((pairs, pairs), -1), rtol=0, atol=0)
    torch.testing.assert_close(
        ref["cos_interleaved"], pairs.repeat_interleave(2, -1), rtol=0, atol=0
    )


def test_rotated_q_equals_apply_rotary_in_both_layouts() -> None:
    q = torch.randn(1, 2, POSITIONS.numel(), 128, dtype=torch.float64)
    for config, layout in (
        (LLAMA31, "half"),
        ({**LLAMA31, "model_type": "deepseek_v3"}, "interleaved"),
    ):
        spec = rope_spec(config)
        assert spec.layout == layout
        ref = reference_arrays(config, POSITIONS, q=q)
        cos, sin = tables(spec, POSITIONS)
        torch.testing.assert_close(ref["q_rotated"], apply_rotary(q, cos, sin, layout=layout))


def test_gemma4_global_layers_rotate_global_head_dim_proportionally() -> None:
    spec = rope_spec(GEMMA4, "full_attention")
    assert (spec.head_dim, spec.rotary_dim) == (512, 512)
    expected = RotaryEmbedding(512, base=1e6).inv_freq().double()[:64]  # exponents over 512
    torch.testing.assert_close(spec.inv_freq[:64], expected, rtol=1e-15, atol=0)
    assert bool((spec.inv_freq[64:] == 0).all())  # the last 3/4 of the pairs pass through
    assert rope_spec(GEMMA4, "sliding_attention").head_dim == 256


def test_deepseek_v4_rotates_the_trailing_slice_interleaved_with_its_compress_base() -> None:
    main, compress = rope_spec(DEEPSEEK_V4, "main"), rope_spec(DEEPSEEK_V4, "compress")
    assert (main.base, compress.base) == (1e4, 1.6e5)
    # as HF's DeepseekV4Config nests a flat config.json: YaRN on the compressed entries only,
    # with attention_factor 1 (V4's reference does not scale cos/sin)
    assert main.parameters.scaling is None
    assert compress.parameters.rope_type == "yarn" and compress.attention_factor == 1.0
    assert main.trailing and main.layout == "interleaved" and main.rotary_dim == 64
    x = torch.randn(3, 512, dtype=torch.float64)
    rotated = reference_arrays(DEEPSEEK_V4, torch.arange(3), layer_type="main", q=x)["q_rotated"]
    torch.testing.assert_close(rotated[:, :448], x[:, :448], rtol=0, atol=0)
    assert not torch.allclose(rotated[1:, 448:], x[1:, 448:])
    with pytest.raises(ValueError, match="layer_type must be one of"):
        rope_spec(DEEPSEEK_V4, "sliding_attention")


def test_the_dsa_indexer_is_neox_in_deepseek_v32() -> None:
    v32 = {**DEEPSEEK_V3, "model_type": "deepseek_v32"}
    assert rope_spec(v32).layout == "interleaved"
    assert rope_spec(v32, component="indexer").layout == "half"
    assert (
        rope_spec({**v32, "indexer_rope_interleave": True}, component="indexer").layout
        == "interleaved"
    )


def test_mrope_tables_equal_multi_axis_rotary_and_text_is_1d() -> None:
    positions = positions_of(family("Qwen3.5"))
    spec = rope_spec(QWEN35)
    cos, _ = tables(spec, positions, "pairs")
    expected, _ = mrope_from_config(QWEN35).rotary_tables(positions, torch.float64)
    torch.testing.assert_close(cos, expected.reshape(cos.shape), rtol=0, atol=1e-15)
    text = torch.arange(10)
    torch.testing.assert_close(
        tables(spec, text)[0], tables(spec, text.expand(3, -1))[0], rtol=0, atol=0
    )
    with pytest.raises(ValueError, match=r"positions must be \(seq,\) or \(3, seq\)"):
        tables(spec, torch.zeros(2, 5))


def test_hf_default_sections_apply_when_the_config_has_none() -> None:
    params = dict(QWEN35["rope_parameters"])  # type: ignore[arg-type]
    del params["mrope_section"], params["mrope_interleaved"]
    bare = rope_spec({**QWEN35, "rope_parameters": params})
    assert bare.sections == (11, 11, 10) and bare.axes == rope_spec(QWEN35).axes


def test_a_transformers_gemma4_config_object_reads_its_per_layer_head_dim() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("gemma4_text")
    assert (
        rope_spec(config, "full_attention").head_dim
        == config.per_layer_config["full_attention"].head_dim
    )
    with pytest.raises(ValueError, match="layer_type must be one of"):
        rope_spec(config)


@pytest.mark.parametrize("positions", [None, torch.tensor([0.0, float("inf")]), -torch.arange(3)])
def test_reference_positions_must_be_given_finite_and_non_negative(positions) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="positions"):
        reference_arrays(LLAMA31, positions)

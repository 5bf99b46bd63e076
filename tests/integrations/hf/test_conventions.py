"""HF conventions read by the config adapter: the default-ignores-partial rule taken from HF's
code (tools/hf_sweep/conventions.py reads it, hf.conventions holds it); the keys HF models read
beyond their rope type's (Ministral 3's llama_4_scaling_beta, PhiMoE's short/long mscale,
M-RoPE's mrope_section); nested per-layer-type rope_parameters. Each against transformers' own
computation, and each bad input named."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from posenc.integrations.hf import (
    attention_scale_from_config,
    frequencies_from_config,
    mrope_from_config,
    rope_from_config,
)
from posenc.integrations.hf.conventions import DEFAULT_IGNORES_PARTIAL, UNDECLARED_MROPE_AXES

transformers = pytest.importorskip("transformers")

SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
)


def _rotary_class(family: str, name: str) -> Any:
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    return getattr(module, name)


@pytest.mark.slow
def test_default_ignores_partial_is_read_from_transformers() -> None:
    from tools.hf_sweep.conventions import default_ignores_partial

    assert default_ignores_partial() == DEFAULT_IGNORES_PARTIAL


def test_undeclared_mrope_axes_is_read_from_transformers() -> None:
    from tools.hf_sweep.conventions import undeclared_mrope_axes

    assert undeclared_mrope_axes() == UNDECLARED_MROPE_AXES


@pytest.mark.parametrize(
    ("family", "rotary", "ignores"),
    [
        ("cohere", "CohereRotaryEmbedding", True),  # not in the old hand list of 13
        ("phimoe", "PhimoeRotaryEmbedding", True),
        ("llama", "LlamaRotaryEmbedding", True),
        ("gpt_neox", "GPTNeoXRotaryEmbedding", False),
        ("glm", "GlmRotaryEmbedding", False),
    ],
)
def test_default_partial_rule_matches_hf(family: str, rotary: str, ignores: bool) -> None:
    assert (family in DEFAULT_IGNORES_PARTIAL) == ignores
    config = transformers.AutoConfig.for_model(family, **SMALL, head_dim=16)
    config.rope_parameters = {
        "rope_type": "default",
        "rope_theta": 1e4,
        "partial_rotary_factor": 0.5,
    }
    expected, _ = _rotary_class(family, rotary).compute_default_rope_parameters(config)
    got, _ = frequencies_from_config(config)
    assert got.numel() == (8 if ignores else 4)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)


def _ministral3(**rope: Any) -> Any:
    params = {
        "rope_type": "yarn",
        "rope_theta": 1e6,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "llama_4_scaling_beta": 0.1,
        "max_position_embeddings": 64,
        **rope,
    }
    return transformers.Ministral3Config(
        **SMALL, head_dim=16, max_position_embeddings=64, rope_parameters=params
    )


def test_llama_4_scaling_beta_is_the_query_scale() -> None:
    config = _ministral3()
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    positions = torch.arange(0, 200, 7)[None]
    expected = get_llama_4_attn_scale(positions, 0.1, 16).flatten()
    torch.testing.assert_close(attention_scale_from_config(config, positions).flatten(), expected)
    rope = _ministral3()
    # the RoPE tables do not depend on β: HF's yarn init on the same keys
    inv_freq, factor = frequencies_from_config(rope)
    expected_freq, expected_factor = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["yarn"](
        rope
    )
    torch.testing.assert_close(inv_freq, expected_freq, rtol=1e-6, atol=0)
    assert factor == pytest.approx(expected_factor)


@pytest.mark.parametrize(
    ("rope", "match"),
    [
        ({"llama_4_scaling_beta": -0.1}, "llama_4_scaling_beta"),
        ({"llama_4_scaling_beta": "0.1"}, "llama_4_scaling_beta"),
        ({"max_position_embeddings": 32}, r"rope_parameters\['max_position_embeddings'\] \(32\)"),
    ],
)
def test_llama_4_keys_bad_values(rope: dict[str, Any], match: str) -> None:
    config = {"head_dim": 16, "max_position_embeddings": 64, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
        "llama_4_scaling_beta": 0.1, **rope}}  # fmt: skip
    with pytest.raises(ValueError, match=match):
        frequencies_from_config(config)


def _phimoe(**extra: Any) -> dict[str, Any]:
    return {
        "head_dim": 16,
        "max_position_embeddings": 64,
        "rope_parameters": {
            "rope_type": "longrope",
            "short_factor": [1.0] * 8,
            "long_factor": [4.0] * 8,
            "original_max_position_embeddings": 16,
            "short_mscale": 1.1,
            "long_mscale": 1.3,
            **extra,
        },
    }


def test_short_long_mscale_pick_the_factor_by_length() -> None:
    short_freq, short = frequencies_from_config(_phimoe(), seq_len=16)
    long_freq, long = frequencies_from_config(_phimoe(), seq_len=17)
    assert (short, long) == (1.1, 1.3)
    torch.testing.assert_close(short_freq, long_freq)  # HF's PhiMoE: short factors always


@pytest.mark.parametrize(
    ("extra", "match"),
    [({"long_mscale": None}, "go together"), ({"short_mscale": 0.0}, "short_mscale")],
)
def test_short_long_mscale_bad_values(extra: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        frequencies_from_config(_phimoe(**extra))


def test_rope_from_config_refuses_length_dependent_mscale() -> None:
    with pytest.raises(ValueError, match=r"short_mscale.*patch_rotary"):
        rope_from_config(_phimoe())


def _nested(**types: Any) -> dict[str, Any]:
    return {"head_dim": 16, "max_position_embeddings": 64, "rope_parameters": types}


def test_per_layer_type_frequencies_match_hf() -> None:
    config = transformers.Gemma3TextConfig(
        **SMALL, head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"]
    )
    module = _rotary_class("gemma3", "Gemma3RotaryEmbedding")(config)
    for layer_type in ("full_attention", "sliding_attention"):
        got, factor = frequencies_from_config(config, layer_type=layer_type)
        expected = getattr(module, f"{layer_type}_inv_freq")
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
        assert factor == getattr(module, f"{layer_type}_attention_scaling")
        assert rope_from_config(config, layer_type=layer_type).rotary_dim == 16


def test_per_layer_type_errors_name_the_layer_types() -> None:
    nested = _nested(full_attention={"rope_theta": 1e6}, sliding_attention={"rope_theta": 1e4})
    with pytest.raises(ValueError, match=r"layer_type must be one of .*'full_attention'"):
        frequencies_from_config(nested)
    with pytest.raises(ValueError, match="got 'chunked'"):
        frequencies_from_config(nested, layer_type="chunked")
    with pytest.raises(ValueError, match="flat"):
        frequencies_from_config({"head_dim": 16}, layer_type="full_attention")
    mixed = _nested(full_attention={"rope_theta": 1e6}, rope_theta=1e4)
    with pytest.raises(
        ValueError, match=r"mixes per-layer-type dicts and flat keys \['rope_theta'\]"
    ):
        frequencies_from_config(mixed, layer_type="full_attention")
    no_rope = _nested(full_attention={"rope_theta": 1e6}, sliding_attention=None)
    with pytest.raises(ValueError, match=r"\['full_attention'\]"):  # None: that type has no RoPE
        frequencies_from_config(no_rope, layer_type="sliding_attention")


def _mrope(**extra: Any) -> dict[str, Any]:
    return {"head_dim": 16, "rope_parameters": {"rope_theta": 1e6, "mrope_section": [4, 2, 2],
            **extra}}  # fmt: skip


def test_mrope_from_config_reads_sections() -> None:
    mrope = mrope_from_config(_mrope())
    t_only = torch.tensor([1, 0, 0]).view(3, 1, 1)
    assert (mrope.angles(t_only) != 0).flatten().tolist() == [True] * 4 + [False] * 4
    interleaved = mrope_from_config(_mrope(mrope_interleaved=True))
    assert (interleaved.angles(t_only) != 0).flatten().tolist()[:2] == [True, False]
    inv_freq, _ = frequencies_from_config(_mrope())  # 1D frequencies unchanged
    assert inv_freq.numel() == 8


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"mrope_section": [4, 2, 1]}, "summing to rotary_dim / 2 = 8"),
        ({"mrope_section": [8, 0, 0]}, "3 positive"),
        ({"mrope_interleaved": "yes"}, "mrope_interleaved"),
    ],
)
def test_mrope_bad_values(extra: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mrope_from_config(_mrope(**extra))


def test_rope_from_config_points_mrope_to_mrope_from_config() -> None:
    with pytest.raises(ValueError, match="mrope_from_config"):
        rope_from_config(_mrope())
    with pytest.raises(ValueError, match="no rope_parameters\\['mrope_section'\\]"):
        mrope_from_config({"head_dim": 16})

"""HF configs' per-layer attention (Llama-4 iRoPE, Qwen-1 log-n, Ministral 3 β) in posenc,
against ``transformers``' own config defaults and ``Llama4TextAttention`` in float64."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache, QueryScale
from posenc.integrations.hf import (
    attention_scale_from_config,
    layer_schedule_from_config,
    model_options_from_config,
)
from posenc.models import DecoderLM, LayerAttention, ModelConfig
from posenc.rotary import RotaryEmbedding

LLAMA4 = {"model_type": "llama4_text", "num_hidden_layers": 8}


def test_llama4_dict_defaults_are_hfs() -> None:
    layers = layer_schedule_from_config(LLAMA4)
    rope = LayerAttention(chunk_size=8192)
    nope = LayerAttention(encoded=False, query_scale=QueryScale.llama4(8192, 0.1))
    assert list(layers) == [rope] * 3 + [nope] + [rope] * 3 + [nope]
    options = model_options_from_config(LLAMA4)
    assert options == {
        "nope_layers": (3, 7),
        "chunk_size": 8192,
        "window": None,
        "query_scale": nope.query_scale,
    }
    # a multimodal dict whose text_config omits its model_type is Llama-4's text part too
    outer = {"model_type": "llama4", "text_config": {"num_hidden_layers": 8}}
    assert layer_schedule_from_config(outer) == layers
    model = DecoderLM(ModelConfig(vocab_size=16, dim=32, depth=8, num_heads=4, **options))
    for block, want in zip(model.trunk.blocks, layers, strict=True):
        attn: Any = block.attn
        assert (attn.pos is not None, attn.chunk_size, attn.query_scale) == (
            want.encoded,
            want.chunk_size,
            want.query_scale,
        )


def test_llama4_config_object_equals_hf_layers() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama4 import modeling_llama4

    for kwargs in (
        {},
        {"no_rope_layers": [1, 0, 1, 1, 0, 1], "attention_chunk_size": 32},
        {"attn_temperature_tuning": False, "floor_scale": 16, "attn_scale": 0.25},
        {"no_rope_layer_interval": 2},
    ):
        config = transformers.Llama4TextConfig(
            num_hidden_layers=6, hidden_size=32, num_attention_heads=4, head_dim=8, **kwargs
        )
        layers = layer_schedule_from_config(config)
        for index, layer in enumerate(layers):
            attention = modeling_llama4.Llama4TextAttention(config, index)
            assert layer.encoded == bool(attention.use_rope)
            chunked = config.layer_types[index] == "chunked_attention"
            assert layer.chunk_size == (config.attention_chunk_size if chunked else None)
            tuned = attention.attn_temperature_tuning and not attention.use_rope
            want = QueryScale.llama4(attention.floor_scale, attention.attn_scale) if tuned else None
            assert layer.query_scale == want
        # the multimodal config's text part is read
        outer = transformers.Llama4Config(text_config=config.to_dict())
        assert layer_schedule_from_config(outer) == layers


def test_smollm3_nope_layers_without_llama4s_chunks_or_temperature() -> None:
    """SmolLM3 shares ``no_rope_layers`` (1 = RoPE) with Llama-4 but has no chunks and no
    temperature: its config object and its ``config.json`` dict (with or without
    ``layer_types``) read as HF's ``SmolLM3Attention`` runs."""
    nope = LayerAttention(encoded=False)
    want = (LayerAttention(),) * 3 + (nope,) + (LayerAttention(),) * 3 + (nope,)
    hub = {"model_type": "smollm3", "num_hidden_layers": 8, "no_rope_layers": [1, 1, 1, 0] * 2}
    assert layer_schedule_from_config(hub) == want
    assert layer_schedule_from_config({**hub, "no_rope_layers": None}) == want  # interval 4
    transformers = pytest.importorskip("transformers")
    from transformers.models.smollm3 import modeling_smollm3

    config = transformers.SmolLM3Config(
        num_hidden_layers=8, hidden_size=32, num_attention_heads=4, intermediate_size=64
    )
    for read in (config, config.to_dict()):
        layers = layer_schedule_from_config(read)
        assert layers == want
        for index, layer in enumerate(layers):
            attention = modeling_smollm3.SmolLM3Attention(config, index)
            assert layer.encoded == bool(attention.use_rope)


def test_qwen_logn_and_ministral_beta() -> None:
    qwen = {"use_logn_attn": True, "seq_length": 2048, "num_hidden_layers": 3}
    assert (
        layer_schedule_from_config(qwen) == (LayerAttention(query_scale=QueryScale.logn(2048)),) * 3
    )
    assert layer_schedule_from_config({**qwen, "use_logn_attn": False}) == (LayerAttention(),) * 3
    ministral = {
        "num_hidden_layers": 2,
        "head_dim": 16,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 16.0,
            "original_max_position_embeddings": 16384,
            "llama_4_scaling_beta": 0.1,
        },
    }
    gemma3 = {  # nested per-layer-type rope_parameters and no temperature: plain layers
        "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
    }
    assert layer_schedule_from_config(gemma3) == (LayerAttention(),) * 2
    scale = model_options_from_config(ministral)["query_scale"]
    positions = torch.tensor([0, 16383, 16384, 50000, 400000])
    want = attention_scale_from_config(ministral, positions)
    assert_close(scale.factor(positions).float(), want, atol=0, rtol=1e-6)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({**LLAMA4, "no_rope_layers": [1, 0]}, "no_rope_layers"),
        ({**LLAMA4, "no_rope_layers": [2] * 8}, "no_rope_layers"),
        ({**LLAMA4, "layer_types": ["sliding_attention"] * 8}, "layer_types"),
        ({**LLAMA4, "layer_types": ["full_attention"]}, "layer_types"),
        ({**LLAMA4, "attention_chunk_size": 0}, "attention_chunk_size"),
        ({**LLAMA4, "attention_chunk_size": None}, "attention_chunk_size"),
        ({**LLAMA4, "floor_scale": -1}, "floor_scale"),
        ({**LLAMA4, "attn_scale": float("nan")}, "attn_scale"),
        ({**LLAMA4, "attn_scale": -0.1}, "attn_scale"),
        (
            {
                "num_hidden_layers": 2,
                "rope_parameters": {
                    "rope_type": "yarn",
                    "factor": 16.0,
                    "original_max_position_embeddings": 64,
                    "llama_4_scaling_beta": -0.1,
                },
            },
            "llama_4_scaling_beta",
        ),
        ({**LLAMA4, "use_logn_attn": True, "seq_length": 64}, "more than one"),
        ({"use_logn_attn": True, "num_hidden_layers": 2}, "seq_length"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ("llama4", "config"),
        # a global RoPE layer beside chunked ones: no ModelConfig says it
        (
            {
                **LLAMA4,
                "layer_types": ["full_attention"] + ["chunked_attention"] * 7,
            },
            "ModelConfig",
        ),
    ],
)
def test_bad_configs_raise(config: Any, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        model_options_from_config(config)


def _hf_llama4(**more: Any) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.Llama4TextConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        intermediate_size_mlp=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_chunk_size=4,
        floor_scale=3,
        attn_scale=0.5,
        use_qk_norm=False,  # Scout's L2 norm of q and k: no part of positions
        attn_implementation="eager",
        **more,
    )


@pytest.mark.parametrize("layer_index", [0, 3])  # a chunked RoPE layer, a global NoPE one
@pytest.mark.parametrize("padded", [False, True])
def test_attention_equals_hf_llama4_text_attention(layer_index: int, padded: bool) -> None:
    """posenc's Attention built from the schedule, with HF's weights, equals HF's
    ``Llama4TextAttention`` with HF's masks (float64; HF rotates in float32)."""
    pytest.importorskip("transformers")
    from transformers.masking_utils import create_causal_mask, create_chunked_causal_mask
    from transformers.models.llama4 import modeling_llama4

    config = _hf_llama4()
    plan = layer_schedule_from_config(config)[layer_index]
    torch.manual_seed(layer_index)
    hf = modeling_llama4.Llama4TextAttention(config, layer_index).double()
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=0.3)
    seq = 13
    x = torch.randn(2, seq, 32, dtype=torch.float64)
    positions = torch.arange(seq)[None].expand(2, -1)
    mask = torch.ones(2, seq, dtype=torch.long)
    if padded:
        mask[1, :3] = 0
    make = create_chunked_causal_mask if plan.chunk_size else create_causal_mask
    kwargs = {"inputs_embeds": x, "attention_mask": mask, "past_key_values": None}
    hf_mask = make(config=config, position_ids=positions, **kwargs)
    freqs = modeling_llama4.Llama4TextRotaryEmbedding(config)(x, positions)
    with torch.no_grad():
        want, _ = hf(x, freqs, hf_mask)

    pos = RotaryEmbedding(8, base=config.rope_parameters["rope_theta"], layout="interleaved")
    ours = Attention(
        32,
        4,
        num_kv_heads=2,
        head_dim=8,
        pos=pos if plan.encoded else None,
        chunk_size=plan.chunk_size,
        query_scale=plan.query_scale,
        dtype=torch.float64,
    )
    for name, hf_name in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o")):
        getattr(ours, f"{name}_proj").weight.data.copy_(getattr(hf, f"{hf_name}_proj").weight)
    with torch.no_grad():
        got = ours(x, key_padding_mask=mask.bool() if padded else None)
    real = mask.bool()  # HF's fully masked rows (padding queries) attend uniformly
    # HF rotates in float32 (RoPE layers) and computes the temperature in float32 (NoPE)
    tolerance = 3e-6 if plan.encoded else 1e-7
    assert_close(got[real], want[real], atol=tolerance, rtol=0)
    assert plan.query_scale is None or not plan.encoded


@pytest.mark.parametrize("layer_index", [0, 3])
def test_decoding_equals_hf_decoding_with_its_cache(layer_index: int) -> None:
    """Prefill 5 tokens then decode 6, HF with its ``DynamicCache`` (a sliding-window layer
    for the chunked one; the temperature read from ``past_seen_tokens``) against posenc with
    a ``KVCache``, in float64."""
    pytest.importorskip("transformers")
    from transformers import DynamicCache
    from transformers.masking_utils import create_causal_mask, create_chunked_causal_mask
    from transformers.models.llama4 import modeling_llama4

    config = _hf_llama4()
    plan = layer_schedule_from_config(config)[layer_index]
    torch.manual_seed(10 + layer_index)
    hf = modeling_llama4.Llama4TextAttention(config, layer_index).double()
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=0.3)
    pos = RotaryEmbedding(8, base=config.rope_parameters["rope_theta"], layout="interleaved")
    ours = Attention(
        32,
        4,
        num_kv_heads=2,
        head_dim=8,
        pos=pos if plan.encoded else None,
        chunk_size=plan.chunk_size,
        query_scale=plan.query_scale,
        dtype=torch.float64,
    )
    for name, hf_name in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o")):
        getattr(ours, f"{name}_proj").weight.data.copy_(getattr(hf, f"{hf_name}_proj").weight)
    x = torch.randn(1, 11, 32, dtype=torch.float64)
    rotary = modeling_llama4.Llama4TextRotaryEmbedding(config)
    steps = [(0, 5)] + [(t, t + 1) for t in range(5, 11)]
    hf_cache, cache, want, got = DynamicCache(config=config), KVCache(), [], []
    for start, stop in steps:
        part, positions = x[:, start:stop], torch.arange(start, stop)[None]
        kwargs = {"inputs_embeds": part, "attention_mask": None, "past_key_values": hf_cache}
        if plan.chunk_size:
            mask = create_chunked_causal_mask(
                config=config, position_ids=positions, layer_idx=layer_index, **kwargs
            )
        else:
            mask = create_causal_mask(config=config, position_ids=positions, **kwargs)
        with torch.no_grad():
            want.append(hf(part, rotary(part, positions), mask, past_key_values=hf_cache)[0])
            got.append(ours(part, cache=cache))
    tolerance = 3e-6 if plan.encoded else 1e-7  # HF: float32 rotation, float32 temperature
    assert_close(torch.cat(got, 1), torch.cat(want, 1), atol=tolerance, rtol=0)

"""HF configs' sliding windows read into posenc's schedule: Cohere 2's RNoPE-SWA (RoPE and a
window on the sliding layers, global NoPE elsewhere) and SmolLM3's ``use_sliding_window``,
against ``transformers``' config defaults, its attention modules, and ``Cohere2Attention``'s
outputs with its masks and its cache (float64)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache
from posenc.integrations.hf import layer_schedule_from_config, model_options_from_config
from posenc.models import DecoderLM, LayerAttention, ModelConfig, rnope_swa
from posenc.rotary import RotaryEmbedding

NOPE = LayerAttention(encoded=False)


def test_cohere2_dict_defaults_are_hfs() -> None:
    windowed = LayerAttention(window=4096)
    layers = layer_schedule_from_config({"model_type": "cohere2", "num_hidden_layers": 8})
    assert layers == (windowed,) * 3 + (NOPE,) + (windowed,) * 3 + (NOPE,)
    hub = {"model_type": "cohere2", "num_hidden_layers": 6, "sliding_window_pattern": 3}
    assert (
        layer_schedule_from_config({**hub, "sliding_window": 64})
        == ((LayerAttention(window=64),) * 2 + (NOPE,)) * 2
    )
    options = model_options_from_config({"model_type": "cohere2", "num_hidden_layers": 8})
    assert ModelConfig(depth=8, **options) == ModelConfig(depth=8, **rnope_swa(8, window=4096))


def test_cohere2_config_object_equals_hf_attention() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.cohere2 import modeling_cohere2

    for kwargs in (
        {},
        {"sliding_window": 16, "sliding_window_pattern": 2},
        {"layer_types": ["full_attention", "sliding_attention"] * 3},
    ):
        config = transformers.Cohere2Config(
            num_hidden_layers=6, hidden_size=32, num_attention_heads=4, **kwargs
        )
        layers = layer_schedule_from_config(config)
        assert layer_schedule_from_config(config.to_dict()) == layers
        for index, layer in enumerate(layers):
            attention = modeling_cohere2.Cohere2Attention(config, index)
            # HF rotates exactly the layers with a window
            assert layer.encoded == (attention.sliding_window is not None)
            assert layer.window == attention.sliding_window
            assert (layer.chunk_size, layer.query_scale) == (None, None)


def test_smollm3_sliding_window_only_with_use_sliding_window() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.smollm3 import modeling_smollm3

    for use in (False, True):
        config = transformers.SmolLM3Config(
            num_hidden_layers=8,
            hidden_size=32,
            num_attention_heads=4,
            intermediate_size=64,
            use_sliding_window=use,
            sliding_window=16,
        )
        layers = layer_schedule_from_config(config)
        assert layer_schedule_from_config(config.to_dict()) == layers
        for index, layer in enumerate(layers):
            attention = modeling_smollm3.SmolLM3Attention(config, index)
            assert layer.encoded == bool(attention.use_rope)
            assert layer.window == attention.sliding_window
    # HF's default puts the windows on the NoPE layers: no ModelConfig says that
    with pytest.raises(ValueError, match="ModelConfig"):
        model_options_from_config(config)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"model_type": "cohere2", "num_hidden_layers": 4, "sliding_window": None}, "window"),
        ({"model_type": "cohere2", "num_hidden_layers": 4, "sliding_window": 0}, "window"),
        (
            {"model_type": "cohere2", "num_hidden_layers": 2, "layer_types": ["chunked_attention"]},
            "layer_types",
        ),
        (
            {
                "model_type": "cohere2",
                "num_hidden_layers": 2,
                "layer_types": ["chunked_attention", "full_attention"],
            },
            "chunked_attention",
        ),
    ],
)
def test_bad_cohere2_configs_raise(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        layer_schedule_from_config(config)


def _cohere2(**more: Any) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.Cohere2Config(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=4,
        attn_implementation="eager",
        **more,
    )


def _pair(config: Any, layer_index: int, seed: int) -> tuple[Any, Attention]:
    """HF's ``Cohere2Attention`` with random weights and posenc's Attention built from the
    schedule with the same weights."""
    from transformers.models.cohere2 import modeling_cohere2

    plan = layer_schedule_from_config(config)[layer_index]
    torch.manual_seed(seed)
    hf = modeling_cohere2.Cohere2Attention(config, layer_index).double()
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=0.3)
    rope = RotaryEmbedding(8, base=config.rope_parameters["rope_theta"], layout="interleaved")
    ours = Attention(
        32,
        4,
        num_kv_heads=2,
        head_dim=8,
        pos=rope if plan.encoded else None,
        window=plan.window,
        dtype=torch.float64,
    )
    for name, hf_name in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o")):
        getattr(ours, f"{name}_proj").weight.data.copy_(getattr(hf, f"{hf_name}_proj").weight)
    return hf, ours


@pytest.mark.parametrize("layer_index", [0, 3])  # a windowed RoPE layer, a global NoPE one
@pytest.mark.parametrize("padded", [False, True])
def test_attention_equals_hf_cohere2_attention(layer_index: int, padded: bool) -> None:
    pytest.importorskip("transformers")
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
    from transformers.models.cohere2 import modeling_cohere2

    config = _cohere2()
    hf, ours = _pair(config, layer_index, seed=layer_index)
    seq = 11
    x = torch.randn(2, seq, 32, dtype=torch.float64)
    positions = torch.arange(seq)[None].expand(2, -1)
    mask = torch.ones(2, seq, dtype=torch.long)
    if padded:
        mask[1, :3] = 0
    make = create_sliding_window_causal_mask if ours.window else create_causal_mask
    kwargs: dict[str, Any] = {"inputs_embeds": x, "attention_mask": mask, "past_key_values": None}
    hf_mask = make(config=config, position_ids=positions, **kwargs)
    freqs = modeling_cohere2.Cohere2RotaryEmbedding(config)(x, positions)
    with torch.no_grad():
        want, _ = hf(x, freqs, hf_mask)
        got = ours(x, key_padding_mask=mask.bool() if padded else None)
    real = mask.bool()  # HF's fully masked rows (padding queries) attend uniformly
    # HF's eager attention takes its softmax in float32 (and rotates in float32)
    assert_close(got[real], want[real], atol=3e-6, rtol=0)


@pytest.mark.parametrize("layer_index", [0, 3])
def test_decoding_equals_hf_decoding_with_its_cache(layer_index: int) -> None:
    """Prefill 5 tokens then decode 6: HF's ``DynamicCache`` (a sliding layer keeps its
    window) against a ``KVCache`` that keeps every key under the window mask."""
    pytest.importorskip("transformers")
    from transformers import DynamicCache
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
    from transformers.models.cohere2 import modeling_cohere2

    config = _cohere2()
    hf, ours = _pair(config, layer_index, seed=10 + layer_index)
    x = torch.randn(1, 11, 32, dtype=torch.float64)
    rotary = modeling_cohere2.Cohere2RotaryEmbedding(config)
    make = create_sliding_window_causal_mask if ours.window else create_causal_mask
    hf_cache, cache, want, got = DynamicCache(config=config), KVCache(), [], []
    for start, stop in [(0, 5)] + [(t, t + 1) for t in range(5, 11)]:
        part, positions = x[:, start:stop], torch.arange(start, stop)[None]
        kwargs: dict[str, Any] = {
            "inputs_embeds": part,
            "attention_mask": None,
            "past_key_values": hf_cache,
        }
        mask = make(config=config, position_ids=positions, **kwargs)
        with torch.no_grad():
            want.append(hf(part, rotary(part, positions), mask, past_key_values=hf_cache)[0])
            got.append(ours(part, cache=cache))
    # HF's eager attention takes its softmax in float32 (and rotates in float32)
    assert_close(torch.cat(got, 1), torch.cat(want, 1), atol=3e-6, rtol=0)


def test_a_cohere2_schedule_runs_in_the_model() -> None:
    options = model_options_from_config(_cohere2())
    model = DecoderLM(ModelConfig(vocab_size=50, dim=32, depth=4, num_heads=4, **options))
    windows = [block.attn.window for block in model.trunk.blocks]  # type: ignore[union-attr]
    assert windows == [4, 4, 4, None]
    assert model(torch.randint(0, 50, (1, 9))).shape == (1, 9, 50)

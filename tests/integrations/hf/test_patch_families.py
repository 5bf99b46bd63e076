"""patch_rotary on the HF conventions beyond Llama's: rotaries per layer, per stack and
per theta under any name; per-layer-type rope_parameters; M-RoPE with (3, batch, seq) positions,
consecutive and interleaved sections; interleaved, half-width and complex tables; PhiMoE's
short/long mscale. Each family is a tiny random model (tools/hf_sweep/tiny.py): the logits
after patching must equal HF's (≤ 5e-6), every text rotary must be an adapter, and each adapter
must be called. Refusals name what they refuse."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc.integrations.hf import HFRotaryAdapter, patch_rotary, rotary_modules, unpatch_rotary
from posenc.integrations.hf.patch import is_text_rotary
from posenc.rotary.rope import RotaryEmbedding

transformers = pytest.importorskip("transformers")
from tools.hf_sweep.overrides import mrope_positions  # noqa: E402
from tools.hf_sweep.sweep import TOLERANCE, output_and_rotary_calls  # noqa: E402
from tools.hf_sweep.tiny import build_tiny  # noqa: E402


def _tiny(family: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    built = build_tiny(family)
    assert not isinstance(built, str), built
    model, inputs, _ = built
    return model, inputs


def _logits(model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits.float()


def _patched_equal(family: str) -> tuple[torch.nn.Module, list[HFRotaryAdapter]]:
    """Patch a tiny ``family`` model; assert every text rotary became an adapter, the adapters
    that ran are the modules HF ran (no silent no-op), and the logits equal HF's."""
    model, inputs = _tiny(family)
    text = [name for name, m in rotary_modules(model) if is_text_rotary(m)]
    expected, hf_called = output_and_rotary_calls(model, inputs)
    patch_rotary(model, keep_non_text=True)
    adapters = {n: m for n, m in model.named_modules() if isinstance(m, HFRotaryAdapter)}
    assert sorted(adapters) == sorted(text)  # every text rotary, nothing else
    got, called = output_and_rotary_calls(model, inputs)
    assert called == hf_called and called
    assert (got - expected).abs().max().item() <= TOLERANCE
    return model, list(adapters.values())


@pytest.mark.parametrize(
    ("family", "count"),
    [
        ("granite_swa", 2),  # unused rotary_emb + per-theta `rotary_embs` (a silent no-op before)
        ("moshi", 2),  # one rotary per attention layer
        ("t5gemma", 2),  # encoder and decoder stacks
        ("evolla", 2),  # a protein encoder's `rotary_embeddings` and the decoder's
    ],
)
def test_every_rotary_module_is_patched(family: str, count: int) -> None:
    _, adapters = _patched_equal(family)
    assert len(adapters) == count


@pytest.mark.parametrize("family", ["gemma3", "olmo3", "modernbert_decoder", "laguna"])
def test_per_layer_type_rope_parameters(family: str) -> None:
    _, adapters = _patched_equal(family)
    assert all(len(a.layer_ropes) >= 1 for a in adapters)


@pytest.mark.parametrize(
    ("family", "table_format"),
    [
        ("cohere", "interleaved"),
        ("gpt_oss", "half_width"),
        ("llama4", "complex"),
        ("llama", "half"),
    ],
)
def test_table_formats(family: str, table_format: str) -> None:
    _, adapters = _patched_equal(family)
    assert {a.table_format for a in adapters} == {table_format}


@pytest.mark.parametrize(
    ("family", "interleaved"),
    [("qwen2_vl", False), ("qwen2_5_vl", False), ("glm4v", False), ("qwen3_vl", True)],
)
def test_mrope_with_grid_positions(family: str, interleaved: bool) -> None:
    _, inputs = _tiny(family)
    assert inputs["position_ids"].shape[0] == 3  # t, h, w differ: sections matter
    _, adapters = _patched_equal(family)
    (adapter,) = adapters
    assert adapter.mrope is not None
    t_only = torch.tensor([1, 0, 0]).view(3, 1, 1)
    reads_t = (adapter.mrope.angles(t_only) != 0).flatten().tolist()
    assert reads_t[0] and reads_t[1] != interleaved  # Qwen3-VL's code interleaves t, h, w


def test_mrope_pair_axis_map_read_off_the_module() -> None:
    """ERNIE-4.5-VL alternates h and w pair by pair, then t: neither consecutive nor
    interleaved sections of [3, 3, 2]; the map read off HF's module gives its logits on grid
    positions."""
    _, inputs = _tiny("ernie4_5_vl_moe")
    assert inputs["position_ids"].shape[0] == 3
    _, adapters = _patched_equal("ernie4_5_vl_moe")
    (adapter,) = adapters
    assert adapter.mrope is not None
    assert adapter.mrope.frequencies.argmax(dim=-1).tolist() == [1, 2, 1, 2, 1, 2, 0, 0]


def test_mrope_per_layer_type() -> None:
    """Cohere Compass: per-layer-type rope_parameters, each with an M-RoPE section."""
    _, adapters = _patched_equal("cohere_compass")
    (adapter,) = adapters
    assert list(adapter.layer_mropes) == ["full_attention"]


def test_mrope_axes_undeclared_in_the_config() -> None:
    """NeoMME's rotary reads (row, column) pair by pair with no mrope_section in its config
    (hf.conventions.UNDECLARED_MROPE_AXES): two axes, per layer type, on differing rows."""
    _, inputs = _tiny("neomme")
    assert inputs["position_ids"].shape[0] == 2
    _, adapters = _patched_equal("neomme")
    (adapter,) = adapters
    assert sorted(adapter.layer_mropes) == ["full_attention", "sliding_attention"]
    for mrope in adapter.layer_mropes.values():
        axes = mrope.frequencies.argmax(dim=-1).tolist()
        assert axes == [i % 2 for i in range(len(axes))]


@pytest.mark.parametrize(
    ("sections", "match"),
    [
        ([4, 2, 2], "two halves of its frequency pairs by different axes"),
        ([2, 2, 2, 2], r"mrope_section.*must be 3"),  # the 4-axis (XD-RoPE) configs of the Hub
    ],
)
def test_refuses_pairs_whose_halves_read_different_axes(sections: list[int], match: str) -> None:
    """HunYuan-VL's module gives the two halves of a pair different axes: not a rotation on
    image positions; refused by name (its 4-axis configs already by the config reader),
    nothing replaced."""
    model, _ = _tiny("hunyuan_vl")
    config = model.config
    config.text_config.rope_parameters["mrope_section"] = sections
    model = type(model)(config)
    with pytest.raises(ValueError, match=match):
        patch_rotary(model, keep_non_text=True)
    assert not any(isinstance(m, HFRotaryAdapter) for m in model.modules())


def test_mrope_tables_differ_from_plain_rope() -> None:
    """The grid positions really exercise the sections: plain RoPE on the t row differs."""
    model, _ = _tiny("qwen2_vl")
    patch_rotary(model, keep_non_text=True)
    adapter = model.model.language_model.rotary_emb
    _, sin = adapter(torch.zeros(1), mrope_positions())
    _, plain = adapter.rope.cos_sin(mrope_positions()[0], torch.float32)
    assert (sin - plain).abs().max() > 1e-2


def test_phimoe_short_long_mscale_across_the_original_length() -> None:
    """LongRoPE with short/long mscale: HF recomputes the short-factor frequencies every call
    and switches the factor at L0; the patched model follows below and above it."""
    config = transformers.PhimoeConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=128,
        max_position_embeddings=64,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "short_factor": [1.0 + i / 10 for i in range(8)],
            "long_factor": [2.0 + i for i in range(8)],
            "short_mscale": 1.1,
            "long_mscale": 1.3,
            "original_max_position_embeddings": 16,
        },
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.PhimoeForCausalLM(config).eval()
    inputs = [torch.randint(1, 128, (1, n)) for n in (12, 40)]
    expected = [_logits(model, {"input_ids": ids}) for ids in inputs]
    patch_rotary(model)
    for ids, ref in zip(inputs, expected, strict=True):
        assert (_logits(model, {"input_ids": ids}) - ref).abs().max().item() <= TOLERANCE


def test_refuses_non_text_rotaries_unless_kept() -> None:
    model, _ = _tiny("qwen2_vl")
    with pytest.raises(ValueError, match=r"model\.visual\.rotary_pos_emb.*keep_non_text"):
        patch_rotary(model)
    assert not any(isinstance(m, HFRotaryAdapter) for m in model.modules())  # nothing replaced
    patch_rotary(model, keep_non_text=True)
    assert type(model.model.visual.rotary_pos_emb).__name__ == "Qwen2VLVisionRotaryEmbedding"


def test_refuses_an_explicit_rope_for_mrope() -> None:
    model, _ = _tiny("qwen2_vl")
    with pytest.raises(ValueError, match="M-RoPE"):
        patch_rotary(model, RotaryEmbedding(16), keep_non_text=True)


def test_unknown_layer_type_names_the_known_ones() -> None:
    model, _ = _tiny("gemma3")
    patch_rotary(model, keep_non_text=True)
    (adapter,) = [m for m in model.modules() if isinstance(m, HFRotaryAdapter)]
    with pytest.raises(ValueError, match=r"layer_type 'chunked'.*full_attention"):
        adapter(torch.zeros(1), torch.arange(4)[None], "chunked")


def test_unpatch_restores_every_module() -> None:
    model, inputs = _tiny("granite_swa")
    expected = _logits(model, inputs)
    originals = dict(rotary_modules(model))
    patch_rotary(model)
    unpatch_rotary(model)
    assert dict(rotary_modules(model)) == originals
    assert torch.equal(_logits(model, inputs), expected)

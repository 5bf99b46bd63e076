"""patch_rotary: tiny random Llama, Mistral and Qwen2 give the same logits patched and unpatched
(≤ 1e-5 in float32) for every rope type, including dynamic NTK and LongRoPE past the original
length, across calls (grow and reset) and with a KV cache; the patch really runs posenc."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from posenc.integrations.hf import (
    HFRotaryAdapter,
    patch_rotary,
    rope_from_config,
    unpatch_rotary,
)
from posenc.rotary.rope import RotaryEmbedding

transformers = pytest.importorskip("transformers")

MODELS = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"]
HEAD_DIM = 16  # hidden 64 / 4 heads
MAX_POS = 32

_gen = torch.Generator().manual_seed(2)


def _factors(low: float, high: float) -> list[float]:
    values = low + (high - low) * torch.rand(HEAD_DIM // 2, generator=_gen, dtype=torch.float64)
    return values.tolist()


# rope_scaling of each case and the input lengths run one after the other on one model.
SCALINGS: dict[str, tuple[dict[str, Any] | None, list[int]]] = {
    "default": (None, [20]),
    "linear": ({"rope_type": "linear", "factor": 2.0}, [48]),
    "dynamic_grow_reset": ({"rope_type": "dynamic", "factor": 2.0}, [48, 20, 40, 60]),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}, [48]),
    "yarn_no_truncate_mscale": (
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
            "truncate": False,
            "mscale": 0.707,
            "mscale_all_dim": 1.0,
            "beta_fast": 8.0,
        },
        [40],
    ),
    "longrope_below_above": (
        {
            "rope_type": "longrope",
            "short_factor": _factors(1.0, 1.5),
            "long_factor": _factors(1.0, 6.0),
            "original_max_position_embeddings": 16,
        },
        [12, 48, 16, 17],
    ),
    "llama3": (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 100.0,
        },
        [48],
    ),
}
if "proportional" in transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS:
    SCALINGS["proportional"] = (
        {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0},
        [48],
    )

MAX_DIFF: dict[str, float] = {}


def tiny_model(model_name: str, rope_scaling: dict[str, Any] | None) -> torch.nn.Module:
    torch.manual_seed(0)
    cls = getattr(transformers, model_name)
    config_cls = transformers.AutoConfig.for_model(cls.config_class.model_type).__class__
    rope_parameters = {
        "rope_type": "default",
        "rope_theta": 10000.0,
        **copy.deepcopy(rope_scaling or {}),
    }
    config = config_cls(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=MAX_POS,
        rope_parameters=rope_parameters,
        attn_implementation="eager",
        initializer_range=0.05,
    )
    return cls(config).eval()


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _record(key: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    diff = (got - expected).abs().max().item()
    MAX_DIFF[key] = max(MAX_DIFF.get(key, 0.0), diff)
    print(f"max |logit diff| {key}: {diff:.2e}")


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("model_name", MODELS)
def test_patched_logits_equal_unpatched(model_name: str, name: str) -> None:
    rope_scaling, lengths = SCALINGS[name]
    model = tiny_model(model_name, rope_scaling)
    inputs = [torch.randint(0, 100, (2, n)) for n in lengths]
    expected = [_logits(model, ids) for ids in inputs]  # HF's own runtime sequence
    patch_rotary(model)
    assert isinstance(model.model.rotary_emb, HFRotaryAdapter)
    for ids, ref in zip(inputs, expected, strict=True):
        got = _logits(model, ids)
        _record(f"{model_name}/{name}", got, ref)
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["default", "dynamic_grow_reset", "yarn", "longrope_below_above"])
def test_kv_cache_decode_matches_unpatched(name: str) -> None:
    """Prefill below the original length, then decode step by step across it."""
    rope_scaling, _ = SCALINGS[name]
    runs = []
    for patched in (False, True):
        model = tiny_model("LlamaForCausalLM", rope_scaling)
        if patched:
            patch_rotary(model)
        ids = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            out = model(ids, use_cache=True)
            logits, cache = [out.logits], out.past_key_values
            for step in range(12, 44, 8):  # chunks crossing 16 (LongRoPE L0) and 32 (max pos)
                chunk = torch.arange(step, step + 8)[None] % 100
                out = model(chunk, past_key_values=cache, use_cache=True)
                logits.append(out.logits)
                cache = out.past_key_values
        runs.append(torch.cat(logits, dim=1))
    _record(f"kv-cache/{name}", runs[1], runs[0])
    torch.testing.assert_close(runs[1], runs[0], atol=1e-5, rtol=1e-5)


def test_generate_matches_unpatched() -> None:
    rope_scaling, _ = SCALINGS["dynamic_grow_reset"]
    prompt = torch.randint(0, 100, (1, 28))
    outputs = []
    for patched in (False, True):
        model = tiny_model("Qwen2ForCausalLM", rope_scaling)
        if patched:
            patch_rotary(model)
        out = model.generate(
            prompt,
            max_new_tokens=8,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
        outputs.append(out)
    assert torch.equal(outputs[1].sequences, outputs[0].sequences)
    torch.testing.assert_close(
        torch.stack(outputs[1].scores), torch.stack(outputs[0].scores), atol=1e-5, rtol=1e-5
    )


def test_patch_uses_posenc_and_unpatch_restores() -> None:
    model = tiny_model("LlamaForCausalLM", None)
    ids = torch.randint(0, 100, (2, 20))
    expected = _logits(model, ids)
    original = model.model.rotary_emb
    other = rope_from_config({"head_dim": HEAD_DIM, "rope_theta": 500.0})
    patch_rotary(model, other)
    assert model.model.rotary_emb.rope is other
    different = _logits(model, ids)
    assert not torch.allclose(different, expected, atol=1e-3, rtol=0)
    # re-patching replaces the rope but keeps HF's module for unpatch
    patch_rotary(model)
    torch.testing.assert_close(_logits(model, ids), expected, atol=1e-5, rtol=1e-5)
    assert not any(k.endswith("rotary_emb.inv_freq") for k in model.state_dict())
    unpatch_rotary(model)
    assert model.model.rotary_emb is original
    assert torch.equal(_logits(model, ids), expected)


def test_patch_replaces_a_shared_rotary_under_every_name() -> None:
    """One rotary module registered under several names (here also in every decoder layer,
    which named_modules lists first) is replaced under all of them by one adapter: the one
    the model calls runs posenc; unpatch puts the one HF module back under every name."""
    ids = torch.randint(0, 100, (2, 20))
    other = rope_from_config({"head_dim": HEAD_DIM, "rope_theta": 500.0})
    reference = patch_rotary(tiny_model("LlamaForCausalLM", None), other)
    model = tiny_model("LlamaForCausalLM", None)
    original = model.model.rotary_emb
    for layer in model.model.layers:
        layer.shared_rotary = original
    patch_rotary(model, other)
    adapter = model.model.rotary_emb
    assert isinstance(adapter, HFRotaryAdapter)
    assert all(layer.shared_rotary is adapter for layer in model.model.layers)
    torch.testing.assert_close(_logits(model, ids), _logits(reference, ids), atol=0, rtol=0)
    unpatch_rotary(model)
    assert model.model.rotary_emb is original
    assert all(layer.shared_rotary is original for layer in model.model.layers)


def test_patched_half_precision_close_to_unpatched() -> None:
    model = tiny_model("LlamaForCausalLM", SCALINGS["yarn"][0]).to(torch.bfloat16)
    ids = torch.randint(0, 100, (2, 24))
    expected = _logits(model, ids)
    patch_rotary(model)
    got = _logits(model, ids)
    assert got.dtype == torch.bfloat16
    # bf16 tables: HF rounds float32-phase cos/sin, posenc float64-phase ones (≤ 1 ulp apart)
    torch.testing.assert_close(got.float(), expected.float(), atol=0.05, rtol=0.05)


@pytest.mark.parametrize(
    ("rope", "match"),
    [
        (RotaryEmbedding(HEAD_DIM, layout="interleaved"), "layout"),
        (RotaryEmbedding(HEAD_DIM, rotary_dim=8), "rotary_dim"),
        (RotaryEmbedding(2 * HEAD_DIM), "head_dim"),
        (torch.nn.Identity(), "RotaryEmbedding"),
    ],
)
def test_patch_rejects_incompatible_ropes(rope: Any, match: str) -> None:
    model = tiny_model("LlamaForCausalLM", None)
    with pytest.raises(ValueError, match=match):
        patch_rotary(model, rope)
    assert not isinstance(model.model.rotary_emb, HFRotaryAdapter)


def test_patch_rejects_models_without_a_rotary_module() -> None:
    with pytest.raises(ValueError, match="no rotary module"):
        patch_rotary(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="not patched"):
        unpatch_rotary(tiny_model("LlamaForCausalLM", None))


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

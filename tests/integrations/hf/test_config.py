"""HF config interop: frequencies_from_config equals transformers' RoPE init for every rope type,
both config forms, config objects and dicts; strict validation; rope_from_config round trips."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest
import torch

from posenc.integrations.hf import frequencies_from_config, rope_from_config, to_rope_parameters
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import (
    DynamicNTK,
    Linear,
    Llama3,
    LongRoPE,
    NTKAware,
    Proportional,
    YaRN,
)

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

_gen = torch.Generator().manual_seed(1)


def _factors(n: int, low: float, high: float) -> list[float]:
    return (low + (high - low) * torch.rand(n, generator=_gen, dtype=torch.float64)).tolist()


# Each case: model_type, head_dim, max_position_embeddings, rope_theta, partial_rotary_factor,
# rope fields (None: plain), extra top-level keys, and the seq_lens to evaluate at.
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
CASES: dict[str, dict[str, Any]] = {
    "default": dict(head_dim=64, max_pos=2048, theta=10000.0, rope=None),
    "default_5e5_d128": dict(head_dim=128, max_pos=2048, theta=5e5, rope=None),
    "default_llama_ignores_partial": dict(head_dim=64, theta=1e4, partial=0.5, rope=None),
    "default_neox_partial": dict(model_type="gpt_neox", head_dim=64, partial=0.25, rope=None),
    "linear": dict(head_dim=64, theta=1e4, rope={"rope_type": "linear", "factor": 4.0}),
    "linear_partial": dict(head_dim=80, partial=0.4, rope={"rope_type": "linear", "factor": 2.5}),
    "linear_neox_partial": dict(
        model_type="gpt_neox", head_dim=64, partial=0.25, rope={"rope_type": "linear", "factor": 2}
    ),
    "dynamic": dict(
        head_dim=64,
        max_pos=2048,
        rope={"rope_type": "dynamic", "factor": 2.0},
        seq_lens=[1000, 5000],
    ),
    "dynamic_partial": dict(
        head_dim=96,
        partial=0.5,
        theta=5e5,
        rope={"rope_type": "dynamic", "factor": 8.0},
        seq_lens=[2049, 100_000],
    ),
    "yarn": dict(head_dim=128, max_pos=8192, rope=YARN),
    "yarn_no_truncate": dict(head_dim=128, max_pos=8192, rope={**YARN, "truncate": False}),
    "yarn_betas": dict(head_dim=64, rope={**YARN, "beta_fast": 16.0, "beta_slow": 2.0}),
    "yarn_mscale_both": dict(head_dim=64, rope={**YARN, "mscale": 1.0, "mscale_all_dim": 1.0}),
    "yarn_mscale_ratio": dict(head_dim=64, rope={**YARN, "mscale": 0.707, "mscale_all_dim": 1.0}),
    "yarn_mscale_only": dict(head_dim=64, rope={**YARN, "mscale": 1.0}),
    "yarn_mscale_zero": dict(head_dim=64, rope={**YARN, "mscale": 0.0, "mscale_all_dim": 1.0}),
    "yarn_attention_factor": dict(head_dim=64, rope={**YARN, "attention_factor": 0.8}),
    "yarn_factor_1": dict(head_dim=64, rope={**YARN, "factor": 1.0}),
    "yarn_partial": dict(head_dim=64, partial=0.5, theta=5e4, rope=YARN),
    "yarn_gpt_oss": dict(
        head_dim=64,
        theta=150000.0,
        max_pos=131072,
        rope={
            "rope_type": "yarn",
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
    ),
    "yarn_deepseek_v3": dict(
        head_dim=64,
        max_pos=163840,
        rope={
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "beta_fast": 32,
            "beta_slow": 1,
        },
    ),
    "yarn_top_level_l0_wins": dict(
        head_dim=64, max_pos=8192, rope=YARN, top={"original_max_position_embeddings": 1024}
    ),
    "longrope_phi3": dict(
        head_dim=96,
        max_pos=131072,
        theta=1e4,
        rope={
            "rope_type": "longrope",
            "short_factor": _factors(48, 1.0, 1.2),
            "long_factor": _factors(48, 1.0, 60.0),
        },
        top={"original_max_position_embeddings": 4096},
        seq_lens=[4096, 4097, 131072],
    ),
    "longrope_factor_attention": dict(
        head_dim=64,
        max_pos=8192,
        rope={
            "rope_type": "longrope",
            "short_factor": _factors(32, 1.0, 2.0),
            "long_factor": _factors(32, 1.0, 8.0),
            "factor": 4.0,
            "attention_factor": 1.1,
            "original_max_position_embeddings": 2048,
        },
        seq_lens=[2048, 2049],
    ),
    "longrope_partial": dict(
        head_dim=64,
        partial=0.5,
        max_pos=8192,
        rope={
            "rope_type": "longrope",
            "short_factor": _factors(16, 1.0, 2.0),
            "long_factor": _factors(16, 1.0, 8.0),
            "original_max_position_embeddings": 2048,
        },
        seq_lens=[10, 3000],
    ),
    "llama3_1": dict(
        head_dim=128,
        theta=5e5,
        max_pos=131072,
        rope={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
    "llama4_equal_low_high": dict(
        head_dim=128,
        theta=5e5,
        max_pos=10_485_760,
        rope={
            "rope_type": "llama3",
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
    ),
}
if "proportional" in ROPE_INIT_FUNCTIONS:
    CASES["proportional"] = dict(head_dim=64, partial=0.25, rope={"rope_type": "proportional"})
    CASES["proportional_factor"] = dict(
        head_dim=128, partial=0.5, theta=1e6, rope={"rope_type": "proportional", "factor": 2.0}
    )


def hf_config_dict(case: dict[str, Any], form: str) -> dict[str, Any]:
    """The config.json dict of a case, in the legacy or the rope_parameters form."""
    head_dim, model_type = case["head_dim"], case.get("model_type", "llama")
    out: dict[str, Any] = {
        "model_type": model_type,
        "hidden_size": 4 * head_dim,
        "num_attention_heads": 4,
        "max_position_embeddings": case.get("max_pos", 4096),
        **case.get("top", {}),
    }
    if model_type == "llama":
        out["head_dim"] = head_dim
    theta, partial = case.get("theta", 10000.0), case.get("partial")
    rope = copy.deepcopy(case["rope"])
    if form == "legacy":
        out["rope_theta"] = theta
        if partial is not None:
            out["partial_rotary_factor"] = partial
        if rope is not None:
            rope["type"] = rope.pop("rope_type")
        out["rope_scaling"] = rope
    else:
        params = {"rope_type": "default", **(rope or {}), "rope_theta": theta}
        if partial is not None:
            params["partial_rotary_factor"] = partial
        out["rope_parameters"] = params
    return out


def hf_config_object(config_dict: dict[str, Any]) -> Any:
    kwargs = {k: v for k, v in copy.deepcopy(config_dict).items() if k != "model_type"}
    cls = transformers.AutoConfig.for_model(config_dict["model_type"]).__class__
    return cls(**kwargs)


def hf_reference(config_dict: dict[str, Any], seq_len: int | None) -> tuple[torch.Tensor, float]:
    """What transformers computes: the model's rotary module at init, or the init function
    at ``seq_len`` (what ``dynamic_rope_update`` calls at runtime)."""
    config = hf_config_object(config_dict)
    if seq_len is None:
        from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        cls = GPTNeoXRotaryEmbedding if config.model_type == "gpt_neox" else LlamaRotaryEmbedding
        module = cls(config)
        return module.inv_freq, module.attention_scaling
    rope_type = config.rope_parameters["rope_type"]
    return ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=seq_len)


PARITY = [
    (name, seq_len) for name, case in CASES.items() for seq_len in [None, *case.get("seq_lens", [])]
]


@pytest.mark.parametrize("as_object", [False, True], ids=["dict", "object"])
@pytest.mark.parametrize("form", ["legacy", "rope_parameters"])
@pytest.mark.parametrize(("name", "seq_len"), PARITY)
def test_frequencies_match_transformers(
    name: str, seq_len: int | None, form: str, as_object: bool
) -> None:
    config_dict = hf_config_dict(CASES[name], form)
    hf_inv_freq, hf_attention = hf_reference(config_dict, seq_len)
    config = hf_config_object(config_dict) if as_object else config_dict
    inv_freq, attention = frequencies_from_config(config, seq_len)
    assert inv_freq.dtype == torch.float32
    torch.testing.assert_close(inv_freq, hf_inv_freq, rtol=1e-6, atol=0)
    assert attention == hf_attention


def test_frequencies_do_not_mutate_the_dict() -> None:
    config = hf_config_dict(CASES["yarn_top_level_l0_wins"], "legacy")
    before = copy.deepcopy(config)
    frequencies_from_config(config)
    assert config == before


# ---------------------------------------------------------------- strict validation

L0 = "original_max_position_embeddings"
BASE = {"head_dim": 64, "max_position_embeddings": 4096, "rope_theta": 10000.0}
LONG = {"short_factor": [1.0] * 32, "long_factor": [2.0] * 32}
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
BAD = [
    ({"rope_type": "linear", "factor": 2.0, "foo": 1}, "foo"),
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}, L0),
    ({"rope_type": "yarn"}, "factor"),
    ({"rope_type": "yarn", "factor": None}, "factor"),
    ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}, "low_freq_factor"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 32}, "long_factor"),
    ({"rope_type": "linear"}, "factor"),
    ({"rope_type": "linear", "factor": 0}, "factor"),
    ({"rope_type": "linear", "factor": "2"}, "factor"),
    ({"rope_type": "dynamic", "factor": float("nan")}, "factor"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": -1.0}, "beta_fast"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_slow": 0.0}, "beta_slow"),
    ({"rope_type": "yarn", "factor": 4.0, "mscale": -1.0}, "mscale"),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.0}, "attention_factor"),
    ({"rope_type": "yarn", "factor": 4.0, "truncate": "no"}, "truncate"),
    ({"rope_type": "yarn", "factor": 4.0, L0: 0}, L0),
    ({"rope_type": "longrope", **LONG, "short_factor": [1.0] * 31}, "short_factor"),
    ({"rope_type": "longrope", **LONG, "long_factor": [1.0] * 31 + [-1.0]}, "long_factor"),
    ({"rope_type": "llama3", **LLAMA3, "high_freq_factor": 0.5}, "high_freq_factor"),
    ({"rope_type": "llama3", **LLAMA3, "low_freq_factor": -1.0}, "low_freq_factor"),
    ({"rope_type": "default", "rope_theta": -1.0}, "rope_theta"),
    ({"rope_type": "default", "partial_rotary_factor": 1.5}, "partial_rotary_factor"),
    (
        {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.01},
        "partial_rotary_factor",
    ),
    ({"rope_type": "mrope"}, "rope_type"),
    ({"rope_type": "linear", "type": "yarn", "factor": 2.0}, "type"),
]


@pytest.mark.parametrize(("rope", "key"), BAD, ids=[f"{k}-{i}" for i, (_, k) in enumerate(BAD)])
@pytest.mark.parametrize("form", ["rope_parameters", "rope_scaling"])
def test_bad_rope_values_raise_naming_the_key(rope: dict[str, Any], key: str, form: str) -> None:
    with pytest.raises(ValueError, match=key):
        frequencies_from_config({**BASE, form: rope})


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"rope_theta": 1e4}, "head_dim"),
        ({"hidden_size": 64, "num_attention_heads": 0}, "num_attention_heads"),
        (
            {"head_dim": 64, "rope_scaling": {"type": "dynamic", "factor": 2.0}},
            "max_position_embeddings",
        ),
        (
            {
                "head_dim": 64,
                "rope_scaling": {"type": "linear", "factor": 2.0},
                "rope_parameters": {"rope_type": "linear", "factor": 3.0},
            },
            "rope_scaling",
        ),
        (
            {"head_dim": 64, "rope_parameters": {"full_attention": {"rope_type": "default"}}},
            "per-layer",
        ),
        ({"hidden_size": 64, "num_attention_heads": 4, "rotary_pct": 0.5}, "rotary_pct"),
        ("llama", "config"),
    ],
)
def test_bad_configs_raise(config: Any, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        frequencies_from_config(config)


def test_bad_seq_len_raises() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        frequencies_from_config(BASE, seq_len=0)


# ---------------------------------------------------------------- round trip

ROUND_TRIP = {
    "default": (64, 64, None),
    "partial": (64, 32, None),
    "partial_odd_ratio": (96, 32, None),
    "linear": (64, 64, Linear(factor=4.0)),
    "dynamic": (64, 48, DynamicNTK(factor=2.0, max_position_embeddings=2048)),
    "yarn": (
        128,
        128,
        YaRN(
            factor=8.0,
            original_max_position_embeddings=4096,
            truncate=False,
            beta_fast=16.0,
            mscale=0.707,
            mscale_all_dim=1.0,
        ),
    ),
    "yarn_override": (
        64,
        64,
        YaRN(factor=4.0, original_max_position_embeddings=2048, attention_factor_override=0.9),
    ),
    "longrope": (
        64,
        64,
        LongRoPE(
            short_factor=tuple(_factors(32, 1, 2)),
            long_factor=tuple(_factors(32, 1, 9)),
            original_max_position_embeddings=2048,
            factor=4.0,
        ),
    ),
    "longrope_from_max_pos": (
        64,
        32,
        LongRoPE(
            short_factor=tuple(_factors(16, 1, 2)),
            long_factor=tuple(_factors(16, 1, 9)),
            original_max_position_embeddings=2048,
            max_position_embeddings=16384,
            attention_factor_override=1.2,
        ),
    ),
    "llama3": (
        128,
        128,
        Llama3(
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
    ),
    "proportional": (64, 64, Proportional(partial_rotary_factor=0.25, factor=2.0)),
}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_round_trip(name: str) -> None:
    head_dim, rotary_dim, scaling = ROUND_TRIP[name]
    rope = RotaryEmbedding(head_dim, rotary_dim=rotary_dim, base=5e5, scaling=scaling)
    params = to_rope_parameters(rope)
    max_pos = getattr(scaling, "max_position_embeddings", None) or 2048
    config = {"head_dim": head_dim, "max_position_embeddings": max_pos, "rope_parameters": params}
    back = rope_from_config(config)
    assert (back.head_dim, back.rotary_dim, back.base, back.layout) == (
        head_dim,
        rotary_dim,
        5e5,
        "half",
    )
    assert back.scaling == scaling
    for seq_len in (None, 1000, 20000):
        inv_freq, attention = frequencies_from_config(config, seq_len)
        expected = (
            scaling.inv_freq(rotary_dim, 5e5, seq_len=seq_len)
            if scaling is not None
            else rope.inv_freq("cpu")
        )
        torch.testing.assert_close(inv_freq, expected.float(), rtol=1e-6, atol=0)
        assert attention == back.attention_factor == rope.attention_factor
    # transformers reads the exported dict and computes the same frequencies
    hf_config = transformers.LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=max_pos,
        rope_parameters=copy.deepcopy(params),
    )
    if params["rope_type"] != "default":
        hf_inv_freq, hf_attention = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf_config, None)
        torch.testing.assert_close(
            frequencies_from_config(config)[0], hf_inv_freq, rtol=1e-6, atol=0
        )
        assert hf_attention == rope.attention_factor


@pytest.mark.parametrize(
    "scaling",
    [
        NTKAware(factor=2.0),
        DynamicNTK(factor=2.0, max_position_embeddings=64, mode="fixed", target_length=128),
    ],
)
def test_to_rope_parameters_rejects_posenc_only_scalings(scaling: Any) -> None:
    with pytest.raises(ValueError, match="scaling"):
        to_rope_parameters(RotaryEmbedding(64, scaling=scaling))


def test_to_rope_parameters_rejects_the_query_length_rule_of_a_dynamic_scaling() -> None:
    """HF picks a dynamic scaling's length per forward; posenc's "query" rule (each query its
    own prefix) has no HF key and was dropped silently. A static scaling ignores the rule."""
    dynamic = DynamicNTK(factor=2.0, max_position_embeddings=64)
    with pytest.raises(ValueError, match="length_rule"):
        to_rope_parameters(RotaryEmbedding(64, scaling=dynamic, length_rule="query"))
    assert to_rope_parameters(RotaryEmbedding(64, scaling=dynamic)) == {
        "rope_type": "dynamic",
        "rope_theta": 10000.0,
        "factor": 2.0,
    }
    linear = RotaryEmbedding(64, scaling=Linear(2.0), length_rule="query")
    assert to_rope_parameters(linear)["rope_type"] == "linear"


def test_to_rope_parameters_rejects_non_rope() -> None:
    with pytest.raises(ValueError, match="rope"):
        to_rope_parameters(torch.nn.Linear(2, 2))  # type: ignore[arg-type]


def test_imports_and_reads_dicts_without_transformers() -> None:
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from posenc.integrations.hf import frequencies_from_config, rope_from_config\n"
        "inv_freq, a = frequencies_from_config({'head_dim': 8, 'rope_theta': 100.0})\n"
        "assert inv_freq.shape == (4,) and a == 1.0\n"
        "assert 'transformers' not in {m for m in sys.modules if sys.modules[m] is not None}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_deepseek_v3_dict_reads_qk_rope_head_dim() -> None:
    config_dict = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "max_position_embeddings": 163840,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    }
    hf_inv_freq, hf_attention = hf_reference(config_dict, 1)
    inv_freq, attention = frequencies_from_config(config_dict)
    torch.testing.assert_close(inv_freq, hf_inv_freq, rtol=1e-6, atol=0)
    assert attention == hf_attention == 1.0


def _gemma4() -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model("gemma4_text")


def _gemma4_forms() -> dict[str, Any]:
    """Gemma 4's config three ways: transformers' object (``per_layer_config`` by layer type),
    its ``to_dict()`` (``per_layer_config`` by layer index) and a Hub-style ``config.json``
    (``global_head_dim``)."""
    config = _gemma4()
    as_dict = config.to_dict()
    hub = {k: v for k, v in as_dict.items() if k != "per_layer_config"}
    return {"object": config, "to_dict": as_dict, "config.json": {**hub, "global_head_dim": 512}}


@pytest.mark.parametrize("form", ["object", "to_dict", "config.json"])
@pytest.mark.parametrize("layer_type", ["full_attention", "sliding_attention"])
def test_gemma4_layer_types_have_their_own_head_dim(form: str, layer_type: str) -> None:
    """Gemma 4's full-attention layers are 512 wide (proportional RoPE over 512 dims, 128 of
    them rotating), its sliding layers 256: each layer type's inverse frequencies equal
    transformers' own rotary's buffer for that type, in every config form (reading
    ``head_dim`` = 256 for the global layers is neuronx-distributed-inference#106)."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding

    reference = getattr(Gemma4TextRotaryEmbedding(_gemma4()), f"{layer_type}_inv_freq")
    config = _gemma4_forms()[form]
    inv_freq, factor = frequencies_from_config(config, layer_type=layer_type)
    torch.testing.assert_close(inv_freq, reference, rtol=1e-6, atol=0)
    assert factor == 1.0
    rope = rope_from_config(config, layer_type=layer_type)
    assert rope.head_dim == (512 if layer_type == "full_attention" else 256)


def test_per_layer_head_dims_need_a_layer_type() -> None:
    """A config object with per-layer head dims refuses to give one rotary for all layers."""
    with pytest.raises(ValueError, match="layer_type must be one of"):
        rope_from_config(_gemma4())


def test_disagreeing_per_layer_head_dims_raise() -> None:
    """Two full-attention layers of different widths cannot share one rotary: an error, not
    the first one's width."""
    config = _gemma4().to_dict()
    types = config["layer_types"]
    full = [i for i, kind in enumerate(types) if kind == "full_attention"]
    config["per_layer_config"] = {f"{full[0]:02d}": {"head_dim": 512}}
    with pytest.raises(ValueError, match="different head_dim"):
        rope_from_config(config, layer_type="full_attention")


@pytest.mark.parametrize("form", ["config.json", "object"])
def test_legacy_mrope_type_reads_as_default_rope(form: str) -> None:
    """Qwen2-VL's Hub config says ``rope_scaling = {"type": "mrope", "mrope_section": ...}``;
    transformers reads it as the default RoPE on (t, h, w) (and its config object then holds
    both ``type: mrope`` and ``rope_type: default``): posenc reads either form as the current
    ``rope_parameters`` form, with transformers' inverse frequencies."""
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    from posenc.integrations.hf import mrope_from_config

    dims = {"hidden_size": 3584, "num_attention_heads": 28, "max_position_embeddings": 32768}
    legacy = {"type": "mrope", "mrope_section": [16, 24, 24]}
    hf = Qwen2VLTextConfig(**dims, rope_theta=1e6, rope_scaling=dict(legacy))
    hub = {"model_type": "qwen2_vl", **dims, "rope_theta": 1e6, "rope_scaling": dict(legacy)}
    current = {
        "model_type": "qwen2_vl",
        **dims,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1e6,
            "mrope_section": [16, 24, 24],
        },
    }
    config = hub if form == "config.json" else hf
    inv_freq, factor = frequencies_from_config(config)
    torch.testing.assert_close(inv_freq, Qwen2VLRotaryEmbedding(hf).inv_freq, rtol=1e-6, atol=0)
    assert factor == 1.0
    positions = torch.randint(0, 4000, (3, 2, 17))
    got = mrope_from_config(config).rotary_tables(positions, torch.float64)
    want = mrope_from_config(current).rotary_tables(positions, torch.float64)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)

"""Tiny random-weight models of every RoPE family of the installed ``transformers``.

:func:`build_tiny` builds one family's model (a folder of
:func:`~tools.hf_sweep.families.rope_families`) with a shrunk default config (2 layers, hidden 64,
4 heads, small experts; per-layer lists cut to the layers kept) and its inputs. Used by
:mod:`tools.hf_sweep.sweep` and the tests of ``patch_rotary``; needs ``transformers``.
"""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

import torch
from torch import nn

from tools.hf_sweep.families import family_model_types, modeling_source
from tools.hf_sweep.overrides import (
    BATCH,
    EXTRA_INPUTS,
    MAIN_INPUTS,
    MODEL_CLASS,
    MODEL_TYPE,
    OVERRIDES,
    SEQ_LEN,
    mrope_positions,
)

LAYERS = 2
# Config keys set (when the default config has them) to make every model tiny.
SIZES: dict[str, int] = {
    "hidden_size": 64,
    "d_model": 64,
    "n_embd": 64,
    "intermediate_size": 128,
    "ffn_hidden_size": 128,
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "moe_intermediate_size": 32,
    "expert_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "num_experts_per_token": 2,
    "moe_k": 2,
    "moe_topk": 2,
    "n_group": 1,
    "num_expert_group": 1,
    "topk_group": 1,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "sliding_window": 6,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "kv_channels": 16,
    "first_k_dense_replace": 1,
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "out_hidden_size": 64,
    "projection_dim": 64,
    # Mamba-2's chunked scan pads the sequence to a whole chunk (256 by default): 16 holds the
    # tiny inputs in one chunk, and the forward drops from seconds to milliseconds
    "mamba_chunk_size": 16,
}
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layers", "n_layer", "decoder_layers")
LAYER_LIST_KEYS = ("layer_types", "layers_block_type", "attention_layer_types")
# Sub-configs that hold the text model (shrunk like the top level).
_SUB = ("text_config", "decoder_config", "encoder_config", "language_config", "llm_config")


def rotary_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """HF's rotary modules in ``model``: every submodule whose class name ends with
    ``RotaryEmbedding`` or ``RotaryPositionalEmbedding`` (posenc's own modules excluded)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(module).__name__.endswith(("RotaryEmbedding", "RotaryPositionalEmbedding"))
        and not type(module).__module__.startswith("posenc")
    ]


def _shrink(config: dict[str, Any], mrope: bool = False) -> dict[str, Any]:
    """The overrides that make a default config dict tiny: the sizes of :data:`SIZES`,
    :data:`LAYERS` layers (one of each layer type), per-layer lists and dicts cut to them.
    Only changed keys are returned, so that the config recomputes its derived fields."""
    out = copy.deepcopy(config)
    for key, value in SIZES.items():
        if isinstance(out.get(key), int) and not isinstance(out.get(key), bool):
            out[key] = value
    if config.get("num_key_value_heads") == config.get("num_attention_heads") is not None:
        out["num_key_value_heads"] = out["num_attention_heads"]  # multi-head stays multi-head
    for key in ("num_experts_per_tok", "head_dim", "num_key_value_heads"):  # None: unset
        if key in out and out[key] is None and "num_attention_heads" in out:
            out[key] = SIZES["num_attention_heads" if key == "num_key_value_heads" else key]
    if isinstance(out.get("qk_rope_head_dim"), int):  # MLA: HF's head_dim is the rotary part
        out.update(
            head_dim=out["qk_rope_head_dim"], num_key_value_heads=out.get("num_attention_heads")
        )
    old = next((out[k] for k in LAYER_KEYS if isinstance(out.get(k), int)), None)
    if old:
        keep = list(range(min(old, LAYERS)))
        types = next((out[k] for k in LAYER_LIST_KEYS if isinstance(out.get(k), list)), None)
        if types and len(types) == old:  # one layer of each type, in order of first use
            first = {t: i for i, t in reversed(list(enumerate(types)))}
            keep = sorted(first.values())
            keep += [i for i in range(old) if i not in keep][: max(0, LAYERS - len(keep))]
            keep.sort()
        for key in LAYER_KEYS:
            if isinstance(out.get(key), int):
                out[key] = len(keep)
        for key, value in list(out.items()):
            if isinstance(value, list) and len(value) == old and old > len(keep):
                out[key] = [value[i] for i in keep]
            if isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
                out[key] = {
                    type(next(iter(value)))(new): value.get(str(i), value.get(i))
                    for new, i in enumerate(keep)
                    if str(i) in value or i in value
                }
    for key in ("rope_parameters", "rope_scaling"):
        params: dict[str, Any] = out[key] if isinstance(out.get(key), dict) else {}
        partial = _partial(params) or out.get("partial_rotary_factor") or 1.0
        if isinstance(out.get("head_dim"), int) and partial < 1:  # an even, 3-section width
            out["head_dim"] = next(h for h in (16, 32, 64, 128, 256) if int(h * partial) >= 6)
            while int(out["head_dim"] * partial) % 2:
                out["head_dim"] += 16
        _shrink_rope(params, int((out.get("head_dim") or SIZES["head_dim"]) * partial))
    rope_parameters = out.get("rope_parameters")
    flat = isinstance(rope_parameters, dict) and not _nested(rope_parameters)
    if mrope and flat and rope_parameters.get("rope_type") != "axial":  # type: ignore[union-attr]
        partial = _partial(out["rope_parameters"]) or out.get("partial_rotary_factor") or 1.0
        pairs = int((out.get("head_dim") or SIZES["head_dim"]) * partial) // 2
        out["rope_parameters"].setdefault(
            "mrope_section", [pairs - 2 * (pairs // 3)] + [pairs // 3] * 2
        )
    for key, value in out.items():
        if key == "codec_config":  # an audio codec's convolutions: left at its default size
            continue
        if isinstance(value, dict) and ("model_type" in value or key in _SUB):
            sub_mrope = mrope and (key in _SUB or "text" in key)
            kind = {"model_type": value["model_type"]} if "model_type" in value else {}
            out[key] = {**kind, **_shrink(value, sub_mrope)}
    changed = {k: v for k, v in out.items() if k not in config or config[k] != v}
    if isinstance(out.get("rope_parameters"), dict):  # some configs need it given
        changed["rope_parameters"] = out["rope_parameters"]
    return changed


def _nested(params: dict[str, Any]) -> bool:
    """Whether a rope dict holds one dict per layer type (``{"full_attention": {...}}``)."""
    return bool(params) and all(isinstance(v, dict) for v in params.values())


def _has_mrope(params: Any) -> bool:
    """Whether a flat or per-layer-type rope dict sets ``mrope_section``."""
    if not isinstance(params, dict):
        return False
    return "mrope_section" in params or any(_has_mrope(v) for v in params.values())


def _partial(params: dict[str, Any]) -> float | None:
    """The smallest ``partial_rotary_factor`` of a flat or per-layer-type rope dict."""
    values = [params.get("partial_rotary_factor")]
    values += [v.get("partial_rotary_factor") for v in params.values() if isinstance(v, dict)]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return min(numbers) if numbers else None


def _shrink_rope(params: Any, head_dim: int) -> None:
    """Rescale M-RoPE sections (and nested per-layer-type dicts) to the tiny head_dim."""
    if not isinstance(params, dict):
        return
    for value in params.values():
        _shrink_rope(value, head_dim)
    section = params.get("mrope_section")
    if isinstance(section, list) and section and sum(section) != head_dim // 2:
        total, half = sum(section), head_dim // 2
        new = [max(1, s * half // total) for s in section]
        new[0] += half - sum(new)
        params["mrope_section"] = new


_TOKEN_ID = re.compile(r".*_(token_id|token_index|id)$")


def _vocab(overrides: dict[str, Any], config: dict[str, Any]) -> None:
    """Set a small vocab that still holds every special token id of the config."""
    for key, value in config.items():
        if isinstance(value, dict) and "model_type" in value:
            overrides.setdefault(key, {"model_type": value["model_type"]})
            _vocab(overrides[key], value)
    if "vocab_size" not in config or isinstance(config["vocab_size"], bool):
        return
    ids = [
        v
        for k, v in config.items()
        if _TOKEN_ID.match(k) and isinstance(v, int) and not isinstance(v, bool)
    ]
    ids += [
        x
        for k, v in config.items()
        if _TOKEN_ID.match(k) and isinstance(v, list)
        for x in v
        if isinstance(x, int)
    ]
    overrides["vocab_size"] = max([128, *[i + 1 for i in ids]])


def _merge(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Set ``overrides`` into ``raw``; a dict into a sub-config dict is merged key by key
    (at any depth), except ``rope_parameters``, which is replaced whole; a callable is called
    for the value (a config object, built only when transformers is there)."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict) and key != "rope_parameters":
            _merge(raw[key], value)
        else:
            raw[key] = value() if callable(value) else copy.deepcopy(value)


def _model_class(model_type: str) -> type[nn.Module] | None:
    import transformers
    from transformers.models.auto import modeling_auto as auto

    if model_type in MODEL_CLASS:
        chosen: type[nn.Module] = getattr(transformers, MODEL_CLASS[model_type])
        return chosen

    for mapping in (
        "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
        "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
        "MODEL_MAPPING_NAMES",
    ):
        name = getattr(auto, mapping).get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        if name and hasattr(transformers, name):
            cls: type[nn.Module] = getattr(transformers, name)
            return cls
    return None


def _main_input(family: str, model_type: str) -> Any:
    """The builder of the main input of ``model_type`` (else of ``family``) in
    :data:`~tools.hf_sweep.overrides.MAIN_INPUTS`, or ``None``: token ids."""
    return MAIN_INPUTS.get(model_type, MAIN_INPUTS.get(family))


def _no_tokens(cls: type[nn.Module], family: str, model_type: str = "") -> str | None:
    """Why ``cls`` takes no token ids (``None`` if it does, or if it has a main input), read
    from its ``forward``'s signature before a model is built: a large audio or video model is
    not built for nothing."""
    params = inspect.signature(cls.forward).parameters
    if "input_ids" in params or _main_input(family, model_type) is not None:
        return None
    if "decoder_input_ids" in params and family in EXTRA_INPUTS:  # speech encoder-decoder
        return None
    return f"{cls.__name__}.forward takes no input_ids"


def _forward_inputs(
    model: nn.Module, vocab: int, family: str, model_type: str = ""
) -> dict[str, Any]:
    """The token ids (and whatever else ``family`` reads) for a model that takes tokens, else
    its main input (see :func:`_no_tokens`)."""
    params = inspect.signature(model.forward).parameters
    gen = torch.Generator().manual_seed(1)
    build_main = _main_input(family, model_type)
    if build_main is not None:  # no tokens: the model's own main input
        main: dict[str, Any] = build_main(model, gen)
        if "use_cache" in params:
            main["use_cache"] = False
        return main
    ids = torch.randint(1, min(vocab, 128), (BATCH, SEQ_LEN), generator=gen)
    inputs: dict[str, Any] = {"input_ids": ids}
    if "input_ids" not in params:  # a speech encoder-decoder: tokens reach the decoder only
        inputs = {"decoder_input_ids": ids}
    elif "decoder_input_ids" in params:
        inputs["decoder_input_ids"] = ids[:, : SEQ_LEN // 2]
    if "use_cache" in params:
        inputs["use_cache"] = False
    rope = getattr(getattr(model, "config", None), "get_text_config", lambda: None)()
    if "position_ids" in params and _has_mrope(getattr(rope, "rope_parameters", None)):
        inputs["position_ids"] = mrope_positions()  # t, h, w differ: M-RoPE is exercised
    if family in EXTRA_INPUTS:
        EXTRA_INPUTS[family](model, inputs, gen)
    return inputs


def build_tiny(
    family: str, dtype: torch.dtype = torch.float32, *, model_type: str | None = None
) -> tuple[nn.Module, dict[str, Any], str] | str:
    """``(model, inputs, class name)`` of a tiny random ``family`` model in ``dtype`` (its
    floating inputs too), or the reason (a string) why the family has no model with token
    inputs or a main input. ``model_type``: build that type of the family (e.g. a VL family's
    vision tower) instead of the first that builds. Raises whatever HF raises when the tiny
    config is invalid."""
    from transformers import AutoConfig

    types = family_model_types(family)
    if model_type is not None or family in MODEL_TYPE:
        wanted = model_type or MODEL_TYPE[family]
        if wanted not in types:
            raise ValueError(f"model_type {wanted!r} is not one of {family}'s: {types}")
        types = [wanted]
    if not types:
        raise ValueError(f"no config class in transformers/models/{family}")
    errors, reasons = [], []
    for model_type in types:
        cls = _model_class(model_type)
        if cls is None:
            continue
        no_tokens = _no_tokens(cls, family, model_type)
        if no_tokens:
            reasons.append(no_tokens)
            continue
        try:
            config_cls = type(AutoConfig.for_model(model_type))
            default = config_cls().to_dict()
            mrope = "mrope_section" in modeling_source(family)
            raw = _shrink(default, mrope)
            _vocab(raw, default)
            overrides = OVERRIDES.get(model_type, OVERRIDES.get(family, {}))
            _merge(raw, overrides)
            for key in ("model_type", "transformers_version", "architectures"):
                raw.pop(key, None)
            config = config_cls(**raw)
            config._attn_implementation = "eager"
            torch.manual_seed(0)
            model = cls(config).to(dtype).eval()
        except Exception as err:
            errors.append(f"{model_type}: {type(err).__name__}: {' '.join(str(err).split())}")
            continue
        vocab = int(getattr(config.get_text_config(), "vocab_size", 128) or 128)
        inputs = _forward_inputs(model, vocab, family, model_type)
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                inputs[key] = value.to(dtype)
        return model, inputs, cls.__name__
    if not errors:
        return "; ".join(reasons) or f"no model class among model types {types}"
    raise RuntimeError(errors[0])

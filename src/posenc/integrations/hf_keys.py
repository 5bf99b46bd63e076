"""Reading single keys of an HF config's RoPE: validated numbers, the rope dict (flat, legacy or
the ``layer_type`` entry of a nested per-layer-type one), ``head_dim`` and the lengths, and the
model-specific keys HF models read beyond their rope type's (PhiMoE's short/long mscale,
Ministral 3's ``llama_4_scaling_beta``, M-RoPE's sections). Used by
:mod:`posenc.integrations.hf`, which maps a whole config onto posenc's scalings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_L0 = "original_max_position_embeddings"


def _get(config: Any, key: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def _number(key: str, value: Any) -> float:
    """``float(value)`` if it is a finite real > 0, else ValueError naming the key."""
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"rope_parameters[{key!r}] must be a finite number > 0, got {value!r}")
    return float(value)


def _integer(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value


def _raw_rope_dict(config: Any) -> dict[str, Any]:
    legacy, current = _get(config, "rope_scaling"), _get(config, "rope_parameters")
    for key, value in (("rope_scaling", legacy), ("rope_parameters", current)):
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"{key} must be a dict or None, got {type(value).__name__}")
    if legacy and current and dict(legacy) != dict(current):
        raise ValueError("rope_scaling and rope_parameters are both set and differ; keep one")
    return dict(legacy or current or {})  # HF: rope_scaling wins over rope_parameters


def _layer_types(config: Any) -> list[str]:
    """The layer types of a nested per-layer-type ``rope_parameters`` (``{"full_attention":
    {...}, "sliding_attention": {...}}``, Gemma 3, ModernBERT, OLMo 3, ...) that have a RoPE
    (HF skips a ``None`` entry: that layer type has none); ``[]`` for a flat dict.

    Nested means every value is a dict or ``None`` (HF: the keys are the config's
    ``layer_types`` or ``_rope_type_labels``)."""
    params = _raw_rope_dict(config)
    values = list(params.values())
    if not values or not any(isinstance(v, Mapping) for v in values):
        return []
    flat = [k for k, v in params.items() if not (v is None or isinstance(v, Mapping))]
    if flat:
        raise ValueError(
            f"rope_parameters mixes per-layer-type dicts and flat keys {flat}; HF nests the "
            "whole dict under the layer types"
        )
    return [k for k, v in params.items() if v is not None]


def _rope_dict(config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The flat rope dict (legacy ``rope_scaling`` or current ``rope_parameters``, the
    ``layer_type`` entry of a nested one), with its type."""
    types = _layer_types(config)
    params = _raw_rope_dict(config)
    if types or layer_type is not None:
        if layer_type not in types:
            raise ValueError(
                f"layer_type must be one of the per-layer-type rope_parameters {types} "
                f"(the config's rope_parameters are {'nested' if types else 'flat'}), got "
                f"{layer_type!r}"
            )
        params = dict(params[layer_type])
    if "type" in params and "rope_type" in params and params["type"] != params["rope_type"]:
        raise ValueError(
            f"rope_parameters['type'] ({params['type']!r}) and ['rope_type'] "
            f"({params['rope_type']!r}) disagree"
        )
    params["rope_type"] = params.pop("rope_type", params.pop("type", "default"))
    params.pop("type", None)
    return params


def _head_dim(config: Any) -> int:
    # MLA models (DeepSeek-V2/V3, ...) rotate qk_rope_head_dim channels; their HF config
    # objects set head_dim to it, their config.json dicts only carry qk_rope_head_dim.
    for key in ("head_dim", "qk_rope_head_dim"):
        if _get(config, key) is not None:
            return _integer(key, _get(config, key))
    hidden, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError("config needs head_dim, or hidden_size and num_attention_heads")
    return _integer("hidden_size", hidden) // _integer("num_attention_heads", heads)


def _max_positions(config: Any, why: str) -> int:
    value = _get(config, "max_position_embeddings")
    if value is None:
        raise ValueError(f"max_position_embeddings is required for {why}")
    return _integer("max_position_embeddings", value)


def _original_max_position(config: Any, params: Mapping[str, Any]) -> int:
    """L0 as HF's ``standardize_rope_params``: the config's own attribute wins (Phi-3), then
    the rope dict, then ``max_position_embeddings``."""
    for value in (_get(config, _L0), params.get(_L0)):
        if value is not None:
            return _integer(_L0, value)
    return _max_positions(config, f"rope_type {params['rope_type']!r} without {_L0}")


# Keys HF models read from rope_parameters beyond the rope type's own (validated below).
_EXTRA_KEYS = (
    "short_mscale",
    "long_mscale",
    "llama_4_scaling_beta",
    "max_position_embeddings",
    "mrope_section",
    "mrope_interleaved",
)


def _read_extras(
    config: Any, extras: dict[str, Any], rope_type: str, rotary_dim: int, params: dict[str, Any]
) -> tuple[tuple[float, float, int] | None, float | None, tuple[tuple[int, ...], bool] | None]:
    """Validate the model-specific rope keys: PhiMoE's ``short_mscale``/``long_mscale``
    (LongRoPE only, both or neither), Ministral 3's ``llama_4_scaling_beta`` (≥ 0) and its
    copy of ``max_position_embeddings`` (must equal the config's), M-RoPE's
    ``mrope_section`` (3 positive pair counts summing to ``rotary_dim / 2``) and
    ``mrope_interleaved`` (bool)."""
    mscales = None
    if "short_mscale" in extras or "long_mscale" in extras:
        if rope_type != "longrope" or None in (
            extras.get("short_mscale"),
            extras.get("long_mscale"),
        ):
            raise ValueError(
                "rope_parameters['short_mscale'] and ['long_mscale'] go together, with rope_type "
                f"'longrope' (PhiMoE); got rope_type {rope_type!r} and {sorted(extras)}"
            )
        short = _number("short_mscale", extras["short_mscale"])
        long = _number("long_mscale", extras["long_mscale"])
        mscales = (short, long, _original_max_position(config, params))
    beta = extras.get("llama_4_scaling_beta")
    if beta is not None:
        number = not isinstance(beta, bool) and isinstance(beta, (int, float))
        if not number or not math.isfinite(beta) or beta < 0:
            raise ValueError(
                "rope_parameters['llama_4_scaling_beta'] must be a finite number >= 0, got "
                f"{beta!r}"
            )
        beta = float(beta)
    if extras.get("max_position_embeddings") is not None:
        inner = _integer(
            "rope_parameters['max_position_embeddings']", extras["max_position_embeddings"]
        )
        outer = _get(config, "max_position_embeddings")
        if outer is not None and inner != outer:
            raise ValueError(
                f"rope_parameters['max_position_embeddings'] ({inner}) != the config's "
                f"max_position_embeddings ({outer})"
            )
    mrope = None
    if extras.get("mrope_section") is not None:
        section = extras["mrope_section"]
        if (
            not isinstance(section, (list, tuple))
            or len(section) != 3
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in section)
            or 2 * sum(section) != rotary_dim
        ):
            raise ValueError(
                "rope_parameters['mrope_section'] must be 3 positive (t, h, w) pair counts summing "
                f"to rotary_dim / 2 = {rotary_dim // 2}, got {section!r}"
            )
        interleaved = extras.get("mrope_interleaved", False)
        if not isinstance(interleaved, bool):
            raise ValueError(
                f"rope_parameters['mrope_interleaved'] must be a bool, got {interleaved!r}"
            )
        mrope = (tuple(section), interleaved)
    elif extras.get("mrope_interleaved") is not None:
        raise ValueError("rope_parameters['mrope_interleaved'] without ['mrope_section']")
    return mscales, beta, mrope

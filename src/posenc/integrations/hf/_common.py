"""Single keys of an HF config, read and validated: what the modules of this package share.

The value of a key in a config object or a ``config.json`` dict, validated numbers (each
``ValueError`` names the key), the flat rope dict (legacy ``rope_scaling``, current
``rope_parameters``, or the ``layer_type`` entry of a nested per-layer-type one), ``head_dim``
and the lengths HF reads. Reference: ``transformers`` 5.23.0 ``modeling_rope_utils.py``
(``standardize_rope_params``) and ``configuration_utils.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torch import nn

from posenc._validate import check_int

L0 = "original_max_position_embeddings"


def config_value(config: Any, key: str) -> Any:
    """``config[key]`` of a dict or ``config.key`` of a config object; ``None`` when unset."""
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def rope_number(key: str, value: Any) -> float:
    """``float(value)`` if it is a finite real > 0, else ValueError naming
    ``rope_parameters[key]``."""
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"rope_parameters[{key!r}] must be a finite number > 0, got {value!r}")
    return float(value)


def nonnegative_number(key: str, value: Any) -> float:
    """``float(value)`` if it is a finite real ≥ 0 (a query temperature's β), else ValueError
    naming ``key``."""
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not math.isfinite(value) or value < 0:
        raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")
    return float(value)


def positive_integer(key: str, value: Any) -> int:
    """``value`` as a Python ``int`` if it is integral and ≥ 1 (an int, numpy integer or 0-d
    integer tensor; not a bool), else ValueError naming ``key``."""
    return check_int(key, value, low=1)


def _raw_rope_dict(config: Any) -> dict[str, Any]:
    legacy = config_value(config, "rope_scaling")
    current = config_value(config, "rope_parameters")
    for key, value in (("rope_scaling", legacy), ("rope_parameters", current)):
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"{key} must be a dict or None, got {type(value).__name__}")
    if legacy and current and dict(legacy) != dict(current):
        raise ValueError("rope_scaling and rope_parameters are both set and differ; keep one")
    return dict(legacy or current or {})  # HF: rope_scaling wins over rope_parameters


def rope_layer_types(config: Any) -> list[str]:
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


def rope_dict(config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The flat rope dict (legacy ``rope_scaling`` or current ``rope_parameters``, the
    ``layer_type`` entry of a nested one), with its ``rope_type`` (``"type"`` read as HF's
    legacy name, ``"default"`` when neither is set; the legacy ``"mrope"`` of Qwen2/2.5-VL
    checkpoints is ``"default"``, as their transformers configs read it)."""
    types = rope_layer_types(config)
    params = _raw_rope_dict(config)
    if types or layer_type is not None:
        if layer_type not in types:
            raise ValueError(
                f"layer_type must be one of the per-layer-type rope_parameters {types} "
                f"(the config's rope_parameters are {'nested' if types else 'flat'}), got "
                f"{layer_type!r}"
            )
        params = dict(params[layer_type])
    for key in ("type", "rope_type"):
        if params.get(key) == "mrope":  # Qwen2/2.5-VL's legacy name: plain RoPE on (t, h, w)
            if params.get("mrope_section") is None:
                raise ValueError(
                    f"rope_parameters[{key!r}] 'mrope' (Qwen2/2.5-VL's legacy name for the "
                    "default RoPE on (t, h, w) positions) needs ['mrope_section']"
                )
            params[key] = "default"
    if "type" in params and "rope_type" in params and params["type"] != params["rope_type"]:
        raise ValueError(
            f"rope_parameters['type'] ({params['type']!r}) and ['rope_type'] "
            f"({params['rope_type']!r}) disagree"
        )
    params["rope_type"] = params.pop("rope_type", params.pop("type", "default"))
    params.pop("type", None)
    return params


def config_head_dim(config: Any, layer_type: str | None = None) -> int:
    """The channels per attention head: ``head_dim``, else ``qk_rope_head_dim`` (MLA), else
    ``hidden_size // num_attention_heads``; for ``layer_type``, that layer type's own width
    where the config gives one (:func:`layer_type_head_dim`: Gemma 4's full-attention
    layers)."""
    if layer_type is not None:
        width = layer_type_head_dim(config, layer_type)
        if width is not None:
            return width
    # MLA models (DeepSeek-V2/V3, ...) rotate qk_rope_head_dim channels; their HF config
    # objects set head_dim to it, their config.json dicts only carry qk_rope_head_dim.
    for key in ("head_dim", "qk_rope_head_dim"):
        try:
            value = config_value(config, key)
        except RuntimeError as error:  # transformers: a per-layer attribute read globally
            raise ValueError(
                f"config has per-layer {key} values (transformers' per_layer_config, e.g. "
                "Gemma 4): pass layer_type to read one layer type's rotary"
            ) from error
        if value is not None:
            return positive_integer(key, value)
    hidden = config_value(config, "hidden_size")
    heads = config_value(config, "num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError("config needs head_dim, or hidden_size and num_attention_heads")
    return positive_integer("hidden_size", hidden) // positive_integer("num_attention_heads", heads)


def layer_type_head_dim(config: Any, layer_type: str) -> int | None:
    """The head width of the ``layer_type`` layers when it differs from the config's
    ``head_dim``, else None. Gemma 4's full-attention layers have ``global_head_dim`` (512)
    channels against ``head_dim`` (256) of its sliding layers: ``global_head_dim`` in
    ``config.json``; ``per_layer_config`` in transformers' config objects (by layer type)
    and in their ``to_dict()`` (by layer index, with ``layer_types``). Reading ``head_dim``
    for such a layer is the public bug of neuronx-distributed-inference#106 (proportional
    RoPE over 128 dims instead of 512)."""
    if not isinstance(config, Mapping):
        per_layer = getattr(config, "per_layer_config", None)
        if per_layer is None:
            return None
        try:
            value = getattr(per_layer[layer_type], "head_dim", None)
        except (KeyError, IndexError, TypeError, ValueError):
            return None
        return None if value is None else positive_integer("head_dim", value)
    if layer_type == "full_attention" and config.get("global_head_dim") is not None:
        return positive_integer("global_head_dim", config["global_head_dim"])
    per_layer, types = config.get("per_layer_config"), config.get("layer_types")
    if not isinstance(per_layer, Mapping) or not isinstance(types, (list, tuple)):
        return None
    by_index = {int(k): v for k, v in per_layer.items() if str(k).isdigit()}
    layers = [i for i, kind in enumerate(types) if kind == layer_type]
    widths = {(by_index.get(i) or {}).get("head_dim") for i in layers}
    if len(widths) > 1:
        raise ValueError(
            f"per_layer_config gives the {layer_type!r} layers different head_dim values "
            f"{sorted(widths, key=str)}: one rotary per layer type cannot serve them"
        )
    width = next(iter(widths), None)
    return None if width is None else positive_integer("per_layer_config head_dim", width)


def max_positions(config: Any, why: str) -> int:
    """The config's ``max_position_embeddings``; ValueError saying ``why`` it is needed when
    unset."""
    value = config_value(config, "max_position_embeddings")
    if value is None:
        raise ValueError(f"max_position_embeddings is required for {why}")
    return positive_integer("max_position_embeddings", value)


def original_max_position(config: Any, params: Mapping[str, Any]) -> int:
    """L0 as HF's ``standardize_rope_params``: the config's own attribute wins (Phi-3), then
    the rope dict ``params``, then ``max_position_embeddings``."""
    for value in (config_value(config, L0), params.get(L0)):
        if value is not None:
            return positive_integer(L0, value)
    return max_positions(config, f"rope_type {params['rope_type']!r} without {L0}")


class RotaryStandIn(nn.Module):
    """Base of a module that stands in for a decoder's rotary module and keeps the module it
    replaced as ``original`` (:func:`~posenc.integrations.hf.segments.patch_segments`' identity
    tables): :mod:`posenc.integrations.hf.patch` recognises one by this class without importing
    the segments package, which imports it."""

    original: nn.Module

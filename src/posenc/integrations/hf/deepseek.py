"""DeepSeek's rotaries from HF configs: MLA's decoupled RoPE, the DSA indexer's, DeepSeek-V4's.

* :func:`mla_rotary_from_config`: DeepSeek-V2/V3 (and V3.2, GLM-5, Kimi K2) attention,
  :class:`~posenc.rotary.deepseek.DecoupledRotary` over ``qk_nope_head_dim +
  qk_rope_head_dim`` channels, interleaved unless ``rope_interleave`` is False.
* :func:`indexer_rotary_from_config`: the DSA Lightning Indexer of DeepSeek-V3.2 and GLM-5,
  RoPE on the leading ``qk_rope_head_dim`` of ``index_head_dim`` channels. DeepSeek-V3.2's is
  NeoX (``"half"``) while its main attention is interleaved (vllm#28968, sglang#13530);
  transformers 5.23.0's ``glm_moe_dsa`` indexer is interleaved. A config's
  ``indexer_rope_interleave`` decides where it is set.
* :func:`deepseek_v4_rotary_from_config`: DeepSeek-V4's ``"main"`` or ``"compress"`` rotary
  (:class:`~posenc.rotary.deepseek.DeepSeekV4Rotary`), read from the rope-type-keyed
  ``rope_parameters`` of a ``DeepseekV4Config`` or from a checkpoint's ``config.json``
  (``rope_theta``, ``compress_rope_theta``, ``rope_scaling``), converted as HF's
  ``DeepseekV4Config.__post_init__`` does; :func:`deepseek_v4_rope_type` says which a layer
  uses.

References: ``transformers`` 5.23.0 ``deepseek_v3``, ``deepseek_v32``, ``glm_moe_dsa`` and
``deepseek_v4`` (configuration and modeling).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch

from posenc.integrations.hf._common import config_value, positive_integer
from posenc.integrations.hf.rope_parameters import read_rope_parameters
from posenc.rotary.deepseek import DecoupledRotary, DeepSeekV4Rotary
from posenc.rotary.layouts import Layout
from posenc.rotary.rope import RotaryEmbedding

__all__ = [
    "INDEXER_INTERLEAVED",
    "deepseek_v4_rope_parameters",
    "deepseek_v4_rope_type",
    "deepseek_v4_rotary_from_config",
    "indexer_interleaved",
    "indexer_rotary_from_config",
    "mla_rotary_from_config",
]

V4RopeType = Literal["main", "compress"]
_V4_TYPES: tuple[str, ...] = ("main", "compress")

#: Whether each model type's DSA indexer rotates interleaved pairs when its config does not
#: say (``indexer_rope_interleave``): what transformers 5.23.0's code does.
INDEXER_INTERLEAVED: dict[str, bool] = {"deepseek_v32": False, "glm_moe_dsa": True}


def indexer_interleaved(config: Any) -> bool | None:
    """Whether a DSA indexer rotates interleaved pairs: the config's
    ``indexer_rope_interleave``, else its model type's :data:`INDEXER_INTERLEAVED`; ``None``
    when neither says.

    Raises:
        ValueError: ``indexer_rope_interleave`` set and not a bool.
    """
    model_type = config_value(config, "model_type")
    return _interleave_flag(
        config, "indexer_rope_interleave", INDEXER_INTERLEAVED.get(str(model_type))
    )


def _interleave_flag(config: Any, key: str, default: bool | None) -> bool | None:
    value = config_value(config, key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be a bool, got {value!r}")
    return value


def _layout(interleaved: bool) -> Layout:
    return "interleaved" if interleaved else "half"


def mla_rotary_from_config(
    config: Any,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> DecoupledRotary:
    """The decoupled RoPE of an MLA attention (DeepSeek-V2/V3, V3.2, GLM-5, Kimi K2).

    Heads of ``qk_nope_head_dim + qk_rope_head_dim`` channels, the trailing
    ``qk_rope_head_dim`` rotated with the config's ``rope_theta`` and scaling (YaRN's
    attention factor in the tables; the softmax scale's ``mscale²`` stays the model's), in
    the interleaved layout unless ``rope_interleave`` is False (``deepseek_v3``'s flag;
    DeepSeek-V2's complex rotation is interleaved).

    Raises:
        ValueError: naming the key: ``qk_nope_head_dim`` / ``qk_rope_head_dim`` missing or
            not positive integers, ``rope_interleave`` not a bool, or the RoPE keys
            (:func:`~posenc.integrations.hf.rope_parameters.read_rope_parameters`).
    """
    nope, rope_dim = _mla_dims(config)
    rope = read_rope_parameters(config)
    if rope.rotary_dim != rope_dim:
        raise ValueError(
            f"partial_rotary_factor: MLA rotates all qk_rope_head_dim ({rope_dim}) channels "
            f"of its rope part; the config rotates {rope.rotary_dim}"
        )
    interleaved = bool(_interleave_flag(config, "rope_interleave", True))
    return DecoupledRotary(
        nope + rope_dim,
        rope_dim,
        base=rope.base,
        layout=_layout(interleaved),
        scaling=rope.scaling,
        device=device,
        dtype=dtype,
    )


def _mla_dims(config: Any) -> tuple[int, int]:
    dims = []
    for key in ("qk_nope_head_dim", "qk_rope_head_dim"):
        value = config_value(config, key)
        if value is None:
            raise ValueError(f"config needs {key} (an MLA config: DeepSeek-V2/V3, GLM-5, ...)")
        dims.append(positive_integer(key, value))
    return dims[0], dims[1]


def indexer_rotary_from_config(
    config: Any,
    *,
    interleaved: bool | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> RotaryEmbedding:
    """The RoPE of a DSA Lightning Indexer (DeepSeek-V3.2, GLM-5): a
    :class:`~posenc.rotary.RotaryEmbedding` over ``index_head_dim`` channels rotating the
    leading ``qk_rope_head_dim`` (HF splits ``[rope | pass]``), with the model's
    ``rope_theta`` and scaling.

    The layout: ``interleaved`` if given, else the config's ``indexer_rope_interleave``,
    else the model type's :data:`INDEXER_INTERLEAVED`. DeepSeek-V3.2's indexer is NeoX
    (``"half"``) while its main MLA rope is interleaved; ports that reused the main rope
    there ran fluently and ranked keys wrongly (vllm#28968, sglang#13530).

    Raises:
        ValueError: naming the key: ``index_head_dim`` or ``qk_rope_head_dim`` missing or
            not positive integers, a rope slice wider than the indexer head, a model type
            without a known indexer layout and none given, ``indexer_rope_interleave`` not
            a bool.
    """
    head_dim = config_value(config, "index_head_dim")
    if head_dim is None:
        raise ValueError("config needs index_head_dim (a DSA indexer: DeepSeek-V3.2, GLM-5)")
    head_dim = positive_integer("index_head_dim", head_dim)
    _, rope_dim = _mla_dims(config)
    if rope_dim > head_dim:
        raise ValueError(
            f"qk_rope_head_dim ({rope_dim}) must be at most index_head_dim ({head_dim})"
        )
    if interleaved is None:
        interleaved = indexer_interleaved(config)
        if interleaved is None:
            raise ValueError(
                f"model_type {config_value(config, 'model_type')!r} has no known indexer "
                f"layout ({sorted(INDEXER_INTERLEAVED)}); pass interleaved= or set "
                "indexer_rope_interleave"
            )
    elif not isinstance(interleaved, bool):
        raise ValueError(f"interleaved must be a bool or None, got {interleaved!r}")
    rope = read_rope_parameters(config)
    return RotaryEmbedding(
        head_dim,
        rotary_dim=rope_dim,
        base=rope.base,
        layout=_layout(interleaved),
        scaling=rope.scaling,
        device=device,
        dtype=dtype,
    )


def deepseek_v4_rope_parameters(config: Any) -> dict[str, Any]:
    """A DeepSeek-V4 config as a ``config.json``-like dict whose ``rope_parameters`` are
    keyed by rope type, ``{"main": {...}, "compress": {...}}``, as HF's
    ``DeepseekV4Config.__post_init__`` builds them:

    * ``main``: ``rope_type "default"``, ``rope_theta`` (1e4), no scaling (sliding-window
      layers);
    * ``compress``: the checkpoint's ``rope_scaling`` (YaRN) with ``compress_rope_theta``
      (160 000) and, for YaRN, ``attention_factor`` 1 unless set (V4's reference does not
      scale cos/sin);

    both with ``partial_rotary_factor`` = ``qk_rope_head_dim / head_dim`` (64 / 512 by
    default). A config whose ``rope_parameters`` are already nested is read as it is.
    """
    if not isinstance(config, Mapping) and not hasattr(config, "to_dict"):
        raise ValueError(
            f"config must be a transformers PretrainedConfig or a dict, got {config!r}"
        )
    head_dim = positive_integer("head_dim", config_value(config, "head_dim") or 512)
    out: dict[str, Any] = {"model_type": "deepseek_v4", "head_dim": head_dim}
    for key in ("max_position_embeddings", "original_max_position_embeddings"):
        if config_value(config, key) is not None:
            out[key] = config_value(config, key)
    params = config_value(config, "rope_parameters")
    if isinstance(params, Mapping) and all(isinstance(params.get(t), Mapping) for t in _V4_TYPES):
        out["rope_parameters"] = {t: dict(params[t]) for t in _V4_TYPES}
        return out
    partial = config_value(config, "partial_rotary_factor")
    if partial is None:
        rope_dim = config_value(config, "qk_rope_head_dim")
        partial = (
            64 / 512
            if rope_dim is None
            else positive_integer("qk_rope_head_dim", rope_dim) / head_dim
        )
    flat = params if isinstance(params, Mapping) else config_value(config, "rope_scaling")
    scaling = {k: v for k, v in dict(flat or {}).items() if k not in _V4_TYPES}
    theta = config_value(config, "rope_theta")
    compress_theta = config_value(config, "compress_rope_theta")
    main = {
        "rope_type": "default",
        "rope_theta": 10000.0 if theta is None else theta,
        "partial_rotary_factor": partial,
    }
    scaling.pop("rope_theta", None)
    compress = {
        **scaling,
        "rope_theta": 160000.0 if compress_theta is None else compress_theta,
        "partial_rotary_factor": partial,
    }
    rope_type = compress.pop("type", None)
    compress["rope_type"] = compress.get("rope_type", rope_type or "default")
    if compress["rope_type"] == "yarn":
        compress.setdefault("attention_factor", 1.0)
    out["rope_parameters"] = {"main": main, "compress": compress}
    return out


def deepseek_v4_rope_type(config: Any, layer_idx: int) -> V4RopeType:
    """Which rotary DeepSeek-V4 layer ``layer_idx`` uses: ``"main"`` for a
    ``sliding_attention`` layer, ``"compress"`` for a layer with a compressor (CSA, HCA),
    whose compressed entries use it too (HF ``DeepseekV4Attention.rope_layer_type``)."""
    layer_types = config_value(config, "layer_types")
    if not isinstance(layer_types, (list, tuple)):
        raise ValueError("config needs layer_types (load it with transformers.AutoConfig)")
    if isinstance(layer_idx, bool) or not isinstance(layer_idx, int):
        raise ValueError(f"layer_idx must be an int, got {layer_idx!r}")
    if not 0 <= layer_idx < len(layer_types):
        raise ValueError(f"layer_idx must be in [0, {len(layer_types)}), got {layer_idx}")
    return "main" if layer_types[layer_idx] == "sliding_attention" else "compress"


def deepseek_v4_rotary_from_config(
    config: Any,
    rope_type: V4RopeType = "compress",
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> DeepSeekV4Rotary:
    """DeepSeek-V4's rotary of ``rope_type`` (``"main"`` or ``"compress"``): the trailing
    ``head_dim · partial_rotary_factor`` channels, interleaved, with that type's base and
    scaling, values rotated with the keys and the output rotated back (eq. 26).

    Args:
        config: a ``DeepseekV4Config`` or a ``config.json`` dict
            (:func:`deepseek_v4_rope_parameters`).
        rope_type: ``"main"`` (sliding-window layers) or ``"compress"`` (layers with a
            compressor, and the compressed entries); :func:`deepseek_v4_rope_type` gives a
            layer's.

    Raises:
        ValueError: naming ``rope_type`` or the config key that is out of range.

    Example::

        >>> rope = deepseek_v4_rotary_from_config({"head_dim": 512, "qk_rope_head_dim": 64})
        >>> rope.rope_dim, rope.base
        (64, 160000.0)
    """
    if rope_type not in _V4_TYPES:
        raise ValueError(f"rope_type must be one of {list(_V4_TYPES)}, got {rope_type!r}")
    nested = deepseek_v4_rope_parameters(config)
    rope = read_rope_parameters(nested, rope_type)
    return DeepSeekV4Rotary(
        rope.head_dim,
        rope.rotary_dim,
        base=rope.base,
        layout="interleaved",
        scaling=rope.scaling,
        device=device,
        dtype=dtype,
    )

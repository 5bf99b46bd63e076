"""HF configs' per-layer attention read into posenc: NoPE layers, chunked local attention,
sliding windows and query temperatures (Llama-4's iRoPE, SmolLM3, Cohere 2's RNoPE-SWA,
Qwen-1's log-n, Ministral 3's β).

* :func:`layer_schedule_from_config`: one :class:`~posenc.models.LayerAttention` per layer,
  as ``transformers`` runs the model.
* :func:`model_options_from_config`: the same as :class:`~posenc.models.ModelConfig`'s
  ``nope_layers``, ``chunk_size``, ``window`` and ``query_scale``.

Keys read (a ``PretrainedConfig`` or a ``config.json`` dict; Llama-4's text part):

* Llama-4 (HF ``Llama4TextConfig`` / ``Llama4TextAttention``): ``no_rope_layers`` (one flag
  per layer, **1 = RoPE**, 0 = NoPE; empty: a NoPE layer every ``no_rope_layer_interval``
  = 4, as HF fills it), ``layer_types`` (``"chunked_attention"`` / ``"full_attention"``;
  default: chunked on the RoPE layers), ``attention_chunk_size`` (8192),
  ``attn_temperature_tuning`` (True: ``QueryScale.llama4(floor_scale, attn_scale)`` on the
  NoPE layers), ``floor_scale`` (8192), ``attn_scale`` (0.1). Defaults are HF's, used for a
  dict that omits a key; chunks and the temperature are on by default only for ``model_type``
  ``llama4_text`` / ``llama4`` (SmolLM3 shares ``no_rope_layers`` and has neither).
* SmolLM3 (``SmolLM3Config`` / ``SmolLM3Attention``): ``no_rope_layers`` as Llama-4's; a
  ``"sliding_attention"`` layer of ``layer_types`` gets ``sliding_window`` keys when
  ``use_sliding_window`` (HF's default ``layer_types`` puts them on the NoPE layers).
* Cohere 2 (``Cohere2Config`` / ``Cohere2Attention``: Command R7B, Command A's RNoPE-SWA):
  ``layer_types`` (default: ``"full_attention"`` every ``sliding_window_pattern`` = 4th
  layer, ``"sliding_attention"`` elsewhere) and ``sliding_window`` (4096): a sliding layer
  takes RoPE and the window, a full layer is global NoPE (HF rotates only ``if
  self.sliding_window is not None``).
* Qwen-1 (``QWenConfig``, remote code): ``use_logn_attn`` with ``seq_length``:
  ``QueryScale.logn(seq_length)`` on every layer (Qwen applies it in eval mode only).
* Ministral 3 / Mistral 4: ``rope_parameters['llama_4_scaling_beta']``:
  ``QueryScale.ministral3(β, original_max_position_embeddings)`` on every layer (the same
  factor as :func:`~posenc.integrations.hf.attention_scale_from_config`).

Not read: Llama-4's ``use_qk_norm`` (an L2 norm of q and k on the RoPE layers, no part of
positions), and the windows of other models' ``sliding_attention`` layers (Gemma, Mistral:
every layer reads as global RoPE there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from posenc._validate import check_int
from posenc.integrations.hf._common import (
    config_value,
    nonnegative_number,
    original_max_position,
    positive_integer,
    rope_dict,
)
from posenc.models import LayerAttention, ModelConfig
from posenc.softmax.query_scale import QueryScale

__all__ = ["layer_schedule_from_config", "model_options_from_config"]

#: HF ``Llama4TextConfig``'s defaults for the keys read here.
LLAMA4_DEFAULTS: dict[str, Any] = {
    "no_rope_layer_interval": 4,
    "attention_chunk_size": 8192,
    "attn_temperature_tuning": True,
    "floor_scale": 8192,
    "attn_scale": 0.1,
}
_LAYER_TYPES = ("chunked_attention", "full_attention")
#: HF ``Cohere2Config``'s defaults for a dict that omits them.
COHERE2_DEFAULTS: dict[str, Any] = {"sliding_window": 4096, "sliding_window_pattern": 4}


def _text_config(config: Any) -> Any:
    if not isinstance(config, Mapping) and not hasattr(config, "to_dict"):
        raise ValueError(
            f"config must be a transformers PretrainedConfig or a dict, got {config!r}"
        )
    text = config_value(config, "text_config")
    if text is None or config_value(config, "num_hidden_layers") is not None:
        return config
    if isinstance(text, Mapping) and "model_type" not in text and _is_llama4_type(config):
        return {**text, "model_type": "llama4_text"}  # Llama4Config's text part, HF's defaults
    return text


def _is_llama4(config: Any) -> bool:
    """True for a config with Llama-4's layer keys (SmolLM3's NoPE layers share two, and
    its ``model_type`` defaults to them as HF's ``SmolLM3Config``)."""
    keys = ("no_rope_layers", "no_rope_layer_interval", "attn_temperature_tuning")
    smollm3 = config_value(config, "model_type") == "smollm3"
    return (
        _is_llama4_type(config) or smollm3 or any(config_value(config, k) is not None for k in keys)
    )


def _is_llama4_type(config: Any) -> bool:
    return str(config_value(config, "model_type") or "").startswith("llama4")


def _llama4(config: Any, key: str) -> Any:
    """A Llama-4 key: the config's value, else HF's default (a dict may omit it). The two
    defaults that switch something on (``attention_chunk_size``'s chunks,
    ``attn_temperature_tuning``) are ``Llama4TextConfig``'s only: a dict of another
    ``model_type`` that omits them (SmolLM3's ``no_rope_layers``) gets neither."""
    value = config_value(config, key)
    if isinstance(config, Mapping) and key not in config:
        switches = key in ("attention_chunk_size", "attn_temperature_tuning")
        return None if switches and not _is_llama4_type(config) else LLAMA4_DEFAULTS[key]
    return value


def _rope_flags(config: Any, depth: int) -> list[bool]:
    """Per layer, True when the layer rotates (HF ``no_rope_layers[i]``, 1 = RoPE)."""
    flags = config_value(config, "no_rope_layers")
    if not flags:  # HF: `self.no_rope_layers if self.no_rope_layers else default`
        interval = positive_integer(
            "no_rope_layer_interval", _llama4(config, "no_rope_layer_interval")
        )
        return [(i + 1) % interval != 0 for i in range(depth)]
    if (
        isinstance(flags, (str, bytes))
        or not isinstance(flags, Sequence)
        or len(flags) != depth
        or any(isinstance(f, bool) or f not in (0, 1) for f in flags)
    ):
        raise ValueError(
            f"no_rope_layers must list one flag per layer (num_hidden_layers = {depth}), 1 = "
            f"RoPE and 0 = NoPE; got {flags!r}"
        )
    return [f == 1 for f in flags]


def _layer_types(config: Any, depth: int, known: tuple[str, ...]) -> list[str] | None:
    """``layer_types`` checked: one of ``known`` per layer, or None when absent."""
    types = config_value(config, "layer_types")
    if types is None:
        return None
    if isinstance(types, (str, bytes)) or not isinstance(types, Sequence) or len(types) != depth:
        raise ValueError(f"layer_types must list one type per layer ({depth}); got {types!r}")
    unknown = sorted({str(t) for t in types if t not in known})
    if unknown:
        raise ValueError(
            f"layer_types {unknown} are not read here; layer_schedule_from_config reads "
            f"{', '.join(map(repr, known))} for model_type "
            f"{config_value(config, 'model_type')!r}"
        )
    return list(types)


def _chunk_flags(config: Any, rope: list[bool]) -> list[bool]:
    """Per layer, True when its attention is chunked (``layer_types``, default the RoPE
    layers as HF's ``Llama4TextConfig`` when there is a chunk size, else none)."""
    smollm3 = config_value(config, "model_type") == "smollm3"
    known = ("full_attention", "sliding_attention") if smollm3 else _LAYER_TYPES
    types = _layer_types(config, len(rope), known)
    if types is None:
        chunks = _llama4(config, "attention_chunk_size") is not None or _is_llama4_type(config)
        return list(rope) if chunks else [False] * len(rope)
    return [t == "chunked_attention" for t in types]


def _sliding_window(config: Any, defaults: Mapping[str, Any]) -> int | None:
    """``sliding_window`` (HF's default for a dict that omits it), an int ≥ 1 or None."""
    if isinstance(config, Mapping) and "sliding_window" not in config:
        window = defaults.get("sliding_window")
    else:
        window = config_value(config, "sliding_window")
    return None if window is None else positive_integer("sliding_window", window)


def _smollm3_windows(config: Any, depth: int) -> list[int | None]:
    """SmolLM3's window per layer: ``sliding_window`` on ``"sliding_attention"`` layers when
    ``use_sliding_window`` (HF ``SmolLM3Attention``), else none."""
    types = _layer_types(config, depth, ("full_attention", "sliding_attention"))
    window = _sliding_window(config, {})
    if not config_value(config, "use_sliding_window") or window is None or types is None:
        return [None] * depth
    return [window if t == "sliding_attention" else None for t in types]


def _cohere2_schedule(config: Any, depth: int) -> tuple[LayerAttention, ...]:
    """Cohere 2's layers: RoPE and the window on the sliding layers, global NoPE elsewhere."""
    types = _layer_types(config, depth, ("full_attention", "sliding_attention"))
    if types is None:  # HF's `sliding_window_pattern` (4 by default), still in Hub configs
        pattern = config_value(config, "sliding_window_pattern")
        pattern = positive_integer(
            "sliding_window_pattern",
            COHERE2_DEFAULTS["sliding_window_pattern"] if pattern is None else pattern,
        )
        types = [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(depth)
        ]
    window = _sliding_window(config, COHERE2_DEFAULTS)
    if window is None and "sliding_attention" in types:
        raise ValueError(
            "sliding_window must be set for cohere2's sliding_attention layers (HF rotates "
            "and windows only those with a window)"
        )
    return tuple(
        LayerAttention(window=window) if t == "sliding_attention" else LayerAttention(encoded=False)
        for t in types
    )


def _scales(config: Any) -> tuple[QueryScale | None, bool]:
    """The config's query scale and whether it goes to the NoPE layers only (Llama-4)."""
    found: list[tuple[QueryScale, bool]] = []
    if _is_llama4(config) and _llama4(config, "attn_temperature_tuning"):
        floor = positive_integer("floor_scale", _llama4(config, "floor_scale"))
        beta = _llama4(config, "attn_scale")
        found.append((QueryScale.llama4(floor, nonnegative_number("attn_scale", beta)), True))
    if config_value(config, "use_logn_attn"):
        # Qwen's trained length; ln(seq_length) divides
        seq_length = check_int(
            "seq_length (with use_logn_attn)", config_value(config, "seq_length"), low=2
        )
        found.append((QueryScale.logn(seq_length), False))
    raw = config_value(config, "rope_parameters") or config_value(config, "rope_scaling")
    if isinstance(raw, Mapping) and raw.get("llama_4_scaling_beta") is not None:
        params = rope_dict(config)  # validated only when it holds β (nested ones have none)
        original = original_max_position(config, params)
        key = "rope_parameters['llama_4_scaling_beta']"
        beta = nonnegative_number(key, params["llama_4_scaling_beta"])
        found.append((QueryScale.ministral3(beta, original), False))
    if len(found) > 1:
        raise ValueError(
            "config sets more than one query temperature (attn_temperature_tuning, "
            "use_logn_attn, llama_4_scaling_beta); no model combines them"
        )
    return found[0] if found else (None, False)


def layer_schedule_from_config(config: Any) -> tuple[LayerAttention, ...]:
    """Per layer, what ``transformers`` gives its attention: RoPE or NoPE, chunk, temperature.

    Reference: HF 5.23.0 ``Llama4TextAttention`` (``use_rope = no_rope_layers[i]``, the
    temperature ``if attn_temperature_tuning and not use_rope``), ``Llama4TextModel``
    (``layer_types`` picks ``create_chunked_causal_mask`` or ``create_causal_mask``), Qwen-1
    ``QWenAttention`` (``use_logn_attn``) and ``Ministral3Attention``; tested against HF's
    attention in float64.

    Args:
        config: a ``PretrainedConfig`` or ``config.json`` dict (a Llama-4 multimodal config's
            ``text_config`` is read when it has no ``num_hidden_layers`` itself).

    Returns:
        one :class:`~posenc.models.LayerAttention` per layer (``num_hidden_layers``).

    Raises:
        ValueError: naming the key, for a malformed or unsupported value.

    Example::

        >>> layers = layer_schedule_from_config(
        ...     {"model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": 16}
        ... )
        >>> [(a.encoded, a.chunk_size) for a in layers]
        [(True, 16), (True, 16), (True, 16), (False, None)]
        >>> layers[3].query_scale
        QueryScale(mode='floor_log', length=8192, beta=0.1, shift=1)
    """
    config = _text_config(config)
    depth = positive_integer("num_hidden_layers", config_value(config, "num_hidden_layers"))
    scale, nope_only = _scales(config)
    if config_value(config, "model_type") == "cohere2":
        if scale is not None:
            raise ValueError("config: cohere2 has no query temperature; got one")
        return _cohere2_schedule(config, depth)
    if not _is_llama4(config):
        return tuple(LayerAttention(query_scale=scale) for _ in range(depth))
    rope = _rope_flags(config, depth)
    chunked = _chunk_flags(config, rope)
    chunk = _llama4(config, "attention_chunk_size")
    if any(chunked) and chunk is not None:
        chunk = positive_integer("attention_chunk_size", chunk)
    elif any(chunked):  # HF's create_chunked_causal_mask raises too
        raise ValueError("attention_chunk_size must be set for chunked_attention layers")
    windows: list[int | None] = [None] * depth
    if config_value(config, "model_type") == "smollm3":
        windows = _smollm3_windows(config, depth)
    return tuple(
        LayerAttention(
            encoded=uses_rope,
            chunk_size=chunk if is_chunked else None,
            query_scale=scale if not (nope_only and uses_rope) else None,
            window=window,
        )
        for uses_rope, is_chunked, window in zip(rope, chunked, windows, strict=True)
    )


def model_options_from_config(config: Any) -> dict[str, Any]:
    """:func:`layer_schedule_from_config` as :class:`~posenc.models.ModelConfig` keyword
    arguments ``nope_layers``, ``chunk_size``, ``window``, ``query_scale``.

    Raises ``ValueError`` when the schedule is not one a ``ModelConfig`` expresses (chunks
    or a window on a NoPE layer, a global RoPE layer beside chunked or windowed ones, a
    temperature on RoPE layers beside NoPE ones); checked by rebuilding it with
    :meth:`ModelConfig.layer_attention`.

    Example::

        >>> opts = model_options_from_config({"use_logn_attn": True, "seq_length": 2048,
        ...                                   "num_hidden_layers": 2})
        >>> opts["query_scale"], opts["nope_layers"]
        (QueryScale(mode='log_n', length=2048, beta=0.1, shift=0), ())
    """
    layers = layer_schedule_from_config(config)
    chunks = {a.chunk_size for a in layers if a.chunk_size is not None}
    windows = {a.window for a in layers if a.window is not None}
    scales = {a.query_scale for a in layers if a.query_scale is not None}
    options: dict[str, Any] = {
        "nope_layers": tuple(i for i, a in enumerate(layers) if not a.encoded),
        "chunk_size": chunks.pop() if len(chunks) == 1 else None,
        "window": windows.pop() if len(windows) == 1 else None,
        "query_scale": scales.pop() if len(scales) == 1 else None,
    }
    unexpressed = ValueError(
        f"config: its layers {layers} are not one ModelConfig's schedule (nope_layers, "
        "chunk_size or window on the other layers, query_scale on the NoPE layers or on all)"
    )
    if options["chunk_size"] is not None and options["window"] is not None:
        raise unexpressed
    rebuilt = ModelConfig(depth=len(layers), **options)
    if [rebuilt.layer_attention(i) for i in range(len(layers))] != list(layers):
        raise unexpressed
    return options

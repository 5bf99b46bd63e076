"""HF ``transformers`` RoPE configs read into posenc: the functions that
:mod:`posenc.integrations.hf` exports (see its docstring) and the readers
:mod:`posenc.integrations.hf_patch` builds each patched module with.

Kept apart from :mod:`posenc.integrations.hf` so that the patching module can read configs
without importing the module that re-exports it (no import cycle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from posenc.integrations.hf_conventions import DEFAULT_IGNORES_PARTIAL
from posenc.integrations.hf_keys import (
    _EXTRA_KEYS,
    _get,
    _head_dim,
    _integer,
    _max_positions,
    _number,
    _original_max_position,
    _read_extras,
    _rope_dict,
)
from posenc.integrations.hf_layers import layer_schedule_from_config, model_options_from_config
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.multi_axis import MultiAxisRotary
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import (
    DynamicNTK,
    Linear,
    Llama3,
    LongRoPE,
    Proportional,
    Scaling,
    YaRN,
)

__all__ = [
    "DEFAULT_IGNORES_PARTIAL",
    "attention_scale_from_config",
    "frequencies_from_config",
    "layer_schedule_from_config",
    "model_options_from_config",
    "mrope_from_config",
    "rope_from_config",
    "to_rope_parameters",
]

DEFAULT_THETA = 10000.0  # HF's RotaryEmbeddingConfigMixin.default_theta

_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
_L0 = "original_max_position_embeddings"
# rope_type -> (required, optional) keys beyond _COMMON_KEYS. original_max_position_embeddings
# is optional: like HF we fill it from the config (see _original_max_position).
_YARN_OPTIONAL = ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")
_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "yarn": (("factor",), (_L0, "truncate", *_YARN_OPTIONAL)),
    "longrope": (("short_factor", "long_factor"), (_L0, "factor", "attention_factor")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor"), (_L0,)),
    "proportional": ((), ("factor",)),
}
_CLASSES: dict[str, type[Scaling]] = {
    cls.type_name: cls for cls in (Linear, DynamicNTK, YaRN, LongRoPE, Llama3, Proportional)
}
_FIELD = {"attention_factor": "attention_factor_override"}  # HF key -> dataclass field
_HF_KEY = {field: key for key, field in _FIELD.items()}
# Scaling fields HF keeps outside rope_parameters (or has no notion of).
_NOT_IN_ROPE_PARAMETERS = frozenset(
    {"max_position_embeddings", "mode", "target_length", "dynamic", "extrapolation_factor"}
)
# GPT-NeoX's legacy names; their defaults are model-specific (rotary_pct defaults to 0.25).
_MODEL_ALIASES = frozenset({"rotary_pct", "rotary_emb_base"})

# ------------------------------------------------------------------------- reading a config


@dataclass(frozen=True)
class _HFRope:
    """A config's RoPE, read and validated once: what every function below works from."""

    rope_type: str
    base: float
    head_dim: int
    rotary_dim: int
    scaling: Scaling | None
    #: PhiMoE's LongRoPE ``(short_mscale, long_mscale, L0)``: the attention factor by length.
    mscales: tuple[float, float, int] | None = None
    #: Ministral 3 / Mistral 4's query scale β (an attention temperature, not a RoPE key).
    llama_4_scaling_beta: float | None = None
    #: M-RoPE ``(mrope_section, interleaved)`` (Qwen2/2.5/3-VL, GLM-4V, ...).
    mrope: tuple[tuple[int, ...], bool] | None = None


def _read(config: Any, layer_type: str | None = None) -> _HFRope:
    """Validate a config's RoPE (the ``layer_type`` entry of a nested one) and map it onto
    posenc's scaling dataclasses."""
    if not isinstance(config, Mapping) and not hasattr(config, "to_dict"):
        raise ValueError(
            f"config must be a transformers PretrainedConfig or a dict, got {config!r}"
        )
    if isinstance(config, Mapping):
        aliases = sorted(k for k in _MODEL_ALIASES if k in config)
        if aliases:
            raise ValueError(
                f"model-specific key(s) {aliases}: load the dict with transformers.AutoConfig "
                "(which converts them with the model's defaults) and pass the config object"
            )
    params = _rope_dict(config, layer_type)
    rope_type = params["rope_type"]
    if rope_type not in _KEYS:
        raise ValueError(f"rope_type must be one of {sorted(_KEYS)}, got {rope_type!r}")
    required, optional = _KEYS[rope_type]
    extras = {k: params.pop(k) for k in _EXTRA_KEYS if k in params}
    unknown = sorted(set(params) - _COMMON_KEYS - set(required) - set(optional))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in rope_parameters for rope_type {rope_type!r}")
    missing = sorted(k for k in required if params.get(k) is None)
    if missing:
        raise ValueError(f"missing required key(s) {missing} in rope_parameters for {rope_type!r}")

    theta = params.get("rope_theta")
    theta = _get(config, "rope_theta") if theta is None else theta
    base = _number("rope_theta", DEFAULT_THETA if theta is None else theta)
    partial = params.get("partial_rotary_factor")
    partial = _get(config, "partial_rotary_factor") if partial is None else partial
    partial = 1.0 if partial is None else _number("partial_rotary_factor", partial)
    if partial > 1.0:
        raise ValueError(
            f"rope_parameters['partial_rotary_factor'] must be in (0, 1], got {partial}"
        )
    head_dim = _head_dim(config)
    rotary_dim = int(head_dim * partial)  # HF's truncation
    ignores_partial = (
        rope_type == "default" and _get(config, "model_type") in DEFAULT_IGNORES_PARTIAL
    )
    if rope_type == "proportional" or ignores_partial:
        rotary_dim = head_dim
    if rotary_dim == head_dim and head_dim % 2:
        source = next(
            (key for key in ("head_dim", "qk_rope_head_dim") if _get(config, key) is not None),
            "hidden_size // num_attention_heads",
        )
        raise ValueError(
            f"head_dim must be even (RoPE rotates channel pairs); the config's {source} gives "
            f"{head_dim}"
        )
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(
            f"rope_parameters['partial_rotary_factor'] = {partial} gives an odd or empty rotary "
            f"dim int({head_dim}·{partial}) = {rotary_dim}; it must be even and >= 2"
        )

    mscales, beta, mrope = _read_extras(config, extras, rope_type, rotary_dim, params)
    if mscales is not None:  # HF's PhiMoE recomputes the init (short) frequencies every call
        params["long_factor"] = params["short_factor"]
    scaling: Scaling | None = None
    if rope_type != "default":
        kwargs = {
            _FIELD.get(key, key): value
            for key, value in params.items()
            if key not in _COMMON_KEYS and value is not None  # None: unset, as in HF
        }
        if rope_type in ("yarn", "longrope", "llama3"):
            kwargs[_L0] = _original_max_position(config, params)
        if rope_type == "dynamic" or (rope_type == "longrope" and "factor" not in kwargs):
            kwargs["max_position_embeddings"] = _max_positions(config, rope_type)
        if rope_type == "proportional":
            kwargs["partial_rotary_factor"] = partial
        try:
            scaling = _CLASSES[rope_type](**kwargs)
            scaling.inv_freq(rotary_dim, base)  # e.g. LongRoPE factor lists of the wrong length
        except (ValueError, TypeError) as err:
            raise ValueError(f"rope_parameters for rope_type {rope_type!r}: {err}") from None
    return _HFRope(rope_type, base, head_dim, rotary_dim, scaling, mscales, beta, mrope)


# ------------------------------------------------------------------------- public conversions


def frequencies_from_config(
    config: Any, seq_len: int | None = None, *, layer_type: str | None = None
) -> tuple[Tensor, float]:
    """Inverse frequencies and attention factor of an HF config, as ``transformers`` computes them.

    .. math:: (θ', A) = \\mathrm{ROPE\\_INIT\\_FUNCTIONS[rope\\_type]}(config, seq\\_len)

    computed by posenc's scalings in float64 and rounded once to float32 (HF's dtype).
    Reference: ``transformers`` 5.23.0 ``ROPE_INIT_FUNCTIONS`` and the models'
    ``compute_default_rope_parameters``; equal to ≤ 1e-6 relative, ``A`` exactly (tested).

    ``seq_len`` plays the part of HF's runtime ``max(position_ids) + 1``: for ``dynamic`` it
    sets the NTK base (``None`` or ≤ ``max_position_embeddings``: plain RoPE, HF's init
    value); for ``longrope`` it picks ``long_factor`` iff ``seq_len > L0`` (``None``: short).
    Other types ignore it. HF's dynamic module keeps the longest length seen; pass that.

    Args:
        config: a ``transformers`` ``PretrainedConfig`` or the ``config.json`` dict, in the
            ``rope_parameters`` form or the legacy ``rope_scaling``/``rope_theta`` form.
        seq_len: the current sequence length, ≥ 1, or ``None``.

    Shape:
        inv_freq: ``(rotary_dim // 2,)`` float32 (``head_dim // 2`` for ``proportional``).

    Returns:
        ``(inv_freq, attention_factor)``; ``A`` multiplies cos and sin.

    Example::

        >>> inv_freq, a = frequencies_from_config({"head_dim": 8, "rope_theta": 100.0})
        >>> inv_freq
        tensor([1.0000, 0.3162, 0.1000, 0.0316])
    """
    if seq_len is not None:
        _integer("seq_len", seq_len)
    rope = _read(config, layer_type)
    if rope.scaling is None:
        inv_freq = rope_inv_freq(rope.rotary_dim, rope.base)
        return inv_freq.to(torch.float32), 1.0
    inv_freq = rope.scaling.inv_freq(rope.rotary_dim, rope.base, seq_len=seq_len)
    if rope.mscales is not None:  # PhiMoE: the factor follows the length, not the scaling
        short, long, original_max = rope.mscales
        return inv_freq.to(torch.float32), long if (seq_len or 0) > original_max else short
    return inv_freq.to(torch.float32), float(rope.scaling.attention_factor)


def attention_scale_from_config(config: Any, positions: Tensor) -> Tensor:
    """The query scale of ``llama_4_scaling_beta`` (Ministral 3, Mistral 4) at ``positions``.

    .. math:: s(m) = 1 + β \\log(1 + \\lfloor m / L_0 \\rfloor)

    HF multiplies the rotated queries by it in attention (``get_llama_4_attn_scale``), so it is
    no part of the RoPE tables: :func:`patch_rotary` leaves it to HF's attention, and a posenc
    model built with :func:`rope_from_config` multiplies its queries by this. All ones when the
    config has no β.

    Args:
        config: as :func:`frequencies_from_config`.
        positions: ``(batch, seq)`` or ``(seq,)`` positions.

    Returns:
        float32 tensor of the positions' shape.
    """
    rope = _read(config)
    if rope.llama_4_scaling_beta is None:
        return torch.ones(positions.shape, dtype=torch.float32, device=positions.device)
    params = _rope_dict(config)
    original_max = _original_max_position(config, params)
    steps = torch.floor(positions.float() / original_max)
    return 1 + rope.llama_4_scaling_beta * torch.log(1 + steps)


def rope_from_config(
    config: Any,
    *,
    layer_type: str | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> RotaryEmbedding:
    """The :class:`RotaryEmbedding` (half layout) an HF config describes.

    ``rotary_dim = int(head_dim · partial_rotary_factor)`` (full ``head_dim`` for
    ``proportional`` and for the default type of :data:`DEFAULT_IGNORES_PARTIAL` models),
    ``base = rope_theta`` and the scaling of ``rope_type``; dynamic NTK uses HF's runtime
    mode. Inverse of :func:`to_rope_parameters`.

    Args:
        config: a ``PretrainedConfig`` or ``config.json`` dict (see
            :func:`frequencies_from_config`).
        device: default device of the module's frequencies.
        dtype: cos/sin table dtype (``None``: exact, see :class:`RotaryEmbedding`).

    Example::

        >>> rope = rope_from_config({"head_dim": 64, "rope_theta": 5e5})
        >>> rope.base, rope.rotary_dim
        (500000.0, 64)
    """
    rope = _read(config, layer_type)
    if rope.mscales is not None:
        raise ValueError(
            "rope_parameters['short_mscale'] / ['long_mscale'] (PhiMoE) switch the attention "
            "factor with the length, which a RotaryEmbedding cannot: use patch_rotary (which "
            "applies them) or frequencies_from_config(config, seq_len)"
        )
    if rope.mrope is not None:
        raise ValueError(
            "rope_parameters['mrope_section'] describes M-RoPE over (t, h, w) positions: build it "
            "with posenc.integrations.hf.mrope_from_config, or patch_rotary the model"
        )
    return _rope_module(rope, device, dtype)


def mrope_from_config(
    config: Any, *, layer_type: str | None = None, interleaved: bool | None = None
) -> MultiAxisRotary:
    """The M-RoPE an HF config describes (``rope_parameters['mrope_section']``), as posenc's
    :meth:`MultiAxisRotary.mrope <posenc.rotary.MultiAxisRotary.mrope>`: pair ``i`` reads the
    t, h or w position of HF's ``(3, batch, seq)`` ``position_ids``, consecutive sections
    (Qwen2/2.5-VL) or interleaved ones (``mrope_interleaved``, Qwen3-VL); ``rotary_dim``,
    base and scaling as :func:`rope_from_config`. ``interleaved`` overrides the config's
    ``mrope_interleaved`` (Qwen3-VL's code interleaves without the key; :func:`patch_rotary`
    reads it off HF's module).

    Example::

        >>> mrope = mrope_from_config({"head_dim": 16, "rope_parameters": {
        ...     "rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}})
        >>> mrope.head_dim
        16
    """
    rope = _read(config, layer_type)
    if rope.mrope is None:
        raise ValueError("config has no rope_parameters['mrope_section']: use rope_from_config")
    sections, configured = rope.mrope
    interleaved = configured if interleaved is None else interleaved
    return MultiAxisRotary.mrope(
        rope.rotary_dim, sections, base=rope.base, interleaved=interleaved, scaling=rope.scaling
    )


def _rope_module(
    rope: _HFRope, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> RotaryEmbedding:
    return RotaryEmbedding(
        rope.head_dim,
        rotary_dim=rope.rotary_dim,
        base=rope.base,
        layout="half",
        scaling=rope.scaling,
        device=device,
        dtype=dtype,
    )


def _partial_factor(rotary_dim: int, head_dim: int) -> float:
    """The float p with ``int(head_dim · p) == rotary_dim`` (HF truncates)."""
    p = rotary_dim / head_dim
    if int(head_dim * p) != rotary_dim:
        p = math.nextafter(p, math.inf)
    return p


def to_rope_parameters(rope: RotaryEmbedding) -> dict[str, Any]:
    """HF ``rope_parameters`` dict of a :class:`RotaryEmbedding` (inverse of
    :func:`rope_from_config`).

    Carries ``rope_type``, ``rope_theta``, ``partial_rotary_factor`` (when
    ``rotary_dim < head_dim``) and the scaling's fields under HF's names
    (``attention_factor_override`` → ``attention_factor``). Not carried, because HF keeps
    them outside ``rope_parameters``: ``head_dim`` and ``max_position_embeddings`` (needed by
    ``dynamic``, and by ``longrope`` without ``factor``); nor the layout (HF is half-split).
    posenc-only scalings (``NTKAware``, ``DynamicNTK(mode="fixed")``, dynamic ``YaRN``, ``YaRN``
    with ``extrapolation_factor`` ≠ 1, the vLLM ones of :mod:`posenc.rotary.scaling.vllm`) have
    no HF form and raise ValueError; so does ``length_rule="query"`` with a length-dependent
    scaling (HF follows each forward's length).

    Example::

        >>> to_rope_parameters(RotaryEmbedding(64, base=5e5))
        {'rope_type': 'default', 'rope_theta': 500000.0}
    """
    if not isinstance(rope, RotaryEmbedding):
        raise ValueError(f"rope must be a posenc RotaryEmbedding, got {type(rope).__name__}")
    scaling = getattr(rope, "scaling", None)
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": float(rope.base)}
    if rope.rotary_dim != rope.head_dim and not isinstance(scaling, Proportional):
        out["partial_rotary_factor"] = _partial_factor(rope.rotary_dim, rope.head_dim)
    if scaling is None:
        return out
    rope_type = type(scaling).type_name
    posenc_only = (
        getattr(scaling, "mode", "hf") != "hf"
        or getattr(scaling, "dynamic", False)
        or getattr(scaling, "extrapolation_factor", 1.0) != 1.0  # vLLM's YaRN key, not HF's
    )
    if rope_type not in _CLASSES or posenc_only:
        raise ValueError(
            f"scaling {scaling!r} has no HF rope_type (HF knows default, linear, dynamic in HF "
            "mode, static yarn, longrope, llama3 and proportional)"
        )
    if scaling.depends_on_length and rope.length_rule != "forward":
        raise ValueError(
            f"rope.length_rule is {rope.length_rule!r}: HF picks {rope_type}'s length per "
            "forward (length_rule='forward'); rope_parameters have no key for another rule"
        )
    out["rope_type"] = rope_type
    for field in fields(scaling):
        value = getattr(scaling, field.name)
        if field.name not in _NOT_IN_ROPE_PARAMETERS and value is not None:
            out[_HF_KEY.get(field.name, field.name)] = (
                list(value) if isinstance(value, tuple) else value
            )
    return out

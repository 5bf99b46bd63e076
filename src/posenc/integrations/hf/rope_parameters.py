"""An HF config's RoPE, read and validated once: :func:`read_rope_parameters`.

Both config forms are read: the current ``rope_parameters`` dict (``rope_type``,
``rope_theta``, ``partial_rotary_factor``, ...) and the legacy one (top-level ``rope_theta``
and ``partial_rotary_factor``, ``rope_scaling = {"type" | "rope_type": ..., ...}``), flat or
nested per layer type. Each rope type's keys map onto one of posenc's scaling dataclasses
(:data:`SCALINGS`); the model-specific keys HF models read beyond their rope type's are
validated too (PhiMoE's short/long mscale, Ministral 3's ``llama_4_scaling_beta``, M-RoPE's
sections). Validation is stricter than HF's (which only warns): unknown keys, missing required
keys and out-of-range values raise :class:`ValueError` naming the key.

Reference: ``transformers`` 5.23.0 ``modeling_rope_utils.py`` (``ROPE_INIT_FUNCTIONS``,
``standardize_rope_params``). The conversions of :mod:`posenc.integrations.hf.config` and the
patching of :mod:`posenc.integrations.hf.patch` both start from this reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from posenc._validate import check_int
from posenc.integrations.hf._common import (
    L0,
    config_head_dim,
    config_value,
    max_positions,
    nonnegative_number,
    original_max_position,
    positive_integer,
    rope_dict,
    rope_number,
)
from posenc.integrations.hf.conventions import DEFAULT_IGNORES_PARTIAL
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
    "DEFAULT_THETA",
    "FIELD_OF_KEY",
    "SCALINGS",
    "RopeParameters",
    "config_value",
    "read_rope_parameters",
]

DEFAULT_THETA = 10000.0  # HF's RotaryEmbeddingConfigMixin.default_theta

#: HF ``rope_type`` -> the posenc scaling dataclass it is read into.
SCALINGS: dict[str, type[Scaling]] = {
    cls.type_name: cls for cls in (Linear, DynamicNTK, YaRN, LongRoPE, Llama3, Proportional)
}
#: HF ``rope_parameters`` key -> the scaling field of another name.
FIELD_OF_KEY = {"attention_factor": "attention_factor_override"}

_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
# rope_type -> (required, optional) keys beyond _COMMON_KEYS. original_max_position_embeddings
# is optional: like HF we fill it from the config (see original_max_position).
_YARN_OPTIONAL = ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")
_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "yarn": (("factor",), (L0, "truncate", *_YARN_OPTIONAL)),
    "longrope": (("short_factor", "long_factor"), (L0, "factor", "attention_factor")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor"), (L0,)),
    "proportional": ((), ("factor",)),
}
# Keys HF models read from rope_parameters beyond the rope type's own (see _read_extras).
_EXTRA_KEYS = (
    "short_mscale",
    "long_mscale",
    "llama_4_scaling_beta",
    "max_position_embeddings",
    "mrope_section",
    "mrope_interleaved",
)
# GPT-NeoX's legacy names; their defaults are model-specific (rotary_pct defaults to 0.25).
_MODEL_ALIASES = frozenset({"rotary_pct", "rotary_emb_base"})


@dataclass(frozen=True)
class RopeParameters:
    """A config's RoPE, read and validated: what the conversions and the patching work from.

    Args:
        rope_type: HF's ``rope_type`` (``"default"``, ``"linear"``, ``"yarn"``, ...).
        base: ``rope_theta``.
        head_dim: channels per attention head.
        rotary_dim: channels rotated, ``int(head_dim · partial_rotary_factor)`` (HF's
            truncation; the full ``head_dim`` where HF ignores the factor).
        scaling: the posenc scaling of ``rope_type``; ``None`` for ``"default"``.
        mscales: PhiMoE's LongRoPE ``(short_mscale, long_mscale, L0)``: the attention factor
            by length.
        llama_4_scaling_beta: Ministral 3 / Mistral 4's query scale β (an attention
            temperature, not a RoPE key).
        mrope: M-RoPE ``(mrope_section, interleaved)`` (Qwen2/2.5/3-VL, GLM-4V, ...).
    """

    rope_type: str
    base: float
    head_dim: int
    rotary_dim: int
    scaling: Scaling | None
    mscales: tuple[float, float, int] | None = None
    llama_4_scaling_beta: float | None = None
    mrope: tuple[tuple[int, ...], bool] | None = None

    def rotary_embedding(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> RotaryEmbedding:
        """The half-layout :class:`RotaryEmbedding` of ``head_dim``, ``rotary_dim``, ``base``
        and ``scaling`` (M-RoPE sections and PhiMoE's mscales are not part of it)."""
        return RotaryEmbedding(
            self.head_dim,
            rotary_dim=self.rotary_dim,
            base=self.base,
            layout="half",
            scaling=self.scaling,
            device=device,
            dtype=dtype,
        )


def read_rope_parameters(config: Any, layer_type: str | None = None) -> RopeParameters:
    """Validate a config's RoPE (the ``layer_type`` entry of a nested one) and map it onto
    posenc's scaling dataclasses.

    Args:
        config: a ``transformers`` ``PretrainedConfig`` or the ``config.json`` dict.
        layer_type: the entry of a nested per-layer-type ``rope_parameters`` to read; must be
            ``None`` for a flat one.

    Returns:
        the :class:`RopeParameters`.

    Raises:
        ValueError: naming the key, for an unknown, missing or out-of-range one.

    Example::

        >>> read_rope_parameters({"head_dim": 64, "rope_theta": 5e5}).rotary_dim
        64
    """
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
    params = rope_dict(config, layer_type)
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
    theta = config_value(config, "rope_theta") if theta is None else theta
    base = rope_number("rope_theta", DEFAULT_THETA if theta is None else theta)
    partial = params.get("partial_rotary_factor")
    partial = config_value(config, "partial_rotary_factor") if partial is None else partial
    partial = 1.0 if partial is None else rope_number("partial_rotary_factor", partial)
    if partial > 1.0:
        raise ValueError(
            f"rope_parameters['partial_rotary_factor'] must be in (0, 1], got {partial}"
        )
    head_dim = config_head_dim(config, layer_type)
    rotary_dim = int(head_dim * partial)  # HF's truncation
    ignores_partial = (
        rope_type == "default" and config_value(config, "model_type") in DEFAULT_IGNORES_PARTIAL
    )
    if rope_type == "proportional" or ignores_partial:
        rotary_dim = head_dim
    if rotary_dim == head_dim and head_dim % 2:
        source = next(
            (k for k in ("head_dim", "qk_rope_head_dim") if config_value(config, k) is not None),
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
            FIELD_OF_KEY.get(key, key): value
            for key, value in params.items()
            if key not in _COMMON_KEYS and value is not None  # None: unset, as in HF
        }
        if rope_type in ("yarn", "longrope", "llama3"):
            kwargs[L0] = original_max_position(config, params)
        if rope_type == "dynamic" or (rope_type == "longrope" and "factor" not in kwargs):
            kwargs["max_position_embeddings"] = max_positions(config, rope_type)
        if rope_type == "proportional":
            kwargs["partial_rotary_factor"] = partial
        try:
            scaling = SCALINGS[rope_type](**kwargs)
            scaling.inv_freq(rotary_dim, base)  # e.g. LongRoPE factor lists of the wrong length
        except (ValueError, TypeError) as err:
            raise ValueError(f"rope_parameters for rope_type {rope_type!r}: {err}") from None
    return RopeParameters(rope_type, base, head_dim, rotary_dim, scaling, mscales, beta, mrope)


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
        short = rope_number("short_mscale", extras["short_mscale"])
        long = rope_number("long_mscale", extras["long_mscale"])
        mscales = (short, long, original_max_position(config, params))
    beta = extras.get("llama_4_scaling_beta")
    if beta is not None:
        beta = nonnegative_number("rope_parameters['llama_4_scaling_beta']", beta)
    if extras.get("max_position_embeddings") is not None:
        inner = positive_integer(
            "rope_parameters['max_position_embeddings']", extras["max_position_embeddings"]
        )
        outer = config_value(config, "max_position_embeddings")
        if outer is not None and inner != outer:
            raise ValueError(
                f"rope_parameters['max_position_embeddings'] ({inner}) != the config's "
                f"max_position_embeddings ({outer})"
            )
    mrope = None
    if extras.get("mrope_section") is not None:
        section = extras["mrope_section"]
        wanted = (
            "rope_parameters['mrope_section'] must be 3 positive (t, h, w) pair counts summing "
            f"to rotary_dim / 2 = {rotary_dim // 2}"
        )
        if isinstance(section, (list, tuple)):
            try:
                section = [
                    check_int(f"mrope_section[{i}]", n, low=1) for i, n in enumerate(section)
                ]
            except ValueError as error:
                raise ValueError(f"{wanted}; {error}") from None
        if not isinstance(section, list) or len(section) != 3 or 2 * sum(section) != rotary_dim:
            raise ValueError(f"{wanted}, got {section!r}")
        interleaved = extras.get("mrope_interleaved", False)
        if not isinstance(interleaved, bool):
            raise ValueError(
                f"rope_parameters['mrope_interleaved'] must be a bool, got {interleaved!r}"
            )
        mrope = (tuple(section), interleaved)
    elif extras.get("mrope_interleaved") is not None:
        raise ValueError("rope_parameters['mrope_interleaved'] without ['mrope_section']")
    return mscales, beta, mrope

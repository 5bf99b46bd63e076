"""A model config's RoPE as data: :class:`RopeSpec`, read once by :func:`rope_spec`, and
its angles.

The spec comes from :func:`~posenc.integrations.hf.rope_parameters.read_rope_parameters`
(``rope_type``, base, partial width, scaling, M-RoPE sections), plus the conventions HF keeps
in modeling code rather than in ``rope_parameters``:

* layout: interleaved pairs ``(x_{2i}, x_{2i+1})`` for the MLA families (DeepSeek-V2/V3/V3.2,
  GLM-MoE-DSA, ...: ``rope_interleave``, default true) and DeepSeek-V4; half-split
  ``(x_i, x_{i+d/2})`` (NeoX, HF's ``rotate_half``) otherwise. The DSA indexer
  (``component="indexer"``) is half-split in DeepSeek-V3.2 and interleaved in GLM-MoE-DSA
  (``indexer_rope_interleave``);
* slice: the rotated channels lead the head (HF's ``q[..., :rotary_dim]``) except in
  DeepSeek-V4, whose heads are ``[nope | rope]``;
* width: Gemma 4's full-attention layers have ``global_head_dim`` channels (512), as
  :func:`~posenc.integrations.hf.rope_parameters.read_rope_parameters` reads them;
* DeepSeek-V4: a flat ``config.json`` is nested as HF's ``DeepseekV4Config`` does: ``main``
  plain RoPE at ``rope_theta``, ``compress`` the checkpoint's scaling (YaRN, with
  ``attention_factor`` 1 unless set) at ``compress_rope_theta``;
* M-RoPE: pair ``i`` reads the t, h or w row of ``(3, seq)`` positions; interleaved
  (MRoPE-I) for Qwen3-VL and Qwen3.5 even without ``mrope_interleaved``.

Angles are ``φ = m·θ'`` in float64 (``θ'`` from :meth:`Scaling.inv_freq
<posenc.rotary.scaling.Scaling.inv_freq>`, also float64).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.integrations.hf.deepseek import deepseek_v4_rope_parameters, indexer_interleaved
from posenc.integrations.hf.rope_parameters import (
    RopeParameters,
    config_value,
    read_rope_parameters,
)
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.multi_axis import mrope_axes

__all__ = [
    "COMPONENTS",
    "TABLE_LAYOUTS",
    "Component",
    "RopeSpec",
    "TableLayout",
    "mrope_version",
    "nested_layer_types",
    "rope_spec",
    "spec_angles",
]

Component = Literal["attention", "indexer"]
TableLayout = Literal["half", "interleaved", "pairs"]
COMPONENTS: tuple[str, ...] = ("attention", "indexer")
#: ``half``: ``cat(f, f)``; ``interleaved``: ``repeat_interleave(f, 2)``; ``pairs``: ``f``
#: (one column per pair, vLLM's ``cos_sin_cache`` and DeepSeek-V4's tables).
TABLE_LAYOUTS: tuple[str, ...] = ("half", "interleaved", "pairs")

# HF model types whose main attention rotates interleaved pairs (rope_interleave defaults
# to true in their configs; DeepSeek-V2 and V4 have no key and always interleave).
_INTERLEAVED = frozenset(
    {
        "axk1",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_v4",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "kimi_k2",
        "mistral4",
        "youtu",
    }
)
# Model types whose M-RoPE is interleaved (MRoPE-I) in HF's code, key or not.
_INTERLEAVED_MROPE = ("qwen3_vl", "qwen3_5", "qwen3_omni", "qwen4_exp")
_TRAILING_SLICE = frozenset({"deepseek_v4"})
# M-RoPE sections HF's rotary modules fall back to when rope_parameters has none
# (``config.rope_parameters.get("mrope_section", [...])`` in their modeling files).
_DEFAULT_SECTIONS: dict[str, tuple[int, ...]] = {
    "qwen2_vl": (16, 24, 24),
    "qwen2_5_vl": (16, 24, 24),
    "qwen3_vl": (24, 20, 20),
    "qwen3_5": (11, 11, 10),
}


def nested_layer_types(config: Any) -> tuple[str, ...]:
    """The layer types of a nested per-layer-type ``rope_parameters`` with a RoPE; ``()`` for
    a flat one."""
    config = _text_config(config)
    params = config_value(config, "rope_parameters") or config_value(config, "rope_scaling")
    if not isinstance(params, Mapping) or not params:
        return ()
    if not all(value is None or isinstance(value, Mapping) for value in params.values()):
        return ()
    return tuple(key for key, value in params.items() if value is not None)


@dataclass(frozen=True)
class RopeSpec:
    """One layer type's RoPE, as the reference computes it.

    Args:
        parameters: the validated config reading.
        model_type: the config's ``model_type`` (``None`` for a dict without one).
        layer_type: the per-layer-type entry read, or ``None``.
        inv_freq: ``(pairs,)`` float64 ``θ'`` (zeros for Gemma 4's unrotated pairs).
        attention_factor: ``A``, multiplying cos and sin.
        layout: ``"half"`` or ``"interleaved"``: how the rotated channels pair up.
        trailing: the rotated channels are the last ``rotary_dim`` of the head.
        axes: M-RoPE: the position row (0 t, 1 h, 2 w) each pair reads; ``None`` for 1-D.
        sections: M-RoPE's ``(t, h, w)`` pair counts (the config's, or HF's default for the
            family); ``None`` for 1-D.
    """

    parameters: RopeParameters
    model_type: str | None
    layer_type: str | None
    inv_freq: Tensor
    attention_factor: float
    layout: Literal["half", "interleaved"]
    trailing: bool = False
    axes: tuple[int, ...] | None = None
    sections: tuple[int, ...] | None = None

    @property
    def head_dim(self) -> int:
        return self.parameters.head_dim

    @property
    def rotary_dim(self) -> int:
        """Channels the tables cover: ``2 · pairs``."""
        return 2 * self.inv_freq.numel()

    @property
    def base(self) -> float:
        return self.parameters.base

    def with_inv_freq(self, inv_freq: Tensor, attention_factor: float | None = None) -> RopeSpec:
        """This spec with other frequencies (and ``A``): how a bug class states its variant."""
        factor = self.attention_factor if attention_factor is None else attention_factor
        axes = self.axes
        if axes is not None:  # pairs past the sections read t (HF's M-RoPE), extra ones dropped
            pairs = inv_freq.numel()
            axes = (axes + (0,) * pairs)[:pairs]
        return replace(
            self, inv_freq=inv_freq.to(torch.float64), attention_factor=factor, axes=axes
        )


def _text_config(config: Any) -> Any:
    """A VLM's ``text_config`` when the RoPE keys live there."""
    keys = ("rope_parameters", "rope_scaling", "rope_theta")
    text = config_value(config, "text_config")
    if text is not None and all(config_value(config, k) is None for k in keys):
        return text
    return config


def _layer_view(config: Any, layer_type: str | None) -> tuple[Any, str | None]:
    """The config as one layer type sees it, and the per-layer-type entry to read
    (transformers' per-layer config objects; DeepSeek-V4's rope types, a flat config.json
    nested by :func:`~posenc.integrations.hf.deepseek.deepseek_v4_rope_parameters`)."""
    if not isinstance(config, Mapping):
        per_layer = getattr(config, "per_layer_config", None)  # transformers' per-layer view
        if per_layer is not None and layer_type is not None:
            try:
                return per_layer[layer_type], layer_type
            except (KeyError, IndexError, TypeError, ValueError):
                pass  # not a layer type it knows: read_rope_parameters names the allowed ones
        return config, layer_type
    nested = config.get("rope_parameters") or {}
    if config.get("model_type") == "deepseek_v4" and "main" not in nested:
        if layer_type not in (None, "main", "compress"):
            raise ValueError(
                "layer_type must be one of ['main', 'compress'] for deepseek_v4, got "
                f"{layer_type!r}"
            )
        # a flat config.json, nested by rope type as HF's DeepseekV4Config does
        flat = ("rope_scaling", "rope_theta", "compress_rope_theta", "partial_rotary_factor")
        view = {k: v for k, v in config.items() if k not in flat}
        return {**view, **deepseek_v4_rope_parameters(config)}, layer_type or "main"
    return config, layer_type


def rope_spec(
    config: Any,
    layer_type: str | None = None,
    *,
    component: Component = "attention",
    seq_len: int | None = None,
) -> RopeSpec:
    """The :class:`RopeSpec` of ``config`` (a ``config.json`` dict or a ``PretrainedConfig``).

    Args:
        config: the model config; a VLM's ``text_config`` is read when the RoPE keys are there.
        layer_type: the per-layer-type entry (Gemma 3/4 ``sliding_attention`` /
            ``full_attention``; DeepSeek-V4 ``main`` / ``compress``).
        component: ``"attention"`` or the DSA ``"indexer"`` (its own layout).
        seq_len: the length a length-dependent scaling (dynamic NTK, LongRoPE) follows.

    Raises:
        ValueError: naming the key, for a config posenc cannot read, or an unknown
            ``layer_type`` / ``component``.
    """
    if component not in COMPONENTS:
        raise ValueError(f"component must be one of {list(COMPONENTS)}, got {component!r}")
    config = _text_config(config)
    model_type = config_value(config, "model_type")
    view, read_type = _layer_view(config, layer_type)
    params = read_rope_parameters(view, read_type)
    scaling = params.scaling
    if scaling is None:
        inv_freq = rope_inv_freq(params.rotary_dim, params.base)
        factor = 1.0
    else:
        inv_freq = scaling.inv_freq(params.rotary_dim, params.base, seq_len=seq_len)
        factor = float(scaling.attention_factor_at(seq_len))
        if params.mscales is not None:  # PhiMoE
            short, long, original = params.mscales
            factor = long if (seq_len or 0) > original else short
    layout: Literal["half", "interleaved"] = "half"
    if component == "indexer":
        layout = "interleaved" if indexer_interleaved(config) else "half"
    elif model_type in _INTERLEAVED and config_value(config, "rope_interleave") is not False:
        layout = "interleaved"
    axes = None
    mrope = params.mrope
    if mrope is None:  # HF's modeling code defaults the sections of these families
        default = next(
            (v for k, v in _DEFAULT_SECTIONS.items() if str(model_type).startswith(k)), None
        )
        if default is not None and 2 * sum(default) == params.rotary_dim:
            mrope = (default, False)
    if mrope is not None:
        sections, interleaved = mrope
        interleaved = interleaved or str(model_type).startswith(_INTERLEAVED_MROPE)
        axes = tuple(mrope_axes(sections, interleaved=interleaved))
    return RopeSpec(
        params,
        model_type,
        layer_type,
        inv_freq.to(torch.float64),
        factor,
        layout,
        trailing=model_type in _TRAILING_SLICE,
        axes=axes,
        sections=None if mrope is None else tuple(mrope[0]),
    )


def _positions3(spec: RopeSpec, positions: Tensor) -> Tensor:
    """float64 positions, ``(seq,)`` for 1-D RoPE or ``(3, seq)`` for M-RoPE."""
    positions = positions.to(torch.float64)
    if spec.axes is None:
        if positions.dim() != 1:
            raise ValueError(
                f"positions must be (seq,) for this config's 1-D RoPE, got {tuple(positions.shape)}"
            )
        return positions
    if positions.dim() == 1:
        return positions.expand(3, -1)  # text: t = h = w
    if positions.dim() == 3 and positions.shape[1] == 1:
        positions = positions[:, 0]
    if positions.dim() != 2 or positions.shape[0] != 3:
        raise ValueError(
            f"positions must be (seq,) or (3, seq) (t, h, w rows) for M-RoPE, got "
            f"{tuple(positions.shape)}"
        )
    return positions


def spec_angles(spec: RopeSpec, positions: Tensor) -> Tensor:
    """``φ[m, i]``: float64 ``(seq, pairs)``; M-RoPE pair ``i`` reads row ``axes[i]``."""
    positions = _positions3(spec, positions)
    if spec.axes is None:
        return positions[:, None] * spec.inv_freq
    rows = positions[list(spec.axes)]  # (pairs, seq)
    return rows.T * spec.inv_freq


def mrope_version(config: Any) -> str:
    """Which family's M-RoPE ids the config's model builds: ``qwen2_vl``, ``qwen2_5_vl``
    (absolute video time) or ``qwen3_vl`` (Qwen3-VL, Qwen3.5)."""
    model_type = str(config_value(config, "model_type"))
    if model_type.startswith("qwen2_5"):
        return "qwen2_5_vl"
    if model_type.startswith(_INTERLEAVED_MROPE):
        return "qwen3_vl"
    return "qwen2_vl"

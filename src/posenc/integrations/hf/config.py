"""HF ``transformers`` RoPE configs to posenc and back: the conversions that
:mod:`posenc.integrations.hf` exports.

* :func:`frequencies_from_config`: ``(inv_freq, attention_factor)`` as ``transformers``
  computes them;
* :func:`rope_from_config` / :func:`to_rope_parameters`: config ↔ :class:`RotaryEmbedding`;
* :func:`mrope_from_config`: an M-RoPE config → :class:`MultiAxisRotary`;
* :func:`attention_scale_from_config`: Ministral 3's ``llama_4_scaling_beta`` query scale.

Each reads the config once with
:func:`~posenc.integrations.hf.rope_parameters.read_rope_parameters`.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import torch
from torch import Tensor

from posenc.integrations.hf._common import original_max_position, positive_integer, rope_dict
from posenc.integrations.hf.rope_parameters import (
    FIELD_OF_KEY,
    SCALINGS,
    read_rope_parameters,
)
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.multi_axis import MultiAxisRotary
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import Proportional

__all__ = [
    "attention_scale_from_config",
    "frequencies_from_config",
    "mrope_from_config",
    "rope_from_config",
    "to_rope_parameters",
]

_HF_KEY = {field: key for key, field in FIELD_OF_KEY.items()}  # scaling field -> HF key
# Scaling fields HF keeps outside rope_parameters (or has no notion of).
_NOT_IN_ROPE_PARAMETERS = frozenset(
    {"max_position_embeddings", "mode", "target_length", "dynamic", "extrapolation_factor"}
)


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
        seq_len = positive_integer("seq_len", seq_len)
    rope = read_rope_parameters(config, layer_type)
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
    rope = read_rope_parameters(config)
    if rope.llama_4_scaling_beta is None:
        return torch.ones(positions.shape, dtype=torch.float32, device=positions.device)
    params = rope_dict(config)
    original_max = original_max_position(config, params)
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
    ``proportional`` and for the default type of the models of
    :data:`~posenc.integrations.hf.conventions.DEFAULT_IGNORES_PARTIAL`),
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
    rope = read_rope_parameters(config, layer_type)
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
    return rope.rotary_embedding(device, dtype)


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
    rope = read_rope_parameters(config, layer_type)
    if rope.mrope is None:
        raise ValueError("config has no rope_parameters['mrope_section']: use rope_from_config")
    sections, configured = rope.mrope
    interleaved = configured if interleaved is None else interleaved
    return MultiAxisRotary.mrope(
        rope.rotary_dim, sections, base=rope.base, interleaved=interleaved, scaling=rope.scaling
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
    if rope_type not in SCALINGS or posenc_only:
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

"""How each bug class of :mod:`posenc.verify.catalogue` computes: the correct :class:`Case`
of a config, the :class:`Variant` s a buggy port uses instead (its spec, positions and
arithmetic), and the arrays of a variant (:func:`variant_arrays`).

Each public function here maps a :class:`Case` to the variants of one bug class (none when the
class does not apply to the config).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.integrations.hf import DEFAULT_IGNORES_PARTIAL
from posenc.integrations.hf.rope_parameters import config_value
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.multi_axis import mrope_axes
from posenc.rotary.scaling import LongRoPE, Proportional, YaRN
from posenc.verify.reference import rotate, tables
from posenc.verify.spec import RopeSpec, nested_layer_types, rope_spec, spec_angles

__all__ = [
    "Case",
    "Variant",
    "attention_factor",
    "layout_swapped",
    "mrope_rows",
    "mrope_section_layout",
    "mrope_sequential",
    "mrope_temporal_only",
    "offset_lost",
    "partial_ignored",
    "partial_misapplied",
    "per_layer_swapped",
    "proportional_width",
    "scaling_missing",
    "tables_in_bf16",
    "variant_arrays",
    "yarn_original_length",
]


@dataclass(frozen=True)
class Case:
    """What a bug class needs to build its variants: the correct reading of the config.

    Args:
        config: the model config (dict or ``PretrainedConfig``).
        spec: the correct :class:`RopeSpec`.
        positions: the positions the arrays are for, ``(seq,)`` or ``(3, seq)``.
        component: ``"attention"`` or ``"indexer"``.
    """

    config: Any
    spec: RopeSpec
    positions: Tensor
    component: Literal["attention", "indexer"] = "attention"


@dataclass(frozen=True)
class Variant:
    """One way of having a bug: the spec and positions the buggy port uses.

    Args:
        label: what exactly is wrong, for the report.
        spec: the buggy spec.
        positions: the buggy positions.
        arithmetic: the dtype the buggy tables are computed in (``None``: exact).
        swap_tables: the tables are in the other layout than the user states.
    """

    label: str
    spec: RopeSpec
    positions: Tensor
    arithmetic: torch.dtype | None = None
    swap_tables: bool = False


def _other(layout: str) -> str:
    return {"half": "interleaved", "interleaved": "half"}.get(layout, layout)


def _angles(variant: Variant) -> Tensor | None:
    """Angles computed in the variant's arithmetic dtype (``None``: exact)."""
    if variant.arithmetic is None:
        return None
    dtype = variant.arithmetic
    ones = replace(variant.spec, inv_freq=torch.ones_like(variant.spec.inv_freq))
    rows = spec_angles(ones, variant.positions)  # the position each pair reads
    product = rows.to(dtype) * variant.spec.inv_freq.to(dtype)
    return product.to(torch.float64)


def variant_arrays(
    variant: Variant, layout: str | None, inputs: Mapping[str, Tensor | None]
) -> dict[str, Tensor]:
    """The arrays of ``variant``: tables in ``layout`` (the spec's when ``None``; the other
    one for a swapped-layout variant), ``q_rotated`` / ``k_rotated`` of ``inputs['q']`` /
    ``['k']``, and ``position_ids`` when the positions are M-RoPE's ``(3, seq)``."""
    spec = variant.spec
    table_layout = spec.layout if layout is None else layout
    if variant.swap_tables:
        table_layout = _other(layout) if layout is not None else spec.layout
    angles = _angles(variant)
    cos, sin = tables(spec, variant.positions, table_layout, angles=angles)  # type: ignore[arg-type]
    if variant.arithmetic is not None:
        cos, sin = cos.to(variant.arithmetic), sin.to(variant.arithmetic)
    out = {"cos": cos, "sin": sin}
    for name in ("q", "k"):
        x = inputs.get(name)
        if x is not None:
            out[f"{name}_rotated"] = rotate(spec, x, variant.positions, angles=angles)
    if variant.positions.dim() == 2:
        out["position_ids"] = variant.positions.to(torch.int64)
    return out


def layout_swapped(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    other = _other(spec.layout)
    label = f"{other} pairs where this {case.component} needs {spec.layout}"
    return (Variant(label, replace(spec, layout=other), case.positions, swap_tables=True),)  # type: ignore[arg-type]


def per_layer_swapped(case: Case) -> tuple[Variant, ...]:
    own = case.spec.layer_type
    out = []
    for other in nested_layer_types(case.config):
        if other != own:
            spec = rope_spec(case.config, other, component=case.component)
            label = f"the {other!r} layers' RoPE (base {spec.base:g}) used for {own!r}"
            out.append(Variant(label, replace(spec, layer_type=own), case.positions))
    return tuple(out)


def _plain(spec: RopeSpec, rotary_dim: int) -> Tensor:
    return rope_inv_freq(rotary_dim, spec.base)


def scaling_missing(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    scaling = spec.parameters.scaling
    if scaling is None:
        return ()
    if isinstance(scaling, Proportional):
        if scaling.factor == 1.0:
            return ()
        inv_freq = Proportional(scaling.partial_rotary_factor).inv_freq(spec.rotary_dim, spec.base)
    else:
        inv_freq = _plain(spec, spec.rotary_dim)
    label = f"plain RoPE at base {spec.base:g}: rope_type {spec.parameters.rope_type!r} ignored"
    return (Variant(label, spec.with_inv_freq(inv_freq, 1.0), case.positions),)


def yarn_original_length(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    scaling = spec.parameters.scaling
    max_len = config_value(case.config, "max_position_embeddings")
    text = config_value(case.config, "text_config")
    if max_len is None and text is not None:
        max_len = config_value(text, "max_position_embeddings")
    if not isinstance(scaling, YaRN) or not isinstance(max_len, int):
        return ()
    original = scaling.original_max_position_embeddings
    out = []
    if max_len != original:
        wrong = replace(scaling, original_max_position_embeddings=max_len)
        label = f"original_max_position_embeddings read as max_position_embeddings ({max_len})"
        out.append(wrong)
        out_labels = [label]
    else:
        out_labels = []
    if max_len / original >= 1 and max_len / original != scaling.factor:
        out.append(replace(scaling, factor=max_len / original))
        out_labels.append(
            f"factor recomputed as max_position_embeddings / L0 = {max_len / original:g}"
        )
    return tuple(
        Variant(
            label,
            spec.with_inv_freq(
                wrong.inv_freq(spec.rotary_dim, spec.base), float(wrong.attention_factor)
            ),
            case.positions,
        )
        for wrong, label in zip(out, out_labels, strict=True)
    )


def attention_factor(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    scaling = spec.parameters.scaling
    if not isinstance(scaling, (YaRN, LongRoPE)):
        return ()
    out = []
    if spec.attention_factor != 1.0:
        out.append(
            Variant(
                f"A = 1 instead of {spec.attention_factor:.6g}",
                replace(spec, attention_factor=1.0),
                case.positions,
            )
        )
    if isinstance(scaling, YaRN) and scaling.factor > 1:
        plain = 0.1 * math.log(scaling.factor) + 1.0
        if not math.isclose(plain, spec.attention_factor, rel_tol=1e-9):
            label = f"A = 0.1 ln s + 1 = {plain:.6g} instead of {spec.attention_factor:.6g}"
            out.append(Variant(label, replace(spec, attention_factor=plain), case.positions))
    return tuple(out)


def proportional_width(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    scaling = spec.parameters.scaling
    if not isinstance(scaling, Proportional):
        return ()
    rotated = int(scaling.partial_rotary_factor * spec.head_dim // 2)
    narrow = rope_inv_freq(2 * rotated, spec.base) / scaling.factor
    padded = torch.zeros_like(spec.inv_freq)
    padded[:rotated] = narrow
    width = f"{2 * rotated} channels instead of head_dim {spec.head_dim}"
    return (
        Variant(f"exponents over {width}", spec.with_inv_freq(padded), case.positions),
        Variant(f"partial RoPE of {width}", spec.with_inv_freq(narrow), case.positions),
    )


def partial_ignored(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    scaling = spec.parameters.scaling
    if spec.rotary_dim >= spec.head_dim or isinstance(scaling, Proportional):
        return ()
    if scaling is None:
        inv_freq = _plain(spec, spec.head_dim)
    else:
        inv_freq = scaling.inv_freq(spec.head_dim, spec.base)
    label = f"all {spec.head_dim} channels rotated instead of {spec.rotary_dim}"
    return (Variant(label, spec.with_inv_freq(inv_freq), case.positions),)


def partial_misapplied(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    config = case.config
    text = config_value(config, "text_config")
    model_type = config_value(config, "model_type") or config_value(text, "model_type")
    partial = config_value(config, "partial_rotary_factor")
    params = config_value(config, "rope_parameters") or config_value(config, "rope_scaling") or {}
    if isinstance(params, Mapping):
        nested = params.get(spec.layer_type) if spec.layer_type else params
        if isinstance(nested, Mapping) and nested.get("partial_rotary_factor") is not None:
            partial = nested["partial_rotary_factor"]
    if (
        model_type not in DEFAULT_IGNORES_PARTIAL
        or spec.parameters.rope_type != "default"
        or not isinstance(partial, (int, float))
        or not 0 < partial < 1
    ):
        return ()
    width = int(spec.head_dim * partial)
    if width < 2 or width % 2:
        return ()
    label = f"partial_rotary_factor {partial} applied ({width} channels); {model_type} ignores it"
    return (Variant(label, spec.with_inv_freq(_plain(spec, width)), case.positions),)


def mrope_rows(case: Case) -> Tensor | None:
    positions = case.positions
    if case.spec.axes is None or positions.dim() != 2:
        return None
    return positions


def mrope_temporal_only(case: Case) -> tuple[Variant, ...]:
    positions = mrope_rows(case)
    if positions is None or bool((positions == positions[:1]).all()):
        return ()
    label = "only the temporal row of the (3, seq) positions read (a 1-D kernel)"
    return (Variant(label, case.spec, positions[:1].expand(3, -1)),)


def mrope_sequential(case: Case) -> tuple[Variant, ...]:
    positions = mrope_rows(case)
    if positions is None:
        return ()
    sequential = positions[:1, :1] + torch.arange(positions.shape[1], dtype=positions.dtype)
    sequential = sequential.expand(3, -1)
    if bool((sequential == positions).all()):
        return ()
    label = "1-D sequential ids (t = h = w = index) for image/video tokens"
    return (Variant(label, case.spec, sequential),)


def mrope_section_layout(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    if spec.axes is None or spec.sections is None:
        return ()
    sections = spec.sections
    interleaved = tuple(mrope_axes(sections)) == spec.axes  # the spec is chunked
    other = tuple(mrope_axes(sections, interleaved=interleaved))
    name = ("chunked", "interleaved (MRoPE-I)")
    label = f"{name[interleaved]} sections where the model uses {name[not interleaved]}"
    return (Variant(label, replace(spec, axes=other), case.positions),)


def offset_lost(case: Case) -> tuple[Variant, ...]:
    positions = case.positions
    start = positions[..., :1]
    if positions.numel() == 0 or bool((start == 0).all()):
        return ()
    label = "positions restart at 0 (the chunk's or cache's offset lost)"
    return (Variant(label, case.spec, positions - start),)


def tables_in_bf16(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    low = spec.inv_freq.to(torch.bfloat16).to(torch.float64)
    return (
        Variant("positions · inv_freq in bfloat16", spec, case.positions, torch.bfloat16),
        Variant("inv_freq stored in bfloat16", spec.with_inv_freq(low), case.positions),
    )

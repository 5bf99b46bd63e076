"""Known RoPE port bugs, as data: :data:`BUG_CLASSES`.

Each :class:`BugClass` builds the arrays that a port with that bug produces for a config
(its *variants*: the buggy :class:`~posenc.verify.reference.RopeSpec` and positions, and the
arithmetic dtype for the precision bug). :func:`posenc.verify.verify` diagnoses a mismatch by
computing every applicable variant and naming the one the user's arrays match. A new bug
class is one entry: a function from the correct :class:`Case` to its variants.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.integrations.hf import DEFAULT_IGNORES_PARTIAL
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.multi_axis import mrope_axes
from posenc.rotary.scaling import LongRoPE, Proportional, YaRN
from posenc.verify.reference import (
    RopeSpec,
    config_value,
    nested_layer_types,
    rope_spec,
    rotate,
    spec_angles,
    tables,
)

__all__ = ["BUG_CLASSES", "BugClass", "Case", "Variant", "bug_class", "variant_arrays"]


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


@dataclass(frozen=True)
class BugClass:
    """A known class of RoPE port bugs.

    Args:
        name: identifier (``layout_swapped``, ...).
        description: one line: what the port does wrong.
        sources: public reports (``owner/repo#N`` on GitHub, papers).
        variants: the :class:`Variant` s that apply to a :class:`Case` (none: not applicable).
        arithmetic: for a precision bug, the arithmetic dtype: it matches when the user's
            arrays are within that arithmetic's tolerance of the reference (rather than within
            float32's of a variant).
    """

    name: str
    description: str
    sources: tuple[str, ...]
    variants: Callable[[Case], tuple[Variant, ...]]
    arithmetic: torch.dtype | None = None

    def build(
        self,
        config: Any,
        positions: Tensor,
        *,
        layer_type: str | None = None,
        layout: str | None = None,
        component: Literal["attention", "indexer"] = "attention",
        q: Tensor | None = None,
        k: Tensor | None = None,
        variant: int = 0,
    ) -> dict[str, Tensor]:
        """The arrays (``cos``, ``sin``, and ``q_rotated`` / ``k_rotated`` for given ``q`` /
        ``k``; ``position_ids`` for M-RoPE) a port with this bug computes for ``config``.

        Raises:
            ValueError: when the class does not apply to this config (no variant).
        """
        seq_len = int(positions.max()) + 1 if positions.numel() else None
        spec = rope_spec(config, layer_type, component=component, seq_len=seq_len)
        found = self.variants(Case(config, spec, positions, component))
        if not found:
            raise ValueError(f"bug class {self.name!r} does not apply to this config/positions")
        if not 0 <= variant < len(found):
            raise ValueError(f"variant must be in [0, {len(found) - 1}], got {variant}")
        return variant_arrays(found[variant], layout, {"q": q, "k": k})


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


# --- the variants of each class -----------------------------------------------------------


def _layout_swapped(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    other = _other(spec.layout)
    label = f"{other} pairs where this {case.component} needs {spec.layout}"
    return (Variant(label, replace(spec, layout=other), case.positions, swap_tables=True),)  # type: ignore[arg-type]


def _per_layer_swapped(case: Case) -> tuple[Variant, ...]:
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


def _scaling_missing(case: Case) -> tuple[Variant, ...]:
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


def _yarn_original_length(case: Case) -> tuple[Variant, ...]:
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


def _attention_factor(case: Case) -> tuple[Variant, ...]:
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


def _proportional_width(case: Case) -> tuple[Variant, ...]:
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


def _partial_ignored(case: Case) -> tuple[Variant, ...]:
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


def _partial_misapplied(case: Case) -> tuple[Variant, ...]:
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


def _mrope_rows(case: Case) -> Tensor | None:
    positions = case.positions
    if case.spec.axes is None or positions.dim() != 2:
        return None
    return positions


def _mrope_temporal_only(case: Case) -> tuple[Variant, ...]:
    positions = _mrope_rows(case)
    if positions is None or bool((positions == positions[:1]).all()):
        return ()
    label = "only the temporal row of the (3, seq) positions read (a 1-D kernel)"
    return (Variant(label, case.spec, positions[:1].expand(3, -1)),)


def _mrope_sequential(case: Case) -> tuple[Variant, ...]:
    positions = _mrope_rows(case)
    if positions is None:
        return ()
    sequential = positions[:1, :1] + torch.arange(positions.shape[1], dtype=positions.dtype)
    sequential = sequential.expand(3, -1)
    if bool((sequential == positions).all()):
        return ()
    label = "1-D sequential ids (t = h = w = index) for image/video tokens"
    return (Variant(label, case.spec, sequential),)


def _mrope_section_layout(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    if spec.axes is None or spec.parameters.mrope is None:
        return ()
    sections = spec.parameters.mrope[0]
    interleaved = tuple(mrope_axes(sections)) == spec.axes  # the spec is chunked
    other = tuple(mrope_axes(sections, interleaved=interleaved))
    name = ("chunked", "interleaved (MRoPE-I)")
    label = f"{name[interleaved]} sections where the model uses {name[not interleaved]}"
    return (Variant(label, replace(spec, axes=other), case.positions),)


def _offset_lost(case: Case) -> tuple[Variant, ...]:
    positions = case.positions
    start = positions[..., :1]
    if positions.numel() == 0 or bool((start == 0).all()):
        return ()
    label = "positions restart at 0 (the chunk's or cache's offset lost)"
    return (Variant(label, case.spec, positions - start),)


def _tables_in_bf16(case: Case) -> tuple[Variant, ...]:
    spec = case.spec
    low = spec.inv_freq.to(torch.bfloat16).to(torch.float64)
    return (
        Variant("positions · inv_freq in bfloat16", spec, case.positions, torch.bfloat16),
        Variant("inv_freq stored in bfloat16", spec.with_inv_freq(low), case.positions),
    )


#: The catalogue, in the order :func:`~posenc.verify.verify` tries it (the precision class
#: last: it explains only what no exact variant does).
BUG_CLASSES: tuple[BugClass, ...] = (
    BugClass(
        "layout_swapped",
        "rotary pairs interleaved (x[2i], x[2i+1]) where half-split (x[i], x[i+d/2]) is "
        "required, or the reverse (e.g. the DSA indexer's NeoX RoPE run interleaved)",
        (
            "vllm-project/vllm#28968",
            "sgl-project/sglang#13530",
            "huggingface/transformers#46842",
            "ml-explore/mlx-lm#1431",
        ),
        _layout_swapped,
    ),
    BugClass(
        "layer_parameters_swapped",
        "another layer type's RoPE parameters (base, scaling) used for this layer type "
        "(Gemma 3 local vs global)",
        (
            "ollama/ollama#13452",
            "Blaizzy/mlx-vlm#1709",
            "ggml-org/llama.cpp#14367",
            "Lightning-AI/litgpt#2178",
        ),
        _per_layer_swapped,
    ),
    BugClass(
        "scaling_missing",
        "the rope_type's scaling (linear, llama3, yarn, longrope, ...) not applied: plain "
        "RoPE at the same base (Gemma 3 global's linear x8, Llama-3.1's llama3)",
        ("ollama/ollama#13452", "jundot/omlx#3347", "ggml-org/llama.cpp#28030"),
        _scaling_missing,
    ),
    BugClass(
        "yarn_original_length",
        "YaRN's original_max_position_embeddings taken from max_position_embeddings, or its "
        "factor recomputed from them",
        ("huggingface/transformers#38224", "NVIDIA/Megatron-LM#1418"),
        _yarn_original_length,
    ),
    BugClass(
        "attention_factor",
        "YaRN/LongRoPE attention factor A (mscale) on cos/sin missing, or from the plain "
        "0.1 ln s + 1 where the config sets mscale/mscale_all_dim",
        ("arXiv:2309.00071 (YaRN, eq. 22)", "huggingface/transformers#38224"),
        _attention_factor,
    ),
    BugClass(
        "proportional_width",
        "Gemma 4 proportional RoPE built over the rotated width (128) instead of the head "
        "width (512): exponents -2j/128 for -2j/512",
        ("aws-neuron/neuronx-distributed-inference#106",),
        _proportional_width,
    ),
    BugClass(
        "partial_factor_ignored",
        "partial_rotary_factor ignored: the whole head rotated (a kernel without partial rotary)",
        (
            "lightseekorg/tokenspeed#208",
            "linkedin/Liger-Kernel#1451",
            "huggingface/transformers#48622",
        ),
        _partial_ignored,
    ),
    BugClass(
        "partial_factor_misapplied",
        "partial_rotary_factor applied for a model type whose default RoPE ignores it "
        "(posenc.integrations.hf.DEFAULT_IGNORES_PARTIAL, read from HF's code)",
        ("huggingface/transformers (compute_default_rope_parameters of these models)",),
        _partial_misapplied,
    ),
    BugClass(
        "mrope_temporal_only",
        "M-RoPE (3, seq) positions fed to a 1-D kernel: only the temporal row is read",
        ("sgl-project/sglang#35345",),
        _mrope_temporal_only,
    ),
    BugClass(
        "mrope_sequential_ids",
        "M-RoPE image/video tokens given 1-D sequential ids instead of (t, h, w)",
        ("ml-explore/mlx-lm#1768",),
        _mrope_sequential,
    ),
    BugClass(
        "mrope_section_layout",
        "M-RoPE sections chunked (Qwen2/2.5-VL) where interleaved (MRoPE-I: Qwen3-VL, "
        "Qwen3.5) is used, or the reverse",
        ("arXiv:2510.23095 (MRoPE-I)", "huggingface/transformers Qwen3-VL apply_interleaved_mrope"),
        _mrope_section_layout,
    ),
    BugClass(
        "positions_offset_lost",
        "positions restart at 0: a chunked prefill's or merged cache's offset lost",
        ("Blaizzy/mlx-vlm#1621", "scouzi1966/maclocal-api#92"),
        _offset_lost,
    ),
    BugClass(
        "tables_in_bf16",
        "RoPE tables computed in bfloat16/float16 arithmetic (positions · inv_freq, or a "
        "half-precision inv_freq) rather than float32 and rounded once",
        (
            "huggingface/transformers#25681",
            "huggingface/transformers#29285",
            "EleutherAI/gpt-neox#1003",
            "nkalyanv99/UNI-D2#6",
        ),
        _tables_in_bf16,
        arithmetic=torch.bfloat16,
    ),
)


def bug_class(name: str) -> BugClass:
    """The :data:`BUG_CLASSES` entry called ``name``."""
    for entry in BUG_CLASSES:
        if entry.name == name:
            return entry
    raise ValueError(f"name must be one of {[b.name for b in BUG_CLASSES]}, got {name!r}")

"""Known RoPE port bugs, as data: :data:`BUG_CLASSES`.

Each :class:`BugClass` builds the arrays that a port with that bug produces for a config
(its variants, :mod:`posenc.verify.variants`: the buggy spec and positions, and the arithmetic
dtype for the precision bug). :func:`posenc.verify.verify` diagnoses a mismatch by computing
every applicable variant and naming the one the user's arrays match. A new bug class is one
entry: a name, a line, its public sources and a function from the correct
:class:`~posenc.verify.variants.Case` to its variants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.verify import variants
from posenc.verify.spec import rope_spec
from posenc.verify.variants import Case, Variant, variant_arrays

__all__ = ["BUG_CLASSES", "BugClass", "bug_class"]


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
            "NVIDIA/TensorRT-LLM#16378",
        ),
        variants.layout_swapped,
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
        variants.per_layer_swapped,
    ),
    BugClass(
        "scaling_missing",
        "the rope_type's scaling (linear, llama3, yarn, longrope, ...) not applied: plain "
        "RoPE at the same base (Gemma 3 global's linear x8, Llama-3.1's llama3)",
        ("ollama/ollama#13452", "jundot/omlx#3347", "ggml-org/llama.cpp#28030"),
        variants.scaling_missing,
    ),
    BugClass(
        "yarn_original_length",
        "YaRN's original_max_position_embeddings taken from max_position_embeddings, or its "
        "factor recomputed from them",
        ("huggingface/transformers#38224", "NVIDIA/Megatron-LM#1418"),
        variants.yarn_original_length,
    ),
    BugClass(
        "attention_factor",
        "YaRN/LongRoPE attention factor A (mscale) on cos/sin missing, or the plain "
        "0.1 ln s + 1 where the config sets mscale/mscale_all_dim or attention_factor",
        (
            "sgl-project/sglang#22711",
            "vllm-project/vllm#48351",
            "ml-explore/mlx-lm#1507",
            "arXiv:2309.00071 (YaRN)",
        ),
        variants.attention_factor,
    ),
    BugClass(
        "proportional_width",
        "Gemma 4 proportional RoPE built over the rotated width (128) instead of the head "
        "width (512): exponents -2j/128 for -2j/512",
        ("aws-neuron/neuronx-distributed-inference#106",),
        variants.proportional_width,
    ),
    BugClass(
        "partial_factor_ignored",
        "partial_rotary_factor ignored: the whole head rotated (a kernel without partial rotary)",
        (
            "lightseekorg/tokenspeed#208",
            "linkedin/Liger-Kernel#1451",
            "huggingface/transformers#48622",
        ),
        variants.partial_ignored,
    ),
    BugClass(
        "partial_factor_misapplied",
        "partial_rotary_factor applied for a model type whose default RoPE ignores it "
        "(posenc.integrations.hf.DEFAULT_IGNORES_PARTIAL, read from HF's code)",
        ("huggingface/transformers (compute_default_rope_parameters of these models)",),
        variants.partial_misapplied,
    ),
    BugClass(
        "mrope_temporal_only",
        "M-RoPE (3, seq) positions fed to a 1-D kernel: only the temporal row is read",
        ("sgl-project/sglang#35345",),
        variants.mrope_temporal_only,
    ),
    BugClass(
        "mrope_sequential_ids",
        "M-RoPE image/video tokens given 1-D sequential ids instead of (t, h, w)",
        ("ml-explore/mlx-lm#1768",),
        variants.mrope_sequential,
    ),
    BugClass(
        "mrope_section_layout",
        "M-RoPE sections chunked (Qwen2/2.5-VL) where interleaved (MRoPE-I: Qwen3-VL, "
        "Qwen3.5) is used, or the reverse",
        ("arXiv:2510.23095 (MRoPE-I)", "huggingface/transformers Qwen3-VL apply_interleaved_mrope"),
        variants.mrope_section_layout,
    ),
    BugClass(
        "positions_offset_lost",
        "positions restart at 0: a chunked prefill's or merged cache's offset lost",
        ("Blaizzy/mlx-vlm#1621", "scouzi1966/maclocal-api#92"),
        variants.offset_lost,
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
        variants.tables_in_bf16,
        arithmetic=torch.bfloat16,
    ),
)


def bug_class(name: str) -> BugClass:
    """The :data:`BUG_CLASSES` entry called ``name``."""
    for entry in BUG_CLASSES:
        if entry.name == name:
            return entry
    raise ValueError(f"name must be one of {[b.name for b in BUG_CLASSES]}, got {name!r}")

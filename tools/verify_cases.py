"""``posenc verify`` on a correct port of each major RoPE family and on each bug class.

Run from the repository root: ``python -m tools.verify_cases`` prints two markdown tables
(families; bug classes) for ``docs/verify.md``. The same cases are the tests of
``tests/verify/test_families.py`` and ``tests/verify/test_catalogue.py``.

The "correct ports" are (1) HF ``transformers``' own rotary module of the family (its float32
tables, and q/k rotated by HF's ``apply_rotary_pos_emb``), built from a config with the same
rope parameters; skipped when transformers is not installed; (2) posenc's production rotary
modules (:class:`~posenc.rotary.RotaryEmbedding`, :class:`~posenc.rotary.MultiAxisRotary`) in
float32, computed independently of the verify reference; (3) those float32 tables rounded to
bfloat16.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posenc.rotary import MultiAxisRotary, RotaryEmbedding
from posenc.verify import bug_class, rope_spec, verify
from posenc.verify.reference import mrope_ids

__all__ = ["BUG_CASES", "FAMILIES", "BugCase", "Family", "family", "hf_arrays", "main"]

TEXT, IMAGE = 0, 1


@dataclass(frozen=True)
class Family:
    """A model family's config (``config.json`` values of a released model) and its cases."""

    name: str
    config: dict[str, Any]
    layer_types: tuple[str | None, ...] = (None,)
    length: int = 4096
    mrope: bool = False
    hf_module: str | None = None  # transformers model folder, when it differs from model_type
    hf_config: dict[str, Any] = field(default_factory=dict)  # kwargs the HF config needs


LLAMA31 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
GEMMA3 = {  # gemma-3-4b text
    "model_type": "gemma3_text",
    "head_dim": 256,
    "max_position_embeddings": 131072,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    },
}
GEMMA4 = {  # gemma-4 (global layers: proportional over global_head_dim 512)
    "model_type": "gemma4_text",
    "head_dim": 256,
    "global_head_dim": 512,
    "max_position_embeddings": 262144,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 1000000.0,
        },
    },
}
QWEN25VL = {  # Qwen2.5-VL-7B text
    "model_type": "qwen2_5_vl_text",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "max_position_embeddings": 128000,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 1000000.0,
        "mrope_section": [16, 24, 24],
    },
    "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
}
QWEN3VL = {  # Qwen3-VL-8B text
    "model_type": "qwen3_vl_text",
    "head_dim": 128,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "max_position_embeddings": 262144,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5000000.0,
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
}
QWEN35 = {  # Qwen3.5 text: MRoPE-I [11, 11, 10], partial 0.25 of 256
    "model_type": "qwen3_5_text",
    "head_dim": 256,
    "hidden_size": 4096,
    "num_attention_heads": 16,
    "max_position_embeddings": 262144,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "rope_theta": 10000.0,
    "rope_interleave": True,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}
DEEPSEEK_V32 = {**DEEPSEEK_V3, "model_type": "deepseek_v32"}
DEEPSEEK_V4 = {  # DeepSeek-V4: interleaved RoPE on the trailing 64 of 512 channels
    "model_type": "deepseek_v4",
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "max_position_embeddings": 1048576,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "rope_scaling": {
        "type": "yarn",
        "factor": 16.0,
        "original_max_position_embeddings": 65536,
        "beta_fast": 32,
        "beta_slow": 1,
    },
}
QWEN3_YARN = {  # Qwen3-8B with its model card's YaRN x4 (max_position_embeddings kept at 40960)
    "model_type": "qwen3",
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}
GPT_OSS = {
    "model_type": "gpt_oss",
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rope_theta": 150000.0,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": 4096,
    },
}

# A constructed config: lfm3's default RoPE (HF's compute_default_rope_parameters) rotates
# the whole head, partial_rotary_factor or not.
LFM3_DEFAULT = {
    "model_type": "lfm3",
    "head_dim": 128,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 1000000.0,
        "partial_rotary_factor": 0.5,
    },
}

FAMILIES: tuple[Family, ...] = (
    Family("Llama-3.1 (llama3)", LLAMA31),
    Family("Gemma 3", GEMMA3, ("sliding_attention", "full_attention")),
    Family("Gemma 4", GEMMA4, ("sliding_attention", "full_attention")),
    Family("Qwen2.5-VL", QWEN25VL, mrope=True, hf_module="qwen2_5_vl"),
    Family("Qwen3-VL", QWEN3VL, mrope=True, hf_module="qwen3_vl"),
    Family("Qwen3.5", QWEN35, mrope=True, hf_module="qwen3_5"),
    Family("DeepSeek-V3 (YaRN, mscale)", DEEPSEEK_V3),
    Family("DeepSeek-V4", DEEPSEEK_V4, ("main", "compress")),
    Family("gpt-oss (YaRN, truncate False)", GPT_OSS),
    Family("Qwen3 (YaRN x4)", QWEN3_YARN),
)


def family(name: str) -> Family:
    """The family called ``name`` (the part of its name before any parenthesis)."""
    return next(f for f in FAMILIES if name in (f.name, f.name.split(" (")[0]))


def positions_of(fam: Family) -> Tensor:
    """``(seq,)`` positions for 1-D RoPE: a stride through ``[0, length)``; M-RoPE: text,
    an 8×12-patch image (merged 4×6), text, a 12×16-patch image, text (``(3, seq)``)."""
    if not fam.mrope:
        return torch.arange(0, fam.length, 3)
    types = [TEXT] * 5 + [IMAGE] * 24 + [TEXT] * 40 + [IMAGE] * 48 + [TEXT] * 10
    return mrope_ids(fam.config, torch.tensor(types), image_grid_thw=[[1, 8, 12], [1, 12, 16]])


def qk(fam: Family, layer_type: str | None, seq: int) -> tuple[Tensor, Tensor]:
    head_dim = rope_spec(fam.config, layer_type).head_dim
    generator = torch.Generator().manual_seed(0)
    shape = (1, 2, seq, head_dim)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def hf_available() -> bool:
    return importlib.util.find_spec("transformers") is not None


def _hf_config(fam: Family) -> Any:
    from transformers import AutoConfig

    kwargs = {k: v for k, v in fam.config.items() if k not in ("model_type", "vision_config")}
    flat_is_read = fam.config["model_type"] == "deepseek_v4"  # HF nests main / compress itself
    if "rope_scaling" in kwargs and not flat_is_read:  # transformers 5: rope_parameters
        params = dict(kwargs.pop("rope_scaling"))
        params["rope_type"] = params.pop("type", params.get("rope_type"))
        params["rope_theta"] = kwargs.pop("rope_theta")
        kwargs["rope_parameters"] = params
    return AutoConfig.for_model(fam.config["model_type"], **kwargs, **fam.hf_config)


def hf_arrays(
    fam: Family, layer_type: str | None, positions: Tensor, dtype: torch.dtype = torch.float32
) -> dict[str, Tensor]:
    """cos/sin of HF's rotary module for the family (in ``dtype``, HF's cast of float32
    tables), and q/k (float32) rotated by the family's HF ``apply_rotary_pos_emb``."""
    config = _hf_config(fam)
    module_name = fam.hf_module or fam.config["model_type"].removesuffix("_text")
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    classes = [
        getattr(modeling, n)
        for n in dir(modeling)
        if n.endswith("RotaryEmbedding") and "Vision" not in n and "Audio" not in n
    ]
    rotary = classes[0](config)
    position_ids = positions[:, None] if positions.dim() == 2 else positions[None]
    x = torch.zeros(1, dtype=dtype)
    args = (x, position_ids) if layer_type is None else (x, position_ids, layer_type)
    cos, sin = rotary(*args)
    out = {"cos": cos[0], "sin": sin[0]}
    if dtype != torch.float32:
        return out
    q, k = qk(fam, layer_type, positions.shape[-1])
    apply = modeling.apply_rotary_pos_emb
    if fam.config.get("rope_interleave"):  # DeepSeek-V3: HF returns q, k de-interleaved
        apply = modeling.apply_rotary_pos_emb_interleave
    width = rope_spec(fam.config, layer_type).rotary_dim
    sliced = slice(0, width)
    if fam.config["model_type"] == "deepseek_v4":  # the whole head: V4 slices it itself
        sliced = slice(None)
    if "k" in inspect.signature(apply).parameters:
        rq, rk = apply(q[..., sliced], k[..., sliced], cos, sin)
    else:  # Gemma 4, DeepSeek-V4: one tensor at a time
        rq, rk = apply(q[..., sliced], cos, sin), apply(k[..., sliced], cos, sin)
    for key, x, rotated in (("q_rotated", q, rq), ("k_rotated", k, rk)):
        whole = x.clone()
        whole[..., sliced] = rotated
        out[key] = whole
    out["q"], out["k"] = q, k
    return out


def posenc_arrays(fam: Family, layer_type: str | None, positions: Tensor) -> dict[str, Tensor]:
    """float32 tables of posenc's production modules (``pairs`` layout), not the reference."""
    spec = rope_spec(fam.config, layer_type, seq_len=int(positions.max()) + 1)
    params = spec.parameters
    if spec.axes is not None:
        mrope = MultiAxisRotary.mrope(
            params.rotary_dim,
            list(spec.sections or ()),
            base=params.base,
            interleaved=spec.axes != tuple(sorted(spec.axes)),
            scaling=params.scaling,
        )
        cos, sin = mrope.rotary_tables(positions, torch.float32)
    else:
        rope = RotaryEmbedding(
            params.head_dim,
            rotary_dim=params.rotary_dim,
            base=params.base,
            scaling=params.scaling,
            layout="half",
        )
        cos, sin = rope.cos_sin(positions, dtype=torch.float32)
        half = cos.shape[-1] // 2
        cos, sin = cos[..., :half], sin[..., :half]
    return {"cos": cos.reshape(-1, cos.shape[-1]), "sin": sin.reshape(-1, sin.shape[-1])}


def family_rows(fam: Family, *, with_hf: bool = True) -> list[dict[str, Any]]:
    """One row per (layer type, correct port)."""
    rows = []
    positions = positions_of(fam)
    for layer_type in fam.layer_types:
        ports: list[tuple[str, dict[str, Tensor], str | None]] = []
        if with_hf and hf_available():
            arrays = hf_arrays(fam, layer_type, positions)
            pairs = rope_spec(fam.config, layer_type).rotary_dim // 2
            layout = "pairs" if arrays["cos"].shape[-1] == pairs else "half"
            ports.append(("HF module, float32", arrays, layout))
            low = hf_arrays(fam, layer_type, positions, torch.bfloat16)
            ports.append(("HF module, bfloat16 tables", low, layout))
        mine = posenc_arrays(fam, layer_type, positions)
        ports.append(("posenc module, float32", mine, "pairs"))
        low = {k: v.to(torch.bfloat16) for k, v in mine.items()}
        ports.append(("posenc float32 rounded to bf16", low, "pairs"))
        for name, arrays, table_layout in ports:
            report = verify(
                fam.config,
                {**arrays, "positions": positions},
                layer_type=layer_type,
                layout=table_layout,  # type: ignore[arg-type]
            )
            rows.append(_row(fam.name, layer_type, name, report))
    return rows


def _row(fam: str, layer_type: str | None, case: str, report: Any) -> dict[str, Any]:
    worst = max(r.max_abs for r in report.keys)
    return {
        "family": fam,
        "layer_type": layer_type or "-",
        "case": case,
        "verdict": "equal" if report.ok else "mismatch",
        "cause": report.cause.name if report.cause else "-",
        "max_abs": worst if math.isfinite(worst) else "width differs",
        "arrays": ", ".join(r.key for r in report.keys),
    }


@dataclass(frozen=True)
class BugCase:
    """A bug class built for a realistic config; ``offset`` shifts 1-D positions (chunk)."""

    bug: str
    family: str
    layer_type: str | None = None
    component: str = "attention"
    variant: int = 0
    offset: int = 0
    dtype: torch.dtype = torch.float32
    with_qk: bool = False
    config: dict[str, Any] | None = None  # instead of the family's


BUG_CASES: tuple[BugCase, ...] = (
    BugCase("layout_swapped", "Llama-3.1", with_qk=True),
    BugCase("layout_swapped", "DeepSeek-V3", component="indexer"),  # DSA indexer (V3.2)
    BugCase("layer_parameters_swapped", "Gemma 3", "full_attention"),
    BugCase("layer_parameters_swapped", "Gemma 3", "sliding_attention"),
    BugCase("scaling_missing", "Gemma 3", "full_attention"),
    BugCase("scaling_missing", "Llama-3.1"),
    BugCase("yarn_original_length", "Qwen3", variant=0),
    BugCase("yarn_original_length", "Qwen3", variant=1),
    BugCase("yarn_original_length", "gpt-oss"),
    BugCase("attention_factor", "gpt-oss"),
    BugCase("attention_factor", "DeepSeek-V3", variant=0),
    BugCase("attention_factor", "DeepSeek-V4", "compress"),  # explicit attention_factor 1 lost
    BugCase("proportional_width", "Gemma 4", "full_attention"),
    BugCase("proportional_width", "Gemma 4", "full_attention", variant=1),
    BugCase("partial_factor_ignored", "Qwen3.5", with_qk=True),
    BugCase("partial_factor_ignored", "DeepSeek-V4", "main", with_qk=True),
    BugCase("partial_factor_misapplied", "LFM3-style", config=LFM3_DEFAULT),
    BugCase("mrope_temporal_only", "Qwen3.5"),
    BugCase("mrope_sequential_ids", "Qwen2.5-VL"),
    BugCase("mrope_section_layout", "Qwen3-VL"),
    BugCase("mrope_section_layout", "Qwen2.5-VL"),
    BugCase("positions_offset_lost", "Llama-3.1", offset=2048),
    BugCase("tables_in_bf16", "Llama-3.1", dtype=torch.bfloat16),
    BugCase("tables_in_bf16", "gpt-oss", dtype=torch.bfloat16, variant=1),
)


def bug_inputs(case: BugCase) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(arrays, verify kwargs)`` of a port with ``case``'s bug."""
    fam = Family(case.family, case.config) if case.config is not None else family(case.family)
    config = DEEPSEEK_V32 if case.component == "indexer" else fam.config
    positions = positions_of(fam) + case.offset
    kwargs: dict[str, Any] = {"layer_type": case.layer_type, "component": case.component}
    q = k = None
    if case.with_qk:
        q, k = qk(fam, case.layer_type, positions.shape[-1])
    bug = bug_class(case.bug)
    arrays = bug.build(config, positions, q=q, k=k, variant=case.variant, **kwargs)
    arrays = {
        key: value.to(case.dtype)
        if value.is_floating_point() and key in ("cos", "sin")
        else value.float()
        if value.is_floating_point()
        else value
        for key, value in arrays.items()
    }
    arrays.pop("position_ids", None)
    arrays["positions"] = positions
    if q is not None and k is not None:
        arrays["q"], arrays["k"] = q, k
    return arrays, {"config": config, **kwargs}


def bug_rows() -> list[dict[str, Any]]:
    rows = []
    for case in BUG_CASES:
        arrays, kwargs = bug_inputs(case)
        config = kwargs.pop("config")
        report = verify(config, arrays, **kwargs)
        name = f"{case.bug} ({case.family}{', ' + case.layer_type if case.layer_type else ''}"
        name += ", indexer)" if case.component == "indexer" else ")"
        row = _row(case.family, case.layer_type, name, report)
        row["variant"] = report.variant or "-"
        rows.append(row)
    return rows


PORTS = (
    "HF module, float32",
    "HF module, bfloat16 tables",
    "posenc module, float32",
    "posenc float32 rounded to bf16",
)


def _pivot(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (family, layer type): each port's verdict (and cause)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        line = out.setdefault(
            (row["family"], row["layer_type"]),
            {"family": row["family"], "layer_type": row["layer_type"], **dict.fromkeys(PORTS, "-")},
        )
        verdict = row["verdict"] if row["cause"] == "-" else f"{row['verdict']} ({row['cause']})"
        line[row["case"]] = verdict
        if row["case"] == PORTS[0]:
            line["max_abs (HF float32)"] = row["max_abs"]
    for line in out.values():
        line.setdefault("max_abs (HF float32)", "-")
    return list(out.values())


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = [
        "| "
        + " | ".join(f"{row[c]:.2e}" if isinstance(row[c], float) else str(row[c]) for c in columns)
        + " |"
        for row in rows
    ]
    return "\n".join([head, rule, *body])


def main() -> None:
    import transformers

    print(f"Correct ports (transformers {transformers.__version__}, torch {torch.__version__})\n")
    rows = [row for fam in FAMILIES for row in family_rows(fam)]
    print(_table(_pivot(rows), ["family", "layer_type", *PORTS, "max_abs (HF float32)"]))
    print("\nBug classes (each built for a realistic config)\n")
    print(_table(bug_rows(), ["case", "verdict", "cause", "variant", "max_abs"]))


if __name__ == "__main__":
    main()

"""The main job until the lab exists: measure what positional encodings do, write figures.

``posenc demo --out DIR`` runs every property check of :mod:`posenc.checks` (permutation
equivariance and how each encoding breaks it, RoPE's relative-position property, precision
and long-term decay, sinusoidal's linear shift, ALiBi's row-constant equivalence, KV-cache
decoding for every encoding), prints the numbers and writes figures plus ``results.json``.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ["run_demo"]


def run_demo(out: str | Path = "out/demo", echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the checks, print them, and write figures and ``results.json`` to ``out``."""
    from posenc import viz
    from posenc.checks import equivariance_gaps, format_result, run_checks
    from posenc.registry import ModelDims, build_encoding

    start = time.perf_counter()
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    echo(f"posenc demo: property checks (torch {torch.__version__}, {platform.machine()})")
    results = run_checks()
    for result in results:
        echo("  " + format_result(result))

    decay = viz.rope_decay_curves(head_dim=128, base=10000.0, max_distance=4096)
    checkpoints = [0, 16, 256, 1024, 4096]
    echo("RoPE long-term decay bound (head_dim 128, base 1e4), normalised to distance 0:")
    echo("  " + "  ".join(f"r={r}: {float(decay['bound'][r]):.3f}" for r in checkpoints))

    gaps = equivariance_gaps()
    figures = {
        "equivariance.png": viz.plot_equivariance(gaps),
        "sinusoidal.png": viz.plot_sinusoidal(),
        "rope_decay.png": viz.plot_rope_decay(),
        "alibi.png": viz.plot_bias(build_encoding("alibi", ModelDims(dim=64, num_heads=8))),
        "t5.png": viz.plot_bias(build_encoding("t5", ModelDims(dim=64, num_heads=8))),
    }
    for filename, figure in figures.items():
        figure.savefig(folder / filename, dpi=110)
    summary = {
        "checks": [r.as_dict() for r in results],
        "rope_decay_bound": {str(r): float(decay["bound"][r]) for r in checkpoints},
        "equivariance_gaps": gaps,
        "figures": sorted(figures),
        "torch": torch.__version__,
        "machine": platform.platform(),
        "seconds": round(time.perf_counter() - start, 2),
    }
    tmp = folder / "results.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(folder / "results.json")
    failed = [r.name for r in results if not r.passed]
    echo(
        f"wrote {', '.join(sorted(figures))} and results.json to {folder}/ "
        f"in {summary['seconds']} s; {len(results) - len(failed)}/{len(results)} checks passed"
    )
    summary["failed"] = failed
    return summary

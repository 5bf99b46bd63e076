"""The main job (``posenc demo``, what ``make demo`` runs): train short, test long.

1. The property checks of :mod:`posenc.checks` (permutation equivariance and how each
   encoding breaks it, RoPE's relative property, precision and decay, sinusoidal's linear
   shift, ALiBi's row-constant equivalence, KV-cache decoding for every encoding), printed
   with their numbers; figures in ``OUT/checks/``.
2. The lab's extrapolation experiment at CPU scale (:data:`DEMO_CONFIG`): NoPE, sinusoidal,
   learned, RoPE, ALiBi and T5 trained at T = 64 bytes on the Python standard library's
   sources, evaluated at 1x to 8x T; the perplexity table is printed and ``OUT/results.csv``
   (``encoding, train_len, eval_len, loss, ppl, ...``) and ``OUT/report.html`` written.

3. Zero-shot context extension of the RoPE model step 2 trained (evaluation only): PI,
   NTK-aware, dynamic NTK and YaRN against plain RoPE at the same lengths, and one method
   that changes positions per (query, key) pair instead of frequencies, ReRoPE
   (:mod:`posenc.lab.experiments.longctx`'s settings: window T/4, log-n), into ``OUT/extension/``
   (``results.csv``, ``claims.json``, ``report.html``).

Each step prints the seed claims it tests with their verdicts. A killed demo resumes where
it stopped when the same command is given again.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posenc.lab.experiments.extrapolate import ExtrapolateConfig, run_extrapolate

__all__ = ["DEMO_CONFIG", "run_demo"]

#: The demo's experiment: about 90 s on 2 idle CPU cores (two trainings at a time).
DEMO_CONFIG = ExtrapolateConfig(
    encodings=("nope", "sinusoidal", "learned", "rope", "alibi", "t5"),
    train_len=64,
    multipliers=(1.0, 1.25, 2.0, 4.0, 8.0),
    dim=64,
    depth=2,
    num_heads=4,
    steps=600,
    batch_size=32,
    lr=3e-3,
    warmup_steps=30,
    eval_tokens=8192,
    corpus_bytes=2_000_000,
    workers=2,
    threads=1,
    progress=False,
)


def run_checks_and_figures(folder: Path, echo: Callable[[str], None]) -> dict[str, Any]:
    """Run the property checks, print them, write figures and ``checks.json`` to ``folder``."""
    from posenc import viz
    from posenc.checks import equivariance_gaps, format_result, run_checks
    from posenc.registry import ModelDims, build_encoding

    folder.mkdir(parents=True, exist_ok=True)
    results = run_checks()
    for result in results:
        echo("  " + format_result(result))
    decay = viz.rope_decay_curves(head_dim=128, base=10000.0, max_distance=4096)
    checkpoints = [0, 16, 256, 1024, 4096]
    echo("  RoPE long-term decay bound (head_dim 128, base 1e4), relative to distance 0: ")
    echo("    " + "  ".join(f"r={r}: {float(decay['bound'][r]):.3f}" for r in checkpoints))
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
        "failed": [r.name for r in results if not r.passed],
    }
    tmp = folder / "checks.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(folder / "checks.json")
    return summary


#: the context-extension methods step 3 compares (``rope`` is the unscaled baseline)
EXTENSION_METHODS = ("rope", "pi", "ntk", "dynamic_ntk", "yarn")
#: the segment method step 3 adds: its claim (perplexity flat to 8×T) is decided at T = 64
SEGMENT_METHOD = "rerope"


#: fields step 3's longctx config takes from its extend config (the model and the evaluation)
_SHARED = (
    "train_len",
    "dim",
    "depth",
    "num_heads",
    "multipliers",
    "eval_tokens",
    "corpus",
    "corpus_bytes",
    "seeds",
    "split_seed",
)


def extend_zero_shot(
    config: ExtrapolateConfig, folder: Path, *, echo: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """The extension methods applied without fine-tuning to the RoPE model of the
    extrapolation run in ``folder`` (its first seed), evaluated at the same lengths; rows,
    verdicts and report into ``folder/extension`` (reused when already there)."""
    from posenc.lab.claims import format_verdicts
    from posenc.lab.experiments import extend, longctx
    from posenc.lab.report import write_report
    from posenc.lab.results import read_results_csv, write_results_csv
    from posenc.lab.run import as_json, atomic_write_text, torch_threads
    from posenc.lab.runner import record_claims
    from posenc.lab.seed_claims import claims_of

    out = folder / "extension"
    if (out / "results.csv").is_file():
        rows = read_results_csv(out / "results.csv")
    else:
        seed = config.seeds[0]
        ext = extend.ExtendConfig(
            train_len=config.train_len,
            dim=config.dim,
            depth=config.depth,
            num_heads=config.num_heads,
            methods=EXTENSION_METHODS,
            multipliers=config.multipliers,
            ft_methods=(),
            passkey_steps=0,  # evaluation only: the weights are the extrapolation model's
            passkey_lengths=(),
            eval_tokens=config.eval_tokens,
            corpus=config.corpus,
            corpus_bytes=config.corpus_bytes,
            seeds=(seed,),
            split_seed=config.split_seed,
            progress=False,
        )
        run_dir = folder / "runs" / "rope" / f"seed{seed}"
        state = torch.load(run_dir / "final.pt", map_location="cpu", weights_only=True)["model"]
        train_loss = json.loads((run_dir / "done.json").read_text())["final_loss"]
        segment = longctx.LongCtxConfig(
            **{name: getattr(ext, name) for name in _SHARED},
            methods=(SEGMENT_METHOD,),
            passkey_steps=0,
            passkey_lengths=(),
            progress=False,
        )
        with torch_threads(config.threads):
            rows = extend.zero_shot_rows(ext, state, seed=seed, train_loss=train_loss)
            rows += longctx.zero_shot_rows(segment, state, seed=seed, train_loss=train_loss)
        out.mkdir(parents=True, exist_ok=True)
        config_record = {"experiment": "extend", **as_json(ext)}
        atomic_write_text(out / "config.json", json.dumps(config_record, indent=2))
        write_results_csv(rows, out / "results.csv")
    # The zero-shot claims; those about fine-tuning need `posenc lab extend` (it fine-tunes).
    claims = [c for c in claims_of("extend") if c.name.endswith("_zero_shot")]
    claims += [c for c in claims_of("extend") if c.name == f"{SEGMENT_METHOD}_flat_8x"]
    records = record_claims(out, claims, rows)
    write_report(out, title="posenc demo: zero-shot context extension of the RoPE model")
    echo(extend.format_extend_tables(rows))
    echo(format_verdicts(records))
    return rows


def run_demo(
    out: str | Path = "out/demo",
    *,
    config: ExtrapolateConfig = DEMO_CONFIG,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the checks and the extrapolation experiment into ``out``; return a summary."""
    start = time.perf_counter()
    folder = Path(out)
    echo(
        f"posenc demo (torch {torch.__version__}, {platform.machine()}, "
        f"{torch.get_num_threads()} threads)"
    )
    echo("1. property checks")
    checks = run_checks_and_figures(folder / "checks", echo)
    echo(
        "2. train short, test long: "
        + ", ".join(config.encodings)
        + f" at T={config.train_len}, evaluated at "
        + ", ".join(f"{m:g}x" for m in config.multipliers)
    )
    rows = run_extrapolate(config, folder, echo=echo)
    if "rope" in config.encodings:
        echo(
            "3. zero-shot context extension of that RoPE model: "
            + ", ".join((*EXTENSION_METHODS[1:], SEGMENT_METHOD))
        )
        rows += extend_zero_shot(config, folder, echo=echo)
    seconds = time.perf_counter() - start
    echo(
        f"wrote {folder}/results.csv, {folder}/report.html and {folder}/checks/ "
        f"in {seconds:.0f} s; {len(checks['checks']) - len(checks['failed'])}/"
        f"{len(checks['checks'])} checks passed"
    )
    return {"checks": checks, "rows": rows, "seconds": seconds, "failed": checks["failed"]}

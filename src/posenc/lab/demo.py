"""The main job (``posenc demo``, what ``make demo`` runs): train short, test long.

1. The property checks of :mod:`posenc.checks` (permutation equivariance and how each
   encoding breaks it, RoPE's relative property, precision and decay, sinusoidal's linear
   shift, ALiBi's row-constant equivalence, KV-cache decoding for every encoding), printed
   with their numbers; figures in ``OUT/checks/``.
2. The lab's extrapolation experiment at CPU scale (:data:`DEMO_CONFIG`): NoPE, sinusoidal,
   learned, RoPE, ALiBi and T5 trained at T = 64 bytes on the Python standard library's
   sources, 3 seeds, evaluated at 1x to 8x T; the perplexity table (mean ± std over seeds)
   and the claims' verdicts are printed; the run folder is ``OUT`` (``config.json``,
   ``results.csv``: ``encoding, seed, train_len, eval_len, loss, ppl, ...``, ``claims.json``).
3. Zero-shot context extension of the RoPE model of each seed step 2 trained (evaluation
   only): PI, NTK-aware, dynamic NTK and YaRN against plain RoPE at the same lengths, and one
   method that changes positions per (query, key) pair instead of frequencies, ReRoPE
   (:mod:`posenc.lab.experiments.longctx`'s settings: window T/4, log-n), into the run folder
   ``OUT/extension/`` (``results.csv``, ``claims.json``, and a ``config.json`` recording what
   ran: the weights evaluated and the training they came from).

Then one report, ``OUT/report.html``, titled with the question the demo answers
(:data:`DEMO_TITLE`), gathers both run folders (:mod:`posenc.lab.gather`): the findings in
words first (:mod:`posenc.lab.findings`), the data and model described (what the corpus was:
``OUT/data.json``, :func:`corpus_summary`), the cross-signal atlas in brief, every claim of
steps 2 and 3, their tables and figures, the property checks and each run's configuration.
The closing lines name it, count the verdicts and say which ``claims.json`` and
``results.csv`` hold each step's claims and numbers. A killed demo resumes where it
stopped when the same command is given again.
"""

from __future__ import annotations

import json
import platform
import sysconfig
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.experiments import EXPERIMENTS, extend, longctx
from posenc.lab.experiments.extrapolate import ExtrapolateConfig, run_extrapolate
from posenc.lab.run import read_json

__all__ = ["DEMO_CONFIG", "DEMO_TITLE", "claim_counts", "corpus_summary", "run_demo"]

#: The report's title: the question the demo answers.
DEMO_TITLE = "posenc demo: which positional encoding for text past its training length"

#: The demo's experiment: 3 seeds (so that its claims are decided: docs/results.md, "The demo"),
#: two trainings at a time (the demo prints its own wall time).
DEMO_CONFIG = ExtrapolateConfig(
    encodings=("nope", "sinusoidal", "learned", "rope", "alibi", "t5"),
    multipliers=(1.0, 1.25, 2.0, 4.0, 8.0),
    eval_tokens=8192,
    model=ModelArgs(dim=64, depth=2, num_heads=4),
    train=TrainArgs(seeds=(0, 1, 2), steps=600, batch_size=32, lr=3e-3, warmup_steps=30),
    data=DataArgs(train_len=64, corpus_bytes=2_000_000),
    runner=RunnerArgs(workers=2, threads=1, isolate=True, progress=False),
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


def _extension_configs(
    config: ExtrapolateConfig,
) -> tuple[extend.ExtendConfig, longctx.LongCtxConfig]:
    """Step 3's two configs: evaluation only (no fine-tuning, no passkey), in this process,
    of the RoPE models step 2 trained; the model, its training, the data and the evaluation
    lengths are ``config``'s (so ``OUT/extension/config.json`` records the model evaluated)."""
    shared: dict[str, Any] = {
        "model": config.model,
        "train": config.train,
        "data": config.data,
        "multipliers": config.multipliers,
        "eval_tokens": config.eval_tokens,
        "passkey_steps": 0,
        "passkey_lengths": (),
        "runner": RunnerArgs(workers=1, threads=config.runner.threads, progress=False),
    }
    ext = extend.ExtendConfig(**shared, methods=EXTENSION_METHODS, ft_methods=())
    segment = longctx.LongCtxConfig(**shared, methods=(SEGMENT_METHOD,))
    return ext, segment


def extend_zero_shot(
    config: ExtrapolateConfig, folder: Path, *, echo: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """The extension methods applied without fine-tuning to the RoPE model of every seed of
    the extrapolation run in ``folder``, evaluated at the same lengths; rows, verdicts and
    ``config.json`` into ``folder/extension`` (reused when already there)."""
    from posenc.lab.claims import format_verdicts
    from posenc.lab.results import read_results_csv, write_results_csv
    from posenc.lab.run import as_json, atomic_write_text, torch_threads
    from posenc.lab.runner import record_claims

    out = folder / "extension"
    if (out / "results.csv").is_file():
        rows = read_results_csv(out / "results.csv")
    else:
        ext, segment = _extension_configs(config)
        seeds = config.train.seeds
        weights = [f"runs/rope/seed{seed}/final.pt" for seed in seeds]
        rows = []
        with torch_threads(config.runner.threads):
            for seed, path in zip(seeds, weights, strict=True):
                state = torch.load(folder / path, map_location="cpu", weights_only=True)
                done = read_json((folder / path).with_name("done.json"))
                loss = done["final_loss"]
                rows += extend.zero_shot_rows(ext, state["model"], seed=seed, train_loss=loss)
                rows += longctx.zero_shot_rows(segment, state["model"], seed=seed, train_loss=loss)
        out.mkdir(parents=True, exist_ok=True)
        record = {
            "experiment": "extend",
            # what ran: zero-shot evaluation of these weights, trained by ../config.json
            "evaluated": [f"../{path}" for path in weights],
            "trained_by": {"config": "../config.json", "workers": config.runner.workers},
            **as_json(ext),
            "segment_method": {"experiment": "longctx", **as_json(segment)},
        }
        atomic_write_text(out / "config.json", json.dumps(record, indent=2))
        write_results_csv(rows, out / "results.csv")
    # The zero-shot claims; those about fine-tuning need `posenc lab extend` (it fine-tunes).
    # (longctx carries extend's claims beside its own)
    claims = [c for c in longctx.EXPERIMENT.claims if c.name.endswith("_zero_shot")]
    claims += [c for c in longctx.EXPERIMENT.claims if c.name == f"{SEGMENT_METHOD}_flat_8x"]
    records = record_claims(out, claims, rows)
    echo(extend.format_extend_tables(rows))
    echo(format_verdicts(records))
    return rows


def corpus_summary(data: DataArgs) -> dict[str, Any]:
    """What ``data`` loads: the files and bytes (= tokens) of each split, and for the default
    corpus the Python whose standard library it is (``python``, ``root``); the report's
    "Data and model" section reads it from ``OUT/data.json``."""
    splits = data.load()
    return {
        "corpus": list(data.corpus),
        "python": None if data.corpus else platform.python_version(),
        "root": None if data.corpus else sysconfig.get_paths()["stdlib"],
        "files": {name: len(splits.files[name]) for name in ("train", "validation", "test")},
        "bytes": {
            name: int(getattr(splits, name).numel()) for name in ("train", "validation", "test")
        },
    }


def claim_counts(records: Sequence[dict[str, Any]]) -> str:
    """``"7 of 9 claims hold, 1 fails, 1 undecided, 0 undefined"``: every claim's verdict
    counted (a status other than these four under its own name); facts
    (:func:`posenc.lab.claims.is_fact`) are not claims and are left out."""
    from posenc.lab.claims import is_fact

    records = [r for r in records if not is_fact(r)]
    statuses = [str(r.get("status")) for r in records]
    known = ("holds", "fails", "undecided", "undefined")
    parts = [f"{statuses.count(s)} {s}" for s in known[1:]]
    parts += [f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses) if s not in known]
    return f"{statuses.count('holds')} of {len(records)} claims hold, " + ", ".join(parts)


def run_demo(
    out: str | Path = "out/demo",
    *,
    config: ExtrapolateConfig = DEMO_CONFIG,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the checks, the extrapolation experiment and the zero-shot extension of its RoPE
    models into ``out``; write the one report that gathers them; return a summary
    (``checks``, ``rows``, ``claims``, ``report``, ``seconds``, ``failed``)."""
    from posenc.lab.gather import gather
    from posenc.lab.report import write_report
    from posenc.lab.run import atomic_write_text

    start = time.perf_counter()
    folder = Path(out)
    echo(
        f"posenc demo (torch {torch.__version__}, {platform.machine()}, "
        f"{torch.get_num_threads()} threads)"
    )
    echo("1. property checks")
    checks = run_checks_and_figures(folder / "checks", echo)
    seeds = ", ".join(str(s) for s in config.train.seeds)
    echo(
        "2. train short, test long: "
        + ", ".join(config.encodings)
        + f" at T={config.data.train_len}, evaluated at "
        + ", ".join(f"{m:g}x" for m in config.multipliers)
        + f"; seed{'s' if len(config.train.seeds) > 1 else ''} {seeds}"
    )
    rows = run_extrapolate(config, folder, echo=echo)
    summary = json.dumps(corpus_summary(config.data), indent=2)
    atomic_write_text(folder / "data.json", summary)
    if "rope" in config.encodings:
        echo(
            "3. zero-shot context extension of those RoPE models: "
            + ", ".join((*EXTENSION_METHODS[1:], SEGMENT_METHOD))
        )
        rows += extend_zero_shot(config, folder, echo=echo)
    report = write_report(
        folder,
        title=DEMO_TITLE,
        experiments=tuple(EXPERIMENTS.values()),
    )
    runs = gather(folder)
    records = [record for run in runs for record in run.claims]
    seconds = time.perf_counter() - start
    echo(f"report: {report} (every claim, table and figure of steps 1-3)")
    echo(f"claims: {claim_counts(records)}; each claim's numbers:")
    for run in runs:
        where = folder if run.label == "." else folder / run.label
        echo(
            f"  {', '.join(run.experiments)}: {len(run.claims)} claims in {where}/claims.json, "
            f"their numbers in {where}/results.csv"
        )
    echo(
        f"wrote {folder}/ in {seconds:.0f} s; {len(checks['checks']) - len(checks['failed'])}/"
        f"{len(checks['checks'])} checks passed"
    )
    return {
        "checks": checks,
        "rows": rows,
        "claims": records,
        "report": report,
        "seconds": seconds,
        "failed": checks["failed"],
    }

"""A whole lab experiment in one file: how much each encoding's perplexity grows from T to 2T.

docs/lab.md ("Adding an experiment") shows this file; tests/lab/test_toy_experiment.py
registers it with one line and runs it end to end through ``posenc lab``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from posenc.lab.claims import Claim, difference_at
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.data.corpus import LMSource
from posenc.lab.experiments.extrapolate import evaluate_lm
from posenc.lab.figures import encoding_bars
from posenc.lab.runner import Experiment, Run, Section
from posenc.lab.tables import Table, per_encoding_table, text_table
from posenc.lab.train import train
from posenc.models import DecoderLM, ModelConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Row = dict[str, Any]


@dataclass(frozen=True)
class GrowthConfig:
    """The toy's settings: the shared sections and its own field.

    Args:
        encodings: one run per encoding and seed.
        model: the decoder's shape.
        train: seeds and schedule.
        data: the corpus and ``T``.
        runner: how the runs execute.
    """

    encodings: tuple[str, ...] = ("sinusoidal", "alibi")
    model: ModelArgs = field(
        default_factory=functools.partial(ModelArgs, dim=16, depth=1, num_heads=2)
    )
    train: TrainArgs = field(
        default_factory=functools.partial(TrainArgs, steps=20, batch_size=4, warmup_steps=2)
    )
    data: DataArgs = field(
        default_factory=functools.partial(DataArgs, train_len=16, corpus_bytes=20_000)
    )
    runner: RunnerArgs = field(default_factory=functools.partial(RunnerArgs, progress=False))

    def __post_init__(self) -> None:
        if not self.encodings:
            raise ValueError("encodings must name at least one encoding")


def plan(config: GrowthConfig) -> list[Run]:
    """One run per (encoding, seed), each in ``runs/<encoding>/seed<s>``."""
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for encoding in config.encodings
        for seed in config.train.seeds
    ]


def execute(config: GrowthConfig, run: Run, folder: Path) -> list[Row]:
    """Train at ``T`` in ``folder`` (resumable), then perplexity at ``T`` and ``2T``."""
    encoding, seed = run.params["encoding"], run.params["seed"]
    length = config.data.train_len
    corpus = config.data.load()
    torch.manual_seed(seed)
    shape = config.model
    model = DecoderLM(
        ModelConfig(
            dim=shape.dim,
            depth=shape.depth,
            num_heads=shape.num_heads,
            max_seq_len=length,
            pos=encoding,
        )
    )
    source = LMSource(corpus.train, length, seed=seed)
    train(model, source, config.train.train_config(seed, progress=config.runner.progress), folder)
    ppl = {
        n: math.exp(evaluate_lm(model, corpus.test, n, eval_tokens=16 * length))
        for n in (length, 2 * length)
    }
    growth = ppl[2 * length] / ppl[length]
    return [{"experiment": "toy_growth", "encoding": encoding, "seed": seed, "growth": growth}]


def table(rows: list[Row]) -> str:
    """What the terminal prints after the runs."""
    body = [[str(r["encoding"]), str(r["seed"]), f"{r['growth']:.3f}"] for r in rows]
    return text_table(["encoding", "seed", "ppl(2T) / ppl(T)"], body)


def tables(rows: list[Row]) -> list[Table]:
    """The report's table: the growth per encoding, mean ± std over seeds."""
    values = [("ppl(2T) / ppl(T)", "growth", 3)]
    return per_encoding_table(rows, "Perplexity growth from T to 2T", values)


def growth_bars(rows: list[Row]) -> Figure:
    """The report's figure: the growth per encoding, a bar at the mean, a dot per seed."""
    title = "Perplexity growth from T to 2T"
    return encoding_bars(rows, "toy_growth", "growth", "ppl(2T) / ppl(T)", title, unit=False)


SINUSOIDAL_GROWS_MORE = Claim(
    name="toy_sinusoidal_grows_more_than_alibi",
    text="Sinusoidal's perplexity grows more from T to 2T than ALiBi's: growth(sinusoidal) "
    "minus growth(alibi), paired by seed, ≥ 0.",
    paper="Press et al. 2022, Train Short, Test Long (ALiBi), https://arxiv.org/abs/2108.12409",
    published="Table 2 (T = 512): sinusoidal 20.05 at T, 43.54 at 1012 ≈ 2×T (×2.17); ALiBi "
    "19.73 at T, 18.41 at 2512 ≈ 4.9×T (×0.93)",
    experiment="toy_growth",
    statistic=difference_at(
        "toy_growth", {}, "growth", {"encoding": "sinusoidal"}, {"encoding": "alibi"}
    ),
    threshold=0.0,
    direction=">=",
)

EXPERIMENT = Experiment(
    name="toy_growth",
    summary="a toy: each encoding's perplexity growth from T to 2T",
    title="posenc: perplexity growth from T to 2T",
    config=GrowthConfig,
    plan=plan,
    execute=execute,
    table=table,
    claims=(SINUSOIDAL_GROWS_MORE,),
    sections=(Section("Perplexity growth (toy)", tables, {"toy_growth.png": growth_bars}),),
)

if __name__ == "__main__":  # as docs/lab.md runs it: into a temporary folder
    import tempfile

    from posenc.lab.runner import run_experiment

    out = Path(tempfile.mkdtemp()) / "toy_growth"
    run_experiment(EXPERIMENT, GrowthConfig(), out)
    print(f"wrote {out / 'report.html'}")

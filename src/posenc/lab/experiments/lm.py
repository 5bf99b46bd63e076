"""The LM trainer as an experiment: the small byte-level decoder on the embedded corpus, one
run per (encoding, seed), validation loss and throughput; ``torchrun``-ready.

``posenc lab lm --encodings rope alibi --steps 300`` trains in one process;
under ``torchrun`` every process runs the same command and they share the global batch
(:func:`posenc.lab.train.train` wraps the model in DistributedDataParallel; the runner lets
rank 0 alone write the folder; :mod:`posenc.lab.experiments.__main__` joins the group)::

    torchrun --nproc_per_node 2 -m posenc.lab.experiments lm --out runs/lm --encodings rope

The same command without torchrun gives the same losses (to float rounding: gradients are
averaged across ranks). Rows: ``experiment="lm"``, encoding, seed, ``val_loss``, ``val_ppl``
(the validation split, non-overlapping windows), ``train_loss``, ``tokens_per_s``,
``world_size``, ``train_seconds``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from posenc._validate import check_positive_int
from posenc.lab.batch import Batch
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.data.corpus import LMSource, context_free_loss, eval_windows
from posenc.lab.distributed import rank_and_world
from posenc.lab.probes import first_token_mass_fields
from posenc.lab.results import Row
from posenc.lab.runner import Experiment, Run, Section
from posenc.lab.tables import Table, per_encoding_table, text_table
from posenc.lab.train import TrainConfig, lm_loss, train
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import sequence_encoding_spec

__all__ = ["EXPERIMENT", "LmConfig", "format_lm_table"]


@dataclass(frozen=True)
class LmConfig:
    """The LM trainer's settings.

    Args:
        encodings: registered encoding names (``posenc list``), one run each per seed.
        eval_windows: validation windows scored (every eval and at the end).
        device: torch device (under ``torchrun`` with CUDA, each rank's own GPU).
        model: the decoder's shape.
        train: the seeds (one run per seed and encoding: model init and batch order) and the
            schedule; ``batch_size`` is the global batch (divided among ``torchrun`` ranks).
        data: the corpus (capped at 2 MB per split by default) and the training and
            validation context ``train_len``.
        runner: how the runs execute (``threads``: torch's default unless set).
    """

    encodings: tuple[str, ...] = ("rope",)
    eval_windows: int = 32
    device: str = "cpu"
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, depth=2))
    train: TrainArgs = field(
        default_factory=functools.partial(TrainArgs, steps=300, warmup_steps=30)
    )
    data: DataArgs = field(default_factory=functools.partial(DataArgs, corpus_bytes=2_000_000))
    runner: RunnerArgs = field(default_factory=functools.partial(RunnerArgs, threads=None))

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "eval_windows", check_positive_int("eval_windows", self.eval_windows)
        )
        if not self.encodings:
            raise ValueError("encodings must name at least one encoding")
        for name in self.encodings:
            sequence_encoding_spec(name)  # unknown or grid-only names: ValueError

    def model_config(self, encoding: str) -> ModelConfig:
        return ModelConfig(
            vocab_size=256,
            **self.model.config_kwargs(train_len=self.data.train_len),
            pos=encoding,
            max_seq_len=self.data.train_len,
        )

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(
            steps=self.train.steps,
            batch_size=self.train.batch_size,
            lr=self.train.lr,
            warmup_steps=self.train.warmup_steps,
            seed=seed,
            device=self.device,
            progress=self.runner.progress,
        )


def _plan(config: LmConfig) -> list[Run]:
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for encoding in config.encodings
        for seed in config.train.seeds
    ]


def _load(config: LmConfig) -> object:
    return config.data.load()


def _execute(config: LmConfig, run: Run, folder: Path) -> list[Row]:
    encoding, seed = run.params["encoding"], run.params["seed"]
    corpus = config.data.load()
    source = LMSource(corpus.train, config.data.train_len, seed=seed)
    windows = eval_windows(corpus.validation, config.data.train_len, config.eval_windows)

    def validation_loss(model: nn.Module, step: int = 0) -> dict[str, float]:
        device = next(model.parameters()).device
        batch = Batch(windows[:, :-1], windows[:, 1:], torch.ones_like(windows[:, 1:]).bool())
        batch = batch.to(device)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            loss = float(lm_loss(model(batch.tokens), batch))
        model.train(was_training)
        return {"val_loss": loss}

    torch.manual_seed(seed)
    model = DecoderLM(config.model_config(encoding))
    result = train(model, source, config.train_config(seed), folder, evaluate=validation_loss)
    val_loss = validation_loss(model)["val_loss"]
    return [
        {
            "experiment": "lm",
            "encoding": encoding,
            "seed": seed,
            "val_loss": val_loss,
            "val_ppl": math.exp(val_loss),
            # a unigram of the train bytes on the same targets: a learned model is well below
            "context_free_loss": context_free_loss(corpus.train, windows[:, 1:]),
            "train_loss": result.final_loss,
            "tokens_per_s": result.tokens_per_second,
            "world_size": rank_and_world()[1],
            "train_seconds": result.seconds,
            # the attention sink on the validation windows (posenc.lab.probes)
            **first_token_mass_fields(model, windows[:, :-1]),
        }
    ]


def format_lm_table(rows: Sequence[Row]) -> str:
    """One line per run: validation loss and perplexity, training loss (tokens/s stays in the
    rows: runs sharing the machine make it compare no encoding with another)."""
    selected = [r for r in rows if r.get("experiment") == "lm"]
    header = ["encoding", "seed", "val loss", "val ppl", "train loss"]
    body = [
        [
            str(r["encoding"]),
            str(r["seed"]),
            f"{r['val_loss']:.4f}",
            f"{r['val_ppl']:.3f}",
            f"{r['train_loss']:.4f}",
        ]
        for r in selected
    ]
    return "byte-level LM, validation split\n" + text_table(header, body)


def _tables(rows: Sequence[Row]) -> list[Table]:
    """The report's table: validation loss and perplexity and training loss per encoding,
    mean ± std over seeds."""
    values = [
        ("val loss", "val_loss", 4),
        ("val ppl", "val_ppl", 3),
        ("train loss", "train_loss", 4),
    ]
    return per_encoding_table(rows, "Validation loss per positional encoding", values)


EXPERIMENT = Experiment(
    name="lm",
    summary="the byte-level LM trainer (torchrun-ready): validation loss per encoding",
    title="posenc: byte-level LM",
    config=LmConfig,
    plan=_plan,
    execute=_execute,
    table=format_lm_table,
    prepare=_load,
    sections=(Section("Language model (torchrun)", _tables),),
)

"""Length generalization on synthetic tasks, each encoding plain and with randomized positions.

The setting of Ruoss et al. 2023, "Randomized Positional Encodings Boost Length Generalization
of Transformers" (https://arxiv.org/abs/2305.16843), and Kazemnejad et al. 2023, "The Impact
of Positional Encoding on Length Generalization in Transformers"
(https://arxiv.org/abs/2305.19466), at CPU scale: for each task of :mod:`posenc.lab.data.tasks` and
each encoding, a small decoder (:class:`~posenc.models.DecoderLM`) is trained on the task's
short train lengths with the loss on the answer tokens only, once with the positions
``0 .. T - 1`` and once with randomized positions (a row's ``n`` real tokens get ``n`` sorted
distinct integers from ``[0, L)``, padding or not, a fresh draw per row and step). It is then
scored by greedy token accuracy and exact-match sequence accuracy
(:func:`posenc.lab.data.tasks.accuracy`) at the longest train length (``split = "train"``) and
at every test length (``split = "test"``).

As in Ruoss et al. (and their code), a randomized model is also *evaluated* with randomized
positions; these are drawn from a generator seeded by ``(seed, task, length, chunk)``, so the
evaluation is deterministic and every randomized model sees the same positions.

A plain learned table is sized to the longest test sequence, so it is defined there, but its
rows past the train lengths are never trained: failing out of distribution is the expected
finding, not a bug. A randomized learned table is sized ``L`` and sees all of its rows.

Budget (2 shared CPU cores, ``threads = 1``): one model of the defaults trains in about 50 s
(copy, reverse) to 2 min (flip-flop, counting) on a quiet core, so the default 48 models take
about an hour with ``workers = 1`` and half that with ``workers = 2``. Measured: the reverse
task alone (12 models) took 14 min of wall time with ``workers = 2`` on a machine loaded ~3×.

Example::

    rows = run_tasks(TasksConfig(tasks=("reverse",), encodings=("nope", "rope")), "runs/tasks")

The package: this module (config, runs, evaluation, tables and figure) and :mod:`.claims`
(the findings its rows test).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from posenc._validate import check_positive_int
from posenc.encoding.randomized import randomize_positions
from posenc.lab.batch import Batch, derive_seed
from posenc.lab.config import ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.data.tasks import TASKS, TaskSource, accuracy, make_task
from posenc.lab.experiments.generalize.claims import CLAIMS
from posenc.lab.figures import encoding_color, finite, mean_line, new_figure
from posenc.lab.runner import (
    Experiment,
    Run,
    Section,
    check_pos_kwargs,
    run_experiment,
)
from posenc.lab.tables import (
    Table,
    complete_rows,
    has_column,
    pivot,
    seed_note,
    text_table,
    with_variant,
)
from posenc.lab.train import TrainConfig, train
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import sequence_encoding_spec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "EXPERIMENT",
    "TasksConfig",
    "accuracy_vs_length",
    "evaluate_task",
    "format_tasks_table",
    "run_tasks",
]

Row = dict[str, Any]

#: Tokens per evaluation forward pass (rows are chunked to stay below it).
EVAL_TOKENS_PER_CHUNK = 16384


@dataclass(frozen=True)
class TasksConfig:
    """One length-generalization experiment.

    Args:
        tasks: task names of :data:`posenc.lab.data.tasks.TASKS`.
        encodings: registered encoding names (``posenc list``).
        randomized: which variants to train: ``False`` = positions ``0 .. T - 1``, ``True`` =
            randomized positions (Ruoss et al. 2023) in training and evaluation.
        eval_examples: examples scored at each length.
        random_max_length: ``L``, the range randomized positions are drawn from; ``None`` =
            4 × the task's longest sequence (train and test lengths), per task.
        task_params: per task, keyword arguments of :func:`~posenc.lab.data.tasks.make_task` (task
            parameters, and ``train_lengths`` / ``test_lengths`` to override the defaults).
        pos_kwargs: per encoding, keyword arguments of its constructor; each encoding's
            model is built once per task and variant on the meta device when the config is,
            so a bad keyword or value is refused naming ``pos_kwargs[<encoding>]`` before
            anything trains.
        device: torch device of training and evaluation.
        model: the decoder's shape.
        train: the seeds (one run per seed and (task, encoding, variant): model init,
            training data, randomized positions and the scored examples; tables give mean ±
            std over seeds) and the schedule (``batch_size``: examples per step).
        runner: how the runs execute (progress bars only with ``workers = 1``).
    """

    tasks: tuple[str, ...] = ("copy", "reverse", "flip_flop", "counting")
    encodings: tuple[str, ...] = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5")
    randomized: tuple[bool, ...] = (False, True)
    eval_examples: int = 200
    random_max_length: int | None = None
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    pos_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str = "cpu"
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, dim=64))
    train: TrainArgs = field(default_factory=functools.partial(TrainArgs, lr=1e-3))
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "eval_examples", check_positive_int("eval_examples", self.eval_examples)
        )
        dim, heads = self.model.dim, self.model.num_heads
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({heads})")
        if self.random_max_length is not None:
            object.__setattr__(
                self,
                "random_max_length",
                check_positive_int("random_max_length", self.random_max_length),
            )
        for name in ("tasks", "encodings"):
            values = getattr(self, name)
            if not values or len(set(values)) != len(values):
                raise ValueError(f"{name} must be a non-empty tuple without repeats, got {values}")
        for task in self.tasks:
            if task not in TASKS:
                raise ValueError(f"tasks must name tasks of {', '.join(TASKS)}; got {task!r}")
        for encoding in self.encodings:
            try:
                sequence_encoding_spec(encoding)
            except ValueError as error:
                raise ValueError(f"encodings: {error}") from error
        flags = self.randomized
        booleans = all(isinstance(flag, bool) for flag in flags)
        if not flags or not booleans or len(set(flags)) != len(flags):
            raise ValueError(f"randomized must hold False and/or True once each, got {flags}")
        for name, known in (("task_params", self.tasks), ("pos_kwargs", self.encodings)):
            extra = sorted(set(getattr(self, name)) - set(known))
            if extra:
                raise ValueError(f"{name} names {extra}, which are not in {known}")
        for task in self.tasks:
            try:
                source = self.source(task)
            except ValueError as error:
                raise ValueError(f"task_params[{task!r}]: {error}") from error
            longest = source.max_seq_len()
            if self.random_max_length is not None and self.random_max_length < longest:
                raise ValueError(
                    f"random_max_length ({self.random_max_length}) must be >= the longest "
                    f"{task} sequence ({longest} tokens)"
                )
        check_pos_kwargs(self.pos_kwargs, self.encodings, self._models)

    def _models(self, encoding: str) -> list[DecoderLM]:
        """``encoding``'s model of every task and variant (their tables differ in length)."""
        return [
            DecoderLM(self.model_config(task, encoding, randomized))
            for task in self.tasks
            for randomized in self.randomized
        ]

    def source(self, task: str, seed: int = 0) -> TaskSource:
        """The task's source for ``seed``, with ``task_params`` applied."""
        params = dict(self.task_params.get(task, {}))
        for key in ("train_lengths", "test_lengths"):
            if key in params and isinstance(params[key], list):
                params[key] = tuple(params[key])  # JSON gives lists
        return make_task(task, seed=seed, **params)

    def max_position(self, task: str) -> int:
        """``L`` of the randomized variant of ``task``."""
        if self.random_max_length is not None:
            return self.random_max_length
        return 4 * self.source(task).max_seq_len()

    def model_config(self, task: str, encoding: str, randomized: bool) -> ModelConfig:
        """The decoder; ``max_seq_len`` (the learned table) covers every position it is fed."""
        source = self.source(task)
        return ModelConfig(
            vocab_size=source.vocab_size,
            **self.model.config_kwargs(train_len=source.max_seq_len()),
            max_seq_len=self.max_position(task) if randomized else source.max_seq_len(),
            pos=encoding,
            pos_kwargs=dict(self.pos_kwargs.get(encoding, {})),
        )

    def train_config(self, task: str, randomized: bool, seed: int = 0) -> TrainConfig:
        return self.train.train_config(
            seed,
            device=self.device,
            progress=self.runner.progress and self.runner.workers == 1,
            randomize_positions=self.max_position(task) if randomized else None,
        )


def evaluate_task(
    model: nn.Module,
    source: TaskSource,
    length: int,
    *,
    examples: int,
    max_position: int | None = None,
    seed: int = 0,
) -> tuple[float, float]:
    """Greedy ``(token_acc, seq_acc)`` of ``model`` on ``examples`` test rows of ``length``.

    The rows are ``source.batch(0, examples, length=length)`` (a stream separate from
    training), scored in chunks of at most :data:`EVAL_TOKENS_PER_CHUNK` tokens; token
    accuracy is pooled over all answer tokens, sequence accuracy over all rows. With
    ``max_position = L`` each row's ``n`` real tokens get randomized positions (``n`` sorted
    distinct integers from ``[0, L)``, as if the row were unpadded; padding keeps ``0 .. T -
    1``) from a generator seeded by ``(seed, task, length, chunk)``, so repeated calls give the
    same result.

    Args:
        model: maps ``(tokens, positions, key_padding_mask=...)`` to logits ``(B, T, V)``.
        source: the task.
        length: problem size (see :data:`posenc.lab.data.tasks.TASKS`).
        examples: rows to score.
        max_position: ``L`` for randomized positions, ``None`` = ``0 .. T - 1``.
        seed: seed of the randomized positions.
    """
    examples = check_positive_int("examples", examples)
    full = source.batch(0, examples, length=length)
    rows_per_chunk = max(1, EVAL_TOKENS_PER_CHUNK // full.seq_len)
    device = next(model.parameters()).device
    hits, answers, exact, scored = 0.0, 0, 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for chunk, start in enumerate(range(0, examples, rows_per_chunk)):
            rows = slice(start, start + rows_per_chunk)
            padding = None if full.key_padding_mask is None else full.key_padding_mask[rows]
            batch = Batch(
                full.tokens[rows],
                full.targets[rows],
                full.loss_mask[rows],
                key_padding_mask=padding,
            )
            positions = None
            if max_position is not None:  # each row's real tokens their own subset
                key = derive_seed("tasks-eval-positions", seed, source.name, length, chunk)
                positions = randomize_positions(
                    torch.arange(batch.seq_len).expand(batch.batch_size, -1),
                    max_position,
                    real=padding,
                    generator=torch.Generator().manual_seed(key),
                ).to(device)
            batch = batch.to(device)
            logits = model(batch.tokens, positions, key_padding_mask=batch.key_padding_mask)
            token_acc, seq_acc = accuracy(logits, batch)
            count = int(batch.loss_mask.sum())
            rows_scored = int(batch.loss_mask.any(-1).sum())
            hits += token_acc * count
            answers += count
            exact += seq_acc * rows_scored
            scored += rows_scored
    model.train(was_training)
    return hits / answers, exact / scored


def _run_name(task: str, encoding: str, randomized: bool) -> str:
    return f"{task}-{encoding}-{'rand' if randomized else 'plain'}"


def _plan(config: TasksConfig) -> list[Run]:
    return [
        Run(
            f"{_run_name(task, encoding, randomized)}/seed{seed}",
            {"task": task, "encoding": encoding, "randomized": randomized, "seed": seed},
        )
        for task in config.tasks
        for encoding in config.encodings
        for randomized in config.randomized
        for seed in config.train.seeds
    ]


def _execute(config: TasksConfig, run: Run, folder: Path) -> list[Row]:
    """Train one (task, encoding, variant), resuming if its folder holds a run; score it."""
    task, encoding, randomized, seed = (
        run.params[k] for k in ("task", "encoding", "randomized", "seed")
    )
    source = config.source(task, seed)
    max_position = config.max_position(task) if randomized else None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecoderLM(config.model_config(task, encoding, randomized))
    result = train(model, source, config.train_config(task, randomized, seed), folder)
    low, high = source.train_lengths
    lengths = [(high, "train"), *((n, "test") for n in source.test_lengths)]
    rows = []
    for length, split in lengths:
        token_acc, seq_acc = evaluate_task(
            model,
            source,
            length,
            examples=config.eval_examples,
            max_position=max_position,
            seed=seed,
        )
        rows.append(
            {
                "experiment": "tasks",
                "task": task,
                "encoding": encoding,
                "randomized": randomized,
                "seed": seed,
                "length": length,
                "split": split,
                "token_acc": token_acc,
                "seq_acc": seq_acc,
                "train_len_min": low,
                "train_len_max": high,
                "seq_len": source.max_seq_len(length),
                "max_position": max_position,
                "examples": config.eval_examples,
                "train_loss": result.final_loss,
                "train_seconds": result.seconds,
            }
        )
    return rows


def run_tasks(
    config: TasksConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in folder ``out``; return and save its result rows.

    Writes ``out/config.json``, one run folder per (task, encoding, variant) under
    ``out/runs/`` (``copy-rope-rand``, ...), ``out/results.csv`` and ``out/report.html``. Runs
    already evaluated (their ``eval.json`` exists) are not trained again, so the same command
    resumes a killed experiment.

    Raises:
        ValueError: naming the field when ``out`` holds a run with a different config.
    """
    return run_experiment(EXPERIMENT, config, out, echo=echo)


def format_tasks_table(rows: Sequence[Row], metric: str = "seq_acc") -> str:
    """Per task: ``metric`` (``seq_acc`` or ``token_acc``) with encodings down and lengths
    across, mean ± std over seeds; ``*`` marks the in-distribution length, ``+rand`` the
    randomized variant."""
    selected = with_variant([r for r in rows if r.get("experiment") == "tasks"])
    lines = [f"{metric} by length (* = in distribution); {seed_note(selected)}"]
    for task in dict.fromkeys(r["task"] for r in selected):
        cells = [r for r in selected if r["task"] == task]
        train = {r["length"] for r in cells if r.get("split") == "train"}

        def label(n: int, train: set[int] = train) -> str:
            return f"{n}*" if n in train else str(n)

        header, body = pivot(cells, ["variant"], "length", metric, label=label)
        lines += ["", text_table([task, *header[1:]], body)]
    return "\n".join(lines)


def _tables(rows: Sequence[Row]) -> list[Table]:
    """The report's tables: per task, exact-match and token accuracy by variant × length."""
    rows = with_variant(complete_rows(rows, ["task", "encoding", "length"]))
    tables = []
    for task in dict.fromkeys(row["task"] for row in rows):
        cells = [row for row in rows if row["task"] == task]
        train = {row["length"] for row in cells if row.get("split") == "train"}

        def label(n: Any, train: set[Any] = train) -> str:
            return f"{n}*" if n in train else str(n)

        for metric, what in (("seq_acc", "exact-match accuracy"), ("token_acc", "token accuracy")):
            if has_column(cells, metric):
                header, body = pivot(cells, ["variant"], "length", metric, digits=2, label=label)
                caption = (
                    f"{task}: {what} ({metric}) by length (* = a training length; "
                    f"+rand = randomized positions); {seed_note(cells)}."
                )
                tables.append((caption, header, body))
    return tables


def accuracy_vs_length(rows: Sequence[Row]) -> Figure:
    """Sequence accuracy against test length per task (mean over seeds); dashed lines are
    randomized positions."""
    tasks: dict[str, dict[tuple[str, bool], list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in rows:
        if row.get("experiment") == "tasks" and finite(row.get("seq_acc")):
            key = (row["encoding"], bool(row["randomized"]))
            tasks[row["task"]][key].append((row["length"], row["seq_acc"]))
    count = max(len(tasks), 1)
    columns = min(count, 3)
    size = (4.2 * columns, 3.2 * math.ceil(count / columns))
    fig = new_figure(figsize=size, layout="constrained")
    for index, (task, series) in enumerate(sorted(tasks.items())):
        ax = fig.add_subplot(math.ceil(count / columns), columns, index + 1)
        for (encoding, randomized), points in sorted(series.items()):
            mean_line(
                ax,
                points,
                marker=".",
                ls="--" if randomized else "-",
                color=encoding_color(encoding),
                label=f"{encoding}{' (rand)' if randomized else ''}",
            )
        ax.set(title=task, xlabel="test length", ylabel="exact-match accuracy", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    return fig


EXPERIMENT = Experiment(
    name="tasks",
    summary="length generalization on synthetic tasks, plain and randomized positions",
    title="posenc: length generalization on synthetic tasks",
    config=TasksConfig,
    plan=_plan,
    execute=_execute,
    table=format_tasks_table,
    claims=CLAIMS,
    sections=(Section("Length generalization tasks", _tables, {"tasks.png": accuracy_vs_length}),),
)

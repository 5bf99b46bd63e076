"""The long-context task suite: train at ``L``, test at 1, 2, 4, 8 × ``L``, per task family.

The offline counterpart of the benchmarks long-context methods are judged on, generated on the
machine (:mod:`posenc.lab.data`): RULER's synthetic families (:mod:`~posenc.lab.data.ruler`:
needles, variable tracking, common and frequent words; Hsieh et al. 2024,
https://arxiv.org/abs/2404.06654), MQAR (:mod:`~posenc.lab.data.recall`, zoology), flip-flop
(Liu et al. 2023, https://arxiv.org/abs/2306.00946) and state tracking
(:mod:`~posenc.lab.data.state_tracking`, Merrill et al. 2024). For each task, each registered
encoding (any name of ``posenc list``, the data-dependent ones included) and each seed, a small
decoder is trained on problem sizes up to ``L`` (the task's ``length``: prompt tokens for the
RULER tasks, pairs for MQAR, instructions for flip-flop, elements for state tracking) and
scored by exact match and token accuracy at ``m · L`` for every multiplier ``m``.

The training and scoring are :mod:`~posenc.lab.experiments.generalize`'s (its ``execute``, with
the lengths set from ``L`` and the multipliers); this module adds the families, the multiples
and the report. HELMET (Yen et al. 2025, https://arxiv.org/abs/2410.02694) found that needle
retrieval does not predict downstream long-context results: the report says so beside any
finding resting on the ``niah_*`` tasks alone.

Budget: ``--family ruler`` at the defaults (7 tasks × 3 encodings × 1 seed = 21 models) is the
family sweep of docs/lab.md: 633 s with two workers on an idle 2-core machine (docs/results.md
§10); :data:`TINY` is the seconds-long config the tests use.

Example::

    rows = run_suite(SuiteConfig(family="state", encodings=("nope", "rope")), "runs/suite")
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc._validate import check_positive_int
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.data.ruler import NEEDLE_TASKS, RULER_TASKS
from posenc.lab.data.tasks import TASKS, TaskSource, make_task
from posenc.lab.experiments import extend, generalize, longctx
from posenc.lab.experiments.suite.claims import CLAIMS
from posenc.lab.experiments.suite.drope import drope_rows
from posenc.lab.experiments.suite.report import (
    format_suite_table,
    needle_note,
    score_vs_multiple,
    suite_tables,
)
from posenc.lab.runner import Experiment, Run, Section, run_experiment
from posenc.models import DecoderLM

__all__ = [
    "EXPERIMENT",
    "FAMILIES",
    "TINY",
    "SuiteConfig",
    "format_suite_table",
    "needle_note",
    "run_suite",
    "score_vs_multiple",
]

Row = dict[str, Any]

#: The task families by name: a sweep of one is ``--family NAME``.
FAMILIES: dict[str, tuple[str, ...]] = {
    "ruler": tuple(RULER_TASKS),
    "needle": tuple(NEEDLE_TASKS),
    "recall": ("mqar",),
    "flip_flop": ("flip_flop",),
    "state": ("state_tracking",),
}


@dataclass(frozen=True)
class SuiteConfig:
    """One suite sweep.

    Args:
        family: a key of :data:`FAMILIES`, whose tasks run when ``tasks`` is empty.
        tasks: task names of :data:`posenc.lab.data.tasks.TASKS` (overrides ``family``).
        encodings: registered encoding names (``posenc list``).
        multipliers: test problem sizes as multiples of ``L`` (each ``>= 1``; ``1`` is the
            longest training size, scored on fresh examples).
        train_length: per task, ``L``; default the task's longest default training size.
            Training sizes are drawn from ``[low, L]``, ``low`` the task's default smallest
            size when it is at most ``L``, else ``L``.
        task_params: per task, task parameters (:func:`~posenc.lab.data.tasks.make_task`).
        randomized: train (and score) plain positions (``False``) and/or randomized ones
            (``True``, Ruoss et al. 2023), as in ``generalize``.
        eval_examples: examples scored per task and length.
        pos_kwargs: per encoding, keyword arguments of its constructor.
        test_params: per task, named test distributions: parameter overrides the trained
            model is also scored on at every size (rows with ``test_set`` = the name; the
            training distribution's rows have ``test_set = "train"``). The default scores
            flip-flop as Liu et al. 2023 do: trained on FFL(0.8), tested also on sparse
            FFL(0.98) and dense FFL(0.1). Tasks that do not run are ignored.
        zero_shot: long-context methods of ``longctx`` (its segment methods ``self_extend``,
            ``dual_chunk``, ``rerope``, ``leaky_rerope``, ``lm_infinite``, ``sinks``, and
            ``extend``'s scalings ``pi``, ``ntk``, ``dynamic_ntk``, ``yarn``, ...) applied
            **without retraining** to every ``rope`` run at each test size: the RoPE weights
            loaded unchanged into the method's model, its settings ``longctx``'s rules for
            ``T`` = the tokens of the longest training row and ``s = tokens / T``. Needs
            ``"rope"`` in ``encodings``; rows carry ``method`` (``"rope"`` for the trained
            model itself).
        drope_steps: DroPE (:mod:`~posenc.lab.experiments.suite.drope`, Gelberg et al. 2025):
            when ``> 0``, every ``rope`` run (plain positions) is also scored with its encoding
            dropped after this many steps of recalibration at ``L`` (rows with ``method =
            "drope"``); ``0``: none. Needs ``"rope"`` in ``encodings``.
        device: torch device.
        model, train, runner: the decoder's shape, the seeds and schedule, the execution.
    """

    family: str = "ruler"
    tasks: tuple[str, ...] = ()
    encodings: tuple[str, ...] = ("nope", "rope", "alibi")
    multipliers: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    train_length: dict[str, int] = field(default_factory=dict)
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    randomized: tuple[bool, ...] = (False,)
    eval_examples: int = 100
    pos_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    test_params: dict[str, dict[str, dict[str, Any]]] = field(
        default_factory=lambda: {"flip_flop": {"sparse": {"p": 0.98}, "dense": {"p": 0.1}}}
    )
    zero_shot: tuple[str, ...] = ()
    drope_steps: int = 0
    device: str = "cpu"
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, dim=64, depth=2))
    train: TrainArgs = field(
        default_factory=functools.partial(TrainArgs, steps=1500, lr=2e-3, warmup_steps=100)
    )
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}; got {self.family!r}")
        for task in self.tasks:
            if task not in TASKS:
                raise ValueError(f"tasks must name tasks of {', '.join(TASKS)}; got {task!r}")
        multipliers = tuple(self.multipliers)
        if not multipliers or any(not math.isfinite(m) or m < 1 for m in multipliers):
            raise ValueError(f"multipliers must be numbers >= 1, got {multipliers}")
        object.__setattr__(self, "multipliers", multipliers)
        extra = sorted(set(self.train_length) - set(self.task_names))
        if extra:
            raise ValueError(f"train_length names {extra}, which are not in {self.task_names}")
        for task, length in self.train_length.items():
            check_positive_int(f"train_length[{task!r}]", length)
        self.tasks_config()  # generalize's checks: tasks, lengths, encodings, pos_kwargs
        for task, sets in self.test_params.items():
            if task not in TASKS:
                raise ValueError(f"test_params names {task!r}, not a task of {', '.join(TASKS)}")
            if task not in self.task_names:
                continue
            vocab = self.tasks_config().source(task).vocab
            for name, overrides in sets.items():
                if name == "train" or not isinstance(overrides, dict):
                    raise ValueError(
                        f"test_params[{task!r}] must map names other than 'train' to dicts of "
                        f"task parameters, got {name!r}: {overrides!r}"
                    )
                try:
                    source = self.test_source(task, name)
                except ValueError as error:
                    raise ValueError(f"test_params[{task!r}][{name!r}]: {error}") from None
                if source.vocab != vocab:
                    raise ValueError(
                        f"test_params[{task!r}][{name!r}] changes the task's vocabulary, which "
                        "the trained model cannot read"
                    )
        object.__setattr__(self, "zero_shot", tuple(self.zero_shot))
        if not isinstance(self.drope_steps, int) or self.drope_steps < 0:
            raise ValueError(f"drope_steps must be an integer >= 0, got {self.drope_steps!r}")
        if self.drope_steps and "rope" not in self.encodings:
            raise ValueError("drope_steps needs 'rope' in encodings (its runs are recalibrated)")
        if self.zero_shot:
            if "rope" not in self.encodings:
                raise ValueError("zero_shot needs 'rope' in encodings (its runs are extended)")
            if "rope" in self.zero_shot:
                raise ValueError("zero_shot must not name 'rope' (its rows are the rope runs)")
            for task in self.task_names:
                self.longctx_config(task)  # longctx judges the methods and their settings

    @property
    def task_names(self) -> tuple[str, ...]:
        """The tasks that run."""
        return tuple(self.tasks) or FAMILIES[self.family]

    def length(self, task: str) -> int:
        """``L`` of ``task``."""
        return self.train_length.get(task, TASKS[task].train_lengths[1])

    def lengths(self, task: str) -> tuple[tuple[int, int], tuple[int, ...]]:
        """``task``'s training range and its test sizes (the multiples above 1)."""
        length = self.length(task)
        low = TASKS[task].train_lengths[0]
        tests = sorted({round(m * length) for m in self.multipliers if round(m * length) > length})
        return (low if low <= length else length, length), tuple(tests)

    def longctx_config(self, task: str) -> longctx.LongCtxConfig:
        """``longctx``'s config holding the zero-shot methods' rules for ``task``, with ``T``
        the tokens of its longest training row."""
        source = self.tasks_config().source(task)
        train_len = source.max_seq_len(self.length(task))
        longest = max(source.max_seq_len(n) for n in source.test_lengths or (train_len,))
        multiples = tuple(source.max_seq_len(n) / train_len for n in source.test_lengths)
        return longctx.LongCtxConfig(
            methods=self.zero_shot,
            multipliers=multiples or (1.0,),
            passkey_lengths=(),
            passkey_steps=0,
            eval_tokens=max(longest, train_len),
            model=self.model,
            data=DataArgs(train_len=train_len),
        )

    def test_source(self, task: str, name: str, seed: int = 0) -> TaskSource:
        """``task``'s test distribution ``name`` of ``test_params`` (its sizes unchanged)."""
        train, test = self.lengths(task)
        params = {**self.task_params.get(task, {}), **self.test_params[task][name]}
        return make_task(task, seed=seed, train_lengths=train, test_lengths=test, **params)

    def tasks_config(self) -> generalize.TasksConfig:
        """The ``generalize`` config that trains and scores these runs."""
        params = {}
        for task in self.task_names:
            train, test = self.lengths(task)
            params[task] = {
                **self.task_params.get(task, {}),
                "train_lengths": train,
                "test_lengths": test,
            }
        return generalize.TasksConfig(
            tasks=self.task_names,
            encodings=tuple(self.encodings),
            randomized=tuple(self.randomized),
            eval_examples=self.eval_examples,
            task_params=params,
            pos_kwargs=self.pos_kwargs,
            device=self.device,
            model=self.model,
            train=self.train,
            runner=self.runner,
        )


#: The tests' config: two tasks, two encodings, a few steps (seconds on one core).
TINY = SuiteConfig(
    tasks=("niah_single", "state_tracking"),
    encodings=("nope", "rope"),
    train_length={"niah_single": 24, "state_tracking": 4},
    task_params={"state_tracking": {"group": "s3"}},
    multipliers=(1.0, 2.0),
    eval_examples=8,
    model=ModelArgs(dim=16, depth=1, num_heads=2),
    train=TrainArgs(steps=6, batch_size=4, lr=1e-3, warmup_steps=2),
    runner=RunnerArgs(progress=False),
)


def _plan(config: SuiteConfig) -> list[Run]:
    return list(generalize.EXPERIMENT.plan(config.tasks_config()))


def _execute(config: SuiteConfig, run: Run, folder: Path) -> list[Row]:
    """Train and score one (task, encoding, variant, seed) with ``generalize``; add the multiple
    of ``L``, the family and whether the task is needle retrieval."""
    rows = generalize.EXPERIMENT.execute(config.tasks_config(), run, folder)
    rows = [{**row, "test_set": "train"} for row in rows]
    rows += _test_set_rows(config, run, folder, rows)
    extended = config.zero_shot or config.drope_steps
    if extended and run.params["encoding"] == "rope" and not run.params["randomized"]:
        rows = own = [{**row, "method": "rope"} for row in rows]
        if config.zero_shot:
            rows = [*rows, *_zero_shot_rows(config, run, folder, own)]
        if config.drope_steps:
            drope = drope_rows(config.tasks_config(), config.drope_steps, run, folder, own)
            rows = [*rows, *drope]
    family: dict[str, str] = {}
    for name, tasks in FAMILIES.items():  # a task's first family (niah_single: ruler)
        for task in tasks:
            family.setdefault(task, name)
    out = []
    for row in rows:
        length = config.length(row["task"])
        out.append(
            {
                **row,
                "experiment": "suite",
                "family": family.get(row["task"], "other"),
                "train_length": length,
                "multiple": row["length"] / length,
                "needle_only": row["task"] in NEEDLE_TASKS,
                "task_params": json.dumps(config.task_params.get(row["task"], {}), sort_keys=True),
            }
        )
    return out


def _test_set_rows(config: SuiteConfig, run: Run, folder: Path, rows: list[Row]) -> list[Row]:
    """The trained model scored on each of its task's ``test_params`` at every size."""
    task, encoding, randomized, seed = (
        run.params[k] for k in ("task", "encoding", "randomized", "seed")
    )
    sets = config.test_params.get(task, {})
    if not sets:
        return []
    tasks_config = config.tasks_config()
    with torch.random.fork_rng(devices=[]):
        model = DecoderLM(tasks_config.model_config(task, encoding, randomized))
    model.load_state_dict(extend.final_state(folder))
    model.to(config.device)
    max_position = tasks_config.max_position(task) if randomized else None
    out = []
    for name in sets:
        source = config.test_source(task, name, seed)
        for row in rows:
            token_acc, seq_acc = generalize.evaluate_task(
                model,
                source,
                row["length"],
                examples=config.eval_examples,
                max_position=max_position,
                seed=seed,
            )
            out.append({**row, "test_set": name, "token_acc": token_acc, "seq_acc": seq_acc})
    return out


def _zero_shot_rows(config: SuiteConfig, run: Run, folder: Path, rows: list[Row]) -> list[Row]:
    """Each zero-shot method on the rope run's weights at every test size (``longctx``'s
    protocol: the weights unchanged, the method's settings its rule at that length)."""
    task, seed = run.params["task"], run.params["seed"]
    source = config.tasks_config().source(task, seed)
    rules = config.longctx_config(task)
    state = extend.final_state(folder)
    out = []
    for method in config.zero_shot:
        for row in rows:
            if row["split"] != "test" or row["test_set"] != "train":
                continue
            model_config = rules.model_config(method, source.max_seq_len(row["length"]))
            with torch.random.fork_rng(devices=[]):
                model = DecoderLM(
                    dataclasses.replace(model_config, vocab_size=source.vocab_size)
                ).to(config.device)
            model.load_state_dict(state)  # RoPE's weights, unchanged: the methods hold none
            token_acc, seq_acc = generalize.evaluate_task(
                model, source, row["length"], examples=config.eval_examples, seed=seed
            )
            out.append(
                {
                    **row,
                    "method": method,
                    "token_acc": token_acc,
                    "seq_acc": seq_acc,
                    "pos_kwargs": json.dumps(model_config.pos_kwargs, sort_keys=True),
                }
            )
    return out


def run_suite(
    config: SuiteConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the suite in folder ``out``; return and save its rows (``results.csv``,
    ``report.html``, one run folder per task, encoding, variant and seed)."""
    return run_experiment(EXPERIMENT, config, out, echo=echo)


EXPERIMENT = Experiment(
    name="suite",
    summary="long-context task suite: RULER-style, MQAR, flip-flop, state tracking at 1-8x L",
    title="posenc: the long-context task suite",
    config=SuiteConfig,
    plan=_plan,
    execute=_execute,
    table=format_suite_table,
    claims=CLAIMS,
    sections=(
        Section(
            "Long-context task suite",
            suite_tables,
            {"suite.png": score_vs_multiple},
            findings=needle_note,
        ),
    ),
)

"""Train short, test long: perplexity beyond the training length, per encoding.

The setting of Press et al. 2022 (ALiBi, https://arxiv.org/abs/2108.12409, Tables 1-3 and
Figure 1) at CPU scale: a small byte-level decoder LM is trained with each encoding at length
``T`` on the embedded corpus, then evaluated on non-overlapping windows of the test split at
``1×, 1.25×, 2×, 4×, 8×, 16× T``. Every evaluation length scores the same bytes (the first
``eval_tokens`` of the test split), so the numbers compare across lengths. Training tokens/s
and peak memory are recorded per encoding, as ALiBi's Table 1 does. Each length's row also
carries ``loss_se`` and ``ppl_se``, the standard errors over its evaluation windows: the noise a
claim on one seed is judged against (:mod:`posenc.lab.claims`), and ``context_free_loss``, the
loss of a unigram of the train bytes on the same targets
(:func:`~posenc.lab.data.corpus.context_free_loss`): a model whose loss at ``T`` is not well
below it has not learned its data, and its claims are undecided.

A learned absolute table is only defined up to ``T``: longer lengths are reported as
undefined (``defined = False``, no loss), never crashed or clamped.

Example::

    rows = run_extrapolate(ExtrapolateConfig(encodings=("alibi", "rope")), "runs/extrapolate")

The package: this module (config, runs, evaluation, tables and figure) and :mod:`.claims`
(the findings its rows test).
"""

from __future__ import annotations

import functools
import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.backends import NAMES as BACKENDS
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.data.corpus import CorpusSplits, LMSource, context_free_loss, eval_windows
from posenc.lab.experiments.extrapolate.claims import CLAIMS
from posenc.lab.experiments.extrapolate.hybrids import HYBRID_CLAIMS
from posenc.lab.figures import (
    encoding_color,
    finite,
    label_line_ends,
    mean_line,
    new_figure,
    set_length_multiple_axis,
    set_log_ticks,
)
from posenc.lab.findings import extrapolation_findings
from posenc.lab.probes import FIRST_TOKEN_COLUMNS, first_token_mass_fields
from posenc.lab.results import Row
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
    length_label,
    pivot,
    seed_note,
    text_table,
)
from posenc.lab.train import TrainConfig, peak_memory_bytes, train
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import sequence_encoding_spec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "EXPERIMENT",
    "ExtrapolateConfig",
    "WindowLoss",
    "evaluate_lm",
    "evaluate_lm_windows",
    "format_ppl_table",
    "loss_vs_length",
    "run_extrapolate",
]


@dataclass(frozen=True)
class ExtrapolateConfig:
    """One extrapolation experiment.

    Args:
        encodings: registered encoding names (``posenc list``).
        multipliers: evaluation lengths as multiples of ``T`` (``data.train_len``, rounded to
            whole tokens).
        eval_tokens: bytes of the test split scored at every evaluation length.
        pos_kwargs: per encoding, keyword arguments of its constructor (a JSON object on
            the command line, e.g. ``{"rope": {"base": 500}}``); each encoding's model is
            built once on the meta device when the config is, so an unknown keyword or a bad
            value is refused naming ``pos_kwargs[<encoding>]`` before anything trains.
        backend: the attention backend of every model (:mod:`posenc.attention.backends`:
            ``"sdpa"``, ``"flex"``, ``"chunked"``, ``"linear"``, ``"auto"``). ``"linear"``
            makes each model a linear-attention one (RoFormer §3.4.3: rotary encodings on
            the feature-mapped q and k), another model, not another way to compute the same
            one. ``None``, the default, is ``"auto"`` and is left out of the rows and of the
            comparison of a folder's ``config.json``; any other value is recorded there (a
            folder holding runs of another backend is refused, naming ``'backend'``) and in
            each row's ``backend`` column.
        model: the decoder's shape.
        train: the seeds (one run per seed and encoding: model init and batch order) and
            the schedule.
        data: the corpus and ``T``.
        runner: how the runs execute; by default each encoding trains in a fresh process
            (``isolate``), so its peak memory is its own, and tokens/s are measured with
            ``workers`` trainings sharing the machine.
    """

    encodings: tuple[str, ...] = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5")
    multipliers: tuple[float, ...] = (1.0, 1.25, 2.0, 4.0, 8.0, 16.0)
    eval_tokens: int = 32768
    pos_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    backend: str | None = None
    model: ModelArgs = field(default_factory=ModelArgs)
    train: TrainArgs = field(default_factory=functools.partial(TrainArgs, steps=1500))
    data: DataArgs = field(default_factory=DataArgs)
    runner: RunnerArgs = field(default_factory=functools.partial(RunnerArgs, isolate=True))

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(
                f"backend must be None or one of {', '.join(map(repr, BACKENDS))}; "
                f"got {self.backend!r}"
            )
        if not self.encodings:
            raise ValueError("encodings must name at least one encoding")
        for name in self.encodings:
            sequence_encoding_spec(name)  # unknown or grid-only names: ValueError
        if not self.multipliers or any(m <= 0 for m in self.multipliers):
            raise ValueError(f"multipliers must be positive numbers, got {self.multipliers}")
        longest = max(self.eval_lengths)
        if self.eval_tokens < longest:
            raise ValueError(
                f"eval_tokens ({self.eval_tokens}) must be >= the longest evaluation length "
                f"({longest}) so that every length scores at least one window"
            )
        check_pos_kwargs(self.pos_kwargs, self.encodings, self._model)

    def _model(self, encoding: str) -> DecoderLM:
        """``encoding``'s model (the trial build of :func:`check_pos_kwargs`)."""
        return DecoderLM(self.model_config(encoding))

    @property
    def eval_lengths(self) -> tuple[int, ...]:
        return tuple(max(1, round(m * self.data.train_len)) for m in self.multipliers)

    def model_config(self, encoding: str) -> ModelConfig:
        return ModelConfig(
            vocab_size=256,
            **self.model.config_kwargs(train_len=self.data.train_len),
            max_seq_len=self.data.train_len,
            pos=encoding,
            pos_kwargs=dict(self.pos_kwargs.get(encoding, {})),
            backend=self.backend or "auto",
        )

    def train_config(self, seed: int) -> TrainConfig:
        return self.train.train_config(seed, progress=self.runner.progress)


class WindowLoss(NamedTuple):
    """The mean next-byte cross-entropy of an evaluation, ``loss``, and ``se``, its standard
    error over the ``windows`` scored (sample std of the windows' mean losses / √windows;
    ``None`` for one window): what :mod:`posenc.lab.claims` weighs a one-seed claim against."""

    loss: float
    se: float | None
    windows: int


def evaluate_lm_windows(
    model: DecoderLM,
    stream: Tensor,
    eval_len: int,
    *,
    eval_tokens: int,
    max_tokens_per_batch: int = 16384,
    positions: Callable[[int], Tensor] | None = None,
) -> WindowLoss:
    """Mean next-byte cross-entropy over non-overlapping windows of ``eval_len`` tokens, and
    its standard error over those windows.

    Scores the first ``eval_tokens`` targets of ``stream`` (``eval_tokens // eval_len``
    windows), in batches of at most ``max_tokens_per_batch`` tokens.
    ``positions(eval_len)`` overrides the default ``arange(eval_len)``. Neighbouring windows
    of one text are not independent, so ``se`` is a guide to evaluation noise, not an exact
    error; it says nothing of the spread over training seeds.
    """
    windows = eval_windows(stream[: eval_tokens + 1], eval_len)
    rows_per_batch = max(1, max_tokens_per_batch // eval_len)
    sums: list[Tensor] = []  # per window, the summed cross-entropy of its targets
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, windows.shape[0], rows_per_batch):
            chunk = windows[start : start + rows_per_batch].to(device=device, dtype=torch.long)
            pos = None if positions is None else positions(eval_len).to(device)
            logits = model(chunk[:, :-1], pos)
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                chunk[:, 1:].reshape(-1),
                reduction="none",
            )
            sums.append(loss.reshape(chunk.shape[0], -1).double().sum(dim=1).cpu())
    model.train(was_training)
    means = torch.cat(sums) / eval_len  # (windows,) each window's mean loss
    n = means.numel()
    se = float(means.std(correction=1)) / math.sqrt(n) if n > 1 else None
    return WindowLoss(float(means.mean()), se, n)


def evaluate_lm(
    model: DecoderLM,
    stream: Tensor,
    eval_len: int,
    *,
    eval_tokens: int,
    max_tokens_per_batch: int = 16384,
    positions: Callable[[int], Tensor] | None = None,
) -> float:
    """Mean next-byte cross-entropy over non-overlapping windows of ``eval_len`` tokens
    (:func:`evaluate_lm_windows`'s ``loss``)."""
    return evaluate_lm_windows(
        model,
        stream,
        eval_len,
        eval_tokens=eval_tokens,
        max_tokens_per_batch=max_tokens_per_batch,
        positions=positions,
    ).loss


#: Windows of each evaluation length the first-token attention mass is read on.
PROBE_WINDOWS = 2


def _plan(config: ExtrapolateConfig) -> list[Run]:
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for encoding in config.encodings
        for seed in config.train.seeds
    ]


def _execute(config: ExtrapolateConfig, run: Run, folder: Path) -> list[Row]:
    """Train one encoding (resuming if its folder holds a run) and evaluate every length."""
    encoding, seed = run.params["encoding"], run.params["seed"]
    corpus = _load(config)
    torch.manual_seed(seed)
    model = DecoderLM(config.model_config(encoding))
    source = LMSource(corpus.train, config.data.train_len, seed=seed)
    result = train(model, source, config.train_config(seed), folder)
    rows = []
    for multiplier, eval_len in zip(config.multipliers, config.eval_lengths, strict=True):
        row: Row = {
            "experiment": "extrapolate",
            "encoding": encoding,
            # the constructor arguments, so rows of one encoding built two ways stay apart
            # (DAPE around ALiBi or KERPLE); "{}" for the registry defaults
            "pos_kwargs": json.dumps(config.pos_kwargs.get(encoding, {}), sort_keys=True),
            # rows of a linear-attention run stay apart from softmax ones (claims select them)
            **({} if config.backend is None else {"backend": config.backend}),
            "seed": seed,
            "train_len": config.data.train_len,
            "eval_len": eval_len,
            "multiplier": multiplier,
        }
        if encoding == "learned" and eval_len > config.data.train_len:
            row.update(
                loss=None,
                loss_se=None,
                ppl=None,
                ppl_se=None,
                bits_per_byte=None,
                defined=False,
                note=f"undefined: learned table has {config.data.train_len} positions",
                **dict.fromkeys(FIRST_TOKEN_COLUMNS),
            )
        else:
            scored = evaluate_lm_windows(
                model, corpus.test, eval_len, eval_tokens=config.eval_tokens
            )
            loss, ppl = scored.loss, math.exp(scored.loss)
            row.update(
                loss=loss,
                # the standard errors over the evaluation windows (ppl's by the delta method):
                # the noise a one-seed claim is judged against (posenc.lab.claims)
                loss_se=scored.se,
                ppl=ppl,
                ppl_se=None if scored.se is None else ppl * scored.se,
                bits_per_byte=loss / math.log(2),
                defined=True,
                note="",
            )
        windows = eval_windows(corpus.test[: config.eval_tokens + 1], eval_len)
        if row["defined"]:  # the attention sink at this length (posenc.lab.probes)
            row.update(first_token_mass_fields(model, windows[:PROBE_WINDOWS, :-1]))
        targets = windows[:, 1:]
        row.update(
            # a unigram of the train bytes on the same targets: the loss of a model that ignores
            # context, which a model must beat to have learned its data (posenc.lab.claims)
            context_free_loss=context_free_loss(corpus.train, targets),
            train_loss=result.final_loss,
            tokens_per_s=result.tokens_per_second,
            peak_memory_mb=result.peak_memory_bytes / 2**20,
            # the process's peak after evaluating up to this length (with ``isolate``, the
            # run's own process: training and every evaluation so far)
            eval_peak_memory_mb=peak_memory_bytes() / 2**20,
            params=sum(p.numel() for p in model.parameters()),
        )
        rows.append(row)
    return rows


def _load(config: ExtrapolateConfig) -> CorpusSplits:
    return config.data.load()


def run_extrapolate(
    config: ExtrapolateConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in folder ``out``; return and save its result rows.

    Writes ``out/config.json``, one run folder per encoding under ``out/runs/``,
    ``out/results.csv`` and ``out/report.html`` (:func:`posenc.lab.runner.run_experiment`).
    Encodings already evaluated are not trained again, so the same command resumes a killed
    run.
    """
    return run_experiment(EXPERIMENT, config, out, echo=echo)


def format_ppl_table(rows: Sequence[Row]) -> str:
    """Perplexity table: encodings down, evaluation lengths across, mean ± std over seeds
    (``–`` = undefined). Tokens/s and peak memory stay in the rows, out of the table: taken
    while other runs share the cores, and peak memory being the process's, they compare no
    encoding with another."""
    selected = [r for r in rows if r.get("experiment") == "extrapolate"]
    if not selected:
        return "no extrapolate rows"
    header, body = pivot(
        selected,
        ["encoding"],
        "eval_len",
        "ppl",
        label=length_label,
    )
    backend = selected[0].get("backend")
    title = (
        f"perplexity (bytes) by evaluation length; trained at T={selected[0]['train_len']}"
        f"{'' if backend is None else f' with the {backend} backend'}; {seed_note(selected)}"
    )
    return title + "\n" + text_table(header, body)


def _tables(rows: Sequence[Row]) -> list[Table]:
    """The report's table: perplexity by encoding × evaluation length (no tokens/s or memory
    columns: see :func:`format_ppl_table`)."""
    rows = complete_rows(rows, ["encoding", "eval_len"])
    if not rows:
        return []
    header, body = pivot(rows, ["encoding"], "eval_len", "ppl", label=length_label)
    trained = ", ".join(str(t) for t in dict.fromkeys(row.get("train_len") for row in rows))
    caption = f"Perplexity (bytes) by evaluation length; trained at T={trained}; {seed_note(rows)}."
    return [(caption, header, body)]


def loss_vs_length(rows: Sequence[Row]) -> Figure:
    """Perplexity against evaluation length / training length, one line per encoding.

    Rows: ``experiment == "extrapolate"`` with ``encoding, train_len, eval_len, ppl``;
    undefined points (learned past its table) are left out of the line.
    """
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    trained: dict[int, None] = {}
    for row in rows:
        if row.get("experiment") == "extrapolate" and finite(row.get("ppl")):
            series[row["encoding"]].append((row["eval_len"] / row["train_len"], row["ppl"]))
            trained[row["train_len"]] = None
    fig = new_figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for name, points in series.items():
        mean_line(ax, points, marker="o", label=name, color=encoding_color(name))
    at = f": each encoding trained at T = {', '.join(map(str, trained))} bytes" if trained else ""
    ax.set(ylabel="perplexity (bytes; mean ± std over seeds)", title=f"Train short, test long{at}")
    multipliers = sorted({x for points in series.values() for x, _ in points})
    if multipliers:
        set_length_multiple_axis(ax, multipliers)
        set_log_ticks(ax, "y")
        label_line_ends(ax)
    return fig


EXPERIMENT = Experiment(
    name="extrapolate",
    summary="train each encoding at T, perplexity at 1x..16x T (ALiBi Tables 1-3)",
    title="posenc: train short, test long",
    config=ExtrapolateConfig,
    plan=_plan,
    execute=_execute,
    table=format_ppl_table,
    prepare=_load,
    claims=(*CLAIMS, *HYBRID_CLAIMS),
    sections=(
        Section(
            "Train short, test long",
            _tables,
            {"loss_vs_length.png": loss_vs_length},
            findings=extrapolation_findings,
            atlas=True,
        ),
    ),
)

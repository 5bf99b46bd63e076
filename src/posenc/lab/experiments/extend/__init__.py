"""Context extension of a RoPE LM: PI, NTK-aware, dynamic NTK, YaRN, Llama-3 at 1×–8× T.

The setting of PI (Chen et al. 2023, https://arxiv.org/abs/2306.15595, Tables 1, 3, 4) and
YaRN (Peng et al. 2023, https://arxiv.org/abs/2309.00071, Tables 1, 5) at CPU scale:

1. a byte-level RoPE decoder LM is trained at length ``T`` on the embedded corpus
   (``out/runs/base``), with ``passkey_steps`` of its steps on passkey rows at ``T`` so that it
   retrieves a key before any extension (a model of code alone never learns to: passkey
   accuracy 0.00 everywhere at 500 steps);
2. **no fine-tuning** (stage ``"no_ft"``): the same weights are evaluated at each length
   ``L = m·T`` with every scaling at ``s = max(1, L / T)`` (perplexity on non-overlapping
   windows of the test split, as :func:`posenc.lab.experiments.extrapolate.evaluate_lm`). RoPE
   holds no weights, so a scaled model is the trained state loaded into a ``DecoderLM`` whose
   ``pos_kwargs`` carry the scaling;
3. **fine-tuning** (stage ``"ft"``): for each of ``ft_methods`` the base weights are trained
   ``ft_steps`` more steps at ``ft_len = ft_len_multiplier·T`` with the scaling fixed at
   ``s_ft = ft_len / T`` (``out/runs/ft_<method>``; plain ``rope`` is the control), then
   evaluated at the same lengths with that same ``s_ft``, as PI's and YaRN's fine-tuned models
   are;
4. **passkey retrieval** (:mod:`posenc.lab.data.passkey`) of every (method, stage) over a grid of
   context lengths (multiples of ``T``) and depths.

Methods (:func:`scaling_for`, :data:`METHODS`): ``rope`` (no scaling) and every scaling
type of posenc's conversion :func:`posenc.rotary.scaling_from_dict` whose fields the
experiment can fill: one dict of what it knows, ``factor = s``,
``original_max_position_embeddings = max_position_embeddings = T`` and Llama-3.1's band
``low_freq_factor = 1``, ``high_freq_factor = 4``, of which each type takes the keys it has
(so a scaling added to the library joins the experiment unchanged). ``linear`` = PI =
``Linear(s)``, ``ntk`` = ``NTKAware(s)``, ``dynamic`` = ``DynamicNTK(s,
max_position_embeddings=T)`` in HF mode, ``yarn`` = ``YaRN(s, T)``, ``llama3`` = ``Llama3(s,
1, 4, T)``; ``pi`` and ``dynamic_ntk`` are the papers' names for ``linear`` and ``dynamic``
(:data:`ALIASES`, the names of the claims and of the default setting). Types needing fields
the experiment cannot derive from ``s`` and ``T`` are refused naming them: ``longrope``
(``short_factor``, ``long_factor``: per-frequency factors found by LongRoPE's search for one
model) and ``proportional`` (``partial_rotary_factor``: Gemma's architecture choice, not an
extension). Dynamic NTK follows the length of each forward; every evaluation window is its
own forward from position 0, so its frequencies are those of the window length ``L``: HF's
base change with ratio ``s·L/T - (s - 1) = s² - s + 1`` at ``s = L/T`` (3 at 2×, 13 at 4×), a
stronger change than static NTK's ratio ``s``. At ``1×`` every method has ``s = 1`` and is
plain RoPE.

Example::

    rows = run_extend(ExtendConfig(), "runs/extend")

The package: this module (config, runs, evaluation), :mod:`.scalings` (the methods),
:mod:`.report` (tables and figures of its rows) and :mod:`.claims` (the findings they test).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.data.corpus import CorpusSplits, LMSource, context_free_loss, eval_windows
from posenc.lab.data.passkey import PasskeyMix, passkey_accuracy, passkey_min_context
from posenc.lab.experiments.extend.claims import CLAIMS
from posenc.lab.experiments.extend.report import (
    SECTIONS,
    extension_curves,
    format_extend_tables,
    passkey_heatmaps,
)
from posenc.lab.experiments.extend.scalings import (
    ALIASES,
    DEFAULT_METHODS,
    METHODS,
    scaling_for,
    scaling_types,
)
from posenc.lab.experiments.extrapolate import evaluate_lm
from posenc.lab.runner import Experiment, Run, check_builds, run_experiment
from posenc.lab.train import TrainConfig, train
from posenc.models import DecoderLM, ModelConfig
from posenc.rotary.scaling import scaling_from_dict

__all__ = [
    "ALIASES",
    "DEFAULT_METHODS",
    "EXPERIMENT",
    "METHODS",
    "SECTIONS",
    "ExtendConfig",
    "ModelAt",
    "evaluate_model",
    "extension_curves",
    "final_state",
    "format_extend_tables",
    "passkey_heatmaps",
    "run_extend",
    "scaling_for",
    "scaling_types",
    "train_base",
    "zero_shot_rows",
]

Row = dict[str, Any]


def _lengths(name: str, multipliers: tuple[float, ...], train_len: int) -> tuple[int, ...]:
    for m in multipliers:
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0:
            raise ValueError(f"{name} must hold numbers > 0, got {multipliers}")
    return tuple(max(1, round(m * train_len)) for m in multipliers)


@dataclass(frozen=True)
class ExtendConfig:
    """One context-extension experiment (defaults: the documented full setting).

    Args:
        passkey_steps: base training steps (of ``train.steps``, evenly spread) whose batch is
            passkey examples at ``T`` (random depths) instead of corpus text, so the base
            learns to retrieve a key before any extension (:class:`PasskeyMix`); 0 = none.
            Needs ``T`` ≥ :func:`passkey_min_context`. The default, a quarter of the steps,
            is the smallest share measured to give 100 % retrieval at T = 128 in 1000 steps
            (a tenth gave 18 %); it costs 7 % of the perplexity at T (docs/results.md §2).
        methods: methods evaluated without fine-tuning (of :data:`METHODS`: ``rope``, a
            scaling type of :func:`~posenc.rotary.scaling_from_dict`, or an alias).
        multipliers: evaluation lengths as multiples of ``T``.
        ft_len_multiplier: fine-tuning length as a multiple of ``T`` (``s_ft``), ≥ 1.
        ft_steps: steps of the short fine-tune of each of ``ft_methods``.
        ft_lr: its peak learning rate.
        ft_warmup_steps: its warmup steps.
        ft_methods: methods fine-tuned (empty = no fine-tuning stage).
        passkey_ft_steps: fine-tune steps (of ``ft_steps``, evenly spread) whose batch is
            passkey examples at ``ft_len`` (random depths) instead of corpus text; 0 = none.
        passkey_lengths: passkey context lengths as multiples of ``T`` (empty = no passkey);
            each must hold the key sentence and question (:func:`passkey_min_context`).
        passkey_depths: key depths in ``[0, 1]``.
        passkey_trials: keys per (context length, depth).
        eval_tokens: bytes of the test split scored at every evaluation length.
        model: the decoder's shape (head_dim = dim / num_heads, even, ≥ 4; ≥ 32 gives YaRN's
            ramp several high-frequency pairs).
        train: the base's training: one base (and its fine-tunes) per seed (model init,
            batches and passkeys; tables give mean ± std over seeds); ``batch_size`` is the
            fine-tunes' too.
        data: the corpus and ``T``, the base model's training length.
        runner: how the runs execute; with ``workers`` > 1 the fine-tunes start when every
            base has finished.
    """

    passkey_steps: int = 250
    methods: tuple[str, ...] = DEFAULT_METHODS
    multipliers: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    ft_len_multiplier: float = 2.0
    ft_steps: int = 100
    ft_lr: float = 1e-3
    ft_warmup_steps: int = 10
    ft_methods: tuple[str, ...] = ("rope", "pi", "ntk", "yarn")
    passkey_ft_steps: int = 0
    passkey_lengths: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    passkey_depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    passkey_trials: int = 10
    eval_tokens: int = 16384
    model: ModelArgs = field(default_factory=ModelArgs)
    train: TrainArgs = field(default_factory=TrainArgs)
    data: DataArgs = field(default_factory=DataArgs)
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        for f in fields(self):  # JSON (CLI --set) gives lists: keep the frozen tuples
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        for name in ("ft_steps", "passkey_trials", "eval_tokens"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        for name in ("ft_warmup_steps", "passkey_steps", "passkey_ft_steps"):
            object.__setattr__(self, name, check_non_negative_int(name, getattr(self, name)))
        check_positive_float("ft_lr", self.ft_lr)
        dim, heads = self.model.dim, self.model.num_heads
        head_dim, rest = divmod(dim, heads)
        if rest or head_dim < 4 or head_dim % 2:
            raise ValueError(
                f"dim must be num_heads ({heads}) times an even head_dim >= 4, got {dim}"
            )
        if not self.methods:
            raise ValueError("methods must name at least one method")
        for name in ("methods", "ft_methods"):
            for method in getattr(self, name):
                try:  # the conversion itself judges the dict (s = 1 is valid for every type)
                    scaling_from_dict(scaling_for(method, 1.0, self.data.train_len))
                except ValueError as error:
                    raise ValueError(f"{name}: {error}") from None
        if not self.multipliers:
            raise ValueError("multipliers must hold at least one number")
        _lengths("multipliers", self.multipliers, self.data.train_len)
        ft = check_positive_float("ft_len_multiplier", self.ft_len_multiplier)
        if ft < 1:
            raise ValueError(f"ft_len_multiplier must be >= 1, got {ft}")
        if self.passkey_steps > self.train.steps:
            raise ValueError(
                f"passkey_steps must be <= steps ({self.train.steps}), got {self.passkey_steps}"
            )
        if self.passkey_ft_steps > self.ft_steps:
            raise ValueError(
                f"passkey_ft_steps must be <= ft_steps ({self.ft_steps}), "
                f"got {self.passkey_ft_steps}"
            )
        shortest = passkey_min_context()
        passkey_lens = list(self.passkey_lengths_tokens)
        if self.passkey_ft_steps:
            passkey_lens.append(self.ft_len)
        train_len = self.data.train_len
        if passkey_lens and min(passkey_lens) < shortest:
            raise ValueError(
                f"passkey_lengths (and ft_len when passkey_ft_steps > 0) must give contexts "
                f">= {shortest} tokens at train_len {train_len}, got {min(passkey_lens)}"
            )
        if self.passkey_steps and train_len < shortest:
            raise ValueError(
                f"passkey_steps > 0 needs train_len >= {shortest} (a passkey row at T holds "
                f"the key sentence and the question), got {train_len}"
            )
        for d in self.passkey_depths:
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1:
                raise ValueError(f"passkey_depths must be numbers in [0, 1], got {d!r}")
        if self.eval_tokens < max(self.eval_lengths):
            raise ValueError(
                f"eval_tokens ({self.eval_tokens}) must be >= the longest evaluation length "
                f"({max(self.eval_lengths)})"
            )

    @property
    def train_len(self) -> int:
        """``T``, the base model's training length (``data.train_len``)."""
        return self.data.train_len

    @property
    def eval_lengths(self) -> tuple[int, ...]:
        return _lengths("multipliers", self.multipliers, self.train_len)

    @property
    def passkey_lengths_tokens(self) -> tuple[int, ...]:
        return _lengths("passkey_lengths", self.passkey_lengths, self.train_len)

    @property
    def ft_len(self) -> int:
        return round(self.ft_len_multiplier * self.train_len)

    def factor(self, length: int) -> float:
        """``s = max(1, length / T)``."""
        return max(1.0, length / self.train_len)

    def model_config(self, method: str, factor: float) -> ModelConfig:
        scaling = scaling_for(method, factor, self.train_len)
        return ModelConfig(
            vocab_size=256,
            **self.model.config_kwargs(train_len=self.train_len),
            max_seq_len=self.train_len,
            pos="rope",
            pos_kwargs={} if scaling is None else {"scaling": scaling},
        )

    def train_config(self, *, fine_tune: bool, seed: int = 0) -> TrainConfig:
        if not fine_tune:
            return self.train.train_config(seed, progress=self.runner.progress)
        return TrainConfig.for_steps(
            self.ft_steps,
            warmup_steps=self.ft_warmup_steps,
            batch_size=self.train.batch_size,
            lr=self.ft_lr,
            seed=seed,
            progress=self.runner.progress,
        )


def _load(config: ExtendConfig) -> CorpusSplits:
    return config.data.load()


def _prepare(config: ExtendConfig) -> CorpusSplits:
    """The start's checks, before the out folder is written: the model of every method at
    every factor ``s`` its runs evaluate (``methods``) or fine-tune at (``ft_methods``), built
    once (:func:`~posenc.lab.runner.check_builds`), so a scaling refused at some ``s`` fails
    naming the field rather than after the base has trained; then the corpus."""
    lengths = (*config.eval_lengths, *config.passkey_lengths_tokens)
    at = {
        "methods": sorted({config.factor(n) for n in lengths}),
        "ft_methods": [config.factor(config.ft_len)],
    }
    check_builds(
        (f"{name}: {method!r} at s = {s:g}", functools.partial(_trial_model, config, method, s))
        for name in ("methods", "ft_methods")
        for method in getattr(config, name)
        for s in at[name]
    )
    return _load(config)


def _trial_model(config: ExtendConfig, method: str, factor: float) -> DecoderLM:
    return DecoderLM(config.model_config(method, factor))


def _model(config: ExtendConfig, method: str, factor: float, state: dict[str, Tensor]) -> DecoderLM:
    """A fresh model (length-dependent RoPE state starts anew) holding ``state``."""
    model = DecoderLM(config.model_config(method, factor))
    model.load_state_dict(state)
    return model


def final_state(run_dir: Path) -> dict[str, Tensor]:
    """The model weights a finished training run left in ``run_dir/final.pt``."""
    state = torch.load(run_dir / "final.pt", map_location="cpu", weights_only=True)
    return state.get("model", state)


#: A model for one evaluation length and its ``factor`` column (None: no scaling).
ModelAt = Callable[[int], tuple[DecoderLM, float | None]]


def evaluate_model(
    config: ExtendConfig,
    corpus: CorpusSplits,
    model_at: ModelAt,
    *,
    method: str,
    stage: str,
    seed: int,
    train_loss: float,
) -> list[Row]:
    """Perplexity and passkey rows of the models ``model_at(length)``, one per length.

    Perplexity (``experiment="extend"``) on the test split at every length of
    ``config.eval_lengths`` (non-overlapping windows, :func:`evaluate_lm`), then passkey
    accuracy (``experiment="passkey"``) at every ``config.passkey_lengths_tokens`` × depth
    (:func:`passkey_accuracy`, keys of ``seed``). ``model_at`` builds the model evaluated at
    a length and gives its ``factor`` column, so other experiments
    (:mod:`posenc.lab.experiments.longctx`) write the same rows for models of their own.
    """
    common = {"method": method, "stage": stage, "seed": seed, "train_len": config.train_len}
    ft = {"ft_len": config.ft_len if stage == "ft" else None, "train_loss": train_loss}
    rows: list[Row] = []
    for multiplier, length in zip(config.multipliers, config.eval_lengths, strict=True):
        model, factor = model_at(length)
        loss = evaluate_lm(model, corpus.test, length, eval_tokens=config.eval_tokens)
        targets = eval_windows(corpus.test[: config.eval_tokens + 1], length)[:, 1:]
        rows.append(
            {
                "experiment": "extend",
                **common,
                "eval_len": length,
                "multiplier": multiplier,
                "factor": factor,
                "loss": loss,
                # the unigram's loss on the same targets: a learned model is well below it
                "context_free_loss": context_free_loss(corpus.train, targets),
                "ppl": math.exp(loss),
                "bits_per_byte": loss / math.log(2),
                **ft,
            }
        )
    for multiplier, length in zip(
        config.passkey_lengths, config.passkey_lengths_tokens, strict=True
    ):
        model, factor = model_at(length)
        for depth in config.passkey_depths:
            acc, token_acc = passkey_accuracy(
                model, length, float(depth), config.passkey_trials, seed=seed
            )
            rows.append(
                {
                    "experiment": "passkey",
                    **common,
                    "context_len": length,
                    "multiplier": multiplier,
                    "depth": float(depth),
                    "factor": factor,
                    "accuracy": acc,
                    "token_accuracy": token_acc,
                    "trials": config.passkey_trials,
                    **ft,
                }
            )
    return rows


def _evaluate(
    config: ExtendConfig,
    corpus: CorpusSplits,
    state: dict[str, Tensor],
    method: str,
    stage: str,
    fixed_factor: float | None,
    train_loss: float,
    seed: int,
) -> list[Row]:
    """Perplexity and passkey rows of one (method, stage); ``fixed_factor`` None = per length."""

    def model_at(length: int) -> tuple[DecoderLM, float | None]:
        s = config.factor(length) if fixed_factor is None else fixed_factor
        return _model(config, method, s, state), None if method == "rope" else s

    return evaluate_model(
        config, corpus, model_at, method=method, stage=stage, seed=seed, train_loss=train_loss
    )


def _plan(config: ExtendConfig) -> list[Run]:
    """The RoPE base (trained, then evaluated with every method and no fine-tuning), then
    one fine-tuning run per method from the base's final weights (a later stage)."""
    return [
        *(Run(f"base/seed{seed}", {"seed": seed}) for seed in config.train.seeds),
        *(
            Run(f"ft_{method}/seed{seed}", {"method": method, "seed": seed}, stage=1)
            for method in config.ft_methods
            for seed in config.train.seeds
        ),
    ]


def train_base(
    config: ExtendConfig, corpus: CorpusSplits, seed: int, folder: Path
) -> tuple[dict[str, Tensor], float]:
    """Train (or, when ``folder`` holds a finished run, load) the RoPE base of ``seed`` at
    ``T`` with its passkey rows; returns its weights and final training loss (the base run
    of this experiment, also the starting point of :mod:`posenc.lab.experiments.bases`)."""
    torch.manual_seed(seed)
    base = DecoderLM(config.model_config("rope", 1.0))
    lm = LMSource(corpus.train, config.train_len, seed=seed)
    source = PasskeyMix(lm, config.train_len, config.train.steps, config.passkey_steps, seed)
    result = train(base, source, config.train_config(fine_tune=False, seed=seed), folder)
    return base.state_dict(), result.final_loss


def _execute(config: ExtendConfig, run: Run, folder: Path) -> list[Row]:
    corpus = _load(config)
    seed = run.params["seed"]
    if "method" not in run.params:  # the base
        state, train_loss = train_base(config, corpus, seed, folder)
        return zero_shot_rows(config, state, seed=seed, train_loss=train_loss)
    method = run.params["method"]
    s_ft = config.factor(config.ft_len)
    torch.manual_seed(seed)
    base_dir = folder.parent.parent / "base" / f"seed{seed}"
    model = _model(config, method, s_ft, final_state(base_dir))
    lm = LMSource(corpus.train, config.ft_len, seed=seed + 1)
    mix = PasskeyMix(lm, config.ft_len, config.ft_steps, config.passkey_ft_steps, seed + 1)
    result = train(model, mix, config.train_config(fine_tune=True, seed=seed), folder)
    state = model.state_dict()
    return _evaluate(config, corpus, state, method, "ft", s_ft, result.final_loss, seed)


def zero_shot_rows(
    config: ExtendConfig, state: dict[str, Tensor], *, seed: int, train_loss: float
) -> list[Row]:
    """Every method of ``config.methods`` applied without fine-tuning to RoPE weights
    ``state`` trained at ``config.train_len`` (stage ``no_ft``): what the base run of this
    experiment evaluates, for weights trained elsewhere (the demo's extrapolation model)."""
    corpus = _load(config)
    rows: list[Row] = []
    for method in config.methods:
        rows += _evaluate(config, corpus, state, method, "no_ft", None, train_loss, seed)
    return rows


def run_extend(
    config: ExtendConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in folder ``out``; return and save its result rows.

    Writes ``out/config.json``, the base run ``out/runs/base`` (trained once, evaluated with
    every method without fine-tuning), one fine-tuning run per method ``out/runs/ft_<method>``,
    ``out/results.csv`` and ``out/report.html`` (:func:`posenc.lab.runner.run_experiment`).
    Finished runs are not redone, so the same command resumes a killed run. Rows:
    ``experiment="extend"`` (method, stage, train_len, eval_len, loss, ppl, ...) and
    ``experiment="passkey"`` (method, stage, context_len, depth, accuracy, ...).

    Raises:
        ValueError: naming the field when ``out`` holds a run with a different config.
    """
    return run_experiment(EXPERIMENT, config, out, echo=echo)


EXPERIMENT = Experiment(
    name="extend",
    summary="RoPE trained at T, extended by PI/NTK/dynamic NTK/YaRN/Llama-3 (any scaling); passkey",
    title="posenc: RoPE context extension",
    config=ExtendConfig,
    plan=_plan,
    execute=_execute,
    table=format_extend_tables,
    prepare=_prepare,
    claims=CLAIMS,
    sections=SECTIONS,
)

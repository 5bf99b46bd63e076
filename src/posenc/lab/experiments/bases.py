"""RoPE base sweep: fine-tune at a smaller or larger base, test the scaling laws' bound.

The setting of Liu et al. 2023, "Scaling Laws of RoPE-based Extrapolation"
(https://arxiv.org/abs/2310.05209), at CPU scale:

1. the RoPE base of :mod:`posenc.lab.experiments.extend` (a byte-level decoder LM, base
   ``10⁴``, trained at ``T`` with its passkey rows; ``out/runs/base``, the same training as
   ``posenc lab extend``'s, so its finished base folders can be copied in) is evaluated at
   every length (stage ``"pretrained"``);
2. for each of ``bases`` the weights are fine-tuned ``ft_steps`` at the **training length**
   ``T`` with RoPE's base changed to ``β`` (``out/runs/ft_base<β>``; ``β = 10⁴`` is the
   control: the same fine-tune without a base change), then evaluated at ``m·T``.

The paper's prediction (:mod:`posenc.rotary.scaling.laws`): pre-training at ``T`` completes a
period only in the first ``d_extra = critical_dimension(d, 10⁴, T)`` channels; after tuning at
base ``β`` the model extrapolates up to ``T_extra = 2π·β^(d_extra/d)`` positions
(:func:`~posenc.rotary.scaling.laws.extrapolation_bound`), and without limit when ``β`` is so
small that every channel completes a period within ``T`` (``β ≤ full_period_base(d, T)``).
Each row carries its base's regime and bound (:func:`predicted_regime`): ``"larger"``
(``β ≥ 10⁴``, bound ``T_extra``), ``"small"`` (unbounded) or ``"between"`` (the paper states
no bound there).

At this scale (``head_dim = 32``, ``T = 128``): ``d_extra = 12``; ``T_extra`` is 199 at
``β = 10⁴`` (1.6·T), 1117 at ``β = 10⁶`` (8.7·T); the full-period base is 24.9, so the
default small base is 10; 500 (the paper's small base for LLaMA 2) is listed too, and sits
between the regimes here.

Example::

    rows = run_bases(BasesConfig(), "runs/bases")
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int
from posenc.lab.claims import Claim, Control, Learned, Statistic, ratio_at
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs
from posenc.lab.data.corpus import CorpusSplits, LMSource, context_free_loss, eval_windows
from posenc.lab.experiments.extend import ExtendConfig, final_state, train_base
from posenc.lab.experiments.extrapolate import evaluate_lm
from posenc.lab.runner import Experiment, Run, run_experiment
from posenc.lab.tables import length_label, pivot, seed_note, text_table
from posenc.lab.train import TrainConfig, train
from posenc.models import DecoderLM, ModelConfig
from posenc.rotary.scaling.laws import critical_dimension, extrapolation_bound

__all__ = [
    "EXPERIMENT",
    "PRETRAIN_BASE",
    "BasesConfig",
    "format_bases_tables",
    "predicted_regime",
    "run_bases",
]

Row = dict[str, Any]

#: RoPE's base during pre-training (the extend experiment's base model).
PRETRAIN_BASE = 10_000.0


@dataclass(frozen=True)
class BasesConfig:
    """One base-sweep experiment (defaults: the documented setting).

    The pre-training (``model``, ``train``, ``data``, ``passkey_steps``) is that of
    :class:`~posenc.lab.experiments.extend.ExtendConfig`, so that extend's finished base
    runs can be reused.

    Args:
        passkey_steps: pre-training steps on passkey rows (as extend's base).
        bases: RoPE bases ``β`` to fine-tune at (> 0, distinct); include ``10⁴`` as control.
        ft_steps: steps of each fine-tune (at ``T``).
        ft_lr: its peak learning rate.
        ft_warmup_steps: its warmup steps.
        multipliers: evaluation lengths as multiples of ``T``.
        eval_tokens: bytes of the test split scored at every evaluation length.
        model: the decoder's shape (head_dim = dim / num_heads).
        train: the pre-training: one base and its fine-tunes per seed (tables give mean ± std
            over seeds); ``batch_size`` is the fine-tunes' too.
        data: the corpus and ``T``, the length of pre-training and of every fine-tune.
        runner: how the runs execute.
    """

    passkey_steps: int = 250
    bases: tuple[float, ...] = (10.0, 500.0, PRETRAIN_BASE, 1_000_000.0)
    ft_steps: int = 200
    ft_lr: float = 1e-3
    ft_warmup_steps: int = 20
    multipliers: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    eval_tokens: int = 32768
    model: ModelArgs = field(default_factory=ModelArgs)
    train: TrainArgs = field(default_factory=TrainArgs)
    data: DataArgs = field(default_factory=DataArgs)
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        for f in fields(self):  # JSON (CLI --set) gives lists: keep the frozen tuples
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        if not self.bases:
            raise ValueError("bases must hold at least one RoPE base")
        for index, base in enumerate(self.bases):
            check_positive_float(f"bases[{index}]", base)
        object.__setattr__(self, "bases", tuple(float(b) for b in self.bases))
        if len(set(self.bases)) != len(self.bases):
            raise ValueError(f"bases must be distinct, got {self.bases}")
        object.__setattr__(self, "ft_steps", check_positive_int("ft_steps", self.ft_steps))
        object.__setattr__(
            self, "ft_warmup_steps", check_non_negative_int("ft_warmup_steps", self.ft_warmup_steps)
        )
        check_positive_float("ft_lr", self.ft_lr)
        self.extend_config()  # the pre-training's own checks (dims, lengths, passkey rows)

    def extend_config(self) -> ExtendConfig:
        """The extend experiment's config of the same pre-training (base runs match)."""
        return ExtendConfig(
            passkey_steps=self.passkey_steps,
            methods=("rope",),
            multipliers=self.multipliers,
            ft_methods=(),
            passkey_lengths=(),
            eval_tokens=self.eval_tokens,
            model=self.model,
            train=self.train,
            data=self.data,
            runner=RunnerArgs(threads=self.runner.threads, progress=self.runner.progress),
        )

    @property
    def train_len(self) -> int:
        """``T`` (``data.train_len``)."""
        return self.data.train_len

    @property
    def head_dim(self) -> int:
        return self.model.dim // self.model.num_heads

    def model_config(self, base: float) -> ModelConfig:
        return ModelConfig(
            vocab_size=256,
            **self.model.config_kwargs(train_len=self.train_len),
            max_seq_len=self.train_len,
            pos="rope",
            pos_kwargs={"base": base},
        )

    def fine_tune_config(self, seed: int) -> TrainConfig:
        return TrainConfig.for_steps(
            self.ft_steps,
            warmup_steps=self.ft_warmup_steps,
            batch_size=self.train.batch_size,
            lr=self.ft_lr,
            seed=seed,
            progress=self.runner.progress,
        )


# --- the published findings its rows test ---------------------------------------------

_LIU = "Liu et al. 2023, Scaling Laws of RoPE-based Extrapolation, https://arxiv.org/abs/2310.05209"
_LIU_PUBLISHED = (
    "LLaMA 2 7B/13B tuned at 4K (= pre-training length): base 500 keeps perplexity from "
    "exploding far beyond 4K; base 1e6 holds to about its bound 2π·1e6^(92/128) ≈ 129K "
    "(Theorems 1-2, Figure 1; no table of ours to compare: figures only)"
)


def _learned(*bases: float) -> tuple[Learned, ...]:
    """The requirement that the model tuned at each of ``bases`` learned its data."""
    return tuple(
        Learned("bases", {"base": b, "stage": "ft", "multiplier": 1.0}, f"base-{b:g}")
        for b in bases
    )


def _tuned_growth(base: float, multiplier: float, over: float = 1.0) -> Statistic:
    """ppl after tuning at ``base``: at ``multiplier``·T over at ``over``·T (bases sweep)."""
    return ratio_at(
        "bases",
        {"base": base, "stage": "ft"},
        "ppl",
        {"multiplier": multiplier},
        {"multiplier": over},
    )


#: The scaling laws' claims its rows test, in report order. Each is decided against the base
#: the paper contrasts it with (:class:`~posenc.lab.claims.Control`): the pre-training base
#: 10⁴ for flatness (it holds only if 10⁴, tuned the same way, is not flat), the small base 10
#: for the degradation beyond the bound (it holds only if base 10, which has no bound, does
#: not degrade there too). Each requires that the tuned models it reads learned their data.
CLAIMS: tuple[Claim, ...] = (
    Claim(
        name="small_base_flat_16x",
        text="Tuned at T with a base so small that every pair completes a period within T "
        "(10 here; the full-period base is 24.9 at head_dim 32, T = 128), perplexity does "
        "not explode beyond T: ppl(16T) / ppl(T) ≤ 1.5 (no bound in the small-base regime); "
        "decided against the pre-training base 10⁴ (it must be above 1.5).",
        paper=_LIU,
        published=_LIU_PUBLISHED,
        experiment="bases",
        statistic=_tuned_growth(10.0, 16.0),
        threshold=1.5,
        direction="<=",
        control=Control("base 10000", _tuned_growth(PRETRAIN_BASE, 16.0)),
        requires=_learned(10.0, PRETRAIN_BASE),
    ),
    Claim(
        name="large_base_holds_within_bound",
        text="Tuned at T with base 1e6, perplexity holds up to the predicted bound "
        "2π·β^(d_extra/d) (1117 positions = 8.7·T here): ppl(8T) / ppl(T) ≤ 1.5; decided "
        "against the pre-training base 10⁴ (it must be above 1.5).",
        paper=_LIU,
        published=_LIU_PUBLISHED,
        experiment="bases",
        statistic=_tuned_growth(1_000_000.0, 8.0),
        threshold=1.5,
        direction="<=",
        control=Control("base 10000", _tuned_growth(PRETRAIN_BASE, 8.0)),
        requires=_learned(1_000_000.0, PRETRAIN_BASE),
    ),
    Claim(
        name="large_base_fails_beyond_bound",
        text="Beyond its bound the base-1e6 model degrades: ppl(16T) / ppl(8T) ≥ 1.2 "
        "(16T = 2048 > 1117 ≥ 8T); decided against base 10, which has no bound and must not "
        "degrade there (ppl(16T) / ppl(8T) below 1.2).",
        paper=_LIU,
        published=_LIU_PUBLISHED,
        experiment="bases",
        statistic=_tuned_growth(1_000_000.0, 16.0, over=8.0),
        threshold=1.2,
        direction=">=",
        control=Control("base 10", _tuned_growth(10.0, 16.0, over=8.0)),
        requires=_learned(1_000_000.0, 10.0),
    ),
)


def _load(config: BasesConfig) -> CorpusSplits:
    return config.data.load()


def _run_name(base: float) -> str:
    return f"ft_base{int(base)}" if base == int(base) else f"ft_base{base:g}"


def _plan(config: BasesConfig) -> list[Run]:
    """The pre-trained base per seed, then one fine-tune per (base, seed) from it."""
    return [
        *(Run(f"base/seed{seed}", {"seed": seed}) for seed in config.train.seeds),
        *(
            Run(f"{_run_name(base)}/seed{seed}", {"base": base, "seed": seed}, stage=1)
            for base in config.bases
            for seed in config.train.seeds
        ),
    ]


def predicted_regime(head_dim: int, base: float, train_len: int) -> tuple[str, float | None]:
    """The scaling laws' regime of tuning at ``base`` after pre-training at
    :data:`PRETRAIN_BASE`, and its bound in positions: ``("larger", T_extra)``,
    ``("small", None)`` (unbounded: every pair completes a period within ``T``) or
    ``("between", None)`` (the paper states no bound)."""
    try:
        bound = extrapolation_bound(head_dim, base, train_len, pretrain_base=PRETRAIN_BASE)
    except ValueError:
        return "between", None
    return ("small", None) if math.isinf(bound) else ("larger", bound)


def _rows(
    config: BasesConfig,
    corpus: CorpusSplits,
    state: dict[str, torch.Tensor],
    base: float,
    stage: str,
    seed: int,
    train_loss: float,
) -> list[Row]:
    model = DecoderLM(config.model_config(base))
    model.load_state_dict(state)
    regime, bound = predicted_regime(config.head_dim, base, config.train_len)
    rows: list[Row] = []
    for multiplier in config.multipliers:
        length = max(1, round(multiplier * config.train_len))
        loss = evaluate_lm(model, corpus.test, length, eval_tokens=config.eval_tokens)
        targets = eval_windows(corpus.test[: config.eval_tokens + 1], length)[:, 1:]
        rows.append(
            {
                "experiment": "bases",
                "base": base,
                "stage": stage,
                "seed": seed,
                "train_len": config.train_len,
                "eval_len": length,
                "multiplier": float(multiplier),
                "loss": loss,
                # the unigram's loss on the same targets: a learned model is well below it
                "context_free_loss": context_free_loss(corpus.train, targets),
                "ppl": math.exp(loss),
                "critical_dim": critical_dimension(config.head_dim, base, config.train_len),
                "regime": regime,
                "predicted_bound": bound,
                "train_loss": train_loss,
            }
        )
    return rows


def _execute(config: BasesConfig, run: Run, folder: Path) -> list[Row]:
    corpus = _load(config)
    seed = run.params["seed"]
    if "base" not in run.params:
        state, loss = train_base(config.extend_config(), corpus, seed, folder)
        return _rows(config, corpus, state, PRETRAIN_BASE, "pretrained", seed, loss)
    base = run.params["base"]
    torch.manual_seed(seed)
    model = DecoderLM(config.model_config(base))
    model.load_state_dict(final_state(folder.parent.parent / "base" / f"seed{seed}"))
    lm = LMSource(corpus.train, config.train_len, seed=seed + 1)
    result = train(model, lm, config.fine_tune_config(seed), folder)
    return _rows(config, corpus, model.state_dict(), base, "ft", seed, result.final_loss)


def format_bases_tables(rows: Sequence[Row]) -> str:
    """Perplexity by (base, stage) and evaluation length, then each base's predicted bound."""
    rows = [r for r in rows if r.get("experiment") == "bases"]
    if not rows:
        return ""
    lines = [
        f"perplexity (bytes); RoPE pre-trained at base {PRETRAIN_BASE:g}, "
        f"T={rows[0]['train_len']}, fine-tuned at T with base β; {seed_note(rows)}"
    ]
    header, body = pivot(rows, ["base", "stage"], "eval_len", "ppl", label=length_label)
    lines.append(text_table(header, body))
    said = {"small": "unbounded", "between": "no bound stated"}
    bounds = {}
    for row in rows:
        bound = row["predicted_bound"]
        bounds[row["base"]] = said[row["regime"]] if bound is None else f"{bound:.0f} positions"
    lines.append(
        "predicted extrapolation bound (Liu et al. 2023): "
        + ", ".join(f"β={base:g}: {text}" for base, text in bounds.items())
    )
    return "\n".join(lines)


def run_bases(
    config: BasesConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the sweep in folder ``out``; return and save its rows
    (``experiment="bases"``: base, stage, eval_len, loss, ppl, critical_dim,
    predicted_bound). Finished runs are not redone."""
    return run_experiment(EXPERIMENT, config, out, echo=echo)


EXPERIMENT = Experiment(
    name="bases",
    summary="RoPE tuned at a smaller or larger base; perplexity beyond T vs the scaling-law bound",
    title="posenc: RoPE base and the scaling laws of extrapolation",
    config=BasesConfig,
    plan=_plan,
    execute=_execute,
    table=format_bases_tables,
    prepare=_load,
    claims=CLAIMS,
)

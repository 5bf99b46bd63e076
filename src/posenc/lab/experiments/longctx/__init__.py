"""Long context without retraining: Self-Extend, DCA, ReRoPE, LM-Infinite and sinks at 1×–32× T.

The RoPE base of :mod:`posenc.lab.experiments.extend` (a byte-level decoder trained at ``T``
with passkey rows, :func:`~posenc.lab.experiments.extend.train_base`, same folders
``out/runs/base/seed<s>``) is evaluated **without fine-tuning** at ``L = m·T`` for every
multiplier ``m``:

* perplexity on the test split in non-overlapping windows, and passkey retrieval by context
  length × depth (:func:`posenc.lab.experiments.extend.evaluate_model`: the rows of
  ``extend``'s zero-shot stage, ``stage = "no_ft"``), one run per (method, seed) in
  ``out/runs/<method>/seed<s>``;
* methods: the segment methods of :mod:`posenc.segments` (:data:`SEGMENT_METHODS`), the RoPE
  weights loaded unchanged into a model whose rotary encoding the method wraps, against plain
  ``rope`` and the frequency scalings of ``extend`` (``pi``, ``ntk``, ``dynamic_ntk``,
  ``yarn``, ...) at ``s = L/T`` (:func:`~posenc.lab.experiments.extend.scaling_for`).

Each method's settings follow its reference's rule relative to the pre-training length ``T``
(:class:`LongCtxConfig`). Rows carry the method's constructor arguments at that length
(``pos_kwargs``), its ``family``, and for passkey rows the key's distance from the question
(``key_distance``) and, for the windowed methods (LM-Infinite, sinks), whether the key lies
inside what the question's query sees (``key_in_window``).

Example::

    rows = run_longctx(LongCtxConfig(train=TrainArgs(seeds=(0, 1, 2))), "runs/longctx")

The package: this module (config, runs, evaluation), :mod:`.report` (its terminal tables;
the report shows its rows with ``extend``'s sections) and :mod:`.claims` (the findings its
rows test, beside ``extend``'s).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs, flat_record
from posenc.lab.data.corpus import CorpusSplits
from posenc.lab.data.passkey import PASSKEY_DIGITS, passkey_batch
from posenc.lab.experiments import extend
from posenc.lab.experiments.longctx.claims import CLAIMS
from posenc.lab.experiments.longctx.report import WINDOWED, format_longctx_tables
from posenc.lab.run import as_json, read_json
from posenc.lab.runner import Experiment, Run, check_builds, run_experiment
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import ModelDims, build_encoding
from posenc.rotary.scaling import scaling_from_dict

__all__ = [
    "DEFAULT_METHODS",
    "EXPERIMENT",
    "SEGMENT_METHODS",
    "WINDOWED",
    "LongCtxConfig",
    "format_longctx_tables",
    "key_layout",
    "run_longctx",
    "zero_shot_rows",
]

Row = dict[str, Any]

#: Segment methods by name -> the registered encoding that runs it (Leaky ReRoPE is ReRoPE
#: with ``leak``).
SEGMENT_METHODS = {
    "self_extend": "self_extend",
    "dual_chunk": "dual_chunk",
    "rerope": "rerope",
    "leaky_rerope": "rerope",
    "lm_infinite": "lm_infinite",
    "sinks": "sinks",
}
DEFAULT_METHODS = ("rope", "pi", "ntk", "dynamic_ntk", "yarn", *SEGMENT_METHODS)
#: Config fields per segment method (errors of its constructor name them).
_FIELDS = {
    "self_extend": ("self_extend_window", "self_extend_group"),
    "dual_chunk": ("dual_chunk_size", "dual_chunk_local_window"),
    "rerope": ("rerope_window", "rerope_log_scale"),
    "leaky_rerope": ("leaky_rerope_window", "leaky_rerope_leak", "rerope_log_scale"),
    "lm_infinite": ("lm_infinite_local_window", "lm_infinite_global_tokens", "lm_infinite_limit"),
    "sinks": ("sinks", "sinks_window"),
}
#: Settings that default to a rule of ``T`` when None.
_OPTIONAL_INTS = (
    "self_extend_window",
    "self_extend_group",
    "dual_chunk_size",
    "dual_chunk_local_window",
    "rerope_window",
    "leaky_rerope_window",
    "lm_infinite_local_window",
    "lm_infinite_limit",
    "sinks_window",
)
#: The base's fields: a ``base_run`` folder must hold a base trained with the same values.
_BASE_FIELDS = (
    "data.train_len",
    "model.dim",
    "model.depth",
    "model.num_heads",
    "train.steps",
    "train.batch_size",
    "train.lr",
    "train.warmup_steps",
    "passkey_steps",
    "data.corpus",
    "data.corpus_bytes",
    "data.split_seed",
)


@dataclass(frozen=True)
class LongCtxConfig:
    """The long-context experiment (defaults: the documented setting, T = 128 to 32×T).

    Method settings, relative to the pre-training length ``T`` (None = the rule given):

    * Self-Extend (LongLM README §3, Llama-2 at 4096: W = 1024 = T/4; "(1/2 ~ 2/3)·L > W +
      (N − W)/G"): ``W = T/4``; ``G`` per evaluation length ``N`` the smallest power of two
      with ``W + (N − W)/G ≤ T/2``, at most ``W`` (posenc's :class:`~posenc.segments.SelfExtend`
      refuses ``G > W``; at ``T = 128`` this caps ``G`` at 32 from 16×T on, where the rule
      asks 64 and 128: the largest distance is then 94 at 16×T and 158 > T at 32×T).
    * DCA (ChunkLlama ``chunkllama_attn_replace.py``: ``chunk_size = L·3//4``,
      ``local_window = L//8``): ``3T/4`` and ``T/8``.
    * ReRoPE (bojone/rerope README, ReRoPE-w1024 at 4096 = T/4, log-n with the training
      length): ``window = T/4``, ``log_scale_base = T``.
    * Leaky ReRoPE (``leaky_rerope_patch.py``: w = 512 = T/8 at 4096, k = 16, log-n):
      ``window = T/8``, ``leak = 16``, ``log_scale_base = T``.
    * LM-Infinite (its HF drop-in ``convert_llama_model(model, 4096, 10)``): ``local_window =
      T``, ``global_tokens = 10``, ``limit = T``.
    * Sinks (StreamingLLM: 4 sinks, the cache within the pre-training window, "4+1020" at
      1024): ``sinks = 4``, ``window = T − sinks − 1`` (sinks, window and query fill ``T``).

    The base's fields (``model``, ``train``, ``data``, ``passkey_steps``) are those of
    :class:`~posenc.lab.experiments.extend.ExtendConfig` with its defaults: ``extend``'s
    bases are these.

    Args:
        passkey_steps: base steps (of ``train.steps``) on passkey rows at ``T``.
        base_run: an out folder of ``extend`` (or of this experiment) whose finished bases
            ``runs/base/seed<s>`` are evaluated instead of training new ones; its
            ``config.json`` must agree on the base's fields. None = train them here.
        methods: of :data:`SEGMENT_METHODS`, ``rope`` and ``extend``'s scalings.
        multipliers: perplexity lengths as multiples of ``T``.
        passkey_lengths: passkey context lengths as multiples of ``T`` (empty = none).
        passkey_depths: key depths in ``[0, 1]``.
        passkey_trials: keys per (context length, depth).
        eval_tokens: test bytes scored at every perplexity length.
        self_extend_window: ``W`` (None = T/4).
        self_extend_group: a fixed ``G`` at every length (None = per length ``L`` the
            smallest power of two with ``W + (L − W)/G ≤ T/2``, at most ``W``).
        dual_chunk_size: DCA's ``chunk_size`` (None = 3T/4).
        dual_chunk_local_window: DCA's ``local_window`` (None = T/8).
        rerope_window: ReRoPE's ``w`` (None = T/4).
        leaky_rerope_window: Leaky ReRoPE's ``w`` (None = T/8).
        leaky_rerope_leak: Leaky ReRoPE's ``k`` > 1.
        rerope_log_scale: both ReRoPEs scale queries by ``max(1, ln(i+1)/ln T)``.
        lm_infinite_local_window: ``n_local`` (None = T).
        lm_infinite_global_tokens: ``n_global``.
        lm_infinite_limit: the global branch's distance (None = ``n_local``).
        sinks: attention sinks kept.
        sinks_window: recent tokens kept besides the query (None = T − sinks − 1).
        model: the decoder's shape.
        train: the base's training: one base per seed (model init, batches, passkeys);
            mean ± std over seeds.
        data: the corpus and ``T``, the RoPE base's training length.
        runner: how the runs execute.
    """

    passkey_steps: int = 250
    base_run: str | None = None
    methods: tuple[str, ...] = DEFAULT_METHODS
    multipliers: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    passkey_lengths: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    passkey_depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    passkey_trials: int = 20
    eval_tokens: int = 32768
    self_extend_window: int | None = None
    self_extend_group: int | None = None
    dual_chunk_size: int | None = None
    dual_chunk_local_window: int | None = None
    rerope_window: int | None = None
    leaky_rerope_window: int | None = None
    leaky_rerope_leak: float = 16.0
    rerope_log_scale: bool = True
    lm_infinite_local_window: int | None = None
    lm_infinite_global_tokens: int = 10
    lm_infinite_limit: int | None = None
    sinks: int = 4
    sinks_window: int | None = None
    model: ModelArgs = field(default_factory=ModelArgs)
    train: TrainArgs = field(default_factory=TrainArgs)
    data: DataArgs = field(default_factory=DataArgs)
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        for f in fields(self):  # JSON gives lists: keep the frozen tuples
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        self.extend_config()  # the shared fields, validated by extend under the same names
        if not self.methods:
            raise ValueError("methods must name at least one method")
        for method in self.methods:
            if method in SEGMENT_METHODS:
                continue
            try:  # a scaling method: the conversion judges it, as in extend
                scaling_from_dict(extend.scaling_for(method, 1.0, self.train_len))
            except ValueError as error:
                raise ValueError(
                    f"methods: {error}; or one of {', '.join(SEGMENT_METHODS)}"
                ) from None
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct, got {self.methods}")
        for name in ("lm_infinite_global_tokens", "sinks"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        for name in _OPTIONAL_INTS:
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        check_positive_float("leaky_rerope_leak", self.leaky_rerope_leak)
        if not isinstance(self.rerope_log_scale, bool):
            raise ValueError(f"rerope_log_scale must be a bool, got {self.rerope_log_scale!r}")
        dims = ModelDims(
            dim=self.model.dim, num_heads=self.model.num_heads, max_seq_len=self.train_len
        )
        lengths = sorted({*self.eval_lengths, *self.passkey_lengths_tokens})
        for method in (m for m in self.methods if m in SEGMENT_METHODS):
            for length in lengths:
                try:  # the method's own constructor judges the settings
                    build_encoding(
                        SEGMENT_METHODS[method], dims, self.method_kwargs(method, length)
                    )
                except ValueError as error:
                    raise ValueError(f"{'/'.join(_FIELDS[method])}: {error}") from None
        if self.base_run is not None and not isinstance(self.base_run, str):
            raise ValueError(f"base_run must be a folder (str) or None, got {self.base_run!r}")

    @property
    def train_len(self) -> int:
        """``T``, the RoPE base's training length (``data.train_len``)."""
        return self.data.train_len

    def extend_config(self) -> extend.ExtendConfig:
        """The :class:`~posenc.lab.experiments.extend.ExtendConfig` of the base and its
        evaluation: every field the two share, plain RoPE as its only method and no fine-tuning."""
        names = {f.name for f in fields(extend.ExtendConfig)} - {"methods", "ft_methods"}
        shared = {f.name: getattr(self, f.name) for f in fields(self) if f.name in names}
        return extend.ExtendConfig(**shared, methods=("rope",), ft_methods=())

    @property
    def eval_lengths(self) -> tuple[int, ...]:
        return self.extend_config().eval_lengths

    @property
    def passkey_lengths_tokens(self) -> tuple[int, ...]:
        return self.extend_config().passkey_lengths_tokens

    def self_extend_group_at(self, length: int) -> int:
        """Self-Extend's ``G`` at ``length``: the fixed one, else the smallest power of two
        with ``W + (length − W)/G ≤ T/2``, at most ``W``."""
        window = self.self_extend_window or self.train_len // 4
        if self.self_extend_group is not None:
            return self.self_extend_group
        group = 1
        while group < window and window + (length - window) / group > self.train_len / 2:
            group *= 2
        return min(group, window)

    def method_kwargs(self, method: str, length: int) -> dict[str, Any]:
        """Constructor arguments of segment ``method`` for evaluation length ``length``."""
        t = self.train_len
        log_base = {"log_scale_base": t} if self.rerope_log_scale else {}
        if method == "self_extend":
            window = self.self_extend_window or t // 4
            return {"window": window, "group": self.self_extend_group_at(length)}
        if method == "dual_chunk":
            return {
                "chunk_size": self.dual_chunk_size or 3 * t // 4,
                "local_window": self.dual_chunk_local_window or t // 8,
            }
        if method == "rerope":
            return {"window": self.rerope_window or t // 4, **log_base}
        if method == "leaky_rerope":
            window = self.leaky_rerope_window or t // 8
            return {"window": window, "leak": float(self.leaky_rerope_leak), **log_base}
        if method == "lm_infinite":
            local = self.lm_infinite_local_window or t
            return {
                "local_window": local,
                "global_tokens": self.lm_infinite_global_tokens,
                "limit": self.lm_infinite_limit or local,
            }
        if method == "sinks":
            return {"sinks": self.sinks, "window": self.sinks_window or t - self.sinks - 1}
        raise ValueError(f"method must be one of {', '.join(SEGMENT_METHODS)}, got {method!r}")

    def model_config(self, method: str, length: int) -> ModelConfig:
        """The model ``method`` evaluates at ``length``: RoPE's weights fit it unchanged."""
        ext = self.extend_config()
        if method not in SEGMENT_METHODS:
            return ext.model_config(method, ext.factor(length))
        return replace(
            ext.model_config("rope", 1.0),
            pos=SEGMENT_METHODS[method],
            pos_kwargs=self.method_kwargs(method, length),
        )

    def key_in_window(self, method: str, context_len: int, depth: float) -> bool | None:
        """Whether the question's query sees the key under windowed ``method`` (None: the
        method sees every key): within the local window, or among the first tokens."""
        if method not in WINDOWED:
            return None
        distance, start = key_layout(context_len, depth)
        kwargs = self.method_kwargs(method, context_len)
        if method == "lm_infinite":  # local: i − j < n_local; global: j < n_global
            span, first = kwargs["local_window"], kwargs["global_tokens"]
        else:  # window and query: i − j ≤ window; sinks: j < sinks
            span, first = kwargs["window"] + 1, kwargs["sinks"]
        return distance < span or start + PASSKEY_DIGITS <= first


@functools.cache
def key_layout(context_len: int, depth: float) -> tuple[int, int]:
    """``(distance, start)`` of a passkey row: ``start`` is the position of the key's last
    occurrence (``… Remember it. 12345 is the pass key.``) and ``distance`` how far the query
    predicting the first answer digit lies after it; digit ``k`` is read at that same distance.
    The layout depends on the length and depth only (the key has a fixed number of digits)."""
    batch = passkey_batch(context_len, depth, 1, seed=0)
    query = int(batch.loss_mask[0].nonzero()[0])  # predicts the first digit
    key = bytes(batch.targets[0, batch.loss_mask[0]].tolist())
    start = bytes(batch.tokens[0, :query].tolist()).rfind(key)
    return query - start, start


def _prepare(config: LongCtxConfig) -> CorpusSplits:
    """The start's checks, before the out folder is written: the model of every method at
    every length it is evaluated at, built once (:func:`~posenc.lab.runner.check_builds`;
    the scalings at ``s = L/T``), then the corpus and ``base_run``."""
    lengths = sorted({*config.eval_lengths, *config.passkey_lengths_tokens})
    check_builds(
        (f"methods: {method!r} at length {n}", functools.partial(_trial_model, config, method, n))
        for method in config.methods
        for n in lengths
    )
    return _load(config)


def _trial_model(config: LongCtxConfig, method: str, length: int) -> DecoderLM:
    return DecoderLM(config.model_config(method, length))


def _load(config: LongCtxConfig) -> CorpusSplits:
    corpus = config.data.load()
    if config.base_run is not None:
        for seed in config.train.seeds:
            _check_base(config, seed)
    return corpus


def _check_base(config: LongCtxConfig, seed: int) -> Path:
    """The finished base of ``seed`` in ``config.base_run``; ``ValueError`` naming
    ``base_run`` when it is missing or was trained with other settings."""
    folder = Path(str(config.base_run))
    saved = folder / "config.json"
    if not saved.is_file():
        raise ValueError(f"base_run {folder} has no config.json: not an experiment's out folder")
    previous = flat_record(LongCtxConfig, read_json(saved))
    record = flat_record(LongCtxConfig, as_json(config))
    current = {name: record[name] for name in _BASE_FIELDS}
    for name in _BASE_FIELDS:
        if previous.get(name) != current[name]:
            raise ValueError(
                f"base_run {folder} trained its bases with another {name!r} "
                f"({previous.get(name)!r} != {current[name]!r})"
            )
    base = folder / "runs" / "base" / f"seed{seed}"
    if not (base / "final.pt").is_file() or not (base / "done.json").is_file():
        raise ValueError(f"base_run {folder} has no finished base for seed {seed} ({base})")
    return base


def _plan(config: LongCtxConfig) -> list[Run]:
    """The bases (unless ``base_run`` holds them), then one evaluation per (seed, method)."""
    bases = [
        Run(f"base/seed{s}", {"seed": s}, rows=False)  # a base model, no rows
        for s in ([] if config.base_run else config.train.seeds)
    ]
    return bases + [
        Run(f"{method}/seed{seed}", {"method": method, "seed": seed}, stage=1)
        for seed in config.train.seeds
        for method in config.methods
    ]


def _execute(config: LongCtxConfig, run: Run, folder: Path) -> list[Row]:
    corpus = _load(config)
    seed = run.params["seed"]
    if "method" not in run.params:  # the base: trained as extend's, evaluated per method
        extend.train_base(config.extend_config(), corpus, seed, folder)
        return []
    method = run.params["method"]
    if config.base_run is None:
        base = folder.parent.parent / "base" / f"seed{seed}"
    else:
        base = _check_base(config, seed)
    train_loss = read_json(base / "done.json")["final_loss"]
    return _method_rows(config, corpus, extend.final_state(base), method, seed, train_loss)


def _method_rows(
    config: LongCtxConfig,
    corpus: CorpusSplits,
    state: dict[str, Tensor],
    method: str,
    seed: int,
    train_loss: float,
) -> list[Row]:
    """Perplexity and passkey rows of ``method`` on RoPE weights ``state`` (stage no_ft)."""
    ext = config.extend_config()

    def model_at(length: int) -> tuple[DecoderLM, float | None]:
        model = DecoderLM(config.model_config(method, length))
        model.load_state_dict(state)  # RoPE's weights, unchanged: the methods hold none
        scaled = method != "rope" and method not in SEGMENT_METHODS
        return model, ext.factor(length) if scaled else None

    rows = extend.evaluate_model(
        ext, corpus, model_at, method=method, stage="no_ft", seed=seed, train_loss=train_loss
    )
    return [_annotate(config, method, row) for row in rows]


def zero_shot_rows(
    config: LongCtxConfig, state: dict[str, Tensor], *, seed: int, train_loss: float
) -> list[Row]:
    """Every method of ``config.methods`` applied without fine-tuning to RoPE weights
    ``state`` trained at ``config.train_len``: the rows of this experiment's method runs, for
    weights trained elsewhere (the demo's extrapolation model)."""
    corpus = _load(config)
    rows: list[Row] = []
    for method in config.methods:
        rows += _method_rows(config, corpus, state, method, seed, train_loss)
    return rows


def _annotate(config: LongCtxConfig, method: str, row: Row) -> Row:
    """``family`` and ``pos_kwargs``; passkey rows also ``key_distance``, ``key_in_window``."""
    length = row.get("eval_len") or row["context_len"]
    if method in SEGMENT_METHODS:
        family, kwargs = "segments", config.method_kwargs(method, length)
    else:
        ext = config.extend_config()
        scaling = extend.scaling_for(method, ext.factor(length), config.train_len)
        family, kwargs = ("rope" if scaling is None else "scaling"), scaling or {}
    extra: Row = {"family": family, "pos_kwargs": json.dumps(kwargs, sort_keys=True)}
    if row["experiment"] == "passkey":
        extra["key_distance"] = key_layout(length, row["depth"])[0]
        extra["key_in_window"] = config.key_in_window(method, length, row["depth"])
    return {**row, **extra}


def run_longctx(
    config: LongCtxConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in ``out``: ``out/runs/base/seed<s>`` (unless
    ``base_run``), ``out/runs/<method>/seed<s>``, ``results.csv``, ``claims.json``,
    ``report.html`` (:func:`posenc.lab.runner.run_experiment`).

    Raises:
        ValueError: naming the field when ``out`` holds another configuration, or naming
            ``base_run`` when its bases are missing or differ.
    """
    return run_experiment(EXPERIMENT, config, out, echo=echo)


EXPERIMENT = Experiment(
    name="longctx",
    summary="RoPE trained at T, Self-Extend/DCA/ReRoPE/LM-Infinite/sinks to 32×T, no fine-tuning",
    title="posenc: long context without retraining",
    config=LongCtxConfig,
    plan=_plan,
    execute=_execute,
    table=format_longctx_tables,
    prepare=_prepare,
    claims=(*extend.EXPERIMENT.claims, *CLAIMS),
    sections=extend.SECTIONS,
)

"""The sections a lab experiment's config is composed of, each validated once.

An experiment's config is a frozen dataclass holding the sections it needs plus its own
fields, the layout of lingua's ``TrainArgs`` (https://github.com/facebookresearch/lingua,
``apps/main/train.py``):

* :class:`ModelArgs` (``model``): the transformer's shape, ``dim``, ``depth``, ``num_heads``;
* :class:`TrainArgs` (``train``): the seeds and the optimizer's schedule, ``steps``,
  ``batch_size``, ``lr``, ``warmup_steps``;
* :class:`EpochArgs` (``train`` of the experiments that train in passes over a fixed set,
  the image, signal and graph ones): the seeds, ``epochs``, ``batch_size``, ``lr``,
  ``weight_decay``, ``warmup_steps``;
* :class:`DataArgs` (``data``): the byte corpus, its split and the training length;
* :class:`RunnerArgs` (``runner``): how the runs execute, ``workers``, ``threads``,
  ``isolate``, ``progress``; nothing in it changes a result, so a folder's configuration
  guard ignores it (:func:`posenc.lab.results.check_out_dir`).

Each section checks its own fields in its ``__post_init__`` (``ValueError`` naming the
field); the experiment's config checks what ties them together (an evaluation length
against ``data.train_len``, an encoding against ``model.dim``) and its own fields.

On the command line (``posenc lab NAME``, tyro) a section's field is ``--model.dim``,
``--train.steps``, ``--runner.no-progress``; its own name alone (``--dim``, ``--steps``,
``--no-progress``) works as well (:func:`expand_flat_options`). :func:`replace_fields` is
:func:`dataclasses.replace` taking a section's field by its own name too, and
:func:`flat_record` reads a ``config.json`` of either layout as ``{"model.dim": ...}``
(:func:`from_record` builds the config back).

Example::

    >>> config = replace_fields(ExtrapolateConfig(), steps=100, dim=64)
    >>> config.train.steps, config.model.dim
    (100, 64)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int
from posenc.models import ModelConfig, schedules
from posenc.models.config import Mixer
from posenc.softmax.query_scale import QueryScale

if TYPE_CHECKING:
    from posenc.lab.data.corpus import CorpusSplits
    from posenc.lab.train import TrainConfig

__all__ = [
    "LAYER_OPTIONS",
    "DataArgs",
    "EpochArgs",
    "ModelArgs",
    "QueryScaleName",
    "RunnerArgs",
    "Schedule",
    "TrainArgs",
    "check_seeds",
    "expand_flat_options",
    "field_paths",
    "flat_record",
    "from_record",
    "replace_fields",
    "runner_args",
    "sections",
]

C = TypeVar("C")


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    """``seeds`` as a tuple; ``ValueError`` naming ``seeds`` unless they are distinct
    non-negative integers, at least one."""
    seeds = tuple(check_non_negative_int("seeds", s) for s in seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative integers, got {seeds}")
    return seeds


#: A named per-layer schedule of :mod:`posenc.models.schedules`, resolved with
#: ``ModelArgs.interval`` and ``ModelArgs.window``: NoPE every ``interval``-th layer (SmolLM3),
#: RNoPE-SWA (Cohere), SWAN-GPT, or a ``interval - 1 : 1`` linear : softmax hybrid of gated
#: delta-rule or linear-attention layers.
Schedule = Literal["nope_every", "rnope_swa", "swan", "hybrid_delta", "hybrid_linear"]
#: A query temperature by name: Llama-4's (``QueryScale.llama4()``) or Qwen-1's log-n
#: (``QueryScale.logn(train_len)``).
QueryScaleName = Literal["none", "llama4", "logn"]

#: The layer options of :class:`ModelArgs` (beyond the shape), in the order a label lists them.
LAYER_OPTIONS = (
    "schedule",
    "interval",
    "window",
    "nope_layers",
    "mixers",
    "output_gate",
    "chunk_size",
    "query_scale",
)
_NOPE_SCHEDULES = ("nope_every", "rnope_swa", "swan")
_MIXER_SCHEDULES = ("hybrid_delta", "hybrid_linear")


@dataclass(frozen=True)
class ModelArgs:
    """The transformer's shape (``head_dim = dim / num_heads``) and its per-layer options:
    which layers take the encoding, a sliding window or chunks on those, the token mixer of
    each layer and gated attention's output gate (:class:`posenc.models.ModelConfig`;
    docs/hybrids.md). :meth:`config_kwargs` gives them to ``ModelConfig`` in one line.

    Args:
        dim: the model's width, a multiple of ``num_heads``.
        depth: its layers (blocks).
        num_heads: attention heads per layer.
        schedule: a published layout by name (:data:`Schedule`, built by
            :mod:`posenc.models.schedules`): ``"nope_every"`` (a NoPE layer every
            ``interval``-th layer, SmolLM3), ``"rnope_swa"`` (those NoPE layers global, a
            sliding ``window`` on the others: Cohere's RNoPE-SWA,
            https://arxiv.org/abs/2501.18795), ``"swan"`` (RNoPE-SWA plus log-n query scaling
            on the NoPE layers past the training length: SWAN-GPT,
            https://arxiv.org/abs/2504.08719), ``"hybrid_delta"`` / ``"hybrid_linear"``
            (softmax every ``interval``-th layer, gated delta-rule or linear attention
            elsewhere: Qwen3-Next's 3 : 1). ``None``: the layers below as given.
        interval: the schedule's ``k`` ("every ``k``-th layer", layers ``k - 1, 2k - 1, ...``).
        window: sliding-window attention of this many keys on every encoded softmax layer
            (needed by ``rnope_swa`` and ``swan``); ``None``: global.
        nope_layers: indices of layers without the encoding (not with a schedule that sets
            them).
        mixers: one token mixer per layer, ``"softmax"``, ``"linear"`` or ``"delta"``, or
            ``()`` for softmax everywhere (not with a hybrid schedule); ``"delta"`` is causal,
            so decoders only.
        output_gate: gated attention's sigmoid output gate on every softmax layer
            (https://arxiv.org/abs/2505.06708).
        chunk_size: chunked local attention on the encoded layers (Llama-4); not with
            ``window``.
        query_scale: a query temperature (:data:`QueryScaleName`) on the NoPE layers when
            there are any, else on every softmax layer; ``"logn"`` scales by the run's
            training length.

    Example::

        >>> ModelArgs(depth=4, schedule="rnope_swa", window=32).label()
        'rnope_swa+w32'
    """

    dim: int = 128
    depth: int = 4
    num_heads: int = 4
    schedule: Schedule | None = None
    interval: int = 4
    window: int | None = None
    nope_layers: tuple[int, ...] = ()
    mixers: tuple[Mixer, ...] = ()
    output_gate: bool = False
    chunk_size: int | None = None
    query_scale: QueryScaleName = "none"

    def __post_init__(self) -> None:
        for name in ("dim", "depth", "num_heads", "interval"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.dim % self.num_heads:  # checked here, before any experiment writes a folder
            raise ValueError(
                f"dim must be a multiple of num_heads (head_dim = dim / num_heads), got dim "
                f"{self.dim} and num_heads {self.num_heads}"
            )
        schedules = get_args(Schedule)
        if self.schedule is not None and self.schedule not in schedules:
            raise ValueError(
                f"schedule must be one of {', '.join(map(repr, schedules))} or None, got "
                f"{self.schedule!r}"
            )
        scales = get_args(QueryScaleName)
        if self.query_scale not in scales:
            raise ValueError(
                f"query_scale must be one of {', '.join(map(repr, scales))}, got "
                f"{self.query_scale!r}"
            )
        for name in ("nope_layers", "mixers"):  # JSON and the command line give lists
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if self.schedule in _NOPE_SCHEDULES and self.nope_layers:
            raise ValueError(
                f"nope_layers {list(self.nope_layers)}: schedule {self.schedule!r} sets the NoPE "
                "layers (every interval-th); give one or the other"
            )
        if self.schedule in _MIXER_SCHEDULES and self.mixers:
            raise ValueError(
                f"mixers: schedule {self.schedule!r} sets each layer's mixer; give one or the other"
            )
        if self.schedule in ("rnope_swa", "swan") and self.window is None:
            raise ValueError(
                f"window is required with schedule {self.schedule!r} (the sliding window of "
                "its encoded layers, e.g. --model.window 64)"
            )
        if self.schedule == "swan" and self.query_scale != "none":
            raise ValueError(
                f"query_scale {self.query_scale!r}: schedule 'swan' sets log-n scaling on its "
                "NoPE layers; give one or the other"
            )
        ModelConfig(**self.config_kwargs(train_len=2))  # its checks name the field

    @property
    def layered(self) -> bool:
        """Whether any per-layer option differs from its default (a plain transformer)."""
        return any(getattr(self, name) != _DEFAULTS[name] for name in LAYER_OPTIONS)

    def config_kwargs(self, *, train_len: int, causal: bool = True) -> dict[str, Any]:
        """These arguments as :class:`~posenc.models.ModelConfig` keyword arguments: the shape
        and the per-layer options, the named ``schedule`` resolved by
        :mod:`posenc.models.schedules`.

        Args:
            train_len: the run's training length (``"logn"`` and ``"swan"`` scale past it).
            causal: the model is a decoder; ``False`` refuses ``"delta"`` mixers (a causal
                recurrence).

        Example::

            >>> ModelArgs(depth=4, schedule="hybrid_delta").config_kwargs(train_len=64)["mixers"]
            ('delta', 'delta', 'delta', 'softmax')
        """
        depth, k = self.depth, self.interval
        options: dict[str, Any] = {
            "dim": self.dim,
            "depth": depth,
            "num_heads": self.num_heads,
            "window": self.window,
            "nope_layers": self.nope_layers,
            "mixers": self.mixers,
            "output_gate": self.output_gate,
            "chunk_size": self.chunk_size,
            "query_scale": None,
        }
        if self.query_scale == "llama4":
            options["query_scale"] = QueryScale.llama4()
        elif self.query_scale == "logn":
            options["query_scale"] = QueryScale.logn(max(2, train_len))
        if self.schedule == "nope_every":
            options.update(schedules.nope_every(depth, k))
        elif self.schedule == "rnope_swa":
            options.update(schedules.rnope_swa(depth, self.window or 0, k))
        elif self.schedule == "swan":
            options.update(schedules.swan(depth, self.window or 0, max(2, train_len), k))
        elif self.schedule in _MIXER_SCHEDULES:
            mixer: Mixer = "delta" if self.schedule == "hybrid_delta" else "linear"
            options["mixers"] = schedules.hybrid_mixers(depth, k, mixer)
        if not causal and "delta" in options["mixers"]:
            raise ValueError(
                f"mixers: 'delta' layers (a gated delta rule) are causal; this model is an "
                f"encoder (mixers {list(options['mixers'])}): use 'linear' or 'softmax'"
            )
        return options

    def check_supports(self, model: str, supported: Sequence[str] = ()) -> None:
        """Refuse the per-layer options a model other than ``ModelConfig``'s cannot take.

        Raises:
            ValueError: naming the first option set to other than its default that is not
                in ``supported`` (``model.window: the graph transformer takes no window``).
        """
        for name in LAYER_OPTIONS:
            if name not in supported and getattr(self, name) != _DEFAULTS[name]:
                raise ValueError(
                    f"model.{name}: {model} takes no {name.replace('_', ' ')} (got "
                    f"{getattr(self, name)!r}); it supports "
                    f"{', '.join(f'model.{s}' for s in supported) or 'none of the layer options'}"
                )

    def label(self) -> str:
        """The per-layer options as a short name, ``""`` for a plain transformer:
        ``"rnope_swa+w64+gate"``, ``"nope[1,3]"``, ``"mixers=ddds"``. Results rows carry it
        (a ``schedule`` column) so runs with and without a window or gate stay apart."""
        parts = []
        if self.schedule is not None:
            parts.append(self.schedule + ("" if self.interval == 4 else f"/{self.interval}"))
        if self.window is not None:
            parts.append(f"w{self.window}")
        if self.nope_layers:
            parts.append(f"nope[{','.join(map(str, self.nope_layers))}]")
        if self.mixers:
            parts.append("mixers=" + "".join(m[0] for m in self.mixers))
        if self.output_gate:
            parts.append("gate")
        if self.chunk_size is not None:
            parts.append(f"chunk{self.chunk_size}")
        if self.query_scale != "none":
            parts.append(f"qs={self.query_scale}")
        return "+".join(parts)

    def row_fields(self) -> dict[str, str]:
        """``{"schedule": label}`` for a result row, or ``{}`` for a plain transformer (rows
        written before the options read the same)."""
        return {"schedule": self.label()} if self.layered else {}


_DEFAULTS = {f.name: f.default for f in fields(ModelArgs)}


@dataclass(frozen=True)
class TrainArgs:
    """The seeds and the optimizer's schedule of each run (AdamW, linear warmup, then cosine
    decay: :func:`posenc.lab.train.lr_at`).

    Args:
        seeds: one run per seed (model init, batch order, dropout); tables give the mean ±
            std over seeds.
        steps: optimizer steps.
        batch_size: sequences per step (the global batch under ``torchrun``).
        lr: peak learning rate.
        warmup_steps: linear warmup steps (capped at ``steps - 1``).
    """

    seeds: tuple[int, ...] = (0,)
    steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 100

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        for name in ("steps", "batch_size"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        check_positive_float("lr", self.lr)
        object.__setattr__(
            self, "warmup_steps", check_non_negative_int("warmup_steps", self.warmup_steps)
        )

    def train_config(self, seed: int, *, progress: bool, **fields: Any) -> TrainConfig:
        """The trainer's config of one run of ``seed``: this schedule
        (:meth:`~posenc.lab.train.TrainConfig.for_steps`: evaluation at the end, four
        checkpoints, about ten log lines); ``fields`` set the rest (``device``, ...)."""
        from posenc.lab.train import TrainConfig

        return TrainConfig.for_steps(
            self.steps,
            warmup_steps=self.warmup_steps,
            batch_size=self.batch_size,
            lr=self.lr,
            seed=seed,
            progress=progress,
            **fields,
        )


@dataclass(frozen=True)
class EpochArgs:
    """The seeds and the optimizer's schedule of each run that trains in passes over a fixed
    training set: AdamW, linear warmup, then cosine decay over every step of every epoch
    (:meth:`lr_factor` in :func:`posenc.lab.signal_models.fit_signal_model` and
    :func:`posenc.lab.graph_models.fit_graph_model`; the digits ViT gives its steps to
    :mod:`posenc.lab.train`).

    Args:
        seeds: one run per seed (model init and batch order); tables give the mean ± std
            over seeds.
        epochs: passes over the training set.
        batch_size: examples per step.
        lr: peak learning rate.
        weight_decay: AdamW's weight decay.
        warmup_steps: linear warmup steps (capped at the run's steps - 1).
    """

    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: int = 20
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_steps: int = 20

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        for name in ("epochs", "batch_size"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        check_positive_float("lr", self.lr)
        if not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise ValueError(f"weight_decay must be finite and >= 0, got {self.weight_decay}")
        object.__setattr__(
            self, "warmup_steps", check_non_negative_int("warmup_steps", self.warmup_steps)
        )

    def lr_factor(self, step: int, steps: int) -> float:
        """The learning rate of 0-based step ``step`` of ``steps`` as a fraction of ``lr``.

        .. math::
            f(s) = \\frac{s+1}{W+1} \\quad (s < W), \\qquad
            f(s) = \\tfrac12\\big(1 + \\cos(\\pi \\min(1, \\tfrac{s - W}{S - W}))\\big)
            \\quad (s \\ge W)

        with ``S = steps`` and ``W = min(warmup_steps, S - 1)``.

        Example::

            >>> EpochArgs(warmup_steps=1).lr_factor(0, 3), EpochArgs().lr_factor(3, 3)
            (0.5, 0.0)
        """
        warmup = min(self.warmup_steps, steps - 1)
        if step < warmup:
            return (step + 1) / (warmup + 1)
        done = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))


@dataclass(frozen=True)
class DataArgs:
    """The byte-level corpus (:func:`posenc.lab.data.corpus.load_corpus`) and the length the
    model trains at.

    Args:
        corpus: text files or folders; empty = the Python standard library sources.
        corpus_bytes: cap on each split's size (``None`` = the whole corpus).
        split_seed: seed of the train/validation/test split by file (fixed across seeds).
        train_len: ``T``, the training context in bytes.
    """

    corpus: tuple[str, ...] = ()
    corpus_bytes: int | None = None
    split_seed: int = 0
    train_len: int = 128

    def __post_init__(self) -> None:
        corpus = self.corpus
        if isinstance(corpus, str) or not all(isinstance(path, str) for path in corpus):
            raise ValueError(f"corpus must be a tuple of paths (str), got {corpus!r}")
        object.__setattr__(self, "corpus", tuple(corpus))
        if self.corpus_bytes is not None:
            object.__setattr__(
                self, "corpus_bytes", check_positive_int("corpus_bytes", self.corpus_bytes)
            )
        object.__setattr__(
            self, "split_seed", check_non_negative_int("split_seed", self.split_seed)
        )
        object.__setattr__(self, "train_len", check_positive_int("train_len", self.train_len))

    def load(self) -> CorpusSplits:
        """The corpus's :class:`~posenc.lab.data.corpus.CorpusSplits`."""
        from posenc.lab.data.corpus import load_corpus

        return load_corpus(self.corpus or None, seed=self.split_seed, max_bytes=self.corpus_bytes)


@dataclass(frozen=True)
class RunnerArgs:
    """How the runner executes the runs (:func:`posenc.lab.runner.run_experiment`); nothing
    here changes a result.

    Args:
        workers: runs at once in spawned processes (1 = in this process).
        threads: torch intra-op threads per run (``None`` = torch's default; 1 is fastest for
            these small models on a shared 2-core machine).
        isolate: a fresh process per run, so its peak memory is its own.
        progress: progress bars where the experiment draws them (off in parallel workers,
            whose bars would overwrite each other).
    """

    workers: int = 1
    threads: int | None = 1
    isolate: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "workers", check_positive_int("workers", self.workers))
        if self.threads is not None:
            object.__setattr__(self, "threads", check_positive_int("threads", self.threads))
        for name in ("isolate", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")


#: The runner's settings of a config without a ``runner`` section: serial, threads as they are.
_NO_RUNNER = RunnerArgs(threads=None)


def runner_args(config: object) -> RunnerArgs:
    """``config.runner``, or the runner's defaults (serial, threads left alone) for a config
    without that section."""
    runner = getattr(config, "runner", None)
    return runner if isinstance(runner, RunnerArgs) else _NO_RUNNER


def sections(cls: type) -> dict[str, type]:
    """The sections of config class ``cls``: each field whose type is a dataclass, by name."""
    hints = _field_types(cls)
    return {
        name: kind for name, kind in hints.items() if isinstance(kind, type) and is_dataclass(kind)
    }


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


@functools.cache
def field_paths(cls: type) -> dict[str, str]:
    """Each field of config class ``cls`` by its own name: ``{"dim": "model.dim", ...,
    "encodings": "encodings"}`` (a section's fields, then ``cls``'s own; a name that is a
    field of ``cls`` itself keeps its own meaning).

    Raises:
        TypeError: when two sections share a field name (it would name neither).
    """
    paths: dict[str, str] = {}
    for section, kind in sections(cls).items():
        for f in fields(kind):
            if f.name in paths:
                raise TypeError(
                    f"{cls.__name__}: {f.name!r} is a field of both {paths[f.name]} and "
                    f"{section}.{f.name}"
                )
            paths[f.name] = f"{section}.{f.name}"
    for f in fields(cls):
        paths[f.name] = f.name
    return paths


def replace_fields(config: C, **changes: Any) -> C:
    """:func:`dataclasses.replace` of ``config`` where a field of one of its sections may be
    named alone: ``replace_fields(config, steps=10, dim=64)`` sets ``config.train.steps`` and
    ``config.model.dim`` (each changed section is validated again, then the config).

    Raises:
        TypeError: naming a change that is no field of the config or its sections.
    """
    cls: type = type(config)
    paths = field_paths(cls)
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        if name not in paths:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        section, _, leaf = paths[name].rpartition(".")
        if section:
            nested.setdefault(section, {})[leaf] = value
        else:
            own[name] = value
    for section, values in nested.items():
        base = own.get(section, getattr(config, section))
        own[section] = dataclasses.replace(base, **values)
    return dataclasses.replace(config, **own)  # type: ignore[type-var]


def flat_record(cls: type, record: Mapping[str, Any]) -> dict[str, Any]:
    """A config's JSON record (``config.json``) with each section's fields as ``"model.dim"``
    keys; a record written before the sections (flat: ``"dim"``) reads the same, its fields
    placed by :func:`field_paths`. Other keys (``"experiment"``) stay as they are.

    Raises:
        ValueError: naming the key when a section's name holds no object (a record written
            when that name was a field of another kind: triangles' ``train`` graphs).
    """
    paths = field_paths(cls)
    names = sections(cls)
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if key in names:
            if not isinstance(value, Mapping):
                raise ValueError(
                    f"{key!r} is the {key} section of {cls.__name__} (an object of "
                    f"{names[key].__name__}'s fields), got {value!r}"
                )
            flat.update({f"{key}.{leaf}": item for leaf, item in value.items()})
        else:
            flat[paths.get(key, key)] = value
    return flat


def from_record(cls: type[C], record: Mapping[str, Any]) -> C:
    """A config of class ``cls`` from its JSON record (``dataclasses.asdict`` of one, or a
    ``config.json`` without its ``"experiment"`` key): each section built from its object, or,
    in a flat record, from its fields named alone (:func:`flat_record`).

    Raises:
        TypeError: naming a key that is no field of ``cls`` or its sections.
    """
    kinds = sections(cls)
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in flat_record(cls, record).items():
        section, _, leaf = key.rpartition(".")
        if section in kinds:
            nested.setdefault(section, {})[leaf] = value
        else:
            own[key] = value
    for name, values in nested.items():
        own[name] = kinds[name](**values)
    return cls(**own)


def expand_flat_options(cls: type, options: Sequence[str]) -> list[str]:
    """Command-line options with a section's field named alone (``--steps 10``,
    ``--no-progress``, ``--dim=64``) written as tyro names it (``--train.steps 10``,
    ``--runner.no-progress``, ``--model.dim=64``); everything else unchanged."""
    paths = field_paths(cls)
    expanded = []
    for option in options:
        if not option.startswith("--") or "." in option.partition("=")[0]:
            expanded.append(option)
            continue
        flag, sep, value = option[2:].partition("=")
        name = flag.replace("-", "_")
        negated = name.startswith("no_") and name not in paths and name[3:] in paths
        path = paths.get(name[3:] if negated else name, name)
        section, _, leaf = path.rpartition(".")
        if not section:
            expanded.append(option)
            continue
        leaf = leaf.replace("_", "-")
        expanded.append(f"--{section}.{'no-' if negated else ''}{leaf}{sep}{value}")
    return expanded

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
from typing import TYPE_CHECKING, Any, TypeVar

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int

if TYPE_CHECKING:
    from posenc.lab.data.corpus import CorpusSplits
    from posenc.lab.train import TrainConfig

__all__ = [
    "DataArgs",
    "EpochArgs",
    "ModelArgs",
    "RunnerArgs",
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


@dataclass(frozen=True)
class ModelArgs:
    """The transformer's shape (``head_dim = dim / num_heads``).

    Args:
        dim: the model's width, a multiple of ``num_heads``.
        depth: its layers (blocks).
        num_heads: attention heads per layer.
    """

    dim: int = 128
    depth: int = 4
    num_heads: int = 4

    def __post_init__(self) -> None:
        for name in ("dim", "depth", "num_heads"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.dim % self.num_heads:  # checked here, before any experiment writes a folder
            raise ValueError(
                f"dim must be a multiple of num_heads (head_dim = dim / num_heads), got dim "
                f"{self.dim} and num_heads {self.num_heads}"
            )


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

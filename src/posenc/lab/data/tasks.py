"""Seeded synthetic tasks for length generalization: train short, test long.

Every task makes decoder-style sequences ``prompt, <sep>, answer`` over a small vocabulary
(flip-flop and zoology-layout MQAR score answers inline, after each read or query; state
tracking tags every input position with its state, see :attr:`Example.tags`). The model reads
``tokens = sequence[:-1]`` and predicts ``targets = sequence[1:]``; ``loss_mask`` is True
exactly where the target is an answer symbol. Rows of one batch may differ in length: they are
padded **at the end** with token 0 (``vocab[0]`` is always padding), ``loss_mask`` False and
``key_padding_mask`` False there. Under causal attention a real token never sees a later pad,
so neither the pads nor their positions change any scored prediction; the key padding mask
only keeps pad queries well defined.

``length`` is each task's problem size (documented per task in :data:`TASKS`), not the
token count; :meth:`TaskSource.max_seq_len` gives the widest ``tokens`` for a length.

Tasks (Delétang et al. 2023 https://arxiv.org/abs/2207.02098 and Ruoss et al. 2023
https://arxiv.org/abs/2305.16843 for copy, reverse, sort, binary addition; Mohtashami & Jaggi
2023 https://arxiv.org/abs/2305.16300 for passkey; Arora et al. 2023
https://arxiv.org/abs/2312.04927 for MQAR; Liu et al. 2023 https://arxiv.org/abs/2306.00946
for flip-flop; Gu & Dao 2023 https://arxiv.org/abs/2312.00752 for selective copy; Golovneva
et al. 2024 https://arxiv.org/abs/2405.18719 for counting; Hsieh et al. 2024 (RULER)
https://arxiv.org/abs/2404.06654 for the needle, variable-tracking and word-extraction tasks of
:mod:`~posenc.lab.data.ruler`; Merrill et al. 2024 https://arxiv.org/abs/2404.08819 for the
permutation word problems of :mod:`~posenc.lab.data.state_tracking`).

Example::

    >>> task = make_task("reverse", seed=0)
    >>> ex = task.examples(1, length=3, seed=0)[0]
    >>> ex.answer == ex.prompt[::-1]
    True
    >>> batch = task.batch(step=0, batch_size=4)            # lengths from train_lengths
    >>> batch = task.batch(step=0, batch_size=4, length=16)  # a test length
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import torch
from torch import Tensor

from posenc._validate import check_int, check_non_negative_int, check_positive_int
from posenc.lab.batch import Batch, derive_seed, shard_slice
from posenc.lab.data.recall import RECALL_TASKS
from posenc.lab.data.ruler import RULER_TASKS
from posenc.lab.data.state_tracking import STATE_TASKS
from posenc.lab.data.task_generators import PAD, SEP, Example, ParamRange, TaskSpec, float_param
from posenc.lab.data.task_generators import TASKS as ALGORITHMIC_TASKS

__all__ = ["PAD", "SEP", "TASKS", "Example", "TaskSource", "TaskSpec", "accuracy", "make_task"]

_INT_RANGES = {
    "alphabet_size": (2, 26),
    "num_digits": (2, 10),
    "digits": (1, 9),
    "num_keys": (1, 4096),
    "num_values": (1, 4096),
    "queries": (1, 1 << 16),
    "num_tokens": (1, 1 << 16),
    "num_variables": (1, 26),
}
_FLOAT_RANGES = {"depth": (0.0, 1.0), "p": (0.0, 0.999), "p_set": (0.0, 1.0)}
_FLOAT_RANGES |= {"p_increment": (0.0, 1.0)}

TASKS: dict[str, TaskSpec] = {**ALGORITHMIC_TASKS, **RECALL_TASKS, **RULER_TASKS, **STATE_TASKS}
"""Every task by name: the algorithmic ones of :mod:`~posenc.lab.data.task_generators`, MQAR
(:mod:`~posenc.lab.data.recall`), RULER's synthetic families (:mod:`~posenc.lab.data.ruler`)
and state tracking (:mod:`~posenc.lab.data.state_tracking`)."""


def _check_value(key: str, value: object, allowed: ParamRange) -> object:
    if all(isinstance(a, str) for a in allowed):
        if value not in allowed:
            raise ValueError(f"{key} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
        return value
    low, high = allowed
    if isinstance(low, int) and isinstance(high, int):
        return check_int(key, value, low=low, high=high)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not low <= value <= high:  # type: ignore[operator]
        raise ValueError(f"{key} must be a number in [{low}, {high}], got {value!r}")
    return value


def _check_params(spec: TaskSpec, params: dict[str, object]) -> None:
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        allowed = ", ".join(sorted(spec.defaults)) or "none"
        raise ValueError(
            f"unknown parameter(s) {unknown} for task {spec.name!r}; allowed: {allowed}"
        )
    for key, value in list(params.items()):
        if value is None and spec.defaults[key] is None:
            continue
        if isinstance(spec.defaults[key], bool):
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be True or False, got {value!r}")
        else:
            valid: ParamRange | None = spec.ranges.get(key)
            if valid is None:
                valid = _INT_RANGES.get(key) or _FLOAT_RANGES[key]
            params[key] = _check_value(key, value, valid)
    if "p_set" in params and float_param(params, "p_set") + float_param(params, "p_increment") > 1:
        raise ValueError("p_set + p_increment must be <= 1")


class TaskSource:
    """A seeded synthetic task: training batches, test batches, examples. Use :func:`make_task`.

    Attributes:
        spec: the :class:`TaskSpec`.
        params: the task parameters (defaults updated by the caller's).
        seed: data seed.
        train_lengths: inclusive ``(low, high)`` range sampled per training row.
        test_lengths: the lengths to evaluate at.
        vocab: the symbols; token id ``i`` is ``vocab[i]``, ``vocab[0]`` is padding.
        vocab_size: ``len(vocab)``.
    """

    def __init__(
        self,
        spec: TaskSpec,
        *,
        seed: int,
        params: Mapping[str, object],
        train_lengths: tuple[int, int],
        test_lengths: tuple[int, ...],
    ) -> None:
        seed = check_non_negative_int("seed", seed)
        self.spec = spec
        self.seed = seed
        self.params = MappingProxyType(dict(params))
        if len(train_lengths) != 2 or not 1 <= train_lengths[0] <= train_lengths[1]:
            raise ValueError(
                f"train_lengths must be (low, high) with 1 <= low <= high, got {train_lengths}"
            )
        self.train_lengths = (
            check_positive_int("train_lengths", train_lengths[0]),
            check_positive_int("train_lengths", train_lengths[1]),
        )
        self.test_lengths = tuple(check_positive_int("test_lengths", n) for n in test_lengths)
        low, high = self.train_lengths
        for n in (*range(low, high + 1), *self.test_lengths):  # every length a row can draw
            spec.check(n, self.params)
        self.vocab = spec.vocab(self.params)
        self.vocab_size = len(self.vocab)
        self._ids = {symbol: i for i, symbol in enumerate(self.vocab)}

    @property
    def name(self) -> str:
        """The task's name."""
        return self.spec.name

    def _length(self, length: int) -> int:
        length = check_positive_int("length", length)
        self.spec.check(length, self.params)
        return length

    def encode(self, symbols: tuple[str, ...] | list[str]) -> list[int]:
        """Token ids of ``symbols``."""
        return [self._ids[s] for s in symbols]

    def decode(self, ids: Tensor | list[int]) -> tuple[str, ...]:
        """Symbols of token ids."""
        return tuple(self.vocab[int(i)] for i in ids)

    def max_seq_len(self, length: int | None = None) -> int:
        """The widest ``tokens`` (``T``) of a batch at ``length``; over every train and test
        length when None (what a learned table or randomized positions must cover)."""
        if length is None:
            return max(self.max_seq_len(n) for n in (*self.train_lengths, *self.test_lengths))
        return self.spec.max_symbols(self._length(length), self.params) - 1

    def examples(self, n: int, length: int, *, seed: int = 0) -> list[Example]:
        """``n`` examples of problem size ``length`` from ``seed`` (independent of steps)."""
        n = check_positive_int("n", n)
        rng = random.Random(derive_seed(self.name, "examples", seed, self._length(length)))
        return [self.spec.generate(rng, length, self.params) for _ in range(n)]

    def collate(self, examples: list[Example]) -> Batch:
        """Stack examples into a :class:`Batch`, padding short rows at the end with token 0."""
        if not examples:
            raise ValueError("examples must not be empty")
        width = max(len(ex.sequence) - (ex.tags is None) for ex in examples)
        tokens = torch.zeros(len(examples), width, dtype=torch.long)
        targets = torch.zeros_like(tokens)
        loss_mask = torch.zeros_like(tokens, dtype=torch.bool)
        real = torch.zeros_like(loss_mask)
        for row, ex in enumerate(examples):
            ids = torch.tensor(self.encode(ex.sequence))
            if ex.tags is None:  # next-token: the answers follow the prompt in the input
                size = ids.numel() - 1
                tokens[row, :size], targets[row, :size] = ids[:-1], ids[1:]
                loss_mask[row, :size] = torch.tensor(ex.answer_mask[1:])
            else:  # tagging: a target per input position
                size = ids.numel()
                tokens[row, :size] = ids
                targets[row, :size] = torch.tensor(self.encode(ex.tags))
                loss_mask[row, :size] = torch.tensor(ex.answer_mask)
            real[row, :size] = True
        return Batch(tokens, targets, loss_mask, key_padding_mask=None if real.all() else real)

    def batch(
        self,
        step: int,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        length: int | None = None,
    ) -> Batch:
        """Rank ``rank``'s shard of step ``step``'s global batch of ``batch_size`` rows.

        Without ``length`` each row's length is drawn uniformly from ``train_lengths``; with
        it every row has that length (a test batch, from a random stream separate from the
        training one). The global batch is built and then sharded, so shards concatenate to
        it exactly (padding width included).
        """
        step = check_non_negative_int("step", step)
        shard_slice(batch_size, rank, world_size)
        if length is None:
            rng = random.Random(derive_seed(self.name, self.seed, step))
            low, high = self.train_lengths
            lengths = [rng.randint(low, high) for _ in range(batch_size)]
        else:
            rng = random.Random(derive_seed(self.name, self.seed, step, "length", length))
            lengths = [self._length(length)] * batch_size
        rows = [self.spec.generate(rng, n, self.params) for n in lengths]
        return self.collate(rows).shard(rank, world_size)


def _pair(lengths: Sequence[int]) -> tuple[int, int]:
    values = tuple(lengths)
    if len(values) != 2:
        raise ValueError(f"train_lengths must be (low, high), got {values!r}")
    return (int(values[0]), int(values[1]))


def make_task(
    name: str,
    *,
    seed: int = 0,
    train_lengths: tuple[int, int] | None = None,
    test_lengths: tuple[int, ...] | None = None,
    **params: object,
) -> TaskSource:
    """The task ``name`` of :data:`TASKS` with its default lengths and parameters overridden.

    Raises:
        ValueError: naming ``name`` for an unknown task, an unknown or out-of-range
            parameter, or lengths the task cannot make (e.g. mqar length > num_keys).
    """
    if name not in TASKS:
        raise ValueError(f"name must be one of {', '.join(TASKS)}; got {name!r}")
    spec = TASKS[name]
    _check_params(spec, params)
    return TaskSource(
        spec,
        seed=seed,
        params={**spec.defaults, **params},
        train_lengths=spec.train_lengths if train_lengths is None else _pair(train_lengths),
        test_lengths=spec.test_lengths if test_lengths is None else tuple(test_lengths),
    )


def accuracy(logits: Tensor, batch: Batch) -> tuple[float, float]:
    """Greedy accuracy over the answer positions: ``(token_acc, sequence_acc)``.

    ``token_acc`` is the fraction of ``loss_mask`` positions where ``argmax(logits)`` equals
    the target; ``sequence_acc`` the fraction of rows (with at least one answer position)
    whose every answer position is right (exact match).

    Shape:
        logits ``(B, T, V)`` for ``batch.tokens`` ``(B, T)``.
    """
    if logits.dim() != 3 or logits.shape[:2] != batch.tokens.shape:
        raise ValueError(
            f"logits must have shape (B, T, V) with (B, T) = "
            f"{tuple(batch.tokens.shape)}, got {tuple(logits.shape)}"
        )
    mask = batch.loss_mask.to(logits.device)
    if not bool(mask.any()):
        raise ValueError("loss_mask selects no position; accuracy is undefined")
    hit = logits.argmax(-1) == batch.targets.to(logits.device)
    token_acc = (hit & mask).sum().item() / mask.sum().item()
    scored = mask.any(-1)
    exact = (hit | ~mask).all(-1)[scored]
    return float(token_acc), float(exact.float().mean().item())

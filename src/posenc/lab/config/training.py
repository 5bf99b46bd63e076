"""The training sections of a lab config: the seeds and the optimizer's schedule, in steps
(:class:`TrainArgs`) or in passes over a fixed training set (:class:`EpochArgs`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int

if TYPE_CHECKING:
    from posenc.lab.train import TrainConfig

__all__ = ["EpochArgs", "TrainArgs", "check_seeds"]


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    """``seeds`` as a tuple; ``ValueError`` naming ``seeds`` unless they are distinct
    non-negative integers, at least one."""
    seeds = tuple(check_non_negative_int("seeds", s) for s in seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative integers, got {seeds}")
    return seeds


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

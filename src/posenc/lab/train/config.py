"""What a training run is asked (:class:`TrainConfig`) and what it reports (``TrainResult``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int

__all__ = ["TrainConfig", "TrainResult"]


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of one training run (``batch_size`` is global, summed over ranks).

    Args:
        steps: optimizer steps.
        batch_size: rows per step over all processes; must divide by the world size.
        lr, weight_decay: AdamW peak learning rate and decoupled weight decay.
        warmup_steps, min_lr_ratio: linear warmup, then cosine decay to ``min_lr_ratio·lr``
            (see :func:`lr_at`).
        grad_clip: max global gradient norm; ``None`` disables clipping.
        eval_every, checkpoint_every, log_every: periods in steps (the last step always does
            all three).
        seed: seeds dropout (per step) and randomized positions.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; under DDP on CUDA each rank uses
            ``cuda:LOCAL_RANK``.
        progress: show a progress bar (tqdm when installed, else a printed line per log step).
        randomize_positions: ``L`` to train with randomized positions (Ruoss et al. 2023,
            https://arxiv.org/abs/2305.16843): each row's ``n`` real tokens (its
            ``key_padding_mask``) get ``n`` sorted distinct integers from ``[0, L)``, as if
            unpadded; padding keeps its positions; ``None`` = the batch's positions.
    """

    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.1
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    grad_clip: float | None = 1.0
    eval_every: int = 100
    checkpoint_every: int = 100
    log_every: int = 10
    seed: int = 0
    device: str = "cpu"
    progress: bool = True
    randomize_positions: int | None = None

    @classmethod
    def for_steps(
        cls, steps: int, *, warmup_steps: int, eval_every: int | None = None, **fields: Any
    ) -> TrainConfig:
        """The experiments' schedule for a run of ``steps`` steps.

        Warmup capped at ``steps - 1``, evaluation at the end (or every ``eval_every``),
        four checkpoints, about ten log lines (at most every 50 steps); ``fields`` set the
        rest.
        """
        return cls(
            steps=steps,
            warmup_steps=min(warmup_steps, steps - 1),
            eval_every=steps if eval_every is None else eval_every,
            checkpoint_every=max(1, steps // 4),
            log_every=max(1, min(50, steps // 10)),
            **fields,
        )

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "checkpoint_every", "log_every"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        object.__setattr__(
            self, "warmup_steps", check_non_negative_int("warmup_steps", self.warmup_steps)
        )
        object.__setattr__(self, "seed", check_non_negative_int("seed", self.seed))
        check_positive_float("lr", self.lr)
        if isinstance(self.weight_decay, bool) or not isinstance(self.weight_decay, (int, float)):
            raise ValueError(f"weight_decay must be a number >= 0, got {self.weight_decay!r}")
        if not 0.0 <= self.weight_decay < math.inf:
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if isinstance(self.min_lr_ratio, bool) or not isinstance(self.min_lr_ratio, (int, float)):
            raise ValueError(f"min_lr_ratio must be a number in [0, 1], got {self.min_lr_ratio!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.grad_clip is not None:
            check_positive_float("grad_clip", self.grad_clip)
        if self.randomize_positions is not None:
            object.__setattr__(
                self,
                "randomize_positions",
                check_positive_int("randomize_positions", self.randomize_positions),
            )
        if not isinstance(self.progress, bool):
            raise ValueError(f"progress must be a bool, got {self.progress!r}")
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"device must name a torch device, got {self.device!r}") from error


@dataclass
class TrainResult:
    """Summary of a finished run, stored in ``done.json``.

    ``final_loss`` is the mean training loss over the last log interval; ``seconds`` and
    ``tokens_per_second`` add up every session of a resumed run (tokens = batch_size·seq per
    step, all processes); ``peak_memory_bytes`` is :func:`peak_memory_bytes` of rank 0 at the
    end; ``resumed_from`` is the checkpoint step the last session started from (None = fresh).
    """

    steps: int
    final_loss: float
    tokens_per_second: float
    peak_memory_bytes: int
    seconds: float
    resumed_from: int | None

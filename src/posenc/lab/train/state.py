"""The state of a training run while it runs (:class:`TrainState`), what its checkpoints hold."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["LogWindow", "TrainState"]


@dataclass
class LogWindow:
    """What the steps since the last train record add up: their mean losses and gradient
    norms (summed), their number, their tokens (all processes) and their seconds."""

    loss: float = 0.0
    grad_norm: float = 0.0
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0


@dataclass
class TrainState:
    """A training run while it runs: what it trains, where it stands, what it has counted.

    No RNG state: every batch is a pure function of ``(seed, step)`` and dropout is re-seeded
    before every step, so a :meth:`checkpoint` of this state resumes the run exactly.

    Attributes:
        model: the module trained.
        optimizer: AdamW over :func:`~posenc.lab.optim.parameter_groups`.
        wrapped: what a step calls: ``model``, or its ``DistributedDataParallel`` wrapper.
        step: optimizer steps done.
        tokens: tokens trained on up to the last train record (all processes).
        seconds: seconds of training up to the last train record (every session).
        final_loss: the mean training loss of the last log interval (NaN before the first).
        window: the sums since the last train record.
        resumed_from: the checkpoint step this session started from (None: a fresh run).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    wrapped: nn.Module
    step: int = 0
    tokens: int = 0
    seconds: float = 0.0
    final_loss: float = math.nan
    window: LogWindow = field(default_factory=LogWindow)
    resumed_from: int | None = None

    def checkpoint(self) -> dict[str, Any]:
        """``checkpoints/last.pt``: the counters, the log window, the model's and the
        optimizer's state."""
        return {
            "step": self.step,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "final_loss": self.final_loss,
            "window": asdict(self.window),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint`."""
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.step, self.tokens = checkpoint["step"], checkpoint["tokens"]
        self.seconds, self.final_loss = checkpoint["seconds"], checkpoint["final_loss"]
        self.window = LogWindow(**checkpoint["window"])
        self.resumed_from = self.step

    def train_record(self, lr: float) -> dict[str, Any]:
        """Close the log window: the record of its mean loss and gradient norm, its tokens
        added to the run's, its speed."""
        window = self.window
        self.tokens += window.tokens
        self.seconds += window.seconds
        self.final_loss = window.loss / window.steps
        self.window = LogWindow()
        return {
            "kind": "train",
            "step": self.step,
            "loss": self.final_loss,
            "lr": lr,
            "grad_norm": window.grad_norm / window.steps,
            "tokens": self.tokens,
            "time": {
                "elapsed_s": self.seconds,
                "tokens_per_second": window.tokens / max(window.seconds, 1e-9),
            },
        }

"""Training loop for temporal link prediction: an L-STEP predictor on a stream split by time.

What :mod:`posenc.lab.train` is to the language models, for event streams
(:class:`~posenc.lab.data.temporal.TemporalEvents`): DyGLib's protocol (Yu et al. 2023,
https://arxiv.org/abs/2303.13047), which L-STEP's reference follows. The stream is split by
time (:func:`~posenc.lab.data.temporal.chronological_split`, 70 / 15 / 15 %); each epoch
streams the training events from the initial encodings with random negatives drawn from the
training events (Adam), then the validation events from the state training ended in, with
random negatives drawn from all events (the same every epoch); the epoch with the best
validation AP is kept (:func:`train_links`). Evaluations (:func:`stream`) score batches of
positives against as many negatives, AP and ROC AUC per batch averaged over batches
(:mod:`posenc.graph.link_evaluation`).

A run folder holds ``metrics.jsonl`` (per epoch: ``{"kind": "train", "step": epoch, "loss",
"time"}`` and ``{"kind": "eval", "step": epoch, "metrics": {"val_ap"}}``) and
``checkpoints/last.pt`` (model, optimizer, epoch, the best epoch so far), written atomically
after every epoch. Every epoch's negatives are a function of ``(seed, epoch)``, so calling
:func:`train_links` again resumes after the last finished epoch and ends where the
uninterrupted run ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.graph.link_evaluation import (
    NegativeSampler,
    NegativeStrategy,
    StreamResult,
    run_stream,
)
from posenc.graph.link_prediction import LSTEPLinkPredictor, LSTEPState
from posenc.graph.temporal_graph import TemporalGraph
from posenc.lab.data.temporal import TemporalEvents, chronological_split
from posenc.lab.run import MetricsLog, atomic_torch_save

__all__ = [
    "VALIDATION_SALT",
    "LinkData",
    "derived_seed",
    "evaluation_sampler",
    "link_data",
    "stream",
    "train_links",
]

#: Salts of :func:`derived_seed`: training epochs use their number, evaluations these.
VALIDATION_SALT = 90_001


@dataclass(frozen=True)
class LinkData:
    """A stream, its :class:`~posenc.graph.temporal_graph.TemporalGraph` and the boolean
    masks of its training, validation and test events."""

    events: TemporalEvents
    graph: TemporalGraph
    train: Tensor
    val: Tensor
    test: Tensor

    def part(self, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(src, dst, time)`` of the events in ``mask``."""
        return self.events.src[mask], self.events.dst[mask], self.events.time[mask]


def link_data(events: TemporalEvents, node_dim: int, edge_dim: int = 1) -> LinkData:
    """``events`` split by time, with zero node and edge features (``(N, node_dim)``,
    ``(E, edge_dim)``: DyGLib's padding of a dataset without features)."""
    graph = TemporalGraph(
        events.src,
        events.dst,
        events.time,
        torch.zeros(events.num_nodes, node_dim),
        torch.zeros(len(events), edge_dim),
    )
    return LinkData(events, graph, *chronological_split(events.time))


def derived_seed(seed: int, salt: int) -> int:
    """A sampler's seed, distinct per run seed and use (an epoch's number, an evaluation's
    salt)."""
    return seed * 100_003 + salt


def evaluation_sampler(
    data: LinkData, seed: int, strategy: NegativeStrategy = "random"
) -> NegativeSampler:
    """Negatives over all events (as DyGLib's evaluation samplers), the end of training as the
    last observed time (``inductive``)."""
    end = float(data.events.time[data.train].max())
    src, dst, times = data.events.src, data.events.dst, data.events.time
    return NegativeSampler(src, dst, times, strategy=strategy, last_observed_time=end, seed=seed)


def stream(
    model: LSTEPLinkPredictor,
    state: LSTEPState,
    data: LinkData,
    mask: Tensor,
    sampler: NegativeSampler,
    batch_size: int,
    optimizer: torch.optim.Optimizer | None = None,
) -> StreamResult:
    """One pass over the events in ``mask`` from ``state``: training with ``optimizer``, else
    evaluation without gradients (:func:`~posenc.graph.link_evaluation.run_stream`)."""
    with torch.set_grad_enabled(optimizer is not None):
        return run_stream(
            model,
            state,
            data.graph,
            *data.part(mask),
            batch_size=batch_size,
            sampler=sampler,
            optimizer=optimizer,
        )


def train_links(
    model: LSTEPLinkPredictor,
    initial_encodings: Tensor,
    data: LinkData,
    folder: str | Path,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
) -> dict[str, Any]:
    """Train ``model`` for ``epochs`` epochs in ``folder`` (resuming there) and return the
    best epoch by validation AP (the first of equals): ``epoch``, ``val_ap``, ``model`` (its
    ``state_dict``), ``state`` (the :class:`~posenc.graph.link_prediction.LSTEPState` its
    training pass ended in, where validation starts) and ``seconds`` (training and
    validation time over all epochs, resumed ones included).

    Raises:
        ValueError: naming ``epochs`` when it is below 1.
    """
    epochs = check_positive_int("epochs", epochs)
    folder = Path(folder)
    path = folder / "checkpoints" / "last.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    log = MetricsLog(folder / "metrics.jsonl", active=True)
    done, best, seconds = 0, None, 0.0
    if path.is_file():
        with torch.serialization.safe_globals([LSTEPState]):  # the best epoch's stream state
            saved = torch.load(path, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        done, best, seconds = saved["epoch"], saved["best"], saved["seconds"]
    log.truncate(done)
    validation = evaluation_sampler(data, derived_seed(seed, VALIDATION_SALT))
    for epoch in range(done + 1, epochs + 1):
        start = time.perf_counter()
        sampler = NegativeSampler(*data.part(data.train), seed=derived_seed(seed, epoch))
        state = model.initial_state(initial_encodings)  # every epoch starts from them
        trained = stream(model, state, data, data.train, sampler, batch_size, optimizer)
        validation.reset()
        val = stream(model, trained.state, data, data.val, validation, batch_size)
        seconds += time.perf_counter() - start
        loss = sum(trained.losses) / len(trained.losses)
        log.append({"kind": "train", "step": epoch, "loss": loss, "time": seconds})
        log.append({"kind": "eval", "step": epoch, "metrics": {"val_ap": val.average_precision}})
        if best is None or val.average_precision > best["val_ap"]:
            parameters = {name: value.clone() for name, value in model.state_dict().items()}
            best = {"epoch": epoch, "val_ap": val.average_precision}
            best |= {"model": parameters, "state": trained.state}
        saved = {"epoch": epoch, "model": model.state_dict(), "best": best, "seconds": seconds}
        atomic_torch_save(saved | {"optimizer": optimizer.state_dict()}, path)
    log.sync()
    assert best is not None  # epochs >= 1 and each epoch sets it
    return best | {"seconds": seconds}

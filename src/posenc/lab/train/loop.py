"""The training loop (:func:`train`): a session's steps on a :class:`~.state.TrainState`.

Each step (:func:`_train_step`) updates the state; after it :func:`_log_evaluate_checkpoint`
writes its train record, evaluation and checkpoint when they are due; :func:`_start` builds
the state (fresh or from the checkpoint) and :func:`_finish` writes the result. The run
folder and the determinism these keep are described in :mod:`posenc.lab.train`.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from posenc.encoding.randomized import randomize_positions
from posenc.lab.batch import Batch, BatchSource, derive_seed, shard_slice
from posenc.lab.distributed import rank_and_world, rank_device
from posenc.lab.run import (
    MetricsLog,
    as_json,
    atomic_torch_save,
    atomic_write_text,
    check_run_dir,
    read_json,
)
from posenc.lab.train.config import TrainConfig, TrainResult
from posenc.lab.train.loss import masked_ce_sum
from posenc.lab.train.optim import ADAM_BETAS, ADAM_EPS, lr_at, parameter_groups
from posenc.lab.train.progress import Progress
from posenc.lab.train.state import TrainState

__all__ = ["peak_memory_bytes", "train"]

# Fields that only change how a run is displayed, ignored when comparing config.json.
_DISPLAY_FIELDS = ("progress",)


@dataclass(frozen=True)
class _Session:
    """What one call of :func:`train` works with, besides its state: the config, the source,
    the folder, this process's place (rank, world size, its rows of the global batch, its
    device), the metrics log and the evaluation callback."""

    config: TrainConfig
    source: BatchSource
    run_dir: Path
    rank: int
    world_size: int
    rows: slice
    device: torch.device
    log: MetricsLog
    evaluate: Callable[[nn.Module, int], dict[str, float]] | None

    @property
    def writer(self) -> bool:
        """Rank 0 alone writes files."""
        return self.rank == 0


def peak_memory_bytes(device: torch.device | str | None = None) -> int:
    """Peak memory: ``torch.cuda.max_memory_allocated`` on a CUDA device, else the process's
    peak resident set size (``resource.getrusage``; 0 where unavailable, e.g. Windows)."""
    if device is not None and torch.device(device).type == "cuda":
        return int(torch.cuda.max_memory_allocated(torch.device(device)))
    try:
        import resource
    except ImportError:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS: bytes, Linux: KiB


def _run_config(model: nn.Module, config: TrainConfig) -> dict[str, Any]:
    train_fields = {f.name: getattr(config, f.name) for f in fields(config)}
    for name in _DISPLAY_FIELDS:
        train_fields.pop(name)
    model_config = getattr(model, "config", None)
    return as_json(
        {
            "train": train_fields,
            "model_class": type(model).__name__,
            "model": as_json(model_config) if is_dataclass(model_config) else None,
        }
    )


def _model_inputs(batch: Batch, config: TrainConfig, step: int, rows: slice) -> Tensor | None:
    """The positions fed to the model: the batch's, or randomized ones.

    Randomized (:func:`~posenc.encoding.randomized.randomize_positions`): each row's real
    tokens (``key_padding_mask``) take the row's own sorted random subset of
    ``[0, randomize_positions)``, so a padded row gets the positions it gets unpadded and
    padding keeps its own. The draw is for the global batch, this rank's ``rows`` in place and
    the others without real tokens, so a row's positions do not depend on the world size.
    """
    if config.randomize_positions is None:
        return batch.positions
    if batch.seq_len > config.randomize_positions:
        raise ValueError(
            f"randomize_positions ({config.randomize_positions}) must be >= the sequence "
            f"length {batch.seq_len}"
        )
    given = batch.positions if batch.positions is not None else torch.arange(batch.seq_len)
    shape = (config.batch_size, batch.seq_len)
    positions = torch.zeros(shape, dtype=given.dtype)  # (global batch, seq)
    real = torch.zeros(shape, dtype=torch.bool)
    positions[rows] = given.cpu()
    real[rows] = True if batch.key_padding_mask is None else batch.key_padding_mask.cpu()
    generator = torch.Generator().manual_seed(derive_seed("positions", config.seed, step))
    drawn = randomize_positions(
        positions, config.randomize_positions, real=real, generator=generator
    )
    return drawn[rows].to(batch.tokens.device)


def train(
    model: nn.Module,
    source: BatchSource,
    config: TrainConfig,
    run_dir: str | Path,
    *,
    evaluate: Callable[[nn.Module, int], dict[str, float]] | None = None,
) -> TrainResult:
    """Train ``model`` on ``source`` in the run folder ``run_dir``, resuming if it holds a run.

    Each step: ``source.batch(step, batch_size, rank, world_size)``; logits
    ``model(tokens, positions, key_padding_mask=...)``; loss = masked cross-entropy summed
    over this rank's tokens divided by the global masked-token count times the world size
    (so DDP's gradient average equals one process's mean-loss gradient on the global batch);
    clip the global gradient norm; AdamW step at :func:`lr_at`. Every ``log_every`` steps a
    train record (mean loss and gradient norm over the interval), every ``eval_every`` steps
    ``evaluate(model, step)`` (rank 0, ``model.eval()`` and ``torch.no_grad()``), every
    ``checkpoint_every`` steps ``checkpoints/last.pt``; the last step does all three and
    then writes ``final.pt`` and ``done.json``. On a finished run (``done.json`` there) it
    trains nothing and loads ``final.pt`` into ``model``: either way ``model`` returns
    holding the final weights.

    Under ``torch.distributed`` (``torchrun`` or :func:`posenc.lab.distributed.spawn`) the model is
    wrapped in ``DistributedDataParallel``; only rank 0 writes files; every rank reads the
    checkpoint. Dropout masks then differ from a single process (they depend on the rank).

    Args:
        model: maps ``(tokens, positions, key_padding_mask=...)`` to logits ``(B, T, V)``;
            moved to ``config.device``. Its ``.config`` dataclass, if any, is saved.
        source: a :class:`~posenc.lab.batch.BatchSource`.
        config: the :class:`TrainConfig`.
        run_dir: the run folder (created if needed).
        evaluate: optional callback returning named floats, logged to metrics.jsonl.

    Returns:
        the :class:`TrainResult` (also in ``done.json``).

    Raises:
        ValueError: naming ``run_dir`` and the field when ``config.json`` there describes a
            different run; naming ``batch_size`` when it does not divide by the world size.
    """
    run_dir = Path(run_dir)
    rank, world_size = rank_and_world()
    rows = shard_slice(config.batch_size, rank, world_size)
    check_run_dir(run_dir, _run_config(model, config))
    if (run_dir / "done.json").exists():
        return _finished(model, config, run_dir)
    if rank == 0:
        atomic_write_text(run_dir / "config.json", json.dumps(_run_config(model, config)) + "\n")
    device = rank_device(config.device)
    log = MetricsLog(run_dir / "metrics.jsonl", rank == 0)
    session = _Session(config, source, run_dir, rank, world_size, rows, device, log, evaluate)
    state = _start(session, model)
    progress = Progress(config.steps, state.step, config.progress and session.writer)
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices), contextlib.closing(progress):
        while state.step < config.steps:
            _train_step(session, state)
            record = _log_evaluate_checkpoint(session, state)
            progress.update(state.step, record)
    return _finish(session, state)


def _finished(model: nn.Module, config: TrainConfig, run_dir: Path) -> TrainResult:
    """A finished run's result; ``model`` leaves holding its final weights."""
    device = rank_device(config.device)
    model.to(device)
    final = torch.load(run_dir / "final.pt", map_location=device, weights_only=True)
    model.load_state_dict(final["model"])
    return TrainResult(**read_json(run_dir / "done.json"))


def _start(session: _Session, model: nn.Module) -> TrainState:
    """The state to train from: fresh, or ``checkpoints/last.pt``'s (its metrics past the
    checkpoint dropped); the model on the device, in training mode, wrapped in
    ``DistributedDataParallel`` under a process group; peak memory counted from here."""
    config, device = session.config, session.device
    model.to(device)
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay), lr=config.lr, betas=ADAM_BETAS, eps=ADAM_EPS
    )
    state = TrainState(model, optimizer, wrapped=model)
    checkpoint = session.run_dir / "checkpoints" / "last.pt"
    if checkpoint.exists():
        state.restore(torch.load(checkpoint, map_location=device, weights_only=True))
    session.log.truncate(state.step)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if session.world_size > 1:
        ids = [device.index] if device.type == "cuda" else None
        state.wrapped = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    model.train()
    return state


def _train_step(session: _Session, state: TrainState) -> None:
    """One optimizer step at ``state.step``: dropout seeded by ``(seed, step, rank)``, the
    learning rate of :func:`lr_at`, this rank's rows, the loss normalised by the global count
    of scored tokens, clipping, AdamW; its loss, gradient norm, tokens and time go into the
    log window."""
    config, world_size = session.config, session.world_size
    index = state.step
    started = time.perf_counter()
    torch.manual_seed(derive_seed("dropout", config.seed, index, session.rank))
    for group in state.optimizer.param_groups:
        group["lr"] = lr_at(index, config)
    batch = session.source.batch(
        index, config.batch_size, rank=session.rank, world_size=world_size
    ).to(session.device)
    positions = _model_inputs(batch, config, index, session.rows)
    logits = state.wrapped(batch.tokens, positions, key_padding_mask=batch.key_padding_mask)
    local_sum, local_count = masked_ce_sum(logits, batch)
    totals = torch.stack([local_sum.detach(), local_count])
    if world_size > 1:
        dist.all_reduce(totals)
    loss = local_sum * world_size / totals[1].clamp(min=1)
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    max_norm = math.inf if config.grad_clip is None else config.grad_clip
    norm = nn.utils.clip_grad_norm_(state.model.parameters(), max_norm)  # inf: norm only
    state.optimizer.step()

    window = state.window
    window.loss += float(totals[0] / totals[1].clamp(min=1))
    window.grad_norm += float(norm)
    window.steps += 1
    window.tokens += batch.tokens.numel() * world_size
    window.seconds += time.perf_counter() - started
    state.step = index + 1


def _log_evaluate_checkpoint(session: _Session, state: TrainState) -> dict[str, Any] | None:
    """After a step: its train record every ``log_every`` steps (returned), the evaluation
    every ``eval_every`` (rank 0), the checkpoint every ``checkpoint_every``; the last step
    does all three."""
    config, step = session.config, state.step
    last = step == config.steps
    record = None
    if step % config.log_every == 0 or last:
        record = state.train_record(lr_at(step - 1, config))
        session.log.append(record)
    evaluate = session.evaluate
    if evaluate is not None and session.writer and (step % config.eval_every == 0 or last):
        session.log.append(_evaluate(state.model, evaluate, step))
    if step % config.checkpoint_every == 0 or last:
        if session.writer:
            session.log.sync()
            atomic_torch_save(state.checkpoint(), session.run_dir / "checkpoints" / "last.pt")
        if session.world_size > 1:
            dist.barrier()
    return record


def _finish(session: _Session, state: TrainState) -> TrainResult:
    """The :class:`TrainResult`; rank 0 writes ``final.pt`` and then ``done.json``."""
    config = session.config
    result = TrainResult(
        steps=config.steps,
        final_loss=state.final_loss,
        tokens_per_second=state.tokens / max(state.seconds, 1e-9),
        peak_memory_bytes=peak_memory_bytes(session.device),
        seconds=state.seconds,
        resumed_from=state.resumed_from,
    )
    if session.writer:
        final = {"model": state.model.state_dict(), "config": _run_config(state.model, config)}
        atomic_torch_save({**final, "step": config.steps}, session.run_dir / "final.pt")
        done = json.dumps(asdict(result)) + "\n"
        atomic_write_text(session.run_dir / "done.json", done)
    if session.world_size > 1:
        dist.barrier()
    return result


def _evaluate(
    model: nn.Module, evaluate: Callable[[nn.Module, int], dict[str, float]], step: int
) -> dict[str, Any]:
    started = time.perf_counter()
    model.eval()
    try:
        with torch.no_grad():
            metrics = {name: float(value) for name, value in evaluate(model, step).items()}
    finally:
        model.train()
    return {
        "kind": "eval",
        "step": step,
        "metrics": metrics,
        "time": {"seconds": time.perf_counter() - started},
    }

"""Training loop of the lab: AdamW, warmup and cosine decay, clipping, resumable run folders, DDP.

A run is a folder::

    run_dir/
      config.json          {"train": TrainConfig, "model": model.config, "model_class": ...}
      metrics.jsonl        one JSON object per line: {"kind": "train", "step", "loss", "lr",
                           "grad_norm", "tokens", "time": {...}} or {"kind": "eval", "step",
                           "metrics": {...}, "time": {...}}; everything under "time" is wall-clock
                           and differs between runs, everything else is reproducible
      checkpoints/last.pt  model, optimizer, step, token count and log accumulators
      final.pt             {"model": state_dict, "config": ..., "step": steps} at the end
      done.json            the :class:`TrainResult`, written last

Every file is written atomically (temporary file in the same folder, then ``os.replace``), so a
kill at any point leaves the previous version readable. Calling :func:`train` again with the
same arguments resumes from ``checkpoints/last.pt`` (dropping ``metrics.jsonl`` lines past the
checkpoint step) or, when ``done.json`` exists, returns the stored result without training.

Determinism: batches are ``source.batch(step, ...)``, a pure function of the source's seed and
the step; the global torch RNG (dropout) is re-seeded before every step from
``(config.seed, step, rank)`` inside :func:`torch.random.fork_rng`, so no RNG state needs
checkpointing and the caller's RNG is untouched. A resumed run therefore equals the
uninterrupted one bit for bit on CPU with the same thread settings.

Example::

    >>> source = LMSource(load_corpus(max_bytes=100_000).train, seq_len=64)
    >>> model = DecoderLM(ModelConfig(dim=32, depth=2, num_heads=4))
    >>> result = train(model, source, TrainConfig(steps=30, progress=False), "runs/tiny")
    >>> result.final_loss < math.log(256)
    True
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
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int
from posenc.encoding.base import PositionalEncoding
from posenc.lab.batch import Batch, BatchSource, derive_seed, shard_slice
from posenc.lab.distributed import rank_and_world, rank_device
from posenc.lab.run import (
    MetricsLog,
    as_json,
    atomic_torch_save,
    atomic_write_text,
    check_run_dir,
    read_metrics,
)
from posenc.positions import randomized_positions

__all__ = [
    "TrainConfig",
    "TrainResult",
    "atomic_torch_save",
    "atomic_write_text",
    "lm_loss",
    "lr_at",
    "parameter_groups",
    "peak_memory_bytes",
    "read_metrics",
    "train",
]

# AdamW constants (nanoGPT / GPT-3 settings for small models); not part of TrainConfig.
ADAM_BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8
# Fields that only change how a run is displayed, ignored when comparing config.json.
_DISPLAY_FIELDS = ("progress",)


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
            https://arxiv.org/abs/2305.16843): each row's positions are ``T`` sorted distinct
            integers from ``[0, L)``; ``None`` = the batch's positions.
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
            check_positive_int(name, getattr(self, name))
        check_non_negative_int("warmup_steps", self.warmup_steps)
        check_non_negative_int("seed", self.seed)
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
            check_positive_int("randomize_positions", self.randomize_positions)
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


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate of 0-based optimizer step ``step``: linear warmup, then cosine decay.

    .. math::
        \\text{lr}(s) = \\text{lr}·\\frac{s+1}{W} \\quad (s < W), \\qquad
        \\text{lr}(s) = \\text{lr}·\\big(r + (1-r)·\\tfrac12(1 + \\cos(\\pi p))\\big),\\;
        p = \\frac{s - W}{S - W} \\quad (W \\le s \\le S)

    with ``W = warmup_steps``, ``S = steps``, ``r = min_lr_ratio`` (nanoGPT's schedule with
    ``lr_decay_iters = steps``). The peak ``lr`` is reached at step ``W - 1`` and ``W``; the
    floor ``r·lr`` at ``S`` and after.

    Example::

        >>> config = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
        >>> lr_at(0, config), lr_at(10, config), lr_at(100, config)
        (0.1, 1.0, 0.1)
    """
    check_non_negative_int("step", step)
    warmup, total, peak = config.warmup_steps, config.steps, config.lr
    if step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return peak * config.min_lr_ratio
    progress = (step - warmup) / max(1, total - warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay the weights of ``nn.Linear`` layers, nothing else.

    Not decayed: token embeddings, norms, biases, and every parameter inside a
    :class:`~posenc.encoding.base.PositionalEncoding` (learned position tables, T5/Shaw bias tables,
    even linear layers of an encoding's MLP), so that weight decay never pulls an encoding
    toward "no position" and encodings are compared under the same optimizer.

    Returns:
        ``[{"params": decayed, "weight_decay": weight_decay}, {"params": rest,
        "weight_decay": 0.0}]`` in ``model.parameters()`` order.
    """
    in_encoding: set[int] = set()
    decayed: set[int] = set()
    for module in model.modules():
        if isinstance(module, PositionalEncoding):
            in_encoding.update(id(p) for p in module.parameters())
        elif isinstance(module, nn.Linear):
            decayed.add(id(module.weight))
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if id(p) in decayed and id(p) not in in_encoding]
    keep = [p for p in params if id(p) not in decayed or id(p) in in_encoding]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]


def _masked_ce_sum(logits: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
    """Sum of token cross-entropies where ``loss_mask`` is True, and their count."""
    if logits.shape[:2] != batch.targets.shape:
        raise ValueError(
            f"logits must have shape (batch, seq, vocab) matching targets "
            f"{tuple(batch.targets.shape)}; got {tuple(logits.shape)}"
        )
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    per_token = F.cross_entropy(
        logits.flatten(0, 1), batch.targets.flatten(), reduction="none"
    )  # (batch·seq,)
    mask = batch.loss_mask.flatten().to(per_token.dtype)
    return (per_token * mask).sum(), mask.sum()


def lm_loss(logits: Tensor, batch: Batch) -> Tensor:
    """Mean cross-entropy over the targets where ``batch.loss_mask`` is True.

    Shape:
        logits ``(batch, seq, vocab)``; returns a scalar (0 when the mask is empty).
    """
    total, count = _masked_ce_sum(logits, batch)
    return total / count.clamp(min=1)


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


class _Progress:
    """tqdm bar when installed and wanted, else one printed line per log step."""

    def __init__(self, config: TrainConfig, start: int, show: bool) -> None:
        self.show, self.total, self.bar = show, config.steps, None
        if show:
            with contextlib.suppress(ImportError):
                from tqdm.auto import tqdm

                self.bar = tqdm(total=config.steps, initial=start, desc="train", unit="step")

    def update(self, step: int, record: dict[str, Any] | None) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if record is not None:
                speed = record["time"]["tokens_per_second"]
                self.bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{speed:,.0f}")
        elif self.show and record is not None:
            print(
                f"step {step}/{self.total} loss {record['loss']:.4f} lr {record['lr']:.2e} "
                f"tok/s {record['time']['tokens_per_second']:,.0f}",
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _model_inputs(batch: Batch, config: TrainConfig, step: int, rows: slice) -> Tensor | None:
    """The positions fed to the model: randomized (same for any world size) or the batch's."""
    if config.randomize_positions is None:
        return batch.positions
    if batch.seq_len > config.randomize_positions:
        raise ValueError(
            f"randomize_positions ({config.randomize_positions}) must be >= the sequence "
            f"length {batch.seq_len}"
        )
    generator = torch.Generator().manual_seed(derive_seed("positions", config.seed, step))
    positions = randomized_positions(
        batch.seq_len, config.randomize_positions, batch=config.batch_size, generator=generator
    )  # (global batch, seq)
    return positions[rows].to(batch.tokens.device)


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
    done = run_dir / "done.json"
    if done.exists():
        # A finished run: no training, but the model leaves holding the final weights.
        model.to(rank_device(config.device))
        final = torch.load(
            run_dir / "final.pt", map_location=rank_device(config.device), weights_only=True
        )
        model.load_state_dict(final["model"])
        return TrainResult(**json.loads(done.read_text(encoding="utf-8")))
    writer = rank == 0
    if writer:
        atomic_write_text(run_dir / "config.json", json.dumps(_run_config(model, config)) + "\n")

    device = rank_device(config.device)
    model.to(device)
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay), lr=config.lr, betas=ADAM_BETAS, eps=ADAM_EPS
    )
    state: dict[str, Any] = {"step": 0, "tokens": 0, "seconds": 0.0, "final_loss": math.nan}
    state["window"] = {"loss": 0.0, "grad_norm": 0.0, "steps": 0, "tokens": 0, "seconds": 0.0}
    checkpoint_path = run_dir / "checkpoints" / "last.pt"
    resumed_from = None
    if checkpoint_path.exists():
        checkpoint = torch.load(checkpoint_path, map_location=device, weights_only=True)
        model.load_state_dict(checkpoint.pop("model"))
        optimizer.load_state_dict(checkpoint.pop("optimizer"))
        state = checkpoint
        resumed_from = state["step"]
    log = MetricsLog(run_dir / "metrics.jsonl", writer)
    log.truncate(state["step"])

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    wrapped: nn.Module = model
    if world_size > 1:
        wrapped = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    model.train()
    progress = _Progress(config, state["step"], config.progress and writer)

    def save_checkpoint() -> None:
        log.sync()
        payload = {**state, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        atomic_torch_save(payload, checkpoint_path)

    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices), contextlib.closing(progress):
        while state["step"] < config.steps:
            index = state["step"]
            started = time.perf_counter()
            torch.manual_seed(derive_seed("dropout", config.seed, index, rank))
            for group in optimizer.param_groups:
                group["lr"] = lr_at(index, config)
            batch = source.batch(index, config.batch_size, rank=rank, world_size=world_size)
            batch = batch.to(device)
            positions = _model_inputs(batch, config, index, rows)
            logits = wrapped(batch.tokens, positions, key_padding_mask=batch.key_padding_mask)
            local_sum, local_count = _masked_ce_sum(logits, batch)
            totals = torch.stack([local_sum.detach(), local_count])
            if world_size > 1:
                dist.all_reduce(totals)
            loss = local_sum * world_size / totals[1].clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            max_norm = math.inf if config.grad_clip is None else config.grad_clip
            norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # inf: norm only
            optimizer.step()

            step = index + 1
            window = state["window"]
            window["loss"] += float(totals[0] / totals[1].clamp(min=1))
            window["grad_norm"] += float(norm)
            window["steps"] += 1
            window["tokens"] += batch.tokens.numel() * world_size
            window["seconds"] += time.perf_counter() - started
            state["step"] = step
            record = None
            if step % config.log_every == 0 or step == config.steps:
                record = _train_record(state, step, lr_at(index, config))
                log.append(record)
            if (
                evaluate is not None
                and writer
                and (step % config.eval_every == 0 or step == config.steps)
            ):
                log.append(_evaluate(model, evaluate, step))
            if step % config.checkpoint_every == 0 or step == config.steps:
                if writer:
                    save_checkpoint()
                if world_size > 1:
                    dist.barrier()
            progress.update(step, record)

    result = TrainResult(
        steps=config.steps,
        final_loss=state["final_loss"],
        tokens_per_second=state["tokens"] / max(state["seconds"], 1e-9),
        peak_memory_bytes=peak_memory_bytes(device),
        seconds=state["seconds"],
        resumed_from=resumed_from,
    )
    if writer:
        final = {"model": model.state_dict(), "config": _run_config(model, config)}
        atomic_torch_save({**final, "step": config.steps}, run_dir / "final.pt")
        atomic_write_text(done, json.dumps(asdict(result)) + "\n")
    if world_size > 1:
        dist.barrier()
    return result


def _train_record(state: dict[str, Any], step: int, lr: float) -> dict[str, Any]:
    """Close the log window: mean loss and gradient norm since the last record."""
    window = state["window"]
    state["tokens"] += window["tokens"]
    state["seconds"] += window["seconds"]
    state["final_loss"] = window["loss"] / window["steps"]
    record = {
        "kind": "train",
        "step": step,
        "loss": state["final_loss"],
        "lr": lr,
        "grad_norm": window["grad_norm"] / window["steps"],
        "tokens": state["tokens"],
        "time": {
            "elapsed_s": state["seconds"],
            "tokens_per_second": window["tokens"] / max(window["seconds"], 1e-9),
        },
    }
    state["window"] = {"loss": 0.0, "grad_norm": 0.0, "steps": 0, "tokens": 0, "seconds": 0.0}
    return record


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

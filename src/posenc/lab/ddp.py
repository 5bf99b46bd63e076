"""Multi-process training: process-group helpers, a spawn launcher, and a ``torchrun`` entry.

:func:`posenc.lab.train.train` switches to DistributedDataParallel by itself whenever
``torch.distributed`` is initialized; this module only starts the processes.

* :func:`spawn` runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined
  in one process group on a free local port (gloo on CPU; what the tests use, no torchrun).
* :func:`init_distributed` joins the group that ``torchrun`` describes in the environment
  (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``): NCCL when CUDA
  is available, else gloo.
* ``python -m posenc.lab.ddp`` trains the small byte-level LM on the embedded corpus; under
  ``torchrun`` every process runs it and they share the global batch::

      torchrun --nproc_per_node 2 -m posenc.lab.ddp --out runs/ddp --pos rope --steps 200

  The same command without torchrun trains in one process with the same losses.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["free_port", "init_distributed", "main", "rank_and_world", "spawn"]


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)`` of the current process group, ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_device(device: str | torch.device) -> torch.device:
    """The device this rank trains on: ``cuda:LOCAL_RANK`` for CUDA under DDP, else ``device``."""
    device = torch.device(device)
    rank, world_size = rank_and_world()
    if device.type == "cuda" and world_size > 1:
        local = int(os.environ.get("LOCAL_RANK", rank % max(1, torch.cuda.device_count())))
        device = torch.device("cuda", local)
    return device


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(
    rank: int,
    fn: Callable[..., Any],
    world_size: int,
    port: int,
    backend: str,
    args: tuple[Any, ...],
) -> None:
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=5),
    )
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def spawn(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo") -> None:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes sharing a process group.

    ``fn`` must be importable by name (a module-level function) since the children are
    started with the ``spawn`` method; an exception in any child is re-raised here.

    Example::

        >>> spawn(train_one_rank, 2, "runs/ddp")   # gloo, 2 CPU processes
    """
    if world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    mp.spawn(_worker, args=(fn, world_size, free_port(), backend, args), nprocs=world_size)


def init_distributed() -> tuple[int, int]:
    """Join the process group described by torchrun's environment; return (rank, world_size).

    Without ``WORLD_SIZE`` (or with 1) nothing is initialized and ``(0, 1)`` is returned.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return rank_and_world()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    return rank_and_world()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.lab.ddp",
        description="Train the small byte-level LM on the embedded corpus (torchrun-ready).",
    )
    parser.add_argument("--out", required=True, help="run folder (resumes if it holds a run)")
    parser.add_argument("--pos", default="rope", help="encoding name (see `posenc list`)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-bytes", type=int, default=2_000_000, help="cap per split")
    parser.add_argument("--eval-windows", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry of ``python -m posenc.lab.ddp`` / ``torchrun ... -m posenc.lab.ddp``."""
    from posenc.lab.data import LMSource, eval_windows, load_corpus
    from posenc.lab.train import TrainConfig, lm_loss, train
    from posenc.model import DecoderLM, ModelConfig

    args = _parser().parse_args(argv)
    rank, world_size = init_distributed()
    corpus = load_corpus(seed=args.seed, max_bytes=args.max_bytes)
    source = LMSource(corpus.train, args.seq_len, seed=args.seed)
    windows = eval_windows(corpus.validation, args.seq_len, args.eval_windows)
    config = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        device=args.device,
        progress=not args.no_progress,
    )
    model_config = ModelConfig(
        vocab_size=256,
        dim=args.dim,
        depth=args.depth,
        num_heads=args.heads,
        pos=args.pos,
        max_seq_len=args.seq_len,
    )
    torch.manual_seed(args.seed)
    model = DecoderLM(model_config)

    def evaluate(model: torch.nn.Module, step: int) -> dict[str, float]:
        from posenc.lab.batch import Batch

        device = next(model.parameters()).device
        batch = Batch(windows[:, :-1], windows[:, 1:], torch.ones_like(windows[:, 1:]).bool())
        batch = batch.to(device)
        return {"val_loss": float(lm_loss(model(batch.tokens), batch))}

    result = train(model, source, config, args.out, evaluate=evaluate)
    if rank == 0:
        print(
            f"world_size {world_size}: final loss {result.final_loss:.4f}, "
            f"{result.tokens_per_second:,.0f} tokens/s, {result.seconds:.1f} s -> {args.out}"
        )
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Process groups for multi-process training: the helpers and a spawn launcher.

:func:`posenc.lab.train.train` switches to DistributedDataParallel by itself whenever
``torch.distributed`` is initialized; this module only joins and starts process groups.
It imports nothing from the lab (the trainer and the experiments import it).

* :func:`spawn` runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined
  in one process group on a free local port (gloo on CPU; what the tests use, no torchrun).
* :func:`init_distributed` joins the group that ``torchrun`` describes in the environment
  (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``): NCCL when CUDA
  is available, else gloo.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["free_port", "init_distributed", "rank_and_world", "rank_device", "spawn"]


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

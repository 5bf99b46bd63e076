"""Process groups for multi-process training: the helpers and a spawn launcher.

:func:`posenc.lab.train.train` switches to DistributedDataParallel by itself whenever
``torch.distributed`` is initialized; this module only joins and starts process groups.
It imports nothing from the lab (the trainer and the experiments import it).

* :func:`spawn` runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined
  in one process group that meets in a fresh file (gloo on CPU; what the tests use, no
  torchrun). A file, not a free TCP port: two launches at once (parallel test workers) could
  be handed the same port between its release and the store's bind.
* :func:`init_distributed` joins the group that ``torchrun`` describes in the environment
  (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``): NCCL when CUDA
  is available, else gloo.
* :func:`fully_shard_model` shards a model too large for one device with FSDP2
  (``torch.distributed.fsdp.fully_shard``): each block, then the rest; an encoding shared by
  every layer (T5's table, FIRE's MLP) stays replicated, its gradient averaged over the
  ranks. docs/distributed.md has the commands.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

__all__ = [
    "free_port",
    "fully_shard_model",
    "init_distributed",
    "rank_and_world",
    "rank_device",
    "spawn",
]


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
    init_method: str,
    backend: str,
    args: tuple[Any, ...],
) -> None:
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=5),
    )
    try:
        fn(rank, world_size, *args)
        # every rank is done with its collectives before any tears the group down: a rank
        # that destroys its gloo context while another still has work in flight (FSDP2's
        # asynchronous reduce-scatter) can abort the other ("terminate called without an
        # active exception", SIGABRT); after an exception there is no barrier, which could hang
        dist.barrier()
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
    with tempfile.TemporaryDirectory(prefix="posenc-spawn-") as folder:
        init_method = Path(folder, "rendezvous").as_uri()  # file:// store, one per launch
        mp.spawn(_worker, args=(fn, world_size, init_method, backend, args), nprocs=world_size)


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


def fully_shard_model(
    model: nn.Module,
    *,
    blocks: Sequence[nn.Module] | None = None,
    mesh: Any = None,
    reshard_after_forward: bool = True,
) -> list[str]:
    """Shard ``model``'s parameters over the ranks with FSDP2, in place; return the names
    of the parameters kept replicated.

    ``fully_shard`` is applied to each block (its parameters gathered just before it runs
    and freed after), then to the model (embeddings, final norm, head). Parameters that
    several blocks share (an encoding built once for all layers: T5's bucket table, FIRE's
    MLP, KERPLE's kernel) cannot belong to one block's group, so they stay whole on every
    rank and a hook averages their gradient over the group as soon as it is accumulated,
    as FSDP averages the sharded ones; the first forward broadcasts their values from the
    first rank (each rank's ``reset_parameters`` after ``to_empty`` draws its own; the check
    runs at every forward, so it follows ``to_empty``). Each rank then holds
    ``1 / world_size`` of every other parameter and gradient (``DTensor`` objects;
    ``full_tensor()`` gathers one).

    Args:
        model: a :class:`~posenc.models.DecoderLM` or :class:`~posenc.models.EncoderClassifier`
            (their ``trunk.blocks``), or any module when ``blocks`` is given.
        blocks: the modules to shard one by one (default ``model.trunk.blocks``).
        mesh: a 1-D ``DeviceMesh`` (default: every rank of the default group, on the
            model's device type).
        reshard_after_forward: free each block's gathered parameters after its forward
            (FSDP2's default; False keeps them until backward, ZeRO-2-like).

    Example (under ``torchrun --nproc-per-node 2``)::

        >>> init_distributed()
        >>> model = DecoderLM(ModelConfig(vocab_size=256, dim=1024, depth=24, num_heads=16))
        >>> replicated = fully_shard_model(model)
        >>> optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)  # on the shards
    """
    from torch.distributed.fsdp import fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("model: torch.distributed is not initialized (init_distributed)")
    if blocks is None:
        blocks = getattr(getattr(model, "trunk", None), "blocks", None)
        if blocks is None:
            raise ValueError(
                f"blocks: {type(model).__name__} has no trunk.blocks; pass the modules to shard"
            )
    owners: dict[int, int] = {}
    for block in blocks:
        for param in block.parameters():
            owners[id(param)] = owners.get(id(param), 0) + 1
    shared = {p for block in blocks for p in block.parameters() if owners[id(p)] > 1}
    names = [name for name, p in model.named_parameters() if p in shared]  # the model's order
    options: dict[str, Any] = {"reshard_after_forward": reshard_after_forward}
    if mesh is not None:
        options["mesh"] = mesh
    for block in blocks:
        fully_shard(block, ignored_params=shared, **options)
    fully_shard(model, ignored_params=shared, **options)
    if names:
        group = None if mesh is None else mesh.get_group()
        model.register_forward_pre_hook(_AverageGradients(names, group))
    return names


class _AverageGradients:
    """A forward pre-hook that keeps each named (replicated) parameter the same on every rank
    of ``group``: the first forward that sees a parameter object broadcasts the first rank's
    values, and its gradient is averaged over the group once accumulated. Checked on every
    forward, for the parameter objects the model holds then: ``to_empty`` (after building on
    the meta device) replaces them, and each rank's ``reset_parameters`` draws its own."""

    def __init__(self, names: list[str], group: Any) -> None:
        self.names, self.group = names, group
        self.source = 0 if group is None else dist.get_global_rank(group, 0)
        # id -> weak reference: a tensor compares by value, so no set of tensors
        self.hooked: dict[int, weakref.ref[nn.Parameter]] = {}

    def __call__(self, model: nn.Module, args: Any) -> None:
        for name in self.names:
            param = model.get_parameter(name)
            known = self.hooked.get(id(param))
            if known is None or known() is not param:
                # a new parameter object (first forward, or after to_empty): every rank
                # initialized its own copy, so take the first rank's values
                with torch.no_grad():
                    dist.broadcast(param, src=self.source, group=self.group)
                param.register_post_accumulate_grad_hook(self.average)
                self.hooked[id(param)] = weakref.ref(param)

    def average(self, param: torch.Tensor) -> None:
        if param.grad is not None:
            dist.all_reduce(param.grad, group=self.group)  # SUM: gloo has no AVG
            param.grad.div_(dist.get_world_size(self.group))

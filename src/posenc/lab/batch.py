"""The one batch type every lab data source yields, and the source protocol.

A :class:`Batch` holds decoder inputs, their targets and a mask of which targets count; a
:class:`BatchSource` makes the batch of any training step from its seed alone, so that a
resumed run and a DistributedDataParallel run see exactly the rows of a single-process run.

Example::

    >>> tokens = torch.tensor([[1, 2, 3]])
    >>> b = Batch(tokens, tokens.roll(-1, 1), torch.ones(1, 3, dtype=torch.bool))
    >>> b.shard(rank=0, world_size=1).tokens.shape
    torch.Size([1, 3])
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int

__all__ = ["Batch", "BatchSource", "derive_seed", "shard_slice"]


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed derived from ``parts`` (e.g. ``(name, seed, step)``) by SHA-256.

    Unlike ``seed * K + step`` it never maps two different tuples to the same seed in
    practice, and it is the same on every machine and Python version (no ``hash()``).

    Example::

        >>> derive_seed("copy", 0, 5) == derive_seed("copy", 0, 5) != derive_seed("copy", 1, 5)
        True
    """
    text = "\x1f".join(f"{type(part).__name__}:{part}" for part in parts)
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def shard_slice(batch_size: int, rank: int, world_size: int) -> slice:
    """Rows ``rank * B / world .. (rank + 1) * B / world`` of a global batch of ``B`` rows.

    Raises:
        ValueError: naming ``batch_size`` when it is not divisible by ``world_size``, or
            ``rank``/``world_size`` when ``rank`` is not in ``[0, world_size)``.
    """
    batch_size = check_positive_int("batch_size", batch_size)
    world_size = check_positive_int("world_size", world_size)
    rank = check_non_negative_int("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    if batch_size % world_size:
        raise ValueError(
            f"batch_size must be divisible by world_size={world_size}, got {batch_size}"
        )
    per_rank = batch_size // world_size
    return slice(rank * per_rank, (rank + 1) * per_rank)


@dataclass(frozen=True)
class Batch:
    """Decoder inputs and next-token (or answer) targets for one step.

    Args:
        tokens: ``(B, T)`` int64 inputs.
        targets: ``(B, T)`` int64 targets; ``targets[b, t]`` is what the model should predict
            after reading ``tokens[b, : t + 1]``. Ignored where ``loss_mask`` is False.
        loss_mask: ``(B, T)`` bool, True where the target counts in the loss and accuracy.
        positions: explicit positions ``(T,)`` or ``(B, T)`` (randomized positional encodings),
            or None for ``0 .. T - 1``.
        key_padding_mask: ``(B, T)`` bool, True for real tokens, False for padding; None when
            no row is padded.

    Raises:
        ValueError: naming the field whose shape or dtype does not fit ``tokens``.
    """

    tokens: Tensor
    targets: Tensor
    loss_mask: Tensor
    positions: Tensor | None = None
    key_padding_mask: Tensor | None = None

    def __post_init__(self) -> None:
        if self.tokens.dim() != 2 or self.tokens.is_floating_point():
            raise ValueError(f"tokens must be an integer (B, T) tensor, got {self.tokens.shape}")
        shape = self.tokens.shape
        if self.targets.shape != shape or self.targets.is_floating_point():
            raise ValueError(f"targets must be an integer tensor of shape {tuple(shape)}")
        for name in ("loss_mask", "key_padding_mask"):
            mask = getattr(self, name)
            if mask is not None and (mask.shape != shape or mask.dtype != torch.bool):
                raise ValueError(f"{name} must be a bool tensor of shape {tuple(shape)}")
        if self.positions is not None and self.positions.shape not in (shape, shape[1:]):
            raise ValueError(
                f"positions must have shape (T,) or (B, T) = {tuple(shape)}, "
                f"got {tuple(self.positions.shape)}"
            )

    @property
    def batch_size(self) -> int:
        """Number of rows ``B``."""
        return self.tokens.shape[0]

    @property
    def seq_len(self) -> int:
        """Number of columns ``T``."""
        return self.tokens.shape[1]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with every tensor on ``device``."""
        moved: dict[str, Any] = {
            f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
            for f in fields(self)
        }
        return Batch(**moved)

    def shard(self, rank: int, world_size: int) -> Batch:
        """This rank's contiguous rows (see :func:`shard_slice`); positions ``(T,)`` are shared."""
        rows = shard_slice(self.batch_size, rank, world_size)
        changes = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and not (f.name == "positions" and value.dim() == 1):
                changes[f.name] = value[rows]
        return replace(self, **changes)


@runtime_checkable
class BatchSource(Protocol):
    """Anything that makes the batch of a training step: :class:`~posenc.lab.data.corpus.LMSource`,
    :class:`~posenc.lab.data.tasks.TaskSource`.

    ``batch(step, batch_size, rank=r, world_size=w)`` is deterministic in (the source's seed,
    ``step``): it builds the global batch of ``batch_size`` rows for that step and returns
    rank ``r``'s contiguous shard (rows ``r * B / w .. (r + 1) * B / w``). Same step, same
    rows, so resume and DDP reproduce single-process training exactly.
    """

    vocab_size: int

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        """The shard of the global batch for ``step``."""
        ...

"""What the signal experiments (audio, video, VLA) share: a token transformer with any
registered encoding, its run configuration and its training loop.

Each domain turns its data into token features ``(batch, seq, dim)`` and the positions its
encoding reads (:attr:`SignalTransformer.num_axes`: 1 for a sequence numbering, 2 for
(time, frequency) or (row, column), 3 for (time, row, column)); the transformer adds the
encoding (added to the features, or inside every attention layer, as :mod:`posenc.models`
lays it out), runs bidirectional pre-norm blocks (:class:`posenc.models.Block`) and returns
the normed hidden states; the experiment pools and classifies them.

Encodings are built by name from :mod:`posenc.registry` for the model's shape
(:class:`~posenc.registry.ModelDims` with the token grid of the training data, e.g.
``(frames,)``, ``(time, frequency)`` or ``(frames, rows, columns)``), or ``"none"``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int
from posenc.attention import build_context
from posenc.encoding.base import PositionalEncoding
from posenc.lab.config import EpochArgs, ModelArgs, RunnerArgs
from posenc.lab.runner import check_encoding_names, check_pos_kwargs_names
from posenc.models import Block, ModelConfig, layer_encodings
from posenc.registry import ModelDims, build_encoding

__all__ = [
    "NONE",
    "SignalRunConfig",
    "SignalTransformer",
    "accuracy_in_batches",
    "fit_signal_model",
]

#: No positional encoding (not a registry name: the model then holds no encoding module).
NONE = "none"


class SignalTransformer(nn.Module):
    """A positional encoding (or none), bidirectional pre-norm blocks and a final norm.

    Args:
        encoding: a registry name (``posenc list``) or ``"none"``.
        dims: the model's shape; ``dims.grid`` is the training data's token grid for grid
            encodings (a table of a finite grid is sized from it).
        depth: blocks.
        mlp_ratio: MLP hidden width as a multiple of ``dims.dim``.
        pos_kwargs: keyword arguments of the encoding's constructor.

    Shape:
        x ``(batch, seq, dim)``, positions ``(seq,)`` / ``(batch, seq)`` (one axis) or
        ``(axes, seq)`` / ``(axes, batch, seq)`` → ``(batch, seq, dim)``.
    """

    def __init__(
        self,
        encoding: str,
        dims: ModelDims,
        *,
        depth: int = 2,
        mlp_ratio: float = 4.0,
        pos_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.encoding_name = encoding
        kwargs = dict(pos_kwargs or {})
        if encoding == NONE and kwargs:
            raise ValueError(f"pos_kwargs must be empty for encoding 'none', got {kwargs}")

        def build() -> PositionalEncoding | None:
            return None if encoding == NONE else build_encoding(encoding, dims, kwargs)

        laid = layer_encodings(build, check_positive_int("depth", depth))
        self.additive = laid.additive
        shape = ModelConfig(
            vocab_size=2,  # unused: the experiment embeds its own tokens
            dim=dims.dim,
            depth=depth,
            num_heads=dims.num_heads,
            mlp_ratio=mlp_ratio,
            max_seq_len=dims.max_seq_len,
            pos="none",
        )
        self.blocks = nn.ModuleList(Block(shape, pos, causal=False) for pos in laid.layers)
        self.hooks = laid.hooks
        self.norm = nn.LayerNorm(dims.dim)

    @property
    def num_axes(self) -> int:
        """Position axes the encoding reads (1 for ``"none"``: positions are then unused)."""
        return self.hooks.num_axes

    def forward(
        self, x: Tensor, positions: Tensor, *, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        batch, seq, _ = x.shape
        context = build_context(
            batch=batch,
            seq=seq,
            device=x.device,
            causal=False,
            hooks=self.hooks,
            positions=positions,
            key_padding_mask=key_padding_mask,
        )
        if self.additive is not None:
            additive: Any = self.additive  # implements the additive hook
            x = x + additive.position_embedding(context.q_pos).to(x.dtype)
        for block in self.blocks:
            x = block(x, context=context)
        return self.norm(x)


@dataclass(frozen=True)
class SignalRunConfig:
    """What the signal experiments share: encodings, the data's seed, the model and its
    training, as sections (:mod:`posenc.lab.config`); each experiment adds its data and may
    change the sections' defaults.

    Args:
        encodings: ``"none"`` and registered encodings; each experiment says which it takes.
        data_seed: seed of the generated data (the model's seeds are ``train.seeds``).
        mlp_ratio: MLP hidden width as a multiple of ``model.dim``.
        pos_kwargs: per encoding, keyword arguments of its constructor.
        device: torch device of training and evaluation.
        model: the transformer's shape (``dim`` divisible by ``num_heads``).
        train: the seeds (one run per seed and encoding: model init and batch order) and the
            schedule of :func:`fit_signal_model`.
        runner: how the runs execute.
    """

    encodings: tuple[str, ...] = (NONE,)
    data_seed: int = 0
    mlp_ratio: float = 2.0
    pos_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str = "cpu"
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, dim=64, depth=2))
    train: EpochArgs = field(default_factory=EpochArgs)
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        object.__setattr__(self, "encodings", check_encoding_names(self.encodings))
        object.__setattr__(self, "data_seed", check_non_negative_int("data_seed", self.data_seed))
        self.model.check_supports("the signal encoder")
        if self.model.dim % self.model.num_heads:
            raise ValueError(
                f"dim ({self.model.dim}) must be divisible by num_heads ({self.model.num_heads})"
            )
        check_positive_float("mlp_ratio", self.mlp_ratio)
        check_pos_kwargs_names(self.pos_kwargs, self.encodings)

    def transformer(
        self, encoding: str, grid: tuple[int, ...], max_seq_len: int
    ) -> SignalTransformer:
        """A :class:`SignalTransformer` for ``encoding`` on training data of token ``grid``."""
        dims = ModelDims(
            dim=self.model.dim,
            num_heads=self.model.num_heads,
            max_seq_len=max_seq_len,
            causal=False,
            grid=grid,
        )
        return SignalTransformer(
            encoding,
            dims,
            depth=self.model.depth,
            mlp_ratio=self.mlp_ratio,
            pos_kwargs=self.pos_kwargs.get(encoding),
        )


def fit_signal_model(
    model: nn.Module,
    loss_of: Callable[[Tensor], Tensor],
    size: int,
    train: EpochArgs,
    generator: torch.Generator,
) -> dict[str, float]:
    """Train ``model`` for ``train.epochs`` passes over ``size`` examples: each step calls
    ``loss_of(index)`` on a batch of example indices shuffled by ``generator``; AdamW with
    linear warmup then cosine decay to 0. Returns the mean loss of the last epoch."""
    size = check_positive_int("size", size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
    steps = train.epochs * math.ceil(size / train.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(train.lr_factor, steps=steps)
    )
    model.train()
    losses: list[float] = []
    for _ in range(train.epochs):
        order = torch.randperm(size, generator=generator)
        losses = []
        for start in range(0, size, train.batch_size):
            loss = loss_of(order[start : start + train.batch_size])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
    model.eval()
    return {"train_loss": sum(losses) / len(losses)}


@torch.no_grad()
def accuracy_in_batches(
    predict: Callable[[Tensor], Tensor], targets: Tensor, batch_size: int = 256
) -> float:
    """Fraction of ``targets`` (``(N,)`` or ``(N, k)``: every entry counts) that
    ``predict(index)`` (class logits ``(len(index), [k,] classes)``) gets right."""
    correct = 0
    for start in range(0, targets.shape[0], batch_size):
        index = torch.arange(start, min(start + batch_size, targets.shape[0]))
        correct += int((predict(index).argmax(-1) == targets[index]).sum())
    return correct / targets.numel()

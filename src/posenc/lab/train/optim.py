"""The lab's optimizer settings: AdamW's parameter groups and the learning-rate schedule.

AdamW with nanoGPT's (GPT-3's) settings for small models (:data:`ADAM_BETAS`,
:data:`ADAM_EPS`), weight decay on linear weights only (:func:`parameter_groups`), and a
linear warmup followed by cosine decay to ``min_lr_ratio · lr`` (:func:`lr_at`), what
:func:`posenc.lab.train.train` steps with.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torch import nn

from posenc._validate import check_non_negative_int
from posenc.encoding import PositionalEncoding

if TYPE_CHECKING:
    from posenc.lab.train.config import TrainConfig

__all__ = ["ADAM_BETAS", "ADAM_EPS", "lr_at", "parameter_groups"]

#: AdamW's betas and epsilon (nanoGPT / GPT-3 settings for small models); not configurable.
ADAM_BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8


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
    step = check_non_negative_int("step", step)
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
    :class:`~posenc.encoding.PositionalEncoding` (learned position tables, T5/Shaw bias tables,
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

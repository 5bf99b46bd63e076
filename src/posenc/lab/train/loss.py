"""The language-modelling loss of the lab: cross-entropy on the scored targets only.

A :class:`~posenc.lab.batch.Batch` marks the targets that count (``loss_mask``: the answer of
a task, every byte of a corpus window); :func:`masked_ce_sum` gives their summed
cross-entropy and count (what the trainer all-reduces across ranks), :func:`lm_loss` the
mean.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.lab.batch import Batch

__all__ = ["lm_loss", "masked_ce_sum"]


def masked_ce_sum(logits: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
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
    total, count = masked_ce_sum(logits, batch)
    return total / count.clamp(min=1)

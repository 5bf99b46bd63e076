"""Tanh soft-capping of attention logits (Gemma 2), around any encoding.

.. math::
    s_{ij} \\;\\to\\; c \\cdot \\tanh(s_{ij} / c)

applied to each scaled score (``scale · q·k`` plus the encoding's bias or terms), before the
mask and the softmax: the logits stay in ``(−c, c)`` and are nearly unchanged where
``|s| ≪ c``. Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size"
(2024, https://arxiv.org/abs/2408.00118), with ``attn_logit_softcapping = 50.0``; tested
against Hugging Face's ``transformers.models.gemma2.modeling_gemma2.eager_attention_forward``
(the cap after the scaling, before the mask).

The cap is a score map (``map_scores``, :mod:`posenc.encoding.resolve`): elementwise, so
every backend serves it: ``sdpa`` and ``chunked`` on their explicit rows (SDPA's kernels add
a mask to ``scale · q kᵀ`` and cannot apply a function to it), ``flex`` inside its
``score_mod`` (attention-gym's ``generate_tanh_softcap``). The CPU flash-parts plans of
``chunked`` (ALiBi, distance tables) are bypassed: they let the kernel compute the scores.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc.encoding.base import PositionalEncoding
from posenc.encoding.protocols import ScoreMap
from posenc.softmax.wrapping import SoftmaxWrapper

__all__ = ["GEMMA2_ATTN_SOFTCAP", "SoftCap", "tanh_softcap"]

#: Gemma 2's ``attn_logit_softcapping``.
GEMMA2_ATTN_SOFTCAP = 50.0


def tanh_softcap(scores: Tensor, cap: float) -> Tensor:
    """``cap · tanh(scores / cap)``, elementwise (HF's order of operations)."""
    return torch.tanh(scores / cap) * cap


def check_cap(cap: object) -> float:
    """``cap`` as a float; ``ValueError`` naming it unless a finite number > 0."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap):
        raise ValueError(f"cap must be a finite number > 0, got {cap!r}")
    if cap <= 0:
        raise ValueError(f"cap must be a finite number > 0, got {cap!r}")
    return float(cap)


class SoftCap(SoftmaxWrapper, ScoreMap):
    """An encoding whose attention logits are soft-capped: ``c · tanh(s / c)`` (Gemma 2).

    Args:
        encoding: the encoding inside (RoPE for Gemma 2; any bias, additive, contextual or
            scores-reader encoding; None: none). Its hooks act as without the cap; the cap
            applies to the scores they give.
        cap: ``c`` > 0 (default 50.0, Gemma 2's ``attn_logit_softcapping``).

    Raises:
        ValueError: naming ``cap`` (not a finite number > 0) or ``encoding`` (a segment
            method, or an encoding already capped).

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> capped = SoftCap(RotaryEmbedding(16), cap=50.0)
        >>> capped.map_scores(torch.tensor([0.0, 100.0])).tolist()  # doctest: +ELLIPSIS
        [0.0, 48.2...]
    """

    def __init__(
        self, encoding: PositionalEncoding | None = None, *, cap: float = GEMMA2_ATTN_SOFTCAP
    ):
        self_cap = check_cap(cap)
        super().__init__(encoding, "score_map")
        self.cap = self_cap

    def map_scores(self, scores: Tensor) -> Tensor:
        """The score-map hook: ``cap · tanh(scores / cap)``."""
        return tanh_softcap(scores, self.cap)

    def rewrap(self, encoding: PositionalEncoding) -> SoftCap:
        return SoftCap(encoding, cap=self.cap)

    def extra_repr(self) -> str:
        return f"cap={self.cap}"

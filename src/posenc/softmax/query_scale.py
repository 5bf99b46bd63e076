"""Position-dependent query temperature: ``q_i ×= s(p_i)`` before the logits.

A long-context model trained at one length sharpens its attention at longer ones by scaling
each query by a factor that grows with the query's position; the keys and values are left
alone, so a KV cache stays exact (a cached key never depends on a later query). Three models
use one of two shapes of ``s``:

* ``"floor_log"``: :math:`s(p) = 1 + β \\ln(1 + \\lfloor (p + δ) / F \\rfloor)`, a step
  every ``F`` positions. Llama-4's ``attn_temperature_tuning`` on its NoPE layers (``F =
  floor_scale = 8192``, ``β = attn_scale = 0.1``, ``δ = 1``; HF ``Llama4TextAttention``,
  vLLM ``Llama4Attention._get_attn_scale``, from Nakanishi 2025, "Scalable-Softmax",
  https://arxiv.org/abs/2501.19399) and Ministral 3 / Mistral 4's ``llama_4_scaling_beta``
  (``F = original_max_position_embeddings``, ``δ = 0``; HF ``get_llama_4_attn_scale``).
* ``"log_n"``: :math:`s(p) = \\max(1, \\ln(p + 1) / \\ln L)`, 1 inside the trained length
  ``L``. Qwen-1's ``use_logn_attn`` (``L = seq_length``; ``modeling_qwen.py``'s
  ``logn_list[i] = log_L(i)`` for ``i > L`` else 1, indexed by the query's cache index ``i -
  1``), the log-n scale of ReRoPE and Self-Extend (:func:`posenc.segments.base.log_scale`),
  and Chiang & Cholak 2022, https://arxiv.org/abs/2202.12172.

Positions are the attention's query positions (``AttentionContext.q_pos``): with default
positions the token index, which HF reads for Llama-4 (``arange(seq) + past_seen_tokens``)
and Qwen-1 (the cache index), and vLLM reads as its positions. Qwen-1 applies log-n only in
eval mode (``not self.training``): build a model without it to train as Qwen did.

Example::

    >>> QueryScale.llama4(floor_scale=4).factor(torch.arange(8))
    tensor([1.0000, 1.0000, 1.0000, 1.0693, 1.0693, 1.0693, 1.0693, 1.1099],
           dtype=torch.float64)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.segments.base import log_scale

__all__ = ["QueryScale", "QueryScaleMode", "check_chunk_and_scale", "scale_queries"]

QueryScaleMode = Literal["floor_log", "log_n"]


@dataclass(frozen=True)
class QueryScale:
    """A per-query multiplier of q by position (see the module docstring for the formulas).

    Args:
        mode: ``"floor_log"`` (Llama-4, Ministral 3) or ``"log_n"`` (Qwen-1).
        length: ``F`` (``floor_log``: positions per step, ≥ 1) or the trained length ``L``
            (``log_n``: ≥ 2, ``ln L`` divides).
        beta: ``floor_log``'s ``β`` (finite, ≥ 0); unused by ``log_n``.
        shift: ``floor_log``'s ``δ`` added to the position (Llama-4 1, Ministral 3 0), ≥ 0.

    Prefer the presets :meth:`llama4`, :meth:`ministral3` and :meth:`logn`.

    Example::

        >>> QueryScale.logn(4).factor(torch.tensor([0, 3, 15]))
        tensor([1., 1., 2.], dtype=torch.float64)
    """

    mode: QueryScaleMode
    length: int
    beta: float = 0.1
    shift: int = 0
    modes: ClassVar[tuple[str, ...]] = get_args(QueryScaleMode)

    def __post_init__(self) -> None:
        if self.mode not in self.modes:
            raise ValueError(
                f"mode must be one of {', '.join(map(repr, self.modes))}; got {self.mode!r}"
            )
        object.__setattr__(self, "length", check_positive_int("length", self.length))
        if self.mode == "log_n" and self.length < 2:
            raise ValueError(f"length must be >= 2 for log_n (ln L divides); got {self.length}")
        beta = self.beta
        if (
            isinstance(beta, bool)
            or not isinstance(beta, (int, float))
            or not math.isfinite(beta)
            or beta < 0
        ):
            raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
        object.__setattr__(self, "beta", float(beta))
        object.__setattr__(self, "shift", check_non_negative_int("shift", self.shift))

    @classmethod
    def llama4(cls, floor_scale: int = 8192, attn_scale: float = 0.1) -> QueryScale:
        """Llama-4's temperature: ``1 + attn_scale · ln(1 + ⌊(p + 1) / floor_scale⌋)``."""
        return cls("floor_log", floor_scale, attn_scale, shift=1)

    @classmethod
    def ministral3(cls, beta: float, original_max_position_embeddings: int) -> QueryScale:
        """Ministral 3 / Mistral 4's ``llama_4_scaling_beta``: ``1 + β ln(1 + ⌊p / L0⌋)``."""
        return cls("floor_log", original_max_position_embeddings, beta, shift=0)

    @classmethod
    def logn(cls, train_len: int) -> QueryScale:
        """Qwen-1's ``use_logn_attn``: ``max(1, ln(p + 1) / ln train_len)``."""
        return cls("log_n", train_len)

    def factor(self, positions: Tensor) -> Tensor:
        """``s(p)`` at ``positions`` (any shape), float64. Positions before the formula's
        first step (``p + δ < 0``; ``p < 0`` for ``log_n``), which no model gives but posenc
        positions may hold (padding at -1), take its first value, 1, not ``-inf`` or NaN."""
        if self.mode == "log_n":
            return log_scale(positions, self.length)
        p = positions.to(torch.float64)
        steps = torch.floor((p + self.shift) / self.length).clamp(min=0.0)
        return 1.0 + self.beta * torch.log1p(steps)

    def apply(self, q: Tensor, positions: Tensor) -> Tensor:
        """``q`` ``(batch, heads, seq, head_dim)`` times ``s`` of its query ``positions``
        ``(seq,)`` or ``(batch, seq)``; half precision multiplies in float32 and rounds once,
        float64 stays float64."""
        return scale_queries(q, self.factor(positions))


def scale_queries(q: Tensor, factor: Tensor) -> Tensor:
    """``q`` ``(batch, heads, seq, head_dim)`` times a per-query ``factor`` ``(seq,)`` or
    ``(batch, seq)``; half precision multiplies in float32 and rounds once, float64 stays
    float64 (:meth:`QueryScale.apply`, the segment methods' log-n)."""
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    # (batch, 1, seq, 1) or (1, seq, 1); not view(-1, …), which cannot size an empty seq
    factor = factor.to(device=q.device, dtype=compute)[..., None, :, None]
    return (q.to(compute) * factor).to(q.dtype)


def check_chunk_and_scale(
    chunk_size: object, query_scale: object, num_axes: int, backend: str
) -> tuple[int | None, QueryScale | None]:
    """:class:`~posenc.attention.Attention`'s ``chunk_size`` (an int ≥ 1 or None) and
    ``query_scale`` (a :class:`QueryScale` or None, for an encoding of ``num_axes = 1``),
    which the ``backend`` must serve; ``ValueError`` naming the argument otherwise."""
    if chunk_size is not None:
        chunk_size = check_positive_int("chunk_size", chunk_size)
    if query_scale is not None:
        if not isinstance(query_scale, QueryScale):
            raise ValueError(
                f"query_scale must be a posenc QueryScale (QueryScale.llama4(), "
                f"QueryScale.logn(train_len)) or None; got {type(query_scale).__name__}"
            )
        if num_axes != 1:
            raise ValueError(
                f"query_scale reads one position per query; this encoding reads {num_axes} "
                "position axes"
            )
    if backend == "linear" and (chunk_size is not None or query_scale is not None):
        raise ValueError(
            "chunk_size and query_scale need softmax attention; backend 'linear' serves "
            "causal order and key padding only"
        )
    return chunk_size, query_scale

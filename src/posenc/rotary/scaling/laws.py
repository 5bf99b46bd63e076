"""RoPE's periods and the scaling laws of RoPE-based extrapolation (Liu et al. 2023).

Pair ``i`` of a RoPE head of width ``d`` with base ``β`` rotates by ``θ_i = β^(-2i/d)`` per
position, so its angle repeats every

.. math:: P_i = 2π · β^{2i/d}, \\qquad i = 0 … d/2 − 1

positions. A model trained on ``T`` tokens sees every angle of the pairs whose period fits in
``T`` and only part of the circle for the others. Liu et al. (ICLR 2024, "Scaling Laws of
RoPE-based Extrapolation", https://arxiv.org/abs/2310.05209, §3) call the number of channels
of the first kind the **critical dimension**

.. math:: d_\\text{extra} = 2 \\left\\lceil \\tfrac{d}{2} \\log_β \\tfrac{T}{2π} \\right\\rceil

(92 of 128 for LLaMA 2: ``d = 128``, ``β = 10⁴``, ``T = 4096``, the paper's figure, tested).
The channels past it are the ones that go out of distribution beyond ``T``. Fine-tuning at
``T`` with a larger base ``β'`` keeps the critical dimension learned in pre-training and
stretches those channels' period, so the model extrapolates up to the **extrapolation
bound**

.. math:: T_\\text{extra} = 2π · β'^{\\,d_\\text{extra}/d}

(about 129k positions for LLaMA 2 tuned at ``β' = 10⁶``); conversely the base needed for a
target context ``L`` is ``β' = (L/2π)^{d/d_\\text{extra}}``. For a smaller base the paper's
other regime applies: once every pair's period fits in ``T`` (``β ≤ (T/2π)^{d/(d−2)}``,
:func:`full_period_base`), all channels have seen their full circle in training and nothing is
out of distribution beyond ``T``, though attention over long distances still degrades.

:func:`critical_dimension` counts channels exactly (``2 · #{i : P_i ≤ T}``, equal to the
formula above whenever its logarithm is not a whole number), clamped to ``[0, d]``: 0 when
``T < 2π`` (no pair completes a period), ``d`` in the small-base regime. The closed forms of
the bound and the base follow from the period formula; the paper states them in these terms
(its Theorems 1-2), but the numbers other than LLaMA 2's critical dimension are ours.

Related: :class:`~posenc.rotary.Proportional` with ``partial_rotary_factor = p`` is p-RoPE
(Barbero et al. 2024, "Round and Round We Go! What makes Rotary Positional Encodings
useful?", https://arxiv.org/abs/2410.06205): it keeps the highest ``p`` fraction of the
frequencies and sets the lowest ones — the channels past the critical dimension — to zero.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int

__all__ = [
    "base_for_context",
    "critical_dimension",
    "extrapolation_bound",
    "full_period_base",
    "rope_periods",
]


def _head_dim(head_dim: int) -> int:
    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (channel pairs), got {head_dim}")
    return head_dim


def _base(name: str, base: float) -> float:
    value = check_positive_float(name, base)
    if value <= 1.0:
        raise ValueError(f"{name} must be > 1 (periods grow with the pair index), got {base}")
    return value


def _trained_critical_dimension(head_dim: int, base: float, train_len: float) -> int:
    """:func:`critical_dimension`, refusing a ``train_len`` in which no pair completes a
    period (nothing is learned to extrapolate from)."""
    extra = critical_dimension(head_dim, base, train_len)
    if extra == 0:
        raise ValueError(
            f"train_len must be at least 2π (one period of the fastest pair), got {train_len}"
        )
    return extra


def rope_periods(head_dim: int, base: float = 10_000.0) -> Tensor:
    """Period in positions of every pair, ``2π · base^(2i/head_dim)``, float64 ``(d/2,)``.

    Example::

        >>> rope_periods(4, 100.0).tolist()  # 2π and 2π·10
        [6.283185307179586, 62.83185307179586]
    """
    d = _head_dim(head_dim)
    b = _base("base", base)
    exponents = torch.arange(d // 2, dtype=torch.float64) * (2.0 / d)
    return 2 * math.pi * torch.tensor(b, dtype=torch.float64) ** exponents


def critical_dimension(head_dim: int, base: float, train_len: float) -> int:
    """Channels whose period fits in ``train_len``: ``2⌈(d/2)·log_base(T/2π)⌉`` in ``[0, d]``.

    Example::

        >>> critical_dimension(128, 10_000.0, 4096)  # LLaMA 2 (Liu et al. 2023)
        92
    """
    periods = rope_periods(head_dim, base)
    length = check_positive_float("train_len", train_len)
    return 2 * int((periods <= length).sum())


def extrapolation_bound(
    head_dim: int, base: float, train_len: float, *, pretrain_base: float | None = None
) -> float:
    """Positions up to which a model extrapolates after tuning at ``base`` (Liu et al. 2023).

    .. math:: T_\\text{extra} = 2π · β^{d_\\text{extra}/d}, \\quad
        d_\\text{extra} = \\text{critical\\_dimension}(d, β_0, T)

    with ``β_0 = pretrain_base`` (default ``base``: the model as trained): the paper's
    larger-base regime, ``β ≥ β_0``. Returns ``inf`` in the small-base regime, where every
    pair completes a period within ``T`` at ``β`` (``β ≤`` :func:`full_period_base`, or a
    model that already saw every period in pre-training): no channel is out of distribution.

    Raises:
        ValueError: naming ``train_len`` when no channel completes a period (``T < 2π``), and
            naming ``base`` for ``full_period_base < β < β_0``: the paper gives no bound
            between its two regimes (tuning there improves extrapolation, by its Theorem 1,
            without a closed form).
    """
    d = _head_dim(head_dim)
    b = _base("base", base)
    b0 = b if pretrain_base is None else _base("pretrain_base", pretrain_base)
    extra = _trained_critical_dimension(d, b0, train_len)
    if extra == d or critical_dimension(d, b, train_len) == d:
        return math.inf
    if b < b0:
        raise ValueError(
            f"base must be >= pretrain_base ({b0:g}) for the larger-base bound, or <= "
            f"full_period_base(head_dim, train_len) = {full_period_base(d, train_len):.4g} "
            f"(unbounded); got {base:g}, between the regimes, where the paper states no bound"
        )
    return 2 * math.pi * b ** (extra / d)


def base_for_context(
    head_dim: int, context: float, train_len: float, *, pretrain_base: float = 10_000.0
) -> float:
    """The base whose extrapolation bound is ``context``: ``(L/2π)^(d/d_extra)``, with the
    critical dimension of the model pre-trained at ``pretrain_base`` on ``train_len`` tokens.

    Example::

        >>> round(base_for_context(128, 100_000, 4096) / 1e5, 2)  # LLaMA 2 to 100k positions
        7.01
    """
    d = _head_dim(head_dim)
    length = check_positive_float("context", context)
    extra = _trained_critical_dimension(d, _base("pretrain_base", pretrain_base), train_len)
    if length <= 2 * math.pi:
        raise ValueError(f"context must be > 2π, got {context}")
    return (length / (2 * math.pi)) ** (d / extra)


def full_period_base(head_dim: int, train_len: float) -> float:
    """The largest base at which every pair completes a period within ``train_len``:
    ``(T/2π)^(d/(d−2))`` (for ``head_dim = 2``, one pair of period 2π: any base)."""
    d = _head_dim(head_dim)
    length = check_positive_float("train_len", train_len)
    if length < 2 * math.pi:
        raise ValueError(
            f"train_len must be at least 2π (one period of the fastest pair), got {train_len}"
        )
    if d == 2:
        return math.inf
    return (length / (2 * math.pi)) ** (d / (d - 2))

"""DeBERTa's relative rows and disentangled logits, as functions.

The table row every (query, key) pair reads (the span, v2/v3's log buckets, the clamp) and
the c2p/p2c logit terms gathered from it; :class:`posenc.contextual.deberta.DebertaRelative` is
the module that holds the tables and projections.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.bias.alibi import relative_distances
from posenc.contextual.shaw import expand_index

__all__ = [
    "MIN_KEY_SLICE",
    "POSITION_TERMS",
    "PositionTerm",
    "check_deberta_span",
    "deberta_index",
    "deberta_log_bucket",
    "disentangled_logits",
    "relative_rows",
]

PositionTerm = Literal["c2p", "p2c"]
POSITION_TERMS: tuple[PositionTerm, ...] = ("c2p", "p2c")
#: Least keys per p2c slice (``q_len`` if larger): O(q_len · 2k) memory per slice, and
#: one-token decoding does not loop over single keys.
MIN_KEY_SLICE = 256


def check_deberta_span(max_relative_positions: int, position_buckets: int) -> int:
    """The span ``k`` (``2k`` table rows): ``position_buckets`` if > 0, else
    ``max_relative_positions``. Log buckets need ``position_buckets ≥ 2`` and
    ``max_relative_positions − 1 > position_buckets // 2`` (a log base > 1); ValueError
    naming the argument otherwise."""
    max_relative_positions = check_positive_int("max_relative_positions", max_relative_positions)
    position_buckets = check_non_negative_int("position_buckets", position_buckets)
    if position_buckets == 0:
        return max_relative_positions
    if position_buckets < 2:
        raise ValueError(f"position_buckets must be 0 (no buckets) or >= 2, got {position_buckets}")
    mid = position_buckets // 2
    if max_relative_positions - 1 <= mid:
        raise ValueError(
            f"max_relative_positions must exceed position_buckets // 2 + 1 = {mid + 1} with log "
            f"buckets (the log base (max_relative_positions - 1) / mid must be > 1); got "
            f"{max_relative_positions}"
        )
    return position_buckets


def deberta_log_bucket(
    relative: Tensor, position_buckets: int, max_relative_positions: int
) -> Tensor:
    """DeBERTa v2/v3's log buckets of relative positions, int64.

    .. math::
        b(\\delta) = \\begin{cases} \\delta & |\\delta| \\le m \\\\
        \\operatorname{sign}(\\delta)\\big(m + \\lceil \\frac{\\ln(|\\delta| / m)}
        {\\ln((M - 1) / m)} (m - 1) \\rceil\\big) & \\text{otherwise} \\end{cases}
        \\qquad m = \\lfloor \\text{position\\_buckets} / 2 \\rfloor,\\
        M = \\text{max\\_relative\\_positions}

    It reaches ``±(2m − 1)`` at ``|δ| = M − 1`` and grows slowly past it
    (:func:`deberta_index` clamps). Evaluated in float32 in the order of transformers'
    ``make_log_bucket_position`` (default dtype), so every ceiling is the checkpoints'
    (exact arithmetic moves a few by one, e.g. ``δ = ±1643`` at (512, 4096)).
    ``relative``: integer ``δ``, any shape.
    """
    check_deberta_span(max_relative_positions, position_buckets)
    return _log_bucket(relative.to(torch.int64), position_buckets, max_relative_positions)


def _log_bucket(relative: Tensor, position_buckets: int, max_relative_positions: int) -> Tensor:
    mid = position_buckets // 2
    magnitude = relative.abs()
    exact = magnitude <= mid
    # Exact pairs read log(1) = 0 instead of log(|δ| / mid) ≤ 0 (their value is discarded).
    ratio = torch.where(exact, mid, magnitude).to(torch.float32) / mid
    base = torch.tensor((max_relative_positions - 1) / mid, dtype=torch.float32)
    steps = torch.ceil(torch.log(ratio) / torch.log(base).to(ratio.device) * (mid - 1))
    far = relative.sign() * (steps.to(torch.int64) + mid)
    return torch.where(exact, relative, far)


def relative_rows(relative: Tensor, span: int, position_buckets: int, max_relative: int) -> Tensor:
    if position_buckets > 0:
        relative = _log_bucket(relative, position_buckets, max_relative)
    return (relative + span).clamp(0, 2 * span - 1)


def deberta_index(
    q_pos: Tensor, k_pos: Tensor, *, max_relative_positions: int, position_buckets: int = 0
) -> Tensor:
    """Table row of every (query, key) pair: ``clamp(b(q_pos_i − k_pos_j) + k, 0, 2k − 1)``.

    ``b``: :func:`deberta_log_bucket` (``position_buckets > 0``) or the identity; ``k``: the
    span. Both terms read this row (p2c's sign: :class:`DebertaRelative`). Whole-number
    positions; int64 ``(q_len, k_len)``, or ``(batch, q_len, k_len)`` for batched positions.
    """
    span = check_deberta_span(max_relative_positions, position_buckets)
    relative = -relative_distances(q_pos, k_pos, whole=True)  # q_pos_i − k_pos_j
    return relative_rows(relative, span, position_buckets, max_relative_positions)


def disentangled_logits(
    q: Tensor,
    k: Tensor,
    index: Tensor,
    scale: float,
    *,
    position_keys: Tensor | None = None,
    position_queries: Tensor | None = None,
    key_slice: int | None = None,
) -> Tensor:
    """``scale · (q_i · K^r_{index(i,j)} + k_j · Q^r_{index(i,j)})``, either term optional.

    c2p gathers ``q @ K^rᵀ`` ``(batch, heads, q_len, 2k)``; p2c gathers ``Q^r @ kᵀ`` one
    slice of ``max(q_len, key_slice)`` keys at a time, ``(batch, heads, 2k, slice)``.

    Args:
        q: ``(batch, heads, q_len, head_dim)``; k: ``(batch, heads, k_len, head_dim)``.
        index: from :func:`deberta_index`, ``(q_len, k_len)`` or ``(batch, q_len, k_len)``.
        scale: multiplies both terms (DeBERTa: ``1 / sqrt(head_dim · s)``).
        position_keys: ``K^r``, ``(heads, 2k, head_dim)`` (c2p), or None.
        position_queries: ``Q^r``, ``(heads, 2k, head_dim)`` (p2c), or None.
        key_slice: least keys per p2c slice (default :data:`MIN_KEY_SLICE`).

    Returns:
        ``(batch, heads, q_len, k_len)``.
    """
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[-2]
    rows = expand_index(index, batch, heads)  # (batch, heads, q_len, k_len), a view
    term: Tensor | None = None
    if position_keys is not None:
        per_row = q @ position_keys.to(q.dtype).transpose(-1, -2)  # (batch, heads, q, 2k)
        term = per_row.gather(-1, rows)
    if position_queries is not None:
        width = max(q_len, key_slice or MIN_KEY_SLICE)
        table = position_queries.to(k.dtype)
        parts = []
        for start in range(0, k_len, width):
            stop = min(k_len, start + width)
            per_key = table @ k[..., start:stop, :].transpose(-1, -2)  # (batch, heads, 2k, s)
            parts.append(per_key.gather(-2, rows[..., start:stop]))
        p2c = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        term = p2c if term is None else term + p2c
    if term is None:
        raise ValueError("give position_keys (c2p), position_queries (p2c) or both")
    return term * scale

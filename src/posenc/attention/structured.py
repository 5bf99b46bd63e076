"""Plans that split a biased attention into flash parts (see :mod:`posenc.attention.flash`).

Two structures an encoding can declare (duck-typed, optional):

* ``linear_bias_slopes() -> Tensor | None``: ``bias_at(h, q, k) == m_h · (k − q)`` at any
  positions (causal ALiBi). Per block of queries the bias is ``m_h (k_j − c) + m_h (c − q_i)``
  with ``c`` the block's first query position: the second term is constant along a row and
  drops out of that row's softmax, the first is a ``(heads, keys)`` vector. Two parts per
  block: the keys before the block, and the block's own diagonal square under the kernel's
  causal order. Blocks of 128 queries keep ``|m (k − c)|`` near the diagonal small, so the
  float32 scores lose at most about ``ulp(64 m)`` there.
* ``bias_constant_beyond: int`` (``D``): the bias depends on ``k − q`` only and is constant
  for ``k − q ≤ −D`` and for ``k − q ≥ D`` (T5's buckets saturate at ``max_distance``).
  At default positions (key ``j`` at position ``j``) each block has a far-left part (one LSE
  shift per head), a dense band of ``rows + 2D − 2`` keys around the diagonal (the same band
  table for every block and layer, built once per forward) and, without causal order, a
  far-right part.

Both run on the CPU flash kernel, exact in value and gradient, in O(block · keys) memory
without any ``(heads, L, L)`` tensor; half-precision inputs compute in float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.attention import flash
from posenc.attention.context import AttentionContext
from posenc.attention.flash import Part, merge_parts
from posenc.attention.hooks import Hooks
from posenc.attention.rows import compute_dtype

__all__ = ["ALIBI_ROWS", "BAND_ROWS", "structured_attention"]

#: Query rows per block of the ALiBi plan (the float32 error grows with it).
ALIBI_ROWS = 128
#: Query rows per block of the far-constant (T5) plan.
BAND_ROWS = 256


def structured_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
    block_size: int | None = None,
) -> Tensor | None:
    """Attention by a flash-parts plan, or None when no plan applies.

    ``block_size`` overrides the plan's query rows per block (:data:`ALIBI_ROWS`,
    :data:`BAND_ROWS`).

    A plan needs: the CPU flash kernel, no dropout, a pointwise bias and nothing else
    (no contextual term, no scores reader), a mask of causal order and key padding only,
    eager mode, and one of the structures in the module docstring.
    """
    mask = context.mask
    if not (hooks.bias and flash.available(q)) or hooks.contextual or hooks.scores:
        return None
    if dropout_p > 0.0 or mask.has_pairwise or torch.compiler.is_compiling():
        return None
    encoding = hooks.encoding
    linear = getattr(encoding, "linear_bias_slopes", None)
    slopes = linear() if callable(linear) else None
    cdt = compute_dtype(q.dtype)
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    padding = _padding(context, cdt)
    if slopes is not None and mask.causal:
        out = _linear_plan(qc, kc, vc, slopes, context, padding, scale, block_size or ALIBI_ROWS)
    else:
        distance = getattr(encoding, "bias_constant_beyond", None)
        if not isinstance(distance, int) or not context.index_positions:
            return None
        rows = block_size or BAND_ROWS
        out = _far_constant_plan(qc, kc, vc, hooks, distance, context, padding, scale, rows)
    empty = mask.empty_rows()
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out.to(q.dtype)


def _padding(context: AttentionContext, dtype: torch.dtype) -> Tensor | None:
    padding = context.mask.key_padding
    if padding is None:
        return None
    low = torch.finfo(dtype).min
    return torch.zeros((), dtype=dtype).masked_fill(~padding, low)[:, None, None, :]


def _with_padding(
    mask: Tensor | None, padding: Tensor | None, start: int, stop: int
) -> Tensor | None:
    if padding is None:
        return mask
    pad = padding[..., start:stop]
    return pad if mask is None else mask + pad


def _linear_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    slopes: Tensor,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    rows: int,
) -> Tensor:
    heads, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    offset = k_len - q_len
    m = slopes.to(device=q.device, dtype=torch.float64).view(1, heads, 1, 1)
    k_pos = context.k_pos.to(torch.float64)
    k_pos = k_pos.view(-1, 1, 1, k_len)  # (batch | 1, 1, 1, keys)
    q_pos = context.q_pos.to(torch.float64)
    outs = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        first, last = start + offset, stop + offset  # the block's diagonal keys
        c = q_pos[..., start].reshape(-1, 1, 1, 1)  # the block's first query position
        linear = (m * (k_pos[..., :last] - c)).to(q.dtype)  # (batch | 1, heads, 1, last)
        bias = _with_padding(linear, padding, 0, last)
        assert bias is not None
        parts = []
        if first > 0:
            parts.append(Part(k[:, :, :first], v[:, :, :first], mask=bias[..., :first]))
        parts.append(
            Part(k[:, :, first:last], v[:, :, first:last], causal=True, mask=bias[..., first:last])
        )
        outs.append(merge_parts(q[:, :, start:stop], parts, scale))
    return torch.cat(outs, dim=2)


def _far_constant_plan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hooks: Hooks,
    distance: int,
    context: AttentionContext,
    padding: Tensor | None,
    scale: float,
    rows: int,
) -> Tensor:
    encoding = hooks.encoding
    heads, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    causal = context.mask.causal
    offset = k_len - q_len
    reach = distance - 1  # band keys on each side of a query
    rows = min(rows, q_len)
    key = (id(encoding), "far-band", rows, distance, causal, q.dtype, q.device)
    band, left, right = context.cached(
        key, lambda: _band_table(encoding, heads, rows, distance, causal, q.dtype, q.device)
    )
    outs = []
    for start in range(0, q_len, rows):
        stop = min(q_len, start + rows)
        low = start + offset - reach  # key index of the band's first column
        high = stop + offset if causal else stop + offset + reach
        band_start, band_stop = max(0, low), min(k_len, high)
        parts = []
        if band_start > 0:
            parts.append(
                Part(
                    k[:, :, :band_start],
                    v[:, :, :band_start],
                    mask=_with_padding(None, padding, 0, band_start),
                    shift=left,
                )
            )
        dense = band[:, : stop - start, band_start - low : band_stop - low].unsqueeze(0)
        parts.append(
            Part(
                k[:, :, band_start:band_stop],
                v[:, :, band_start:band_stop],
                mask=_with_padding(dense, padding, band_start, band_stop),
            )
        )
        if band_stop < k_len and not causal:
            parts.append(
                Part(
                    k[:, :, band_stop:],
                    v[:, :, band_stop:],
                    mask=_with_padding(None, padding, band_stop, k_len),
                    shift=right,
                )
            )
        outs.append(merge_parts(q[:, :, start:stop], parts, scale))
    return torch.cat(outs, dim=2)


def _band_table(
    encoding: object,
    heads: int,
    rows: int,
    distance: int,
    causal: bool,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[Tensor, Tensor, Tensor]:
    """The band ``(heads, rows, rows + 2D − 2)`` and the far constants ``(1, heads, 1)``.

    Row ``a`` of the band is query ``a`` of a block, column ``c`` the key ``c − (D − 1)``
    relative to the block's first query; future keys are masked when ``causal``.
    """
    head = torch.arange(heads, device=device)
    bias_at = encoding.bias_at  # type: ignore[attr-defined]
    reach = distance - 1
    q_rel = torch.arange(rows, device=device)[:, None] + reach
    k_rel = torch.arange(rows + 2 * reach, device=device)[None, :]
    band = bias_at(head.view(-1, 1, 1), q_rel, k_rel, dtype)
    if causal:
        band = band.masked_fill(k_rel > q_rel, torch.finfo(dtype).min)
    zero, far = (
        torch.zeros((), dtype=torch.long, device=device),
        torch.full((), distance, device=device),
    )
    left = bias_at(head, far, zero, dtype).view(1, heads, 1)  # k - q = -D
    right = bias_at(head, zero, far, dtype).view(1, heads, 1)  # k - q = +D
    return band, left, right

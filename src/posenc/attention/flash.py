"""Exact attention from parts of the key range, on the CPU flash kernel (the structured fast path).

The softmax over all keys of a query equals a merge of softmaxes over disjoint parts of the
keys, weighted by each part's log-sum-exp (LSE):

.. math::
    O_i = \\sum_p e^{\\ell_{p,i} - L_i} O_{p,i}, \\qquad L_i = \\log \\sum_p e^{\\ell_{p,i}}

A bias that is *row-separable* on a part, ``b_ij = r_i + c_j``, needs no L×L tensor there:
``r_i`` only shifts that part's LSE and ``c_j`` is a ``(…, 1, keys)`` vector the kernel
reads with stride 0 over rows. ALiBi is separable everywhere (``m_h (k_j − q_i)``); T5 is
constant beyond ``max_distance`` (one LSE shift per head) and needs a dense band only near
the diagonal, the same band for every block. Each part runs on PyTorch's CPU flash kernel
(``aten::_scaled_dot_product_flash_attention_for_cpu``, which returns the LSE and takes
``is_causal`` together with a mask); the backward of the merge is exact: each part's kernel
backward given the *global* output and LSE yields the global gradients of its keys (the
ring-attention identity), the gradient of an LSE shift is ``w_p (dO · (O_p − O))``, and a
part whose dense mask is learnable (T5's band) gets its gradient from an explicit backward
of that small part.

Used where :func:`available` (a CPU tensor and a torch that has the kernel); otherwise the
callers fall back to query blocks (:func:`posenc.attention.blocks.blocked`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "CPU_FLASH_BACKWARD",
    "CPU_FLASH_FORWARD",
    "Part",
    "available",
    "causal_with_mask",
    "flush_denormals",
    "merge_parts",
    "slices",
    "with_padding",
]

CPU_FLASH_FORWARD: Any
CPU_FLASH_BACKWARD: Any
try:  # the CPU flash kernel's ATen ops (torch >= 2.3)
    CPU_FLASH_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    CPU_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
except AttributeError:
    CPU_FLASH_FORWARD = CPU_FLASH_BACKWARD = None
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def available(q: Tensor) -> bool:
    """True when the CPU flash kernel can run on ``q``'s device and dtype."""
    return (
        CPU_FLASH_FORWARD is not None
        and CPU_FLASH_BACKWARD is not None
        and q.device.type == "cpu"
        and q.dtype in _DTYPES
    )


def causal_with_mask(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """Causal attention (``q_len == k_len``) plus a broadcast additive mask, one kernel call.

    Public SDPA refuses ``is_causal`` with a mask; the CPU kernel takes both. ``mask`` is
    ``(batch | 1, heads | 1, 1 | q, k)`` in q's dtype (read with stride 0 where broadcast).
    """
    assert CPU_FLASH_FORWARD is not None
    out: Tensor = CPU_FLASH_FORWARD(
        q, k, v, 0.0, True, attn_mask=_expand(mask, q, k.shape[-2]), scale=scale
    )[0]
    return out  # the aten op has its own autograd formula (for q, k and v)


#: A subnormal double and one (module globals, so that Python does not fold their product).
_SUBNORMAL, _ONE = 5e-324, 1.0


def _flushing() -> bool:
    """True when this thread already flushes subnormal floats to zero: Python's float
    arithmetic runs under the same SSE flags as the CPU kernels (no tensor, no sync)."""
    return _SUBNORMAL * _ONE == 0.0


@contextmanager
def flush_denormals() -> Iterator[None]:
    """Subnormal floats flushed to zero on this thread inside the block, restored after.

    The CPU kernel's exponentials of strongly negative logits land in the subnormal range
    (below 1.2e-38 in float32), where x86 arithmetic is several times slower: ALiBi's far
    keys (a bias of −m·distance) made its train step at 2048 tokens 3.0× the bare module's,
    1.24× with them flushed (docs/performance.md). Such probabilities change nothing a
    float32 result can show. Only this thread's flag (torch.set_flush_denormal): intra-op
    worker threads keep theirs. Left as it is when already on, or when the CPU cannot.
    """
    if _flushing() or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


class _Slices(torch.autograd.Function):
    """Views of ranges along dim -2 whose gradients are summed into one tensor."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, ranges: tuple[tuple[int, int], ...]) -> tuple[Tensor, ...]:
        ctx.ranges, ctx.shape = ranges, x.shape
        return tuple(x.narrow(-2, lo, hi - lo) for lo, hi in ranges)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, None]:
        total: Tensor | None = None
        for (lo, hi), grad in zip(ctx.ranges, grads, strict=True):
            if grad is None:
                continue
            if total is None:
                total = grad.new_zeros(ctx.shape)
            total.narrow(-2, lo, hi - lo).add_(grad)
        return total, None


def slices(x: Tensor, ranges: Sequence[tuple[int, int]]) -> dict[tuple[int, int], Tensor]:
    """``{(lo, hi): x[..., lo:hi, :]}`` for every range (dim -2), as one autograd node.

    A plan's parts slice the same keys many times; each ordinary slice's backward allocates
    a zero tensor of the whole input (measured: 0.55 s of an ALiBi train step at 2048
    tokens in 256-row blocks). Here the gradients of all slices meet in one.
    """
    unique = tuple(dict.fromkeys((int(lo), int(hi)) for lo, hi in ranges))
    if not (torch.is_grad_enabled() and x.requires_grad):
        return {(lo, hi): x.narrow(-2, lo, hi - lo) for lo, hi in unique}
    return dict(zip(unique, _Slices.apply(x, unique), strict=True))


@dataclass
class Part:
    """A contiguous range of keys for a block of queries.

    Attributes:
        k, v: the keys and values of the part ``(batch, kv_heads, keys, ·)``.
        causal: the kernel's top-left causal order within the part (a square diagonal part).
        mask: additive mask broadcastable to ``(batch, heads, rows, keys)`` in q's dtype, or
            None. Constant unless it requires grad (then its gradient is computed too).
        shift: added to the part's LSE, broadcastable to ``(batch, heads, rows)``: the
            row-constant part of a bias (T5's far constant), or None.
        q: the part's own queries ``(batch, heads, rows, head_dim)`` (a segment method
            rotates the same queries differently per segment), or None for the shared ones.
        reverse: with ``causal``, a square whose visible pairs are key ≥ row (the upper
            triangle with the diagonal): the kernel runs its causal order on the rows and
            keys reversed (copies of one block's q, k and v) instead of a mask that would
            compute the whole square.
        value_index, value_table: a value term added to the part's output,
            ``Σ_j p_ij · value_table[value_index_ij]`` (Shaw's ``a^V``): an int64 index
            broadcastable to ``(batch, heads, rows, keys)`` and a ``(n, v_dim)`` table (may
            require grad). Such a part's softmax is written out (the kernel has no value
            term); it cannot be reversed.
    """

    k: Tensor
    v: Tensor
    causal: bool = False
    mask: Tensor | None = None
    shift: Tensor | None = None
    q: Tensor | None = None
    reverse: bool = False
    value_index: Tensor | None = None
    value_table: Tensor | None = None


def with_padding(
    mask: Tensor | None, padding: Tensor | None, start: int, stop: int
) -> Tensor | None:
    """A part's mask for keys ``[start, stop)`` with the call's additive key padding
    ``(batch, 1, 1, keys)`` (0 or the dtype's lowest value) added; either may be None."""
    if padding is None:
        return mask
    pad = padding[..., start:stop]
    return pad if mask is None else mask + pad


def merge_parts(q: Tensor, parts: Sequence[Part], scale: float) -> Tensor:
    """``softmax`` attention of ``q`` over the union of ``parts``' keys, merged exactly.

    Args:
        q: ``(batch, heads, rows, head_dim)`` on the CPU: the queries of every part that
            has none of its own.
        parts: non-empty parts (each at least one key).
        scale: logit scale.

    Returns:
        ``(batch, heads, rows, v_dim)`` in q's dtype.
    """
    flat: list[Tensor | None] = []
    layout = []
    for part in parts:
        if part.reverse and not part.causal:
            raise ValueError("a reversed part must be causal (a square, key >= row)")
        if (part.value_index is None) != (part.value_table is None) or (
            part.reverse and part.value_index is not None
        ):
            raise ValueError("a value term needs value_index and value_table, and no reverse")
        flat += [part.k, part.v, part.mask, part.shift, part.q, part.value_index, part.value_table]
        layout.append((part.causal, part.reverse))
    out: Tensor = _Merge.apply(q, scale, tuple(layout), *flat)
    return out


def _merge_outputs(outs: Sequence[Tensor], lses: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """``(Σ_p e^{ℓ_p − L} O_p, L)`` of parts' outputs ``O_p`` and LSEs ``ℓ_p``."""
    if len(outs) == 1:
        return outs[0], lses[0]
    total = torch.logsumexp(torch.stack(list(lses)), dim=0)
    merged = torch.zeros_like(outs[0])
    for out, lse in zip(outs, lses, strict=True):
        merged += out * (lse - total).exp().unsqueeze(-1).to(out.dtype)
    return merged, total


def _expand(mask: Tensor | None, q: Tensor, keys: int) -> Tensor | None:
    if mask is None:
        return None
    return mask.expand(q.shape[0], q.shape[1], q.shape[2], keys)


def _row_shift(shift: Tensor | None, lse: Tensor) -> Tensor:
    return lse if shift is None else lse + shift.to(lse.dtype).expand_as(lse)


#: Tensors per part in :class:`_Merge`'s flat arguments: k, v, mask, shift, own q, value
#: index, value table.
_N = 7


def _rows_back(x: Tensor | None, reverse: bool) -> Tensor | None:
    """Rows (dim -2) reversed when ``reverse`` (a reversed part's q, k, v, outputs)."""
    return x.flip(-2) if reverse and x is not None else x


def _mask_back(mask: Tensor | None, reverse: bool) -> Tensor | None:
    """A reversed part's mask: rows and keys reversed (broadcast dims stay)."""
    return mask.flip((-2, -1)) if reverse and mask is not None else mask


class _Merge(torch.autograd.Function):
    @staticmethod
    @flush_denormals()
    def forward(
        ctx: Any,
        q: Tensor,
        scale: float,
        layout: tuple[tuple[bool, bool], ...],
        *flat: Tensor | None,
    ) -> Tensor:
        assert CPU_FLASH_FORWARD is not None
        outs, lses = [], []
        for index, (causal, reverse) in enumerate(layout):
            k, v, mask, shift, own_q, value_index, value_table = flat[_N * index : _N * index + _N]
            assert k is not None and v is not None
            q_part = q if own_q is None else own_q
            if value_index is not None:
                assert value_table is not None
                out, lse = _explicit_forward(
                    q_part, k, v, mask, causal, scale, (value_index, value_table)
                )
            else:
                q_r, k_r, v_r = (_rows_back(t, reverse) for t in (q_part, k, v))
                assert q_r is not None and k_r is not None and v_r is not None
                mask_e = _expand(_mask_back(mask, reverse), q_part, k.shape[-2])
                out, lse = CPU_FLASH_FORWARD(
                    q_r, k_r, v_r, 0.0, causal, attn_mask=mask_e, scale=scale
                )
                if reverse:
                    out, lse = out.flip(-2), lse.flip(-1)
            outs.append(out)
            lses.append(_row_shift(shift, lse))
        merged, total = _merge_outputs(outs, lses)
        keep_parts = any(ctx.needs_input_grad[3 + _N * i + 3] for i in range(len(layout)))
        ctx.scale, ctx.layout = scale, layout
        saved = [q, merged, total, *[t if t is not None else torch.empty(0) for t in flat]]
        if keep_parts:
            saved += outs + lses
        ctx.keep_parts = keep_parts
        ctx.absent = [t is None for t in flat]
        ctx.save_for_backward(*saved)
        return merged

    @staticmethod
    @flush_denormals()
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        assert CPU_FLASH_BACKWARD is not None
        saved = ctx.saved_tensors
        q, merged, total = saved[:3]
        n = len(ctx.layout)
        flat = [
            None if absent else t
            for absent, t in zip(ctx.absent, saved[3 : 3 + _N * n], strict=True)
        ]
        outs = saved[3 + _N * n : 3 + (_N + 1) * n] if ctx.keep_parts else None
        lses = saved[3 + (_N + 1) * n :] if ctx.keep_parts else None
        grad_out = grad_out.contiguous()
        grad_q = torch.zeros_like(q)
        grads: list[Tensor | None] = []
        for index, (causal, reverse) in enumerate(ctx.layout):
            k, v, mask, shift, own_q, value_index, value_table = flat[_N * index : _N * index + _N]
            q_part = q if own_q is None else own_q
            # The part's kernel recomputes p_ij = exp(s_ij + mask_ij - lse): give it the
            # global LSE less this part's shift, and the global output for D = rowsum(dO·O).
            lse = total if shift is None else total - shift.to(total.dtype).expand_as(total)
            mask_needs_grad = ctx.needs_input_grad[3 + _N * index + 2]
            assert k is not None and v is not None
            # a reversed part: everything row-wise reversed, the gradients reversed back
            g_r, q_r, k_r, v_r, o_r = (
                _rows_back(t, reverse) for t in (grad_out, q_part, k, v, merged)
            )
            lse_r = lse.flip(-1) if reverse else lse
            assert g_r is not None and q_r is not None and k_r is not None
            assert v_r is not None and o_r is not None
            dtable = None
            if value_index is not None or mask_needs_grad:  # the part written out
                values = None
                if value_index is not None:  # never reversed
                    assert value_table is not None
                    values = (value_index, value_table)
                dq, dk, dv, dmask_r, dtable = _explicit_backward(
                    g_r.contiguous(),
                    q_r,
                    k_r,
                    v_r,
                    o_r,
                    lse_r,
                    _mask_back(mask, reverse),
                    causal,
                    ctx.scale,
                    values,
                )
                dmask = _mask_back(dmask_r, reverse) if mask_needs_grad else None
            else:
                dq, dk, dv = CPU_FLASH_BACKWARD(
                    g_r.contiguous(),
                    q_r,
                    k_r,
                    v_r,
                    o_r,
                    lse_r,
                    0.0,
                    causal,
                    attn_mask=_expand(_mask_back(mask, reverse), q_part, k.shape[-2]),
                    scale=ctx.scale,
                )
                dmask = None
            if reverse:
                dq, dk, dv = dq.flip(-2), dk.flip(-2), dv.flip(-2)
            if own_q is None:
                grad_q += dq
            dshift = None
            if shift is not None and ctx.needs_input_grad[3 + _N * index + 3]:
                assert outs is not None and lses is not None
                weight = (lses[index] - total).exp()
                per_row = weight * (grad_out * (outs[index] - merged)).sum(-1)
                dshift = per_row.sum_to_size(shift.shape).to(shift.dtype)
            grads += [dk, dv, dmask, dshift, None if own_q is None else dq, None, dtable]
        return (grad_q, None, None, *grads)


def _explicit_logits(
    q: Tensor, k: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> tuple[Tensor, Tensor]:
    """A part's logits written out (keys repeated for grouped heads) and its keys."""
    group = q.shape[1] // k.shape[1]
    k_e = k.repeat_interleave(group, dim=1) if group > 1 else k
    logits = (q @ k_e.transpose(-1, -2)) * scale
    if mask is not None:
        logits = logits + mask
    if causal:
        rows, keys = logits.shape[-2:]
        future = torch.ones(rows, keys, dtype=torch.bool, device=q.device).triu(1)
        logits = logits.masked_fill(future, float("-inf"))
    return logits, k_e


def _value_counts(probs: Tensor, value_index: Tensor, rows: int) -> Tensor:
    """``(…, rows_q, n)``: the probability of each table row (a value term's weights)."""
    counts = probs.new_zeros(*probs.shape[:-1], rows)
    return counts.scatter_add_(-1, value_index.expand_as(probs), probs)


def _explicit_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    values: tuple[Tensor, Tensor],
) -> tuple[Tensor, Tensor]:
    """A part with a value term: its normalized output and LSE, the softmax written out."""
    logits, _ = _explicit_logits(q, k, mask, causal, scale)
    lse = torch.logsumexp(logits, dim=-1)
    probs = torch.exp(logits - lse.unsqueeze(-1))
    group = q.shape[1] // v.shape[1]
    v_e = v.repeat_interleave(group, dim=1) if group > 1 else v
    value_index, value_table = values
    counts = _value_counts(probs, value_index, value_table.shape[0])
    return probs @ v_e + counts @ value_table.to(probs.dtype), lse


def _explicit_backward(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    values: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """Gradients of one (small) part written out: q, k, v, its mask (when it has one) and
    its value table (when it has a value term)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    logits, k_e = _explicit_logits(q, k, mask, causal, scale)
    v_e = v.repeat_interleave(group, dim=1) if group > 1 else v
    probs = torch.exp(logits - lse.unsqueeze(-1).to(logits.dtype))
    d_probs = grad_out @ v_e.transpose(-1, -2)
    grad_table = None
    if values is not None:
        value_index, value_table = values
        table = value_table.to(probs.dtype)
        per_row = grad_out @ table.T  # (…, rows, n): dO · a^V_c
        d_probs = d_probs + per_row.gather(-1, value_index.expand_as(probs))
        counts = _value_counts(probs, value_index, table.shape[0])
        grad_table = counts.flatten(0, -2).T @ grad_out.flatten(0, -2)
        grad_table = grad_table.to(value_table.dtype)
    row_dot = (grad_out * out).sum(-1, keepdim=True)  # the merged output: every part's terms
    d_logits = probs * (d_probs - row_dot)
    grad_q = (d_logits @ k_e) * scale
    grad_k = (d_logits.transpose(-1, -2) @ q) * scale
    grad_v = probs.transpose(-1, -2) @ grad_out
    if group > 1:
        grad_k = grad_k.unflatten(1, (kv_heads, group)).sum(2)
        grad_v = grad_v.unflatten(1, (kv_heads, group)).sum(2)
    grad_mask = None if mask is None else d_logits.sum_to_size(mask.shape)
    return grad_q, grad_k, grad_v, grad_mask, grad_table

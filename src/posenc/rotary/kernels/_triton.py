"""The CUDA rotation kernel, compiled by Triton; imported only when triton is installed.

One program rotates a block of rows of ``x`` — the three leading dimensions flattened in
memory order (largest stride first), so that a block is a near-contiguous span of memory
whatever the strides, e.g. q and k transposed from a ``(batch, seq, heads, head_dim)``
buffer — and every pair of those rows at once: a ``(rows, next_power_of_2(rotary_dim / 2))``
tile, masked at both edges. q and k share one launch (:func:`run_triton` with two items of
one dtype): the first programs take q's blocks, the others k's. Strides travel as arguments
(no copies of ``x`` or ``out``); a table's stride is 0 along every dimension where it has
size 1 (one table for every head, batch or, with one position, every position).

Arithmetic is float32 for float32, bfloat16 and float16 (float64 for float64) with the
torch path's roundings: each product rounded, then the sum, then one rounding to the
storage dtype. The launch sets ``enable_fp_fusion=False``, which keeps LLVM and ptxas from
contracting ``a·c − b·s`` into a fused multiply-add. bfloat16 travels as int16 bits and is
converted in registers — widening by a shift, narrowing with torch's round-to-nearest-even
and its NaN (``0x7FC0``) — so that the kernel gives the same bits compiled for a GPU and
under Triton's interpreter (``TRITON_INTERPRET=1``, how the tests run it without one), whose
own bfloat16 casts truncate when narrowing and get subnormals wrong when widening. float16
uses the native conversions (round to nearest even on both).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

__all__ = ["run_triton"]

#: elements of one tile (rows × columns) per program: 8 KiB of float32 in flight per operand
_TILE = 2048


@triton.jit
def _load(ptrs, mask, BF16_BITS: tl.constexpr):
    """Stored elements as they are, bfloat16 widened exactly to float32 from its int16 bits."""
    # One return statement: Triton rejects returns of two types, even across a constexpr if.
    stored = tl.load(ptrs, mask=mask, other=0)
    if BF16_BITS:
        bits = stored.to(tl.uint16, bitcast=True).to(tl.uint32)
        value = (bits << 16).to(tl.float32, bitcast=True)
    else:
        value = stored
    return value


@triton.jit
def _narrow(value, like, BF16_BITS: tl.constexpr):
    """``value`` rounded once to the element type of the pointer ``like``."""
    if BF16_BITS:
        bits = value.to(tl.float32).to(tl.uint32, bitcast=True)
        bias = ((bits >> 16) & 1) + 0x7FFF  # round to nearest, ties to even
        rounded = ((bits + bias) >> 16).to(tl.uint16)
        rounded = tl.where(value != value, 0x7FC0, rounded).to(tl.uint16)  # torch's NaN
        stored = rounded.to(tl.int16, bitcast=True)
    else:
        stored = value.to(like.dtype.element_ty)
    return stored


@triton.jit
def _rotate_rows(
    block,
    x_ptr,
    out_ptr,
    c_ptr,
    s_ptr,
    n_rows,
    n1,
    n2,
    x_stride0,
    x_stride1,
    x_stride2,
    out_stride0,
    out_stride1,
    out_stride2,
    c_stride0,
    c_stride1,
    c_stride2,
    head_dim,
    r2,
    INTERLEAVED: tl.constexpr,
    BF16_BITS: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_PAIRS: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
):
    """Rotate block ``block`` of ``BLOCK_ROWS`` rows of one tensor."""
    # Rows (i0, i1, i2) in memory order; int64 offsets, as x may exceed 2**31 elements.
    rows = block.to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    i2 = rows % n2
    i1 = (rows // n2) % n1
    i0 = rows // n2 // n1
    x_row = (i0 * x_stride0 + i1 * x_stride1 + i2 * x_stride2)[:, None]  # (rows, 1)
    out_row = (i0 * out_stride0 + i1 * out_stride1 + i2 * out_stride2)[:, None]
    c_row = (i0 * c_stride0 + i1 * c_stride1 + i2 * c_stride2)[:, None]

    pairs = tl.arange(0, BLOCK_PAIRS)[None, :]  # (1, pairs)
    mask = row_mask[:, None] & (pairs < r2)
    c = tl.load(c_ptr + c_row + pairs, mask=mask, other=0)
    s = tl.load(s_ptr + c_row + pairs, mask=mask, other=0)
    if INTERLEAVED:
        # One contiguous (rows, 2·pairs) tile, split into its even and odd channels.
        channels = tl.arange(0, 2 * BLOCK_PAIRS)[None, :]
        tile_mask = row_mask[:, None] & (channels < 2 * r2)
        tile = _load(x_ptr + x_row + channels, tile_mask, BF16_BITS).to(c.dtype)
        a, b = tl.split(tl.reshape(tile, (BLOCK_ROWS, BLOCK_PAIRS, 2)))
    else:
        a = _load(x_ptr + x_row + pairs, mask, BF16_BITS).to(c.dtype)
        b = _load(x_ptr + x_row + r2 + pairs, mask, BF16_BITS).to(c.dtype)

    # Each product rounded, then the difference or sum (no fused multiply-add at launch).
    new_a = a * c - b * s
    new_b = b * c + a * s

    if INTERLEAVED:
        rotated = tl.reshape(tl.join(new_a, new_b), (BLOCK_ROWS, 2 * BLOCK_PAIRS))
        ptrs = out_ptr + out_row + channels
        tl.store(ptrs, _narrow(rotated, out_ptr, BF16_BITS), mask=tile_mask)
    else:
        tl.store(out_ptr + out_row + pairs, _narrow(new_a, out_ptr, BF16_BITS), mask=mask)
        ptrs = out_ptr + out_row + r2 + pairs
        tl.store(ptrs, _narrow(new_b, out_ptr, BF16_BITS), mask=mask)

    if COPY_TAIL:
        # Channels past rotary_dim, bit for bit (into another buffer only).
        tail = 2 * r2 + tl.arange(0, BLOCK_TAIL)[None, :]
        tail_mask = row_mask[:, None] & (tail < head_dim)
        values = tl.load(x_ptr + x_row + tail, mask=tail_mask)
        tl.store(out_ptr + out_row + tail, values, mask=tail_mask)


# The row counts vary with every sequence length: not specialized, to spare recompiles.
@triton.jit(do_not_specialize=["first_blocks", "q_rows", "q_n1", "q_n2", "k_rows", "k_n1", "k_n2"])
def _rotate_kernel(
    first_blocks,
    q_ptr,
    q_out_ptr,
    q_c_ptr,
    q_s_ptr,
    q_rows,
    q_n1,
    q_n2,
    q_stride0,
    q_stride1,
    q_stride2,
    q_out_stride0,
    q_out_stride1,
    q_out_stride2,
    q_c_stride0,
    q_c_stride1,
    q_c_stride2,
    q_head_dim,
    k_ptr,
    k_out_ptr,
    k_c_ptr,
    k_s_ptr,
    k_rows,
    k_n1,
    k_n2,
    k_stride0,
    k_stride1,
    k_stride2,
    k_out_stride0,
    k_out_stride1,
    k_out_stride2,
    k_c_stride0,
    k_c_stride1,
    k_c_stride2,
    k_head_dim,
    r2,
    TWO: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    BF16_BITS: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_PAIRS: tl.constexpr,
    BLOCK_TAIL: tl.constexpr,
):
    """The first ``first_blocks`` programs rotate q's rows, the rest (``TWO``) k's."""
    block = tl.program_id(0)
    if TWO and block >= first_blocks:
        _rotate_rows(
            block - first_blocks,
            k_ptr,
            k_out_ptr,
            k_c_ptr,
            k_s_ptr,
            k_rows,
            k_n1,
            k_n2,
            k_stride0,
            k_stride1,
            k_stride2,
            k_out_stride0,
            k_out_stride1,
            k_out_stride2,
            k_c_stride0,
            k_c_stride1,
            k_c_stride2,
            k_head_dim,
            r2,
            INTERLEAVED,
            BF16_BITS,
            COPY_TAIL,
            BLOCK_ROWS,
            BLOCK_PAIRS,
            BLOCK_TAIL,
        )
    else:
        _rotate_rows(
            block,
            q_ptr,
            q_out_ptr,
            q_c_ptr,
            q_s_ptr,
            q_rows,
            q_n1,
            q_n2,
            q_stride0,
            q_stride1,
            q_stride2,
            q_out_stride0,
            q_out_stride1,
            q_out_stride2,
            q_c_stride0,
            q_c_stride1,
            q_c_stride2,
            q_head_dim,
            r2,
            INTERLEAVED,
            BF16_BITS,
            COPY_TAIL,
            BLOCK_ROWS,
            BLOCK_PAIRS,
            BLOCK_TAIL,
        )


def _table_strides(c: Tensor) -> list[int]:
    """A contiguous table's strides along x's ``(batch, heads, seq)``; 0 where it broadcasts."""
    if c.dim() == 2:  # (seq | 1, r2)
        sizes, strides = [1, 1, c.shape[0]], [0, 0, c.stride(0)]
    else:  # (batch | 1, 1, seq | 1, r2)
        sizes, strides = [c.shape[0], 1, c.shape[2]], [c.stride(0), 0, c.stride(2)]
    return [stride if size > 1 else 0 for size, stride in zip(sizes, strides, strict=True)]


Item = tuple[Tensor, Tensor, Tensor, Tensor | None]


def _arguments(x: Tensor, c: Tensor, s: Tensor, out: Tensor | None) -> list[Any]:
    """One tensor's kernel arguments: pointers, row counts and strides in x's memory order."""
    c, s = c.contiguous(), s.contiguous()
    target = x if out is None else out
    if x.dtype == torch.bfloat16:  # the kernel converts bfloat16 from and to its bits itself
        x, target = x.view(torch.int16), target.view(torch.int16)
    # The leading dims, largest stride of x first: a block of rows is a span of memory.
    strides = x.stride()
    order = sorted(range(3), key=lambda d: -strides[d])
    shape = [x.shape[d] for d in order]
    c_strides = _table_strides(c)
    return [
        x,
        target,
        c,
        s,
        shape[0] * shape[1] * shape[2],
        shape[1],
        shape[2],
        *[x.stride(d) for d in order],
        *[target.stride(d) for d in order],
        *[c_strides[d] for d in order],
        x.shape[-1],
    ]


def run_triton(items: list[Item], interleaved: bool, rotary_dim: int) -> None:
    """Rotate each ``(x, c, s, out)`` in place (``out is None``) or into ``out``, with its
    other channels; two items of one dtype (q and k) in one launch.

    ``x`` is ``(batch, heads, seq, head_dim)`` with unit channel stride (any strides on the
    rest); ``c``, ``s`` are ``(seq | 1, rotary_dim / 2)`` or
    ``(batch | 1, 1, seq | 1, rotary_dim / 2)`` in the compute dtype on ``x``'s device;
    ``out`` has ``x``'s shape, dtype and device, unit channel stride and any other strides.
    """
    items = [item for item in items if item[0].numel() > 0]
    fused = (
        len(items) == 2
        and items[0][0].dtype == items[1][0].dtype
        and (items[0][3] is None) == (items[1][3] is None)
    )
    for group in [items] if fused else [[item] for item in items]:
        _launch(group, interleaved, rotary_dim)


def _launch(items: list[Item], interleaved: bool, rotary_dim: int) -> None:
    """One launch over the rows of one or two tensors (same dtype, both in place or not)."""
    x = items[0][0]
    r2 = rotary_dim // 2
    head_dim = max(item[0].shape[-1] for item in items)
    copy_tail = items[0][3] is not None and rotary_dim < head_dim
    n_rows = [item[0].numel() // item[0].shape[-1] for item in items]

    block_pairs = triton.next_power_of_2(max(1, r2))
    block_tail = triton.next_power_of_2(max(1, head_dim - rotary_dim)) if copy_tail else 1
    width = max(2 * block_pairs, block_tail)
    block_rows = max(1, min(_TILE // width, triton.next_power_of_2(max(n_rows))))
    blocks = [triton.cdiv(n, block_rows) for n in n_rows]

    first = _arguments(*items[0])
    second = _arguments(*items[1]) if len(items) == 2 else first
    # Triton launches on the current CUDA device: make it x's.
    device = torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
    with device:
        _rotate_kernel[(sum(blocks),)](
            blocks[0],
            *first,
            *second,
            r2,
            TWO=len(items) == 2,
            INTERLEAVED=interleaved,
            BF16_BITS=x.dtype == torch.bfloat16,
            COPY_TAIL=copy_tail,
            BLOCK_ROWS=block_rows,
            BLOCK_PAIRS=block_pairs,
            BLOCK_TAIL=block_tail,
            num_warps=4,
            enable_fp_fusion=False,
        )

"""The CPU rotation kernels, compiled by numba (the ``fast`` extra); imported only when present.

One call rotates q and k (or one tensor) — each ``(batch, heads, seq, head_dim)`` with any
strides along the first three dimensions and unit stride along channels. A job is one batch
row and a range of positions; it rotates those positions in every head of q and then of k, as
runs of rows adjacent in memory (a head's positions, or, for ``(batch, seq, heads, dim)``
memory, a position's heads). Jobs run in parallel (``prange``: all the threads numba is
allowed, set per call from ``torch.get_num_threads()``) or, on one thread, one after the other
without numba's threading layer. Each row's pairs are rotated in a loop LLVM vectorizes
(through slices: indexing one array at two offsets does not), while the row 32 rows on is
prefetched (``llvm.prefetch``).

* In place, only the first ``rotary_dim`` channels of a row are read and written: pass-through
  channels are untouched.
* Out of place, the whole row is copied (pass-through channels come along in the same pass)
  and the copy is rotated in place while it is in L1: a loop from one array into another has
  too many pointer pairs for LLVM's runtime alias checks and stays scalar.

Arithmetic is float32 for float32, bfloat16 and float16 (float64 for float64) with the same
roundings as the torch path: ``a·c − b·s`` and ``b·c + a·s``, each product rounded, then
the sum, then one rounding to the storage dtype (no fused multiply-add: numba does not
contract without ``fastmath``). Half-precision elements are widened in registers: no
converted copy of the input is made.

Arrays are one-dimensional views of each tensor's storage with element offsets: slices of a
C-contiguous 1-D array keep unit stride, which is what lets LLVM vectorize the row loop.
bfloat16 travels as int16 bits and float16 as uint16 bits (the storage type picks the
conversion), converted in registers (bfloat16 with torch's
round-to-nearest-even and its NaN, float16 with the hardware conversion).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

__all__ = ["kernel_for"]


@intrinsic
def _f32_bits(typingctx: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def _bits_f32(typingctx: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@intrinsic
def _half_to_f32(typingctx: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.int16), codegen


@intrinsic
def _f32_to_half(typingctx: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.int16(types.float32), codegen


def _prefetcher(write: int) -> Any:
    """An intrinsic ``(array, index)`` that asks for the cache line of ``array[index]`` ahead
    of its use (``llvm.prefetch``; ``write`` fetches it owned, as a store will want it). A
    prefetch never faults, whatever the address."""

    @intrinsic
    def prefetch(typingctx: Any, array: Any, index: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]])
            i32 = ir.IntType(32)
            name = (
                "llvm.prefetch.p0"
                if getattr(pointer.type, "is_opaque", False)
                else ("llvm.prefetch.p0i8")
            )
            function_type = ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32])
            function = cgutils.get_or_insert_function(builder.module, function_type, name)
            # (address, write, locality 3 = keep in every cache level, data cache)
            builder.call(function, [pointer, i32(write), i32(3), i32(1)])
            return context.get_dummy_value()

        return types.void(array, types.intp), codegen

    return prefetch


_prefetch_read = _prefetcher(0)
_prefetch_write = _prefetcher(1)


def _load(bits: Any) -> Any:
    """A stored element as float32 (float64 stays float64)."""
    raise NotImplementedError  # replaced by the overload in compiled code


def _store(value: Any, like: Any) -> Any:
    """``value`` rounded once to the storage type of the array ``like``."""
    raise NotImplementedError


@overload(_load)
def _load_overload(bits):
    if bits == types.int16:  # bfloat16 bits
        return lambda bits: _bits_f32(np.uint32(np.uint16(bits)) << np.uint32(16))
    if bits == types.uint16:  # float16 bits
        return lambda bits: _half_to_f32(np.int16(bits))
    return lambda bits: bits


@overload(_store)
def _store_overload(value, like):
    if like.dtype == types.int16:
        # torch's float -> bfloat16: round to nearest even; NaN -> 0x7FC0.
        def to_bf16(value, like):
            u = _f32_bits(value)
            bias = np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
            rounded = np.int16((u + bias) >> np.uint32(16))
            return np.int16(0x7FC0) if value != value else rounded

        return to_bf16
    if like.dtype == types.uint16:
        return lambda value, like: np.uint16(_f32_to_half(value))
    return lambda value, like: value


@njit(inline="always")
def _rotate_row(x, xo, c, s, co, r2, interleaved):
    """Rotate the first ``2·r2`` channels of the row of ``x`` at ``xo`` in place.

    One loop whose slices are what LLVM's runtime alias checks can clear (reading and writing
    the same slices; ``c`` and ``s`` only read), so it vectorizes; the out-of-place kernels
    copy the row first and rotate the copy here (a loop from ``x`` into another array has too
    many pointer pairs to check and stays scalar)."""
    cr = c[co : co + r2]
    sr = s[co : co + r2]
    if interleaved:
        xr = x[xo : xo + 2 * r2]
        for i in range(r2):
            a = _load(xr[2 * i])
            b = _load(xr[2 * i + 1])
            xr[2 * i] = _store(a * cr[i] - b * sr[i], xr)
            xr[2 * i + 1] = _store(b * cr[i] + a * sr[i], xr)
    else:
        # Two slices of one row: disjoint, so LLVM's runtime alias check passes.
        xa = x[xo : xo + r2]
        xb = x[xo + r2 : xo + 2 * r2]
        for i in range(r2):
            a = _load(xa[i])
            b = _load(xb[i])
            xa[i] = _store(a * cr[i] - b * sr[i], xa)
            xb[i] = _store(b * cr[i] + a * sr[i], xb)


#: rows ahead of the one being rotated whose cache lines are prefetched (8 KiB of bfloat16,
#: 16 KiB of float32 at head_dim 128): with the hardware prefetcher alone one core waits on
#: memory (docs/performance.md)
_AHEAD = 32


@njit(inline="always")
def _prefetch_row(x, xo, width, write):
    """Prefetch the row of ``x`` at ``xo`` if it lies in ``x``."""
    if xo + width <= x.size:
        step = max(1, 64 // x.itemsize)  # elements per 64-byte cache line
        for i in range(0, width, step):
            if write:
                _prefetch_write(x, xo + i)
            else:
                _prefetch_read(x, xo + i)


@njit(inline="always")
def _copy_row(x, xo, w, wo, width):
    xr = x[xo : xo + width]
    wr = w[wo : wo + width]
    for i in range(width):
        wr[i] = xr[i]


@njit(inline="always")
def _run(x, xo, xs, w, wo, ws, c, s, co, cs, n, r2, width, interleaved, inplace):
    """``n`` rows ``xs`` apart (tables ``cs`` apart), each rotated in place, or copied whole
    (pass-through channels too) into ``w`` and rotated there while in L1. The row
    ``_AHEAD`` rows on (in the next run, past the end of this one) is prefetched."""
    for p in range(n):
        ahead = (p + _AHEAD) * xs
        if inplace:
            _prefetch_row(x, xo + ahead, width, True)
            _rotate_row(x, xo + p * xs, c, s, co + p * cs, r2, interleaved)
        else:
            # Only x: prefetching w's lines too measured slower (docs/performance.md).
            _prefetch_row(x, xo + ahead, width, False)
            _copy_row(x, xo + p * xs, w, wo + p * ws, width)
            _rotate_row(w, wo + p * ws, c, s, co + p * cs, r2, interleaved)


@njit(inline="always")
def _part(x, w, c, s, meta, t, b, first, tile, r2, interleaved, inplace):
    """Positions ``first … first + tile − 1`` of batch row ``b`` of tensor ``t``, every head."""
    nb, nh, ns = meta[t, 0], meta[t, 1], meta[t, 2]
    if b >= nb or first >= ns:
        return
    count = min(ns, first + tile) - first
    # Locals, not meta[...] in the row loops: LLVM cannot tell that stores to x leave meta be.
    xs_h, xs_s = meta[t, 4], meta[t, 5]
    ws_h, ws_s = meta[t, 7], meta[t, 8]
    cs_s = meta[t, 10]
    width = meta[t, 12]
    x_base = b * meta[t, 3] + first * xs_s
    w_base = b * meta[t, 6] + first * ws_s
    c_base = b * meta[t, 9] + first * cs_s
    # Runs of adjacent rows: heads apart in memory, a head's positions (tables step by
    # position); else ((batch, seq, heads, dim) memory) a position's heads (one table row).
    # One loop nest for both, with the strides chosen here: each branch's own copy of the
    # inlined row loops multiplied the kernel's LLVM code and its compile time.
    if meta[t, 11]:
        runs, run_x, run_w, run_c = nh, xs_h, ws_h, 0
        rows, row_x, row_w, row_c = count, xs_s, ws_s, cs_s
    else:
        runs, run_x, run_w, run_c = count, xs_s, ws_s, cs_s
        rows, row_x, row_w, row_c = nh, xs_h, ws_h, 0
    for r in range(runs):
        xo, wo, co = x_base + r * run_x, w_base + r * run_w, c_base + r * run_c
        _run(x, xo, row_x, w, wo, row_w, c, s, co, row_c, rows, r2, width, interleaved, inplace)


@njit(inline="always")
def _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace):
    """Every job — one batch row × one tile of positions, q's heads then k's — in a parallel
    loop in a ``parallel=True`` kernel, a plain loop in a serial one (the same code inlined).
    q and k go through one inlined :func:`_part` (arrays picked per ``t``), not one each:
    half the code to compile."""
    tiles = max((meta[0, 2] + tile - 1) // tile, (meta[1, 2] + tile - 1) // tile)
    jobs = max(meta[0, 0], meta[1, 0]) * tiles
    for job in prange(jobs):
        b = job // tiles
        first = (job - b * tiles) * tile
        for t in range(2):
            x = x0 if t == 0 else x1
            w = w0 if t == 0 else w1
            c = c0 if t == 0 else c1
            s = s0 if t == 0 else s1
            _part(x, w, c, s, meta, t, b, first, tile, r2, interleaved, inplace)


# The kernels. ``meta[t]`` describes tensor ``t`` (q, k): its sizes (batch, heads, seq); the
# strides along them of ``x`` and of ``w`` (the output; ignored in place); the tables'
# strides along batch and seq (0 where they broadcast); 1 when heads are further apart in
# memory than positions; the row length (head_dim). A tensor with no rows is skipped: one
# tensor is rotated by passing a second with ``meta[1] == 0``. ``tile`` is the positions per
# job (:func:`posenc.rotary.kernels.fast.positions_per_job`). ``*_32``/``*_64`` are the same
# loop for rotary dims 64 and 128 (the common head dims): with the pair count a constant,
# LLVM drops the per-row remainder and trip-count code, a quarter of the time. The
# ``serial_*`` kernels run on one thread without the threading layer: numba's OpenMP pool
# spins between parallel regions, which took a core from every other process (two 1-thread
# trainings side by side ran 2.7× slower).


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_rows(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace)


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_rows_32(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 32, tile, interleaved, inplace)


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_rows_64(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 64, tile, interleaved, inplace)


@njit(error_model="numpy", cache=True)
def serial_rows(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace)


@njit(error_model="numpy", cache=True)
def serial_rows_32(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 32, tile, interleaved, inplace)


@njit(error_model="numpy", cache=True)
def serial_rows_64(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, tile, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 64, tile, interleaved, inplace)


def kernel_for(pairs: int, threads: int):
    """The kernel for ``pairs`` pairs per row on ``threads`` threads."""
    if threads > 1:
        return {32: rotate_rows_32, 64: rotate_rows_64}.get(pairs, rotate_rows)
    return {32: serial_rows_32, 64: serial_rows_64}.get(pairs, serial_rows)

"""The CPU rotation kernels, compiled by numba (the ``fast`` extra); imported only when present.

The kernel walks the rows of q (and k, in the same call) — the three leading dimensions,
given in memory order by the caller so that consecutive rows are near in memory — in blocks
of consecutive rows run in parallel (``prange``: all the threads numba is allowed, set per
call from ``torch.get_num_threads()``), and rotates the ``rotary_dim / 2`` pairs of a row in
a loop LLVM vectorizes (through slices: indexing one array at two offsets does not).
Arithmetic is float32 for float32, bfloat16 and float16 (float64 for float64) with the same
roundings as the torch path: ``a·c − b·s`` and ``b·c + a·s``, each product rounded, then
the sum, then one rounding to the storage dtype (no fused multiply-add: numba does not
contract without ``fastmath``).

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
from numba.extending import intrinsic, overload

__all__ = ["ROWS_PER_JOB", "kernel_for"]


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


#: rows per parallel job: enough that a job's set-up (one division per index) is amortized,
#: few enough that both cores get work on a single head's rows.
ROWS_PER_JOB = 64


@njit(inline="always")
def _rotate_row_out(x, xo, w, wo, c, s, co, r2, interleaved):
    cr = c[co : co + r2]
    sr = s[co : co + r2]
    if interleaved:
        xr = x[xo : xo + 2 * r2]
        wr = w[wo : wo + 2 * r2]
        for i in range(r2):
            a = _load(xr[2 * i])
            b = _load(xr[2 * i + 1])
            wr[2 * i] = _store(a * cr[i] - b * sr[i], wr)
            wr[2 * i + 1] = _store(b * cr[i] + a * sr[i], wr)
    else:
        xa = x[xo : xo + r2]
        xb = x[xo + r2 : xo + 2 * r2]
        wa = w[wo : wo + r2]
        wb = w[wo + r2 : wo + 2 * r2]
        for i in range(r2):
            a = _load(xa[i])
            b = _load(xb[i])
            wa[i] = _store(a * cr[i] - b * sr[i], wa)
            wb[i] = _store(b * cr[i] + a * sr[i], wb)


@njit(inline="always")
def _rotate_row_in(x, xo, c, s, co, r2, interleaved):
    # Not _rotate_row_out(x, xo, x, xo, ...): with the output the input, LLVM's runtime alias
    # check fails and the scalar loop runs; reading and writing the same slices vectorizes.
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


@njit(inline="always")
def _jobs(meta):
    """Jobs of tensor 0, and of both."""
    rows0 = meta[0, 0] * meta[0, 1] * meta[0, 2]
    rows1 = meta[1, 0] * meta[1, 1] * meta[1, 2]
    jobs0 = (rows0 + ROWS_PER_JOB - 1) // ROWS_PER_JOB
    return jobs0, jobs0 + (rows1 + ROWS_PER_JOB - 1) // ROWS_PER_JOB


@njit(inline="always")
def _job(job, jobs0, x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    """One block of ``ROWS_PER_JOB`` consecutive rows of tensor 0 or 1."""
    t = 0 if job < jobs0 else 1
    rows = meta[t, 0] * meta[t, 1] * meta[t, 2]
    first = (job if t == 0 else job - jobs0) * ROWS_PER_JOB
    last = min(rows, first + ROWS_PER_JOB)
    x = x0 if t == 0 else x1
    w = w0 if t == 0 else w1
    c = c0 if t == 0 else c1
    s = s0 if t == 0 else s1
    # Locals, not meta[...] in the row loop: LLVM cannot tell that stores to x leave meta be.
    n1, n2 = meta[t, 1], meta[t, 2]
    xs0, xs1, xs2 = meta[t, 3], meta[t, 4], meta[t, 5]
    ws0, ws1, ws2 = meta[t, 6], meta[t, 7], meta[t, 8]
    cs0, cs1, cs2 = meta[t, 9], meta[t, 10], meta[t, 11]
    i0 = first // (n1 * n2)
    i1 = (first // n2) % n1
    i2 = first % n2
    for _ in range(first, last):
        xo = i0 * xs0 + i1 * xs1 + i2 * xs2
        co = i0 * cs0 + i1 * cs1 + i2 * cs2
        if inplace:
            _rotate_row_in(x, xo, c, s, co, r2, interleaved)
        else:
            _rotate_row_out(x, xo, w, i0 * ws0 + i1 * ws1 + i2 * ws2, c, s, co, r2, interleaved)
        i2 += 1  # the next row, like an odometer: no division per row
        if i2 == n2:
            i2 = 0
            i1 += 1
            if i1 == n1:
                i1 = 0
                i0 += 1


@njit(inline="always")
def _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    """Every job of q and k: a parallel loop in a ``parallel=True`` kernel, a plain loop in a
    serial one (the same code inlined into both)."""
    jobs0, jobs = _jobs(meta)
    for job in prange(jobs):
        _job(job, jobs0, x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace)


# The kernels. ``meta[t]`` describes tensor ``t``: its three leading sizes in memory order,
# then along them the strides of ``x``, of ``w`` (the output; ignored in place) and of the
# tables. A tensor with no rows is skipped: one tensor is rotated by passing a second with
# ``meta[1, :3] == 0``. ``*_32``/``*_64`` are the same loop for rotary dims 64 and 128 (the
# common head dims): with the pair count a constant, LLVM drops the per-row remainder and
# trip-count code, a quarter of the time. The ``serial_*`` kernels run on one thread without
# the threading layer: numba's OpenMP pool spins between parallel regions, which took a core
# from every other process (two 1-thread trainings side by side ran 2.7× slower).


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_rows(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace)


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_rows_32(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 32, interleaved, inplace)


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_rows_64(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 64, interleaved, inplace)


@njit(error_model="numpy", cache=True)
def serial_rows(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace)


@njit(error_model="numpy", cache=True)
def serial_rows_32(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 32, interleaved, inplace)


@njit(error_model="numpy", cache=True)
def serial_rows_64(x0, w0, c0, s0, x1, w1, c1, s1, meta, r2, interleaved, inplace):
    _all_jobs(x0, w0, c0, s0, x1, w1, c1, s1, meta, 64, interleaved, inplace)


def kernel_for(pairs: int, threads: int):
    """The kernel for ``pairs`` pairs per row on ``threads`` threads."""
    if threads > 1:
        return {32: rotate_rows_32, 64: rotate_rows_64}.get(pairs, rotate_rows)
    return {32: serial_rows_32, 64: serial_rows_64}.get(pairs, serial_rows)

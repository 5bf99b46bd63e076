"""The CPU rotation kernels, compiled by numba (the ``fast`` extra); imported only when present.

Every kernel walks the rows of ``x`` — the three leading dimensions, given in memory order by
the caller so that consecutive rows are near in memory — in parallel (``prange``: all the
threads numba is allowed, set per call from ``torch.get_num_threads()``), and rotates the
``rotary_dim / 2`` pairs of a row in a loop LLVM vectorizes. Arithmetic is float32 for
float32, bfloat16 and float16 (float64 for float64) with the same roundings as the torch
path: ``a·c − b·s`` and ``b·c + a·s``, each product rounded, then the sum, then one rounding
to the storage dtype (no fused multiply-add: numba does not contract without ``fastmath``).

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

__all__ = ["rotate_in", "rotate_out"]


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


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_out(x, x_strides, out, out_strides, c, s, c_strides, shape, r2, interleaved):
    """Rotate into ``out`` (another buffer); rows in the order ``shape`` gives."""
    n0, n1, n2 = shape[0], shape[1], shape[2]
    for row in prange(n0 * n1 * n2):
        i0 = row // (n1 * n2)
        i1 = (row // n2) % n1
        i2 = row % n2
        xo = i0 * x_strides[0] + i1 * x_strides[1] + i2 * x_strides[2]
        oo = i0 * out_strides[0] + i1 * out_strides[1] + i2 * out_strides[2]
        co = i0 * c_strides[0] + i1 * c_strides[1] + i2 * c_strides[2]
        cr = c[co : co + r2]
        sr = s[co : co + r2]
        if interleaved:
            xr = x[xo : xo + 2 * r2]
            w = out[oo : oo + 2 * r2]
            for i in range(r2):
                a = _load(xr[2 * i])
                b = _load(xr[2 * i + 1])
                w[2 * i] = _store(a * cr[i] - b * sr[i], w)
                w[2 * i + 1] = _store(b * cr[i] + a * sr[i], w)
        else:
            xa = x[xo : xo + r2]
            xb = x[xo + r2 : xo + 2 * r2]
            wa = out[oo : oo + r2]
            wb = out[oo + r2 : oo + 2 * r2]
            for i in range(r2):
                a = _load(xa[i])
                b = _load(xb[i])
                wa[i] = _store(a * cr[i] - b * sr[i], wa)
                wb[i] = _store(b * cr[i] + a * sr[i], wb)


@njit(parallel=True, error_model="numpy", cache=True)
def rotate_in(x, x_strides, c, s, c_strides, shape, r2, interleaved):
    """Rotate ``x`` in place; rows in the order ``shape`` gives."""
    n0, n1, n2 = shape[0], shape[1], shape[2]
    for row in prange(n0 * n1 * n2):
        i0 = row // (n1 * n2)
        i1 = (row // n2) % n1
        i2 = row % n2
        xo = i0 * x_strides[0] + i1 * x_strides[1] + i2 * x_strides[2]
        co = i0 * c_strides[0] + i1 * c_strides[1] + i2 * c_strides[2]
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

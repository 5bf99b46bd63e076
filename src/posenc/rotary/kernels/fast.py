"""The fast implementations of the rotation: numba's CPU kernels and the Triton CUDA kernel,
as torch custom ops.

:func:`run_fast` runs the kernel of the tensors' device on one or two ``(x, c, s, out)``
(q and k share one call); the ops ``posenc::rotate``, ``posenc::rotate_out`` and
``posenc::rotate_`` wrap it for autograd (the backward is the rotation by −θ, ``(c, −s)``)
and for ``torch.compile(fullgraph=True)``. The kernels themselves are
:mod:`posenc.rotary.kernels._numba` (the ``fast`` extra) and
:mod:`posenc.rotary.kernels._triton` (triton comes with torch's CUDA builds), imported only
when their package is installed. :mod:`posenc.rotary.kernels` dispatches here.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "FAST",
    "FAST_DTYPES",
    "numba_kernels",
    "positions_per_job",
    "run_fast",
    "triton_kernel",
]

#: the dtypes the fast kernels serve, by their names in the kernels
FAST_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
}


#: parallel jobs per thread of the numba kernels (a job: one batch row, a range of positions)
JOBS_PER_THREAD = 4


def positions_per_job(seq: int, batch: int, threads: int) -> int:
    """Positions per job of the numba kernels: all of them on one thread (each head's rows
    are then one long run, which the prefetchers stream best), else enough jobs for every
    thread to get several, each at least 64 positions long."""
    if threads == 1:
        return max(1, seq)
    per_batch = -(-JOBS_PER_THREAD * threads // max(1, batch))
    return max(64, -(-seq // per_batch))


@cache
def numba_kernels() -> Any:
    """``kernel_for(pairs, threads)`` of the compiled kernels, or None without the ``fast``
    extra."""
    if importlib.util.find_spec("numba") is None:
        return None
    from posenc.rotary.kernels._numba import kernel_for

    return kernel_for


@cache
def triton_kernel() -> Any:
    """``run_triton``, or None without triton (it comes with torch's CUDA builds)."""
    if importlib.util.find_spec("triton") is None:
        return None
    from posenc.rotary.kernels._triton import run_triton

    return run_triton


#: the device type each fast implementation serves, and its availability check
FAST = {"numba": ("cpu", numba_kernels), "triton": ("cuda", triton_kernel)}


def _layout(x: Tensor, target: Tensor, c: Tensor) -> list[int]:
    """The kernels' description of one tensor (``meta[t]`` in :mod:`._numba`): sizes (batch,
    heads, seq), strides of ``x`` and of ``target`` along them, the tables' strides along
    batch and seq (0 where they broadcast), 1 when heads lie further apart than positions, and
    the row length (head_dim: out of place, whole rows are copied)."""
    if c.dim() == 2:  # (seq, r2)
        c_batch, c_seq = 0, c.stride(0)
    else:  # (batch | 1, 1, seq, r2)
        c_batch, c_seq = (c.stride(0) if c.shape[0] > 1 else 0), c.stride(2)
    if x.shape[2] == 1 or c.shape[-2] == 1:  # one position: the same table row for every row
        c_seq = 0
    return [
        *x.shape[:3],
        *x.stride()[:3],
        *target.stride()[:3],
        c_batch,
        c_seq,
        int(x.stride(1) >= x.stride(2)),
        x.shape[3],
    ]


def _storage(t: Tensor) -> Any:
    """A 1-D numpy view from ``t``'s first element to its last (offsets are ``t``'s strides)."""
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True))
    flat = torch.as_strided(t, (span,), (1,), t.storage_offset())
    if t.dtype == torch.bfloat16:
        flat = flat.view(torch.int16)  # the kernels' marker for bfloat16 bits
    elif t.dtype == torch.float16:
        flat = flat.view(torch.uint16)  # and for float16 bits
    return flat.numpy()


def _run_one(
    x: Tensor, c: Tensor, s: Tensor, interleaved: bool, rotary_dim: int, out: Tensor | None
) -> None:
    """Rotate ``x`` into ``out``, or in place when ``out`` is None (the custom ops' body)."""
    run_fast([(x, c, s, out)], interleaved, rotary_dim, inplace=out is None)


def run_fast(
    items: list[tuple[Tensor, Tensor, Tensor, Tensor | None]],
    interleaved: bool,
    rotary_dim: int,
    *,
    inplace: bool,
) -> None:
    """The fast kernel of the items' device on one or two ``(x, c, s, out)``."""
    if items[0][0].device.type == "cuda":
        triton_kernel()(items, interleaved, rotary_dim)  # q and k in one launch
        return
    _run_numba(items, interleaved, rotary_dim, inplace=inplace)


def _run_numba(
    items: list[tuple[Tensor, Tensor, Tensor, Tensor | None]],
    interleaved: bool,
    rotary_dim: int,
    *,
    inplace: bool,
) -> None:
    """One kernel call for one or two ``(x, c, s, out)``: q and k share the parallel loop."""
    kernel_for = numba_kernels()
    assert kernel_for is not None
    items = [item for item in items if item[0].numel() > 0]
    if not items:
        return
    import numba
    import numpy as np

    limit: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    threads = max(1, min(torch.get_num_threads(), limit))
    kernel = kernel_for(rotary_dim // 2, threads)
    if threads > 1:
        numba.set_num_threads(threads)
    meta = np.zeros((2, 13), np.int64)
    arrays = []
    for t, (x, c, s, out) in enumerate(items):
        # The kernels read c and s at the same offsets, with unit stride along the pairs: a
        # pair view of full-width tables (half of each row) is read in place.
        if c.stride(-1) != 1 or c.stride() != s.stride():
            c, s = c.contiguous(), s.contiguous()
        target = x if out is None else out
        meta[t] = _layout(x, target, c)
        arrays.append((_storage(x), _storage(target), _storage(c), _storage(s)))
    if len(arrays) == 1:
        arrays.append(arrays[0])  # meta[1] is all zeros: no rows
    tile = positions_per_job(int(meta[:, 2].max()), int(meta[:, 0].max()), threads)
    kernel(*arrays[0], *arrays[1], meta, rotary_dim // 2, tile, interleaved, inplace)


@torch.library.custom_op("posenc::rotate", mutates_args=())
def _rotate_op(x: Tensor, c: Tensor, s: Tensor, interleaved: bool, rotary_dim: int) -> Tensor:
    out = torch.empty_like(x)
    _run_one(x, c, s, interleaved, rotary_dim, out)
    return out


@_rotate_op.register_fake
def _(x: Tensor, c: Tensor, s: Tensor, interleaved: bool, rotary_dim: int) -> Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    _, c, s, interleaved, rotary_dim = inputs
    ctx.save_for_backward(c, s)
    ctx.interleaved = interleaved
    ctx.rotary_dim = rotary_dim


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    # The rotation is orthogonal: its transpose is the rotation by −θ.
    c, s = ctx.saved_tensors
    grad_x = torch.ops.posenc.rotate(grad.contiguous(), c, -s, ctx.interleaved, ctx.rotary_dim)
    return grad_x, None, None, None, None


_rotate_op.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("posenc::rotate_out", mutates_args=("out",))
def _rotate_out_op(
    x: Tensor, c: Tensor, s: Tensor, interleaved: bool, rotary_dim: int, out: Tensor
) -> None:
    _run_one(x, c, s, interleaved, rotary_dim, out)


@torch.library.custom_op("posenc::rotate_", mutates_args=("x",))
def _rotate_inplace_op(x: Tensor, c: Tensor, s: Tensor, interleaved: bool, rotary_dim: int) -> None:
    _run_one(x, c, s, interleaved, rotary_dim, None)

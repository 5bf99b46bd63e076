"""Applying RoPE's rotation fast: one entry point, four implementations, autograd.

Every rotary encoding in posenc (RoPE with any scaling and attention factor, xPos with its
scale folded into the tables, axial and mixed RoPE, partial rotary) ends in one operation:
given one ``c = A·cos θ`` and ``s = A·sin θ`` per channel pair, each pair ``(a, b)`` of the
first ``rotary_dim`` channels becomes ``(a·c − b·s, b·c + a·s)`` and the other channels pass
through. :func:`rotate` does it

* out of place (a new tensor, autograd supported),
* into a caller's buffer (``out=``), or
* in place (``inplace=True``: ``x`` is overwritten; for inference and KV caches),

with one of these implementations (``impl``):

=========  ==================================================================================
``torch``  pure torch, always available; differentiable, traceable by ``torch.compile``.
           float16/bfloat16 compute in float32 and round once.
``numba``  CPU kernels from the ``fast`` extra (``pip install posenc[fast]``): one pass over
           q and k, every core, conversions in registers (:mod:`posenc.rotary._numba_kernels`).
``triton`` the CUDA kernel (:mod:`posenc.rotary._triton_kernels`; triton comes with torch's
           CUDA builds): one launch per tensor, strides as arguments, no copies.
``auto``   ``numba`` on the CPU (for tensors of at least ``FAST_MIN_ELEMENTS``) and ``triton``
           on CUDA when installed and the call is served (strided rows with unit channel
           stride, tables without gradients), else ``torch``. The default.
=========  ==================================================================================

:func:`rotate_pair` rotates q and k in one kernel call (the attention's path; in place when
no gradient is needed, as q and k are fresh projections there).

All implementations give the same bits: float32 arithmetic for float32, bfloat16 and
float16 (float64 for float64), each product and sum rounded as torch rounds them (no fused
multiply-add), one rounding on store. The fast paths' gradient is a custom autograd
function whose backward is the rotation by ``−θ`` (``(c, −s)``) through the same kernel,
registered as a torch custom op (``posenc::rotate``) so that ``torch.compile(fullgraph=True)``
keeps it in one graph.

``set_rotary_impl`` sets the process default; ``rotary_impl(name)`` is the same as a
context manager (tests and benchmarks force a path with it).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from functools import cache
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices
from posenc.rotary.layouts import pair_views

__all__ = [
    "Impl",
    "available_impls",
    "rotary_impl",
    "rotate",
    "rotate_pair",
    "set_rotary_impl",
]

Impl = Literal["auto", "torch", "numba", "triton"]
IMPLS: tuple[str, ...] = get_args(Impl)
_FAST_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
}

_default: list[str] = ["auto"]

#: ``auto`` leaves smaller tensors (a decoding step's q) to torch: a kernel call's fixed cost
#: (tens of µs through the custom op) is more than the work there.
FAST_MIN_ELEMENTS = 1 << 15


@cache
def _numba_kernels() -> Any:
    """``kernel_for(pairs, threads)`` of the compiled kernels, or None without the ``fast``
    extra."""
    if importlib.util.find_spec("numba") is None:
        return None
    from posenc.rotary._numba_kernels import kernel_for

    return kernel_for


@cache
def _triton_kernel() -> Any:
    """``run_triton``, or None without triton (it comes with torch's CUDA builds)."""
    if importlib.util.find_spec("triton") is None:
        return None
    from posenc.rotary._triton_kernels import run_triton

    return run_triton


#: the device type each fast implementation serves, and its availability check
_FAST = {"numba": ("cpu", _numba_kernels), "triton": ("cuda", _triton_kernel)}


def available_impls() -> tuple[str, ...]:
    """The implementations this installation can run (``auto`` and ``torch`` always;
    ``triton`` is listed where triton is installed, and runs on CUDA tensors)."""
    return ("auto", "torch", *(name for name, (_, found) in _FAST.items() if found() is not None))


def set_rotary_impl(impl: Impl) -> None:
    """Set the process-wide default implementation of :func:`rotate` (``"auto"`` at start)."""
    _default[0] = _check_impl(impl)


@contextlib.contextmanager
def rotary_impl(impl: Impl) -> Iterator[None]:
    """Use ``impl`` as the default within a ``with`` block, then restore the previous one."""
    previous = _default[0]
    _default[0] = _check_impl(impl)
    try:
        yield
    finally:
        _default[0] = previous


def _check_impl(impl: str) -> str:
    check_in_choices("impl", impl, IMPLS)
    if impl in _FAST and _FAST[impl][1]() is None:
        package = "numba (pip install 'posenc[fast]')" if impl == "numba" else "triton"
        raise ValueError(
            f"impl={impl!r} needs {package}; available here: {', '.join(available_impls())}"
        )
    return impl


def rotate(
    x: Tensor,
    c: Tensor,
    s: Tensor,
    *,
    layout: str,
    rotary_dim: int,
    out: Tensor | None = None,
    inplace: bool = False,
    impl: Impl | None = None,
) -> Tensor:
    """Rotate the pairs of the first ``rotary_dim`` channels of ``x`` by per-pair tables.

    No argument checks (the hot path): callers pass tables built for ``x`` — ``c``, ``s`` of
    shape ``(seq, rotary_dim / 2)`` or ``(batch | 1, 1, seq, rotary_dim / 2)`` in the
    compute dtype (float32, or float64 for float64 ``x``) on ``x``'s device; ``x`` is
    ``(batch, heads, seq, head_dim)``. The public, checked entry points are
    :func:`posenc.rotary.apply_rotary` and the encodings' ``forward``.

    Args:
        out: a tensor of ``x``'s shape, dtype and device to write into (no autograd, as with
            torch's ``out=``). Channels past ``rotary_dim`` are copied.
        inplace: overwrite ``x`` (no autograd).
        impl: ``None`` for the default (:func:`set_rotary_impl`).

    Returns:
        The rotated tensor: ``out``, ``x`` itself when ``inplace``, else a new tensor.
    """
    name = _resolve(impl, x, c, s)
    if inplace or out is not None:
        _refuse_autograd(inplace, x, c)
    if name == "torch":
        return _torch_rotate(x, c, s, layout, rotary_dim, out, inplace)
    interleaved = layout == "interleaved"
    if torch.compiler.is_compiling() or (not (inplace or out is not None) and _needs_grad(x)):
        # Through the custom ops: what a compiled graph keeps, and where autograd lives.
        if inplace:
            torch.ops.posenc.rotate_(x, c, s, interleaved, rotary_dim)
            return x
        if out is not None:
            torch.ops.posenc.rotate_out(x, c, s, interleaved, rotary_dim, out)
            return out
        return torch.ops.posenc.rotate(x, c, s, interleaved, rotary_dim)
    # Eager and no autograd: the kernel directly (the op dispatcher costs ~60 µs a call).
    target = None if inplace else torch.empty_like(x) if out is None else out
    _run_fast([(x, c, s, target)], interleaved, rotary_dim, inplace=inplace)
    return x if target is None else target


def rotate_pair(
    q: Tensor,
    k: Tensor,
    q_tables: tuple[Tensor, Tensor],
    k_tables: tuple[Tensor, Tensor],
    *,
    layout: str,
    rotary_dim: int,
    inplace: bool = False,
    impl: Impl | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`rotate` of q by ``q_tables`` and k by ``k_tables`` in one kernel call.

    The fast kernels walk the rows of both in one parallel loop (one launch, one set-up);
    the torch path and autograd rotate them one after the other. Same arguments and
    results as two :func:`rotate` calls (``q_tables`` and ``k_tables`` may be the same).
    """
    q_impl = _resolve(impl, q, *q_tables)
    k_impl = _resolve(impl, k, *k_tables)
    if inplace:
        _refuse_autograd(True, q, q_tables[0])
        _refuse_autograd(True, k, k_tables[0])
    fused = (
        q_impl == k_impl != "torch"
        and q.device == k.device
        and not torch.compiler.is_compiling()
        and (inplace or not (_needs_grad(q) or _needs_grad(k)))
    )
    if not fused:
        kw: dict[str, Any] = {"layout": layout, "rotary_dim": rotary_dim, "inplace": inplace}
        return rotate(q, *q_tables, impl=impl, **kw), rotate(k, *k_tables, impl=impl, **kw)
    q_out = None if inplace else torch.empty_like(q)
    k_out = None if inplace else torch.empty_like(k)
    items = [(q, q_tables[0], q_tables[1], q_out), (k, k_tables[0], k_tables[1], k_out)]
    _run_fast(items, layout == "interleaved", rotary_dim, inplace=inplace)
    return (q if q_out is None else q_out), (k if k_out is None else k_out)


def _resolve(impl: str | None, x: Tensor, c: Tensor, s: Tensor) -> str:
    """The implementation that runs: the default or ``impl``, ``auto`` made concrete."""
    name = _default[0] if impl is None else _check_impl(impl)
    if name == "auto":
        fast = "triton" if x.device.type == "cuda" else "numba"
        # A CPU kernel call's fixed cost is more than a small call's work; a GPU launch is not.
        large = fast == "triton" or x.numel() >= FAST_MIN_ELEMENTS
        return fast if large and _fast_serves(fast, x, c, s) else "torch"
    if name in _FAST and not _fast_serves(name, x, c, s):
        raise ValueError(
            f"impl={name!r} serves {_FAST[name][0].upper()} tensors of float32/float64/"
            "bfloat16/float16 with unit channel stride and tables without gradients; got "
            f"{x.dtype} on {x.device}"
        )
    return name


def _needs_grad(x: Tensor) -> bool:
    return torch.is_grad_enabled() and x.requires_grad


def _refuse_autograd(inplace: bool, x: Tensor, c: Tensor) -> None:
    if torch.is_grad_enabled() and (x.requires_grad or c.requires_grad):
        raise RuntimeError(
            f"rotate with {'inplace=True' if inplace else 'out='} does not support autograd "
            "(x or the tables require grad): call it under torch.no_grad() or without them"
        )


def _fast_serves(name: str, x: Tensor, c: Tensor, s: Tensor) -> bool:
    device, found = _FAST[name]
    return (
        x.device.type == device
        and x.dtype in _FAST_DTYPES
        and x.dim() == 4
        and x.stride(-1) == 1
        and not (c.requires_grad or s.requires_grad)
        and found() is not None
    )


# -- torch --------------------------------------------------------------------------------


def _torch_rotate(
    x: Tensor,
    c: Tensor,
    s: Tensor,
    layout: str,
    rotary_dim: int,
    out: Tensor | None,
    inplace: bool,
) -> Tensor:
    """Pure torch, lean: products written straight into the result's halves.

    ``new_a = a·c − b·s`` is ``mul`` into the result, then ``sub_`` of ``b·s`` from one
    half-size scratch buffer: the same roundings as HF's ``x·cos + rotate_half(x)·sin``
    (bitwise equal; ``addcmul_`` would fuse differently), with one half-size temporary
    instead of four full-size ones. Half precision computes in the tables' float32 and
    rounds once; with autograd, plain differentiable ops.
    """
    a, b = pair_views(x, rotary_dim, layout)
    if (
        torch.is_grad_enabled() and (x.requires_grad or c.requires_grad or s.requires_grad)
    ) or torch.compiler.is_compiling():
        # Plain ops: autograd's, and what a compiler fuses (it cannot trace ``out=`` views).
        new_a, new_b = a * c - b * s, b * c + a * s
    elif x.dtype == c.dtype and x.shape[2] > (step := _block_rows(x)):
        # Blocks of positions: the scratch products stay small and in cache.
        result = x if inplace else torch.empty_like(x) if out is None else out
        for start in range(0, x.shape[2], step):
            rows = slice(start, start + step)
            _torch_rotate(
                x[:, :, rows],
                c[..., rows, :],
                s[..., rows, :],
                layout,
                rotary_dim,
                None if inplace else result[:, :, rows],
                inplace,
            )
        return result
    elif x.dtype == c.dtype:
        scratch = torch.mul(a, s)
        if inplace:
            b_s = torch.mul(b, s)
            a.mul_(c).sub_(b_s)
            b.mul_(c).add_(scratch)
            return x
        result = torch.empty_like(x) if out is None else out
        new_a, new_b = pair_views(result, rotary_dim, layout)
        torch.mul(b, c, out=new_b).add_(scratch)
        torch.mul(b, s, out=scratch)
        torch.mul(a, c, out=new_a).sub_(scratch)
        if rotary_dim < x.shape[-1]:
            result[..., rotary_dim:] = x[..., rotary_dim:]
        return result
    else:
        return _torch_rotate_narrow(x, c, s, layout, rotary_dim, out, inplace)
    if inplace or out is not None:
        target = x if inplace else out
        assert target is not None
        ra, rb = pair_views(target, rotary_dim, layout)
        ra.copy_(new_a)
        rb.copy_(new_b)
        if out is not None and rotary_dim < x.shape[-1]:
            target[..., rotary_dim:] = x[..., rotary_dim:]
        return target
    if layout == "half":
        rotated = torch.cat((new_a, new_b), dim=-1)
    else:
        rotated = torch.stack((new_a, new_b), dim=-1).flatten(-2)
    rotated = rotated.to(x.dtype)
    if rotary_dim == x.shape[-1]:
        return rotated
    return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)


def _torch_rotate_narrow(
    x: Tensor,
    c: Tensor,
    s: Tensor,
    layout: str,
    rotary_dim: int,
    out: Tensor | None,
    inplace: bool,
) -> Tensor:
    """float16/bfloat16 without autograd: blocks of positions widened into one reused float32
    scratch (mixed-dtype ops and fresh full-size float32 tensors are what make a naive
    version slow), rotated in place there, rounded once into the result."""
    result = x if inplace else torch.empty_like(x) if out is None else out
    seq = x.shape[2]
    step = _block_rows(x)
    scratch = None
    for start in range(0, seq, step):
        stop = min(seq, start + step)
        block = x[:, :, start:stop, :rotary_dim]
        if scratch is None or scratch.shape != block.shape:
            scratch = torch.empty(block.shape, dtype=c.dtype, device=x.device)
        scratch.copy_(block)
        rows = slice(start, stop)
        _torch_rotate(scratch, c[..., rows, :], s[..., rows, :], layout, rotary_dim, None, True)
        result[:, :, start:stop, :rotary_dim] = scratch
    if not inplace and rotary_dim < x.shape[-1]:
        result[..., rotary_dim:] = x[..., rotary_dim:]
    return result


#: elements of x per block of positions in the torch path (1 MiB of float32: stays in cache)
_BLOCK = 1 << 18


def _block_rows(x: Tensor) -> int:
    """Positions per block of the torch path."""
    return max(1, _BLOCK // max(1, x.shape[0] * x.shape[1] * x.shape[3]))


# -- numba, as torch custom ops ----------------------------------------------------------


def _rows(x: Tensor, c: Tensor) -> tuple[list[int], list[int], list[int], list[int]]:
    """The three leading dims in memory order: shape, x's strides and the tables' strides."""
    seq = x.shape[2]
    if c.dim() == 2:  # (seq, r2)
        c_strides = [0, 0, c.stride(0)]
    else:  # (batch | 1, 1, seq, r2)
        c_strides = [c.stride(0) if c.shape[0] > 1 else 0, 0, c.stride(2)]
    if seq == 1 or c.shape[-2] == 1:  # one position: the same table row for every row
        c_strides[2] = 0
    strides = x.stride()
    order = sorted(range(3), key=lambda d: -strides[d])
    return (
        [x.shape[d] for d in order],
        [x.stride(d) for d in order],
        [c_strides[d] for d in order],
        order,
    )


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
    _run_fast([(x, c, s, out)], interleaved, rotary_dim, inplace=out is None)


def _run_fast(
    items: list[tuple[Tensor, Tensor, Tensor, Tensor | None]],
    interleaved: bool,
    rotary_dim: int,
    *,
    inplace: bool,
) -> None:
    """The fast kernel of the items' device on one or two ``(x, c, s, out)``."""
    if items[0][0].device.type == "cuda":
        run_triton = _triton_kernel()
        for x, c, s, out in items:
            run_triton(x, c, s, interleaved, rotary_dim, out)
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
    kernel_for = _numba_kernels()
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
    meta = np.zeros((2, 12), np.int64)
    arrays = []
    for t, (x, c, s, out) in enumerate(items):
        c, s = c.contiguous(), s.contiguous()
        shape, x_strides, c_strides, order = _rows(x, c)
        target = x if out is None else out
        meta[t] = [*shape, *x_strides, *(target.stride(d) for d in order), *c_strides]
        arrays.append((_storage(x), _storage(target), _storage(c), _storage(s)))
    if len(arrays) == 1:
        arrays.append(arrays[0])  # meta[1] is all zeros: no rows
    kernel(*arrays[0], *arrays[1], meta, rotary_dim // 2, interleaved, inplace)
    for x, _, _, out in items:
        if out is not None and rotary_dim < x.shape[-1]:
            out[..., rotary_dim:] = x[..., rotary_dim:]


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

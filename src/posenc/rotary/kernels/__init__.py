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
``numba``  CPU kernels from the ``fast`` extra (numba): one pass over
           q and k, every core, conversions in registers (:mod:`posenc.rotary.kernels._numba`).
``triton`` the CUDA kernel (:mod:`posenc.rotary.kernels._triton`; triton comes with torch's
           CUDA builds): q and k in one launch, strides as arguments, no copies.
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

This module chooses the implementation and dispatches; :mod:`~posenc.rotary.kernels.torch_path`
is the ``torch`` implementation, :mod:`~posenc.rotary.kernels.fast` runs the numba and Triton
kernels as torch custom ops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices
from posenc.rotary.kernels.fast import FAST, FAST_DTYPES, run_fast
from posenc.rotary.kernels.torch_path import torch_rotate

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
_default: list[str] = ["auto"]

#: ``auto`` leaves smaller tensors (a decoding step's q) to torch: a kernel call's fixed cost
#: (tens of µs through the custom op) is more than the work there.
FAST_MIN_ELEMENTS = 1 << 15


def available_impls() -> tuple[str, ...]:
    """The implementations this installation can run (``auto`` and ``torch`` always;
    ``triton`` is listed where triton is installed, and runs on CUDA tensors)."""
    return ("auto", "torch", *(name for name, (_, found) in FAST.items() if found() is not None))


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
    if impl in FAST and FAST[impl][1]() is None:
        package = "numba (pip install -e '.[fast]' in a posenc clone)"
        if impl != "numba":
            package = "triton"
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
        return torch_rotate(x, c, s, layout, rotary_dim, out, inplace)
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
    run_fast([(x, c, s, target)], interleaved, rotary_dim, inplace=inplace)
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
    run_fast(items, layout == "interleaved", rotary_dim, inplace=inplace)
    return (q if q_out is None else q_out), (k if k_out is None else k_out)


def _resolve(impl: str | None, x: Tensor, c: Tensor, s: Tensor) -> str:
    """The implementation that runs: the default or ``impl``, ``auto`` made concrete."""
    name = _default[0] if impl is None else _check_impl(impl)
    if name == "auto":
        fast = "triton" if x.device.type == "cuda" else "numba"
        # A CPU kernel call's fixed cost is more than a small call's work; a GPU launch is not.
        large = fast == "triton" or x.numel() >= FAST_MIN_ELEMENTS
        return fast if large and _fast_serves(fast, x, c, s) else "torch"
    if name in FAST and not _fast_serves(name, x, c, s):
        raise ValueError(
            f"impl={name!r} serves {FAST[name][0].upper()} tensors of float32/float64/"
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
    device, found = FAST[name]
    return (
        x.device.type == device
        and x.dtype in FAST_DTYPES
        and x.dim() == 4
        and x.stride(-1) == 1
        and not (c.requires_grad or s.requires_grad)
        and found() is not None
    )

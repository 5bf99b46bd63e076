"""The ``torch`` implementation of the rotation: pure torch, always available.

Differentiable and traceable by ``torch.compile``; without autograd it writes the products
straight into the result's halves, blocks of positions at a time, with the roundings of HF's
``x·cos + rotate_half(x)·sin`` (bitwise equal). float16/bfloat16 compute in float32 and
round once. :mod:`posenc.rotary.kernels` dispatches here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.rotary.layouts import pair_views

__all__ = ["torch_rotate"]


def torch_rotate(
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
            torch_rotate(
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
        torch_rotate(scratch, c[..., rows, :], s[..., rows, :], layout, rotary_dim, None, True)
        result[:, :, start:stop, :rotary_dim] = scratch
    if not inplace and rotary_dim < x.shape[-1]:
        result[..., rotary_dim:] = x[..., rotary_dim:]
    return result


#: elements of x per block of positions in the torch path (1 MiB of float32: stays in cache)
_BLOCK = 1 << 18


def _block_rows(x: Tensor) -> int:
    """Positions per block of the torch path."""
    return max(1, _BLOCK // max(1, x.shape[0] * x.shape[1] * x.shape[3]))

"""Small argument checks shared by every module; each error names the argument.

Checks that read tensor values (NaN, whole numbers, ranges) need a host sync and would break
a ``torch.compile(fullgraph=True)`` graph, so they run eagerly and are skipped while
compiling (:func:`validating_values`); shape and dtype checks always run.
"""

from __future__ import annotations

import math
import operator

import torch
from torch import Tensor

__all__ = [
    "check_finite",
    "check_in_choices",
    "check_int",
    "check_integer_valued",
    "check_non_negative_int",
    "check_positive_float",
    "check_positive_int",
    "validating_values",
]


def check_int(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as a Python ``int`` if it is integral and in ``[low, high]`` (either
    bound optional), else raise ``ValueError`` naming ``name`` and the allowed range.

    Integral means an ``int``, a numpy integer or a 0-d integer tensor (what
    :func:`operator.index` reads, tensors of one dimension or more aside). ``bool`` (a
    ``True`` passed for a count is a slip, not a 1), floats, even whole ones, and other types
    are refused with one message that names the argument, the range and the accepted types.
    """
    if low is not None and high is not None:
        allowed = f"an integer in [{low}, {high}]"
    elif low == 1:
        allowed = "a positive integer (>= 1)"
    elif low == 0:
        allowed = "a non-negative integer (>= 0)"
    elif low is not None:
        allowed = f"an integer >= {low}"
    elif high is not None:
        allowed = f"an integer <= {high}"
    else:
        allowed = "an integer"
    number: int | None = None
    refused = isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy's bool
    if isinstance(value, Tensor):
        refused = value.dtype == torch.bool or value.dim() > 0  # refused with the rest
    if not refused:
        try:
            number = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            number = None
    if number is None:
        kind = (
            f"a {value.dtype} tensor of shape {tuple(value.shape)}"
            if isinstance(value, Tensor)
            else type(value).__name__
        )
        raise ValueError(
            f"{name} must be {allowed}: an int, numpy integer or 0-d integer tensor; "
            f"got {value!r} ({kind})"
        )
    if (low is not None and number < low) or (high is not None and number > high):
        raise ValueError(f"{name} must be {allowed}, got {number}")
    return number


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` as an ``int`` if it is integral and ≥ 1 (see :func:`check_int`), else
    raise ``ValueError`` naming ``name``."""
    return check_int(name, value, low=1)


def check_non_negative_int(name: str, value: object) -> int:
    """Return ``value`` as an ``int`` if it is integral and ≥ 0 (see :func:`check_int`), else
    raise ``ValueError`` naming ``name``."""
    return check_int(name, value, low=0)


def check_positive_float(name: str, value: object) -> float:
    """Return ``float(value)`` if it is a finite real > 0, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_floating_dtype(name: str, dtype: torch.dtype | None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``dtype`` is None or a floating dtype."""
    if dtype is not None and not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating dtype, got {dtype}")


def check_floating_tensor(name: str, x: object, axes: tuple[str, ...]) -> Tensor:
    """Return ``x`` if it is a floating tensor with one dimension per name in ``axes``, else
    raise ``ValueError`` naming ``name`` and the expected layout."""
    if not isinstance(x, Tensor) or x.dim() != len(axes) or not x.is_floating_point():
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a floating tensor ({', '.join(axes)}); got {got}")
    return x


def check_layer_input(x: object, dim: int, owner: str, device: torch.device) -> Tensor:
    """Return ``x`` if it is a layer's input as an encoding that reads it needs (FoX's gates,
    PaTH's transforms, CARoPE's rates): a floating ``(batch, seq, dim)`` tensor on the
    encoding's ``device``, finite (checked outside compilation); else raise ``ValueError``
    naming ``x`` and ``owner`` (the encoding's class)."""
    if not isinstance(x, Tensor) or x.dim() != 3 or not x.is_floating_point():
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating tensor (batch, seq, {dim}); got {got}")
    if x.shape[-1] != dim:
        raise ValueError(f"x has last dim {x.shape[-1]} but this {owner} has dim {dim}")
    if x.device != device:
        raise ValueError(f"x must be on {device} (the {owner}'s parameters'), got {x.device}")
    check_finite("x", x)
    return x


def check_bool_mask(name: str, mask: object, like_name: str, like: Tensor) -> Tensor | None:
    """Return ``mask`` if it is None or a bool tensor that broadcasts to ``like``'s shape, else
    raise ``ValueError`` naming ``name`` (and ``like_name``, what it must broadcast to)."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor broadcastable to {like_name}, or None")
    try:
        fits = torch.broadcast_shapes(mask.shape, like.shape) == like.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to {like_name} "
            f"{tuple(like.shape)}"
        )
    return mask


def check_in_choices(name: str, value: object, choices: tuple[object, ...]) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {allowed}; got {value!r}")


def validating_values() -> bool:
    """True when value checks should run: always in eager mode, never while compiling."""
    return not torch.compiler.is_compiling()


def check_finite(name: str, tensor: Tensor) -> None:
    """Raise ``ValueError`` naming ``name`` if a floating tensor holds NaN or ±inf."""
    if not validating_values() or tensor.device.type == "meta":  # meta: no values to read
        return
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} must be finite; it contains NaN or inf")


def check_integer_valued(name: str, tensor: Tensor) -> None:
    """Raise ``ValueError`` unless every entry of ``tensor`` is a whole number."""
    if not validating_values() or tensor.device.type == "meta":  # meta: no values to read
        return
    if tensor.is_floating_point() and not bool((tensor == tensor.round()).all()):
        raise ValueError(
            f"{name} must hold whole numbers for this encoding (got fractional values)"
        )

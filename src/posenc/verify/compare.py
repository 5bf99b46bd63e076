"""Where and by how much a port's arrays differ from the reference: tolerances and
:class:`KeyReport`.

The tolerance rule (``docs/verify.md``): a correct port computes the angles in at least
float32 and rounds the result once to its dtype. Element by element, a table entry may then
differ from the float64 reference by

.. math::

    \\mathrm{tol} = A (\\ln b + 4) ε_{32} |φ| + 4 A ε_{32} + \\mathrm{eps}(\\mathrm{dtype}) |x|

(``ε₃₂ = 2⁻²⁴``: the inverse frequency from a float32 power ``b^{-2i/d}`` carries a relative
error up to ``ln b · ε₃₂``, the product ``m·θ`` and the cos/sin a few more; ``eps(dtype)·|x|``
is one rounding of the value ``x`` to the user's dtype, to either neighbour). A table computed
in bfloat16 arithmetic (``positions · inv_freq`` in bfloat16, or a bfloat16 ``inv_freq``)
carries an angle error of ``≈ 2⁻⁹ |φ|``, far outside this at any position past a few dozen,
so it is flagged (bug class ``tables_in_bf16``), while float32 tables rounded to bfloat16
pass. Rotated q/k get the table tolerance times ``|x_a| + |x_b|`` of their pair plus three
roundings in their dtype (the stored tables, the products, the sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc.verify.spec import RopeSpec, spec_angles

__all__ = ["EPS32", "KeyReport", "compare_key", "pair_of_channel", "tolerance"]

EPS32 = 2.0**-24


def _eps(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _angle_allowance(spec: RopeSpec, angles: Tensor, unit: float) -> Tensor:
    """Angle error of a correct computation in arithmetic of unit roundoff ``unit``."""
    log_base = math.log(max(spec.base, math.e))
    return spec.attention_factor * ((log_base + 4) * unit * angles.abs() + 4 * unit)


def _widen(per_pair: Tensor, layout: str) -> Tensor:
    if layout == "half":
        return torch.cat((per_pair, per_pair), dim=-1)
    if layout == "interleaved":
        return per_pair.repeat_interleave(2, dim=-1)
    return per_pair


def tolerance(
    spec: RopeSpec,
    positions: Tensor,
    key: str,
    reference: Tensor,
    dtype: torch.dtype,
    *,
    layout: str = "half",
    x: Tensor | None = None,
    arithmetic_unit: float = EPS32,
) -> Tensor:
    """Element-wise tolerance of ``key`` (``cos``/``sin`` tables, ``q_rotated``/``k_rotated``
    given the input ``x``), see the module; ``arithmetic_unit`` is the unit roundoff of the
    arithmetic allowed (float32's by default)."""
    angles = spec_angles(spec, positions)  # (seq, pairs)
    allowance = _angle_allowance(spec, angles, arithmetic_unit)
    eps = _eps(dtype)
    if x is None:
        return _widen(allowance, layout) + eps * reference.abs() + torch.finfo(torch.float32).tiny
    width = spec.rotary_dim
    x = x.to(torch.float64)
    rotated = x[..., spec.head_dim - width :] if spec.trailing else x[..., :width]
    if spec.layout == "half":
        pair_sum = rotated[..., : width // 2].abs() + rotated[..., width // 2 :].abs()
    else:
        pair_sum = rotated[..., 0::2].abs() + rotated[..., 1::2].abs()
    per_pair = pair_sum * (allowance + 3 * eps * spec.attention_factor)
    slice_tol = _widen(per_pair, spec.layout)
    passed = torch.zeros(*x.shape[:-1], spec.head_dim - width, dtype=torch.float64)
    parts = (passed, slice_tol) if spec.trailing else (slice_tol, passed)
    return torch.cat(parts, dim=-1) + eps * reference.abs() + torch.finfo(torch.float32).tiny


def pair_of_channel(channel: int, width: int, layout: str) -> int:
    """The frequency pair a table column belongs to in ``layout``."""
    if layout == "half":
        return channel % (width // 2)
    if layout == "interleaved":
        return channel // 2
    return channel


@dataclass(frozen=True)
class KeyReport:
    """How one array compares with its reference.

    Args:
        key: the array's name (``cos``, ``sin``, ``q_rotated``, ...).
        shape: its shape, as given.
        dtype: its dtype.
        max_abs: ``max |user − ref|``.
        max_rel: ``max_abs / max |ref|``.
        mismatches: entries beyond the tolerance.
        first_row: the first sequence index with one (``None`` when equal).
        first_position: the position of that row (its t, h, w for M-RoPE).
        channels: the last-axis indices with a mismatch.
        reference_shape: the reference array's shape (differs only for a bug class that
            changes the width).
    """

    key: str
    shape: tuple[int, ...]
    dtype: str
    max_abs: float
    max_rel: float
    mismatches: int
    first_row: int | None
    first_position: tuple[float, ...] | None
    channels: tuple[int, ...]
    reference_shape: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.reference_shape:
            object.__setattr__(self, "reference_shape", self.shape)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


def compare_key(
    key: str, user: Tensor, reference: Tensor, tol: Tensor, positions: Tensor
) -> KeyReport:
    """Compare ``user`` with the float64 ``reference`` rounded to the user's dtype, element by
    element against ``tol``; ``(..., seq, channels)`` shapes, sequence on axis −2."""
    rounded = reference.to(user.dtype).to(torch.float64) if user.is_floating_point() else reference
    error = (user.to(torch.float64) - rounded).abs()
    over = error > tol
    mismatches = int(over.sum())
    first_row: int | None = None
    first_position: tuple[float, ...] | None = None
    channels: tuple[int, ...] = ()
    if mismatches:
        rows = over.reshape(-1, *over.shape[-2:]).any(0)  # (seq, channels)
        first_row = int(rows.any(-1).nonzero()[0, 0])
        pos = positions.to(torch.float64)
        column = pos[first_row] if pos.dim() == 1 else pos[:, first_row]
        first_position = tuple(float(v) for v in column.reshape(-1))
        channels = tuple(int(c) for c in rows.any(0).nonzero().flatten())
    scale = float(reference.abs().max()) if reference.numel() else 0.0
    max_abs = float(error.max()) if error.numel() else 0.0
    return KeyReport(
        key,
        tuple(user.shape),
        str(user.dtype).removeprefix("torch."),
        max_abs,
        max_abs / scale if scale else max_abs,
        mismatches,
        first_row,
        first_position,
        channels,
    )

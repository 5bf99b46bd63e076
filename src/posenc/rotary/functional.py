"""RoPE as functions: rotation angles, cos/sin tables and the rotation of q or k.

Paper: RoFormer, Su et al. 2021, https://arxiv.org/abs/2104.09864. A pair of channels
``(a, b)`` of a query or key at position ``m`` with inverse frequency ``θ_i`` becomes

.. math::

    \\begin{pmatrix} a' \\\\ b' \\end{pmatrix} =
    \\begin{pmatrix} \\cos mθ_i & -\\sin mθ_i \\\\ \\sin mθ_i & \\cos mθ_i \\end{pmatrix}
    \\begin{pmatrix} a \\\\ b \\end{pmatrix},

so that ``q_m · k_n`` depends on positions only through ``m - n``. Two layouts say which
channels form the pair ``i`` of the first ``rotary_dim = d`` channels (the rest pass through):

* ``"half"`` (GPT-NeoX, HF Llama): ``(i, i + d/2)``; ``x' = x·cos + rotate_half(x)·sin`` with
  ``rotate_half(x) = cat(-x[d/2:], x[:d/2])`` and ``cos = cat(cos mθ, cos mθ)``;
* ``"interleaved"`` (GPT-J, Meta Llama, RoFormer): ``(2i, 2i + 1)``; ``rotate_every_two(x)``
  maps ``x[2i] -> -x[2i+1]``, ``x[2i+1] -> x[2i]`` and ``cos = repeat_interleave(cos mθ, 2)``.

Numerics: phases ``m·θ_i`` and their cos/sin are evaluated in float64 (exact to far beyond
``m = 2^24``) and rounded once to the table dtype; half-precision q/k are rotated with float32
arithmetic and rounded once to their dtype.

:func:`rope_angles`, :func:`rope_cos_sin` and :func:`apply_rotary` check their arguments (the
public entry points); the rotary encodings' per-forward path calls their unchecked forms
(:func:`cos_sin_tables`, :func:`rotate_by_tables`) and the per-pair tables
(:func:`pair_tables`) of :mod:`posenc.rotary.kernels`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float
from posenc.positions import check_positions
from posenc.rotary.frequencies import check_rotary_dim
from posenc.rotary.kernels import rotate
from posenc.rotary.layouts import LAYOUTS, Layout, pair_views

__all__ = [
    "apply_rotary",
    "compute_dtype",
    "cos_sin_tables",
    "pair_tables",
    "pair_tables_for",
    "rope_angles",
    "rope_cos_sin",
    "rotate_by_tables",
]


def _check_inv_freq(inv_freq: Tensor) -> None:
    if not isinstance(inv_freq, Tensor) or inv_freq.dim() != 1 or inv_freq.numel() == 0:
        raise ValueError("inv_freq must be a non-empty 1-D tensor (rotary_dim // 2,)")
    if not inv_freq.is_floating_point():
        raise ValueError(f"inv_freq must be a floating tensor, got {inv_freq.dtype}")


def rope_angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Rotation angles ``positions[..., None] * inv_freq``, in float64.

    .. math:: φ_{m,i} = m · θ_i

    Float64 keeps the phase exact where HF's float32 product (``fp32(m)·fp32(θ_i)``) is off
    by up to ``m·2^-24`` rad. On MPS, which has no float64, the angles are computed and
    returned on the CPU (:func:`rope_cos_sin` moves its float32 result back).

    Args:
        positions: integer or floating positions ``(seq,)`` or ``(batch, seq)``; fractional
            positions (position interpolation) are legal.
        inv_freq: inverse frequencies ``(rotary_dim // 2,)``, e.g. :func:`rope_inv_freq`.

    Shape:
        Output: ``(seq, rotary_dim // 2)`` or ``(batch, seq, rotary_dim // 2)``.

    Example::

        >>> rope_angles(torch.tensor([0, 2]), torch.tensor([1.0, 0.5]))
        tensor([[0., 0.],
                [2., 1.]], dtype=torch.float64)
    """
    check_positions(positions)
    _check_inv_freq(inv_freq)
    return _angles(positions, inv_freq)


def _angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """:func:`rope_angles` without checks (the per-forward path)."""
    device = torch.device("cpu") if positions.device.type == "mps" else positions.device
    positions = positions.to(device=device, dtype=torch.float64)
    return positions[..., None] * inv_freq.to(device=device, dtype=torch.float64)


def rope_cos_sin(
    positions: Tensor,
    inv_freq: Tensor,
    *,
    layout: Layout = "half",
    dtype: torch.dtype = torch.float32,
    attention_factor: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Full-width cos/sin tables of the rotation angles, in the layout's channel order.

    .. math::

        \\cos_{m} = A·\\cos(m θ), \\quad \\sin_{m} = A·\\sin(m θ), \\quad
        \\text{half: } \\mathrm{cat}(f, f), \\quad
        \\text{interleaved: } \\mathrm{repeat\\_interleave}(f, 2)

    ``A`` is the attention factor of a context-extension scaling (YaRN, LongRoPE); it scales
    both q and k, so the logits scale by ``A²`` (HF convention). Plain RoPE has ``A = 1``.
    Tested against HF ``LlamaRotaryEmbedding`` (half) and rotary-embedding-torch (interleaved).

    Args:
        positions: ``(seq,)`` or ``(batch, seq)``, integer or floating.
        inv_freq: ``(rotary_dim // 2,)`` inverse frequencies.
        layout: ``"half"`` (NeoX/HF) or ``"interleaved"`` (GPT-J/Meta).
        dtype: dtype of the tables; they are evaluated in float64 and rounded once.
        attention_factor: ``A`` > 0.

    Shape:
        Output: two tensors ``(seq, rotary_dim)`` or ``(batch, seq, rotary_dim)``, on
        ``positions.device``.

    Example::

        >>> cos, sin = rope_cos_sin(torch.arange(3), rope_inv_freq(4), layout="interleaved")
        >>> cos.shape
        torch.Size([3, 4])
    """
    check_in_choices("layout", layout, LAYOUTS)
    attention_factor = check_positive_float("attention_factor", attention_factor)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    check_positions(positions)
    _check_inv_freq(inv_freq)
    return cos_sin_tables(positions, inv_freq, layout, dtype, attention_factor)


def cos_sin_tables(
    positions: Tensor, inv_freq: Tensor, layout: str, dtype: torch.dtype, attention_factor: float
) -> tuple[Tensor, Tensor]:
    """:func:`rope_cos_sin` without argument checks: the per-forward path of the rotary
    encodings, whose inputs were validated at the public boundary."""
    angles = _angles(positions, inv_freq)  # (..., seq, rotary_dim // 2), float64
    tables = []
    for fn in (torch.cos, torch.sin):
        half = fn(angles)
        if attention_factor != 1.0:
            half = half * attention_factor
        half = half.to(dtype)  # one rounding, before the (exact) widening below
        if layout == "half":
            full = torch.cat((half, half), dim=-1)
        else:
            full = half.repeat_interleave(2, dim=-1)
        tables.append(full.to(positions.device))
    return tables[0], tables[1]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype q and k of ``dtype`` are rotated in: float64 for float64, else float32
    (float16/bfloat16 rotate in float32 and are rounded once at the end)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, *, layout: Layout = "half") -> Tensor:
    """Rotate the first ``rotary_dim`` channels of ``x`` by the angles behind ``cos``/``sin``.

    .. math:: x' = x · \\cos + \\mathrm{rot}(x) · \\sin \\quad \\text{(first } d
        \\text{ channels; the rest pass through)}

    where ``rot`` is ``rotate_half`` (layout ``"half"``, HF ``apply_rotary_pos_emb``) or
    ``rotate_every_two`` (layout ``"interleaved"``, rotary-embedding-torch
    ``apply_rotary_emb``). Paper: https://arxiv.org/abs/2104.09864. Half-precision ``x`` is
    rotated in float32 and rounded once to ``x.dtype``; float64 stays float64.

    Args:
        x: queries or keys ``(batch, heads, seq, head_dim)``.
        cos: ``(seq, rotary_dim)`` or ``(batch, seq, rotary_dim)`` from :func:`rope_cos_sin`;
            ``rotary_dim = cos.shape[-1]`` is even and ≤ ``head_dim`` (partial rotary when
            smaller). A batch of 1 broadcasts.
        sin: same shape as ``cos``.
        layout: ``"half"`` or ``"interleaved"``; must match the one ``cos``/``sin`` were
            built with.

    Shape:
        Output: same shape and dtype as ``x``.

    Example::

        >>> x = torch.randn(1, 2, 5, 8)
        >>> cos, sin = rope_cos_sin(torch.arange(5), rope_inv_freq(8))
        >>> apply_rotary(x, cos, sin).shape
        torch.Size([1, 2, 5, 8])
    """
    check_in_choices("layout", layout, LAYOUTS)
    if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
        raise ValueError(
            "x must be a floating tensor (batch, heads, seq, head_dim); "
            f"got {getattr(x, 'shape', type(x).__name__)}"
        )
    for name, table in (("cos", cos), ("sin", sin)):
        if not isinstance(table, Tensor) or table.dim() not in (2, 3):
            raise ValueError(
                f"{name} must be a tensor (seq, rotary_dim) or (batch, seq, rotary_dim)"
            )
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have one shape; got {cos.shape} and {sin.shape}")
    batch, _, seq, head_dim = x.shape
    rotary_dim = check_rotary_dim(cos.shape[-1], "cos.shape[-1] (rotary_dim)")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim = cos.shape[-1] = {rotary_dim} exceeds head_dim {head_dim}")
    if cos.shape[-2] != seq:
        raise ValueError(f"cos has {cos.shape[-2]} positions but x has seq {seq}")
    if cos.dim() == 3 and cos.shape[0] not in (1, batch):
        raise ValueError(f"cos has batch {cos.shape[0]} but x has batch {batch}")
    return rotate_by_tables(x, cos, sin, layout)


def rotate_by_tables(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """:func:`apply_rotary` without argument checks, from full-width tables.

    The hot path of every rotary encoding: the tables become one value per pair in the
    compute dtype on ``x``'s device (:func:`pair_tables_for`) and each pair ``(a, b)``
    becomes ``(a·c − b·s, b·c + a·s)`` with the same roundings as HF's
    ``x·cos + rotate_half(x)·sin`` (bitwise equal), by the implementation
    :mod:`posenc.rotary.kernels` picks (numba's kernels on the CPU when installed).
    """
    c, s = pair_tables_for(x, cos, sin, layout)
    return rotate(x, c, s, layout=layout, rotary_dim=cos.shape[-1])


def pair_tables_for(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """Full-width tables as one value per pair (:func:`pair_tables`) in ``x``'s compute
    dtype (:func:`compute_dtype`), on its device."""
    compute = compute_dtype(x.dtype)
    cos, sin = cos.to(device=x.device, dtype=compute), sin.to(device=x.device, dtype=compute)
    return pair_tables(cos, sin, layout)


def pair_tables(cos: Tensor, sin: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """One value per pair from full-width tables, heads broadcast: ``(…, 1, seq, d/2)``."""
    rotary_dim = cos.shape[-1]
    c, s = pair_views(cos, rotary_dim, layout)[0], pair_views(sin, rotary_dim, layout)[0]
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]  # (batch, 1, seq, rotary_dim / 2): broadcast heads
    return c, s

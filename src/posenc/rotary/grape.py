"""Multiplicative GRAPE: positions as rotations ``G(n) = exp(n Σ_i ω_i L_i)`` in SO(d).

GRAPE (Group Representational Position Encoding, Zhang et al., ICLR 2026,
https://arxiv.org/abs/2512.07805; code model-architectures/GRAPE) lets a position ``n`` act on
queries and keys through a one-parameter group. The multiplicative family uses rank-2
skew-symmetric generators, one per plane spanned by orthonormal ``(u_i, v_i)``:

.. math::

    L_i = v_i u_i^⊤ − u_i v_i^⊤, \\qquad
    \\exp(θ L_i) = I + \\sin θ\\, L_i + (1 − \\cos θ)\\, L_i^2, \\qquad
    G(n) = \\exp\\Big(n \\sum_i ω_i L_i\\Big),

(the Rodrigues form: ``L_i³ = −L_i`` on orthonormal planes; :func:`rank2_exp` gives the
general one). Queries and keys become ``G(n_q) q`` and ``G(n_k) k``; as ``G`` is a group
homomorphism with ``G(n)^⊤ = G(−n)``, the logit ``q^⊤ G(n_q)^⊤ G(n_k) k = q^⊤ G(n_k − n_q) k``
depends on the offset alone (the exact relative law), and a key cached at ``G(n_k) k`` stays
valid (streaming cacheability). When the planes are mutually orthogonal the generators
commute and ``G(n) = P \\operatorname{blockdiag}_i R(n ω_i) P^⊤`` with ``P`` the orthogonal
matrix whose columns are the ``u_i, v_i``.

**RoPE is the special case** ``P = I`` (the coordinate planes of the layout: ``(i, i + d/2)``
for ``"half"``, ``(2i, 2i + 1)`` for ``"interleaved"``) with the log-uniform spectrum
``ω_i = base^{−2i/d}``: :class:`GrapeRotation` with its defaults gives the bits of
:class:`~posenc.rotary.RotaryEmbedding`, and :func:`grape_matrix` builds ``G(n)`` from the
generators as matrices (the float64 reference the tests compare both with).

:class:`GrapeRotation` learns the spectrum (shared or per head: the reference's
``MSGRAPECommuting``) and, with ``planes="learned"``, the planes too: ``P = exp(skew(W))``
(``W = 0`` at initialization, so training starts at RoPE), the commuting dictionary of
learned subspaces of the paper.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor, nn

from posenc._validate import (
    check_finite,
    check_floating_dtype,
    check_in_choices,
    check_positive_float,
    check_positive_int,
)
from posenc.encoding.protocols import RotaryEncoding
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.functional import compute_dtype
from posenc.rotary.layouts import LAYOUTS, Layout, pair_views

__all__ = [
    "GrapePlanes",
    "GrapeRotation",
    "grape_angles",
    "grape_matrix",
    "grape_rotate",
    "rank2_exp",
    "rank2_generator",
]

GrapePlanes = Literal["coordinate", "learned"]
PLANES: tuple[str, ...] = get_args(GrapePlanes)


def rank2_generator(u: Tensor, v: Tensor) -> Tensor:
    """The rank-2 skew generator ``L = v uᵀ − u vᵀ`` of the plane of ``u`` and ``v``
    (``(..., d)`` each → ``(..., d, d)``): ``exp(θL)`` turns ``u`` towards ``v``."""
    return v[..., :, None] * u[..., None, :] - u[..., :, None] * v[..., None, :]


def rank2_exp(u: Tensor, v: Tensor, angle: Tensor | float) -> Tensor:
    """``exp(angle · L)`` of :func:`rank2_generator` in closed form (any ``u``, ``v``).

    .. math::

        s = \\sqrt{|u|^2 |v|^2 − (u·v)^2}, \\qquad
        \\exp(θL) = I + \\frac{\\sin θs}{s} L + \\frac{1 − \\cos θs}{s^2} L^2

    (``L³ = −s² L``); ``s = 0`` (parallel ``u``, ``v``: ``L = 0``) gives ``I``. Paper eq. for
    the Rodrigues-type formula; tested against ``torch.linalg.matrix_exp``.
    """
    generator = rank2_generator(u, v)
    angle = torch.as_tensor(angle, dtype=generator.dtype, device=generator.device)
    uu, vv, uv = (u * u).sum(-1), (v * v).sum(-1), (u * v).sum(-1)
    s = (uu * vv - uv * uv).clamp_min(0).sqrt()
    safe = torch.where(s > 0, s, torch.ones_like(s))
    theta = angle * safe
    first = torch.where(s > 0, torch.sin(theta) / safe, torch.zeros_like(s))
    second = torch.where(s > 0, (1 - torch.cos(theta)) / safe**2, torch.zeros_like(s))
    eye = torch.eye(u.shape[-1], dtype=generator.dtype, device=generator.device)
    return (
        eye + first[..., None, None] * generator + second[..., None, None] * (generator @ generator)
    )


def grape_angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles ``n · ω_i`` in float64.

    Args:
        positions: ``(seq,)`` or ``(batch, seq)``.
        inv_freq: the spectrum ``(pairs,)`` (shared) or ``(heads, pairs)`` (per head).

    Shape:
        ``(…, seq, pairs)`` for a shared spectrum, ``(…, heads, seq, pairs)`` per head.
    """
    n = positions.to(torch.float64)
    omega = inv_freq.to(device=n.device, dtype=torch.float64)
    if omega.dim() == 1:
        return n[..., None] * omega
    return n[..., None, :, None] * omega[:, None, :]


def grape_rotate(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Each coordinate pair ``(a, b)`` of ``x`` becomes ``(a·c − b·s, b·c + a·s)``.

    In ``x``'s compute dtype (float32, float64 for float64), rounded once to ``x.dtype``: the
    roundings of RoPE's ``x·cos + rotate_half(x)·sin``. ``cos``, ``sin``: one value per pair,
    broadcastable to ``(batch, heads, seq, d/2)``; differentiable in all three.
    """
    compute = compute_dtype(x.dtype)
    a, b = pair_views(x.to(compute), x.shape[-1], layout)
    c, s = cos.to(compute), sin.to(compute)
    new_a, new_b = a * c - b * s, b * c + a * s
    if layout == "half":
        out = torch.cat((new_a, new_b), dim=-1)
    else:
        out = torch.stack((new_a, new_b), dim=-1).flatten(-2)
    return out.to(x.dtype)


def grape_matrix(
    positions: Tensor, inv_freq: Tensor, layout: str, basis: Tensor | None = None
) -> Tensor:
    """``G(n) = exp(n Σ_i ω_i L_i)`` as float64 matrices, from the generators (the reference).

    ``L_i`` is :func:`rank2_generator` of the layout's coordinate pair ``i`` (conjugated by
    the orthogonal ``basis`` ``P`` when given: planes ``(P e_a, P e_b)``), and the exponential
    is ``torch.linalg.matrix_exp``, independent of the cos/sin path of :class:`GrapeRotation`.

    Args:
        positions: ``(seq,)``.
        inv_freq: ``(pairs,)`` or ``(heads, pairs)``.
        layout: ``"half"`` or ``"interleaved"``: which channels form pair ``i``.
        basis: ``(d, d)`` or ``(heads, d, d)`` orthogonal, or None for the identity.

    Shape:
        ``(seq, d, d)`` or ``(heads, seq, d, d)``; apply as ``x' = G x`` per position.
    """
    omega = inv_freq.to(torch.float64)
    pairs = omega.shape[-1]
    d = 2 * pairs
    eye = torch.eye(d, dtype=torch.float64, device=omega.device)
    first, second = pair_views(eye, d, layout)  # columns e_a, e_b of each pair: (d, pairs)
    generators = rank2_generator(first.t(), second.t())  # (pairs, d, d)
    if basis is not None:
        p = basis.to(torch.float64)
        generators = p[..., None, :, :] @ generators @ p[..., None, :, :].transpose(-1, -2)
    mixed = (omega[..., :, None, None] * generators).sum(-3)  # (…, d, d): Σ ω_i L_i
    n = positions.to(device=omega.device, dtype=torch.float64)
    return torch.linalg.matrix_exp(n[:, None, None] * mixed[..., None, :, :])


class GrapeRotation(RotaryEncoding):
    """Multiplicative GRAPE: ``q' = G(n_q) q``, ``k' = G(n_k) k``, ``G(n) = P R(nω) Pᵀ``.

    .. math::

        G(n) = \\exp\\Big(n \\sum_i ω_i L_i\\Big), \\quad L_i = v_i u_i^⊤ − u_i v_i^⊤, \\quad
        q'^⊤ k' = q^⊤ G(n_k − n_q) k

    Paper: GRAPE, https://arxiv.org/abs/2512.07805 (reference: model-architectures/GRAPE,
    ``MSGRAPECommuting`` in ``llama-mha-grape-m-nonctx.py``). With the default spectrum and
    ``planes="coordinate"`` it is RoPE bit for bit (tested against
    :class:`~posenc.rotary.RotaryEmbedding` in both layouts); :func:`grape_matrix` builds
    ``G(n)`` from the generators in float64 (tested against the module).

    Learned parameters: the spectrum ``inv_freq`` (``ω_i > 0``, initialized log-uniform as
    RoPE; shared or one per head) and, for ``planes="learned"``, ``plane_weight`` ``W`` with
    ``P = exp(W − Wᵀ)`` (zero at start: ``P = I``). The planes stay mutually orthogonal, so
    the generators commute and every logit depends on ``n_k − n_q`` alone. Deviation from the
    reference: the spectrum is stored as ``ω`` itself (float64 by default, so the default is
    RoPE's exact frequencies), not ``exp(log ω / scale)``.

    Args:
        head_dim: channels per head (even); every channel is rotated.
        num_heads: heads with their own spectrum and planes, or None for one set shared by
            every head (grouped-query attention needs None).
        base: RoPE base of the initial spectrum ``ω_i = base^{−2i/d}``.
        layout: ``"half"`` or ``"interleaved"``: the coordinate planes.
        planes: ``"coordinate"`` (RoPE's planes) or ``"learned"`` (``P`` learned).
        device, dtype: of the parameters (default float64: the exact RoPE spectrum).

    Shape:
        ``forward(q, k, q_pos, k_pos)``: q ``(batch, heads, q_len, head_dim)``, k ``(batch,
        heads, k_len, head_dim)``, positions ``(seq,)`` or ``(batch, seq)`` → rotated q, k.

    Example::

        >>> grape = GrapeRotation(8)
        >>> q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
        >>> q2, k2 = grape(q, k, torch.arange(5), torch.arange(5))
        >>> q2.shape
        torch.Size([1, 2, 5, 8])
    """

    def __init__(
        self,
        head_dim: int,
        *,
        num_heads: int | None = None,
        base: float = 10000.0,
        layout: Layout = "half",
        planes: GrapePlanes = "coordinate",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        head_dim = check_positive_int("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even (pairs of channels), got {head_dim}")
        if num_heads is not None:
            num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim, self.num_heads = head_dim, num_heads
        self.base = check_positive_float("base", base)
        check_in_choices("layout", layout, LAYOUTS)
        check_in_choices("planes", planes, PLANES)
        check_floating_dtype("dtype", dtype)
        self.layout: Layout = layout
        self.planes: GrapePlanes = planes
        heads = () if num_heads is None else (num_heads,)
        factory = {"device": device, "dtype": dtype or torch.float64}
        self.inv_freq = nn.Parameter(torch.empty(*heads, head_dim // 2, **factory))  # type: ignore[arg-type]
        self.plane_weight: nn.Parameter | None = None
        if planes == "learned":
            shape = (*heads, head_dim, head_dim)
            self.plane_weight = nn.Parameter(torch.empty(shape, **factory))  # type: ignore[arg-type]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """RoPE's log-uniform spectrum ``base^{−2i/d}``; ``W = 0`` (the coordinate planes)."""
        if self.inv_freq.device.type == "meta":
            return
        with torch.no_grad():
            spectrum = rope_inv_freq(self.head_dim, self.base).to(torch.float64)
            self.inv_freq.copy_(spectrum.expand_as(self.inv_freq))
            if self.plane_weight is not None:
                self.plane_weight.zero_()

    def basis(self) -> Tensor | None:
        """``P = exp(W − Wᵀ)`` in float64 ``(…, d, d)``, or None for the coordinate planes."""
        if self.plane_weight is None:
            return None
        weight = self.plane_weight.to(torch.float64)
        return torch.linalg.matrix_exp(weight - weight.transpose(-1, -2))

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> tuple[Tensor, ...]:
        """cos and sin of ``n ω_i`` per pair (``(…, 1 | heads, seq, d/2)``), then ``P`` for
        learned planes, in the compute dtype of ``dtype``; the spectrum does not follow the
        length."""
        compute = compute_dtype(dtype)
        angles = grape_angles(positions, self.inv_freq)  # float64
        if self.num_heads is None:
            angles = angles.unsqueeze(-3)  # (…, 1, seq, pairs): heads broadcast
        cos, sin = torch.cos(angles).to(compute), torch.sin(angles).to(compute)
        basis = self.basis()
        if basis is None:
            return cos, sin
        return cos, sin, basis.to(device=positions.device, dtype=compute)

    def _rotate(self, x: Tensor, tables: tuple[Tensor, ...]) -> Tensor:
        if len(tables) == 2:
            return grape_rotate(x, tables[0], tables[1], self.layout)
        cos, sin, basis = tables
        if basis.dim() == 3:
            basis = basis[None]  # (1, heads, d, d): x's (batch, heads) broadcast
        y = grape_rotate(x.to(basis.dtype) @ basis, cos, sin, self.layout)  # Pᵀ x, rotated
        return (y @ basis.transpose(-1, -2)).to(x.dtype)  # P R Pᵀ x

    def rotate_qk(
        self,
        q: Tensor,
        k: Tensor,
        q_tables: tuple[Tensor, ...],
        k_tables: tuple[Tensor, ...],
        *,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """``G(n_q) q`` and ``G(n_k) k`` (new tensors; ``inplace`` is accepted, not needed)."""
        return self._rotate(q, q_tables), self._rotate(k, k_tables)

    def bind_projections(self, q_proj: nn.Linear, k_proj: nn.Linear) -> None:
        """Attention's construction-time check: a spectrum per head needs a key head per
        query head (``ValueError`` naming ``num_kv_heads`` otherwise)."""
        kv_heads = k_proj.out_features // self.head_dim
        if self.num_heads is not None and kv_heads != self.num_heads:
            raise ValueError(
                f"pos: GrapeRotation has parameters for {self.num_heads} heads but the "
                f"attention has {kv_heads} key heads (num_kv_heads): grouped-query attention "
                "needs num_heads=None (one set shared by every head)"
            )

    def check_rotary_call(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> None:
        """The base checks; q and k with ``num_heads`` heads for per-head parameters; finite
        parameters (``ValueError`` naming ``inv_freq`` or ``plane_weight``)."""
        super().check_rotary_call(q, k, q_pos, k_pos)
        check_finite("inv_freq", self.inv_freq.detach())
        if self.plane_weight is not None:
            check_finite("plane_weight", self.plane_weight.detach())
        for name, x in (("q", q), ("k", k)):
            if self.num_heads is not None and x.shape[1] != self.num_heads:
                raise ValueError(
                    f"{name} has {x.shape[1]} heads but this GrapeRotation has parameters "
                    f"for {self.num_heads} heads (num_heads=None shares one set)"
                )

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, num_heads={self.num_heads}, base={self.base:g}, "
            f"layout={self.layout!r}, planes={self.planes!r}"
        )

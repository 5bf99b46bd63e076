"""Learned rotations: ``R(p) = exp(Σ_a p_a · A_a)`` with skew-symmetric block generators.

LieRE and ComRoPE replace RoPE's fixed 2×2 rotations by the matrix exponential of learned
skew-symmetric generators ``A_a``, one per position axis ``a`` (row and column; time, row
and column); ``p_a`` is the position times ``position_scale``. Every ``A_a`` is
block-diagonal with ``head_dim / b`` blocks of ``b × b``, so

.. math::

    R(p) = \\operatorname{blockdiag}_j \\exp\\Big(\\sum_a p_a · B_{a,j}\\Big), \\qquad
    q' = R(p_q)\\, q, \\quad k' = R(p_k)\\, k, \\quad q'·k' = q^⊤ R(p_q)^⊤ R(p_k)\\, k.

``R`` is orthogonal (norms are kept) and ``R(0) = I``. When the generators commute, ``R(p_q)^⊤
R(p_k) = R(p_k − p_q)`` and a score depends on the positions only through their difference
(ComRoPE's Theorem: commuting is necessary and sufficient); general generators (LieRE) give
scores that also read absolute positions. The three methods are presets of one class,
:class:`LearnedRotation`, whose ``kind`` names how the blocks ``B_{a,j}`` are made from the
parameter ``weight = W`` (``skew(W) = W − Wᵀ``; see docs/rotary.md for choosing ``b``):

* ``"liere"`` (Ostmeier et al. 2024, https://arxiv.org/abs/2406.10322; StanfordMIMI/LieRE):
  ``B_{a,j} = skew(W_{a,j})``, free per axis, per block and per head; not relative;
* ``"comrope_ap"`` (ComRoPE axis-partition, Yu et al. 2025, https://arxiv.org/abs/2506.03737;
  Longin-Yu/ComRoPE ``ComRoPEAPAttention``): block ``j`` belongs to axis ``j mod N``,
  ``B_{a,j} = skew(W_j)`` when ``j ≡ a (mod N)`` else 0; blocks of different axes act on
  different channels, so the generators commute;
* ``"comrope_ld"`` (ComRoPE linearly dependent, ``ComRoPELDAttention``): ``B_{a,j} = θ_{a,j} ·
  skew(W_j)``, one matrix per block scaled per axis (``axis_scale = θ``), so they commute.

Parameterisation and initialization follow the reference code (read at
Longin-Yu/ComRoPE ``model.py`` and StanfordMIMI/LieRE ``models/rope_vit.py``
``LierePositionEncoder``): ComRoPE stores the full ``W`` (per head; ``θ`` shared by the
heads) drawn from ``N(0, init_scale²)``, ``init_scale = 1``, and ``θ ~ N(0, 1)``; LieRE draws
``U[0, 2π)`` and keeps the strict upper triangle (``triu(W, 1)``: its ``−0.5`` offset
cancels in ``W − Wᵀ``); here LieRE's ``W`` is stored full as well, zero below the diagonal
at initialization, so the generator equals LieRE's (a gradient step moves it twice as far
as LieRE's triangle would). Both references feed coordinates normalized to about ``[0, 1]``
per axis (ComRoPE ``(i + 0.5) / n``, LieRE ``linspace(0, 1, n)``): ``position_scale``
multiplies the positions (the registry sets ``1 / grid size`` per axis). Deviations: the
block size defaults to the largest of 8, 4, 2 that divides ``head_dim`` (LieRE's scripts
use one block of the whole head, ComRoPE's config 2; pass ``block_size``); axis-partition
takes any block count of at least ``N`` (ComRoPE asks ``head_dim`` divisible by ``N·b``).

Precision: the exponent ``Σ_a p_a B_{a,j}`` and its exponential are computed in float64 and
the rotation cast once to float32 (float64 for float64 inputs), as RoPE's tables are: in
float32 the angles of positions near ``2^18`` keep no fraction of a radian. Starting tensors
holding NaN or inf raise ``ValueError`` naming them, as do parameters in the validated call
(``forward``; attention's hot path reads no values).

Cost: a ``b × b`` float64 matrix exponential per token, head and block, then ``O(head_dim ·
b)`` multiply-adds per vector (in float32, or float64 for float64 inputs) where RoPE takes
``O(head_dim)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, get_args

import torch
from torch import Tensor, nn

from posenc._validate import (
    check_finite,
    check_in_choices,
    check_positive_float,
    check_positive_int,
)
from posenc.encoding.protocols import RotaryEncoding

__all__ = ["LearnedRotation", "RotationKind", "block_rotations", "rotate_blocks", "skew"]

RotationKind = Literal["liere", "comrope_ap", "comrope_ld"]
KINDS: tuple[str, ...] = get_args(RotationKind)


def skew(weight: Tensor) -> Tensor:
    """``W − Wᵀ`` over the last two dimensions: a skew-symmetric matrix."""
    return weight - weight.transpose(-1, -2)


def axis_partition(num_axes: int, num_blocks: int, device: torch.device | None = None) -> Tensor:
    """ComRoPE-AP's ownership ``(axes, blocks)``: 1 where block ``j`` reads axis ``j mod N``."""
    blocks = torch.arange(num_blocks, device=device)
    axes = torch.arange(num_axes, device=device)
    return (blocks[None, :] % num_axes == axes[:, None]).float()


def block_rotations(generators: Tensor, coordinates: Tensor) -> Tensor:
    """``exp(Σ_a p_a B_{a,j})`` per token, head and block.

    Args:
        generators: ``(heads, axes, blocks, b, b)`` skew-symmetric blocks.
        coordinates: ``(..., seq, axes)`` positions, in the generators' dtype.

    Returns:
        ``(..., heads, seq, blocks, b, b)`` rotations (``torch.linalg.matrix_exp``).
    """
    exponent = torch.einsum("...sa,hanij->...hsnij", coordinates, generators)
    # contiguous: matrix_exp views its input and fails on einsum's permuted output
    return torch.linalg.matrix_exp(exponent.contiguous())


def rotate_blocks(x: Tensor, rotations: Tensor) -> Tensor:
    """``R x`` blockwise: x ``(batch, heads, seq, head_dim)``, rotations ``([batch,] heads|1,
    seq, blocks, b, b)``; computed in the rotations' dtype, returned in x's."""
    blocks, size = rotations.shape[-3], rotations.shape[-1]
    parts = x.to(rotations.dtype).unflatten(-1, (blocks, size))[..., None]  # (..., n, b, 1)
    return (rotations @ parts)[..., 0].flatten(-2).to(x.dtype)


def _default_block_size(head_dim: int, min_blocks: int) -> int:
    """The largest of 8, 4, 2 dividing ``head_dim`` into at least ``min_blocks`` blocks."""
    for size in (8, 4, 2):
        if head_dim % size == 0 and head_dim // size >= min_blocks:
            return size
    raise ValueError(
        f"head_dim must be even with at least {min_blocks} blocks of 2 channels, got {head_dim}"
    )


class LearnedRotation(RotaryEncoding):
    """Rotary encoding by learned skew-symmetric block generators (LieRE, ComRoPE-AP/LD).

    See the module for the formula and the presets (:meth:`liere`, :meth:`comrope_ap`,
    :meth:`comrope_ld`); the parameters are learned per layer (``shared_across_layers`` is
    False).

    Args:
        head_dim: channels per head (q and k's last dimension).
        num_axes: position axes ``N`` (2: row and column; 3: time, row and column).
        kind: ``"liere"``, ``"comrope_ap"`` or ``"comrope_ld"``.
        block_size: ``b``, dividing ``head_dim``, at least 2 (default: the largest of 8, 4,
            2 dividing it, with at least ``N`` blocks for ``"comrope_ap"``).
        num_heads: heads with their own generators (1: one set for all heads). Per-head
            generators need as many key heads as query heads: under grouped-query attention
            a query head and its key head would rotate differently, and ComRoPE's scores
            would no longer be relative (refused by :meth:`bind_projections`).
        init_scale: LieRE: the upper bound of ``U[0, init_scale)`` (default 2π); ComRoPE: the
            standard deviation of ``W`` (default 1).
        position_scale: multiplies the positions, one value or one per axis (``1 / n`` for
            an ``n``-patch axis gives the references' unit-interval coordinates).
        weight: ``W`` to start from (``reset_parameters`` restores it) instead of a draw:
            ``(heads, N, blocks, b, b)`` for LieRE, ``(heads, 1, blocks, b, b)`` for ComRoPE.
        axis_scale: ComRoPE-LD's ``θ`` to start from, ``(N, blocks)``.
        device, dtype: of the parameters (float32 by default).

    Shape:
        q ``(batch, heads, q_len, head_dim)``, k likewise; positions ``(N, seq)`` or ``(N,
        batch, seq)`` (``(seq,)`` or ``(batch, seq)`` when ``N = 1``), integer or floating.

    Example::

        >>> from posenc.positions import grid_positions
        >>> rot = LearnedRotation.comrope_ld(16, num_axes=3, num_heads=2)
        >>> q = k = torch.randn(1, 2, 24, 16)
        >>> pos = grid_positions(2, 3, 4)
        >>> q2, k2 = rot(q, k, pos, pos)
        >>> torch.allclose(q2.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
        True
    """

    num_heads: int

    shared_across_layers = False  # learned per layer

    def __init__(
        self,
        head_dim: int,
        num_axes: int = 2,
        *,
        kind: RotationKind = "comrope_ld",
        block_size: int | None = None,
        num_heads: int = 1,
        init_scale: float | None = None,
        position_scale: float | Sequence[float] = 1.0,
        weight: Tensor | None = None,
        axis_scale: Tensor | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.num_axes = check_positive_int("num_axes", num_axes)
        check_in_choices("kind", kind, KINDS)
        self.kind: RotationKind = kind
        self.num_heads = check_positive_int("num_heads", num_heads)
        min_blocks = num_axes if kind == "comrope_ap" else 1
        if block_size is None:
            block_size = _default_block_size(head_dim, min_blocks)
        block_size = check_positive_int("block_size", block_size)
        if block_size < 2 or head_dim % block_size:
            raise ValueError(
                f"block_size must be at least 2 and divide head_dim ({head_dim}), got {block_size}"
            )
        self.block_size, self.num_blocks = block_size, head_dim // block_size
        if self.num_blocks < min_blocks:
            raise ValueError(
                f"block_size {block_size} leaves {self.num_blocks} blocks for {num_axes} axes: "
                "comrope_ap gives each axis at least one block (choose a smaller block_size)"
            )
        default_init = 2 * math.pi if kind == "liere" else 1.0
        self.init_scale = check_positive_float(
            "init_scale", default_init if init_scale is None else init_scale
        )
        self.position_scale = self._scales(position_scale)
        axes = num_axes if kind == "liere" else 1
        shape = (num_heads, axes, self.num_blocks, block_size, block_size)
        self._initial_weight = self._given("weight", weight, shape)
        self._initial_axis_scale = self._given(
            "axis_scale", axis_scale, (num_axes, self.num_blocks)
        )
        if axis_scale is not None and kind != "comrope_ld":
            raise ValueError(f"axis_scale is ComRoPE-LD's θ; kind {kind!r} has none")
        self.weight = nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self.axis_scale: nn.Parameter | None = None
        if kind == "comrope_ld":
            scale = torch.empty(num_axes, self.num_blocks, device=device, dtype=dtype)
            self.axis_scale = nn.Parameter(scale)
        self.reset_parameters()

    def _scales(self, position_scale: float | Sequence[float]) -> tuple[float, ...]:
        values = (
            list(position_scale)
            if isinstance(position_scale, Sequence)
            else [position_scale] * self.num_axes
        )
        if len(values) != self.num_axes:
            raise ValueError(
                f"position_scale must be one value or one per axis ({self.num_axes}), got "
                f"{len(values)}"
            )
        return tuple(check_positive_float(f"position_scale[{i}]", v) for i, v in enumerate(values))

    @staticmethod
    def _given(name: str, value: Tensor | None, shape: tuple[int, ...]) -> Tensor | None:
        """A user's starting tensor, checked and kept as float64 on the CPU."""
        if value is None:
            return None
        if not isinstance(value, Tensor) or not value.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor of shape {shape}")
        if tuple(value.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
        if value.device.type == "meta":
            raise ValueError(f"{name} must hold values (a tensor on the meta device has none)")
        check_finite(name, value.detach())
        return value.detach().to(device="cpu", dtype=torch.float64).clone()

    # ---- presets ---------------------------------------------------------------------------

    @classmethod
    def liere(
        cls,
        head_dim: int,
        num_axes: int = 2,
        *,
        block_size: int | None = None,
        num_heads: int = 1,
        init_scale: float | None = None,
        position_scale: float | Sequence[float] = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> LearnedRotation:
        """LieRE: free generators per axis, block and head (not relative); ``U[0, 2π)``
        strict upper triangle at initialization. LieRE's own runs use ``block_size =
        head_dim``. Arguments: those of :class:`LearnedRotation`."""
        return cls(
            head_dim,
            num_axes,
            kind="liere",
            block_size=block_size,
            num_heads=num_heads,
            init_scale=init_scale,
            position_scale=position_scale,
            device=device,
            dtype=dtype,
        )

    @classmethod
    def comrope_ap(
        cls,
        head_dim: int,
        num_axes: int = 2,
        *,
        block_size: int | None = None,
        num_heads: int = 1,
        init_scale: float | None = None,
        position_scale: float | Sequence[float] = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> LearnedRotation:
        """ComRoPE-AP: block ``j`` rotates by axis ``j mod N`` alone (commuting, relative).
        Arguments: those of :class:`LearnedRotation`."""
        return cls(
            head_dim,
            num_axes,
            kind="comrope_ap",
            block_size=block_size,
            num_heads=num_heads,
            init_scale=init_scale,
            position_scale=position_scale,
            device=device,
            dtype=dtype,
        )

    @classmethod
    def comrope_ld(
        cls,
        head_dim: int,
        num_axes: int = 2,
        *,
        block_size: int | None = None,
        num_heads: int = 1,
        init_scale: float | None = None,
        position_scale: float | Sequence[float] = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> LearnedRotation:
        """ComRoPE-LD: one generator per block and head, scaled per axis by ``θ_{a,j}``
        (commuting, relative). Arguments: those of :class:`LearnedRotation`."""
        return cls(
            head_dim,
            num_axes,
            kind="comrope_ld",
            block_size=block_size,
            num_heads=num_heads,
            init_scale=init_scale,
            position_scale=position_scale,
            device=device,
            dtype=dtype,
        )

    # ---- parameters ------------------------------------------------------------------------

    @property
    def relative(self) -> bool:
        """True when the generators commute by construction (scores read ``p_k − p_q``)."""
        return self.kind != "liere" or self.num_axes == 1

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Draw the generators as the references do (see the module) from ``generator``
        (else the global generator of the parameters' device), or restore the tensors the
        constructor was given. Call it after ``to_empty`` on a ``meta``-built module."""
        weight = self.weight
        where = generator.device if generator is not None else weight.device

        def normal(shape: torch.Size) -> Tensor:
            return torch.randn(shape, generator=generator, device=where)

        with torch.no_grad():
            if self._initial_weight is not None:
                weight.copy_(self._initial_weight)
            elif self.kind == "liere":
                uniform = torch.rand(weight.shape, generator=generator, device=where)
                weight.copy_((uniform * self.init_scale).triu(diagonal=1))
            else:
                weight.copy_(normal(weight.shape) * self.init_scale)
            if self.axis_scale is not None:
                given = self._initial_axis_scale
                self.axis_scale.copy_(normal(self.axis_scale.shape) if given is None else given)

    def generators(self, dtype: torch.dtype | None = None) -> Tensor:
        """The skew-symmetric blocks ``B_{a,j}``: ``(heads, axes, blocks, b, b)``, in
        ``dtype`` (default: the parameters' dtype), with autograd to the parameters."""
        weight = self.weight if dtype is None else self.weight.to(dtype)
        blocks = skew(weight)
        if self.kind == "comrope_ap":
            own = axis_partition(self.num_axes, self.num_blocks, weight.device)
            return blocks * own.to(blocks.dtype)[None, :, :, None, None]
        if self.kind == "comrope_ld":
            assert self.axis_scale is not None
            theta = self.axis_scale.to(blocks.dtype)
            return blocks * theta[None, :, :, None, None]
        return blocks

    def matrix(self, positions: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
        """The full ``R(p)``: ``(..., heads, seq, head_dim, head_dim)`` (for tests and
        figures; attention uses the blocks of :meth:`rotary_tables`)."""
        return _block_diag(self.rotary_tables(positions, dtype))

    # ---- hooks -----------------------------------------------------------------------------

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> Tensor:
        """``R(p)``'s blocks per token: ``(heads|1, seq, blocks, b, b)``, or with a leading
        batch for batched positions; computed in float64 and returned in float32 (float64
        when ``dtype`` or the parameters are), with autograd to the generators. No value
        checks (attention's hot path): :meth:`forward` checks the parameters."""
        out = torch.promote_types(self.weight.dtype, torch.float32)
        if dtype == torch.float64:
            out = torch.float64
        # p·A and its exponential in float64 whatever the output dtype (as RoPE's tables):
        # in float32 the angle of a position near 2^18 keeps no fraction of a radian
        f64 = torch.float64
        coords = positions[None] if self.num_axes == 1 else positions  # (N, [batch,] seq)
        coords = coords.to(device=self.weight.device, dtype=f64).movedim(0, -1)
        if any(s != 1.0 for s in self.position_scale):
            coords = coords * torch.tensor(self.position_scale, dtype=f64, device=coords.device)
        return block_rotations(self.generators(f64), coords).to(out)

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_tables: Tensor, k_tables: Tensor, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        """``R(p_q) q`` and ``R(p_k) k`` blockwise (new tensors: ``inplace`` is accepted and
        not needed, the product needs a fresh output anyway)."""
        return rotate_blocks(q, q_tables.to(q.device)), rotate_blocks(k, k_tables.to(k.device))

    def bind_projections(self, q_proj: nn.Linear, k_proj: nn.Linear) -> None:
        """Attention's construction-time check (no reference is kept): per-head generators
        need a key head per query head; ``ValueError`` naming ``num_kv_heads`` otherwise."""
        kv_heads = k_proj.out_features // self.head_dim
        if self.num_heads > 1 and kv_heads != self.num_heads:
            raise ValueError(
                f"pos: LearnedRotation has generators for {self.num_heads} heads but the "
                f"attention has {kv_heads} key heads (num_kv_heads): grouped-query attention "
                "needs num_heads=1 (one set of generators shared by every head)"
            )

    def check_rotary_call(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> None:
        """The base checks; per-head generators need q and k with ``num_heads`` heads; the
        parameters must be finite (a diverged step or a bad checkpoint: ``ValueError``
        naming ``weight`` or ``axis_scale``, rather than NaN rotations)."""
        super().check_rotary_call(q, k, q_pos, k_pos)
        for name, parameter in (("weight", self.weight), ("axis_scale", self.axis_scale)):
            if parameter is not None:
                check_finite(name, parameter.detach())
        for name, x in (("q", q), ("k", k)):
            if self.num_heads > 1 and x.shape[1] != self.num_heads:
                raise ValueError(
                    f"{name} has {x.shape[1]} heads but this LearnedRotation has generators "
                    f"for {self.num_heads} heads (num_heads=1 shares one set)"
                )

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, num_axes={self.num_axes}, kind={self.kind!r}, "
            f"block_size={self.block_size}, num_heads={self.num_heads}"
        )


def _block_diag(blocks: Tensor) -> Tensor:
    """``(..., n, b, b)`` blocks → ``(..., n·b, n·b)`` block-diagonal matrices."""
    n, b = blocks.shape[-3], blocks.shape[-1]
    eye = torch.eye(n, dtype=blocks.dtype, device=blocks.device)
    # (..., n, b, n, b): block (i, j) is blocks[i] when i == j
    full = blocks[..., :, :, None, :] * eye[:, None, :, None]
    return full.reshape(*blocks.shape[:-3], n * b, n * b)

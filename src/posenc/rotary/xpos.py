"""xPos: RoPE with an exponential decay of q·k in the relative distance (causal attention).

Paper: "A Length-Extrapolatable Transformer", Sun et al. 2022,
https://arxiv.org/abs/2212.10554. Each channel pair ``i`` of the ``d`` rotated channels gets

.. math::

    ζ_i = \\frac{2i + 0.4 d}{1.4 d} \\in [2/7, 1), \\qquad
    q'_n = ζ^{(n - c)/B} ⊙ R(nθ) q_n, \\qquad k'_m = ζ^{-(m - c)/B} ⊙ R(mθ) k_m,

so that pair ``i`` of ``q'_n · k'_m`` is RoPE's term times ``ζ_i^{(n - m)/B}``: it depends
only on ``n - m`` and decays for keys behind the query (``n > m``). Keys *after* the query
would be amplified instead, so xPos is meant for causal attention (the module cannot see the
mask; with a bidirectional mask it runs but no longer decays).

**The centre** ``c``. The reference implementations (rotary-embedding-torch, x-transformers,
torchscale) measure positions from the middle of the current sequence, ``c = seq_len // 2``.
That breaks KV caching: a key rotated when the sequence was short carries a different scale
than the same key in a full forward. Here ``c`` is a constructor argument (default 0), fixed
for the module's lifetime, so a cached key is exactly the key of the full forward; scores do
not depend on ``c`` at all (it cancels in ``ζ^{(n-c)/B} ζ^{-(m-c)/B}``), only the range does.

**Range.** The scales are computed in float64 (``exp(±(p - c)/B · ln ζ)``) and folded into the
cos/sin tables with one rounding, but q and k are stored in their own dtype, where
``ζ_0^{±(p-c)/B} = (2/7)^{±(p-c)/B}`` must stay representable with room for q and k
themselves. posenc gives half of the dtype's binary exponent range to the scale:
``|p - c| ≤ (e/2)·B / log2(7/2)`` with ``e`` = 128 (float32, bfloat16), 16 (float16) or 1024
(float64), i.e. about 18 130 (float32/bfloat16), 2 266 (float16) and 145 043 (float64)
positions either side of ``c`` for ``B = 512`` (:func:`xpos_max_distance`). Positions
further out raise ``ValueError`` naming them (eager mode; the check reads tensor values, so
it is skipped under ``torch.compile``) instead of silently producing ``inf`` or ``0``. For
long contexts put ``c`` in the middle of the positions in use, or run in float64.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from posenc._validate import (
    check_in_choices,
    check_positive_float,
    check_positive_int,
    validating_values,
)
from posenc.encoding.protocols import RotaryEncoding, check_rotary_input
from posenc.positions import check_positions
from posenc.rotary.frequencies import check_rotary_dim, resolve_rotary_dim, rope_inv_freq
from posenc.rotary.functional import cos_sin_tables, pair_tables_for, rotate_by_tables
from posenc.rotary.kernels import rotate_pair
from posenc.rotary.layouts import LAYOUTS, Layout

__all__ = ["XPos", "xpos_max_distance", "xpos_scale", "xpos_zeta"]


def xpos_zeta(rotary_dim: int) -> Tensor:
    """Per-pair decay bases of xPos, ``ζ_i = (2i + 0.4·d) / (1.4·d)``, in float64.

    .. math:: ζ_i = \\frac{2i + 0.4 d}{1.4 d}, \\qquad i = 0, \\dots, d/2 - 1

    Paper: https://arxiv.org/abs/2212.10554 (eq. 8). Same values as rotary-embedding-torch's
    ``RotaryEmbedding(dim, use_xpos=True).scale``.

    Args:
        rotary_dim: number of rotated channels ``d`` (even, ≥ 2).

    Shape:
        Output: ``(rotary_dim // 2,)``, float64 on the CPU, increasing from ``2/7``.

    Example::

        >>> xpos_zeta(4)
        tensor([0.2857, 0.6429], dtype=torch.float64)
    """
    check_rotary_dim(rotary_dim)
    index = torch.arange(0, rotary_dim, 2, dtype=torch.float64)
    return (index + 0.4 * rotary_dim) / (1.4 * rotary_dim)


def _max_binary_exponent(dtype: torch.dtype) -> int:
    return math.frexp(torch.finfo(dtype).max)[1]  # 128 (float32), 16 (float16), 1024 (float64)


def xpos_max_distance(scale_base: float = 512.0, dtype: torch.dtype = torch.float32) -> float:
    """Largest ``|position − center|`` whose xPos scales fit ``dtype`` with headroom.

    .. math:: |p - c| \\le \\frac{e}{2} \\cdot \\frac{B}{\\log_2 (7/2)}

    with ``e`` the largest binary exponent of ``dtype`` (half of the range goes to the scale
    ``ζ_0^{±(p-c)/B}``, half stays for the values of q and k).

    Args:
        scale_base: ``B`` > 0.
        dtype: floating dtype q and k are stored in.

    Example::

        >>> round(xpos_max_distance(512.0, torch.float32))
        18130
    """
    scale_base = check_positive_float("scale_base", scale_base)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    return _max_binary_exponent(dtype) / 2 * scale_base / math.log2(3.5)


def _check_center(center: object) -> float:
    if isinstance(center, bool) or not isinstance(center, (int, float)):
        raise ValueError(f"center must be a finite number, got {center!r}")
    if not math.isfinite(center):
        raise ValueError(f"center must be a finite number, got {center!r}")
    return float(center)


def xpos_scale(
    positions: Tensor,
    rotary_dim: int,
    *,
    scale_base: float = 512.0,
    center: float = 0.0,
    layout: Layout = "interleaved",
    inverse: bool = False,
) -> Tensor:
    """Full-width xPos scales ``ζ_i^{(p − c)/B}`` (queries) or their inverse (keys), float64.

    .. math:: s_{p,i} = ζ_i^{\\pm (p - c)/B} = \\exp(\\pm (p - c)/B · \\ln ζ_i)

    Paper: https://arxiv.org/abs/2212.10554. With ``c = seq_len // 2`` this equals
    rotary-embedding-torch's ``get_scale`` (tested); posenc keeps ``c`` fixed (see the module
    docstring). On MPS, which has no float64, the result is computed and returned on the CPU.

    Args:
        positions: ``(seq,)`` or ``(batch, seq)``, integer or floating.
        rotary_dim: rotated channels ``d`` (even).
        scale_base: ``B`` > 0; larger means slower decay.
        center: ``c``, the position whose scale is 1.
        layout: channel order of the pairs, ``"half"`` or ``"interleaved"``.
        inverse: ``False`` for queries (``+``), ``True`` for keys (``−``).

    Shape:
        Output: ``(seq, rotary_dim)`` or ``(batch, seq, rotary_dim)``.

    Example::

        >>> xpos_scale(torch.tensor([0, 512]), 4)
        tensor([[1.0000, 1.0000, 1.0000, 1.0000],
                [0.2857, 0.2857, 0.6429, 0.6429]], dtype=torch.float64)
    """
    check_positions(positions)
    scale_base = check_positive_float("scale_base", scale_base)
    center = _check_center(center)
    check_in_choices("layout", layout, LAYOUTS)
    return _scale(positions, rotary_dim, scale_base, center, layout, inverse=inverse)


def _scale(
    positions: Tensor,
    rotary_dim: int,
    scale_base: float,
    center: float,
    layout: str,
    *,
    inverse: bool,
) -> Tensor:
    """:func:`xpos_scale` without checks (the per-forward path)."""
    device = torch.device("cpu") if positions.device.type == "mps" else positions.device
    log_zeta = xpos_zeta(rotary_dim).log().to(device)
    power = (positions.to(device=device, dtype=torch.float64) - center) / scale_base
    if inverse:
        power = -power
    half = torch.exp(power[..., None] * log_zeta)  # (..., seq, rotary_dim // 2)
    if layout == "half":
        return torch.cat((half, half), dim=-1)
    return half.repeat_interleave(2, dim=-1)


class XPos(RotaryEncoding):
    """xPos: rotary embedding whose q·k decays as ``ζ_i^{(n − m)/B}`` per channel pair.

    .. math::

        q'_n = ζ^{(n - c)/B} ⊙ R(nθ) q_n, \\quad k'_m = ζ^{-(m - c)/B} ⊙ R(mθ) k_m,
        \\quad ζ_i = \\frac{2i + 0.4 d}{1.4 d}

    Paper: Sun et al. 2022, https://arxiv.org/abs/2212.10554. Tested against
    rotary-embedding-torch ``RotaryEmbedding(dim, use_xpos=True).rotate_queries_and_keys``
    (whole tensors with ``center = seq_len // 2``, score matrices for any centre).

    For causal attention: keys behind the query decay, keys ahead would grow. The centre
    ``c`` is fixed, so decoding with a KV cache equals the full forward; scores do not
    depend on ``c``, the usable range ``|p − c| ≤`` :func:`xpos_max_distance` does (about
    18 000 positions either side in float32 for ``B = 512``; further raises ``ValueError``).

    Args:
        head_dim: channels per head of q and k (≥ 1).
        rotary_dim: rotated (and scaled) channels, even and ≤ ``head_dim``; the rest pass
            through unchanged. Defaults to ``head_dim``.
        base: the RoPE base of ``θ_i = base^{-2i/d}``, > 0.
        scale_base: ``B`` > 0 (512 in the paper).
        center: ``c``, the position where both scales are 1 (any finite number; default 0).
        layout: ``"interleaved"`` (default, as the reference) or ``"half"``.
        device: unused (nothing is stored); accepted for a uniform constructor.
        dtype: dtype of the cos/sin tables; ``None`` keeps them exact (float32, or float64
            when q is float64).

    Shape:
        - q: ``(batch, q_heads, q_len, head_dim)``; k: ``(batch, k_heads, k_len, head_dim)``.
        - q_pos: ``(q_len,)`` or ``(batch, q_len)``; k_pos: ``(k_len,)`` or ``(batch, k_len)``.
        - Output: q and k rotated and scaled, same shapes and dtypes.

    Example::

        >>> xpos = XPos(64)
        >>> q, k = torch.randn(2, 8, 5, 64), torch.randn(2, 8, 9, 64)
        >>> q, k = xpos(q, k, torch.arange(4, 9), torch.arange(9))
    """

    #: Keys after the query would grow instead of decay: bidirectional attention refuses it.
    causal_only: ClassVar[bool] = True

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        scale_base: float = 512.0,
        center: float = 0.0,
        layout: Layout = "interleaved",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.rotary_dim = resolve_rotary_dim(head_dim, rotary_dim)
        self.base = check_positive_float("base", base)
        self.scale_base = check_positive_float("scale_base", scale_base)
        self.center = _check_center(center)
        check_in_choices("layout", layout, LAYOUTS)
        self.layout: Layout = layout
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype or None, got {dtype}")
        self.dtype = dtype
        self.device = None if device is None else torch.device(device)
        # float64 on the CPU, outside state_dict and _apply: module casts cannot round it.
        # (built on the CPU even under a meta-device build: a constant, not state)
        self._inv_freq = rope_inv_freq(self.rotary_dim, self.base, device="cpu")

    def inv_freq(self) -> Tensor:
        """Inverse frequencies ``θ_i`` ``(rotary_dim // 2,)``, float64 on the CPU."""
        return self._inv_freq

    def rotate_queries(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate queries by ``positions`` and scale them by ``ζ^{(p − c)/B}``."""
        self._check_call(x, positions, "x", "positions")
        cos, sin, _, _ = self.rotary_tables(positions.to(x.device), x.dtype)
        return rotate_by_tables(x, cos, sin, self.layout)

    def rotate_keys(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate keys by ``positions`` and scale them by ``ζ^{-(p − c)/B}``."""
        self._check_call(x, positions, "x", "positions")
        _, _, cos, sin = self.rotary_tables(positions.to(x.device), x.dtype)
        return rotate_by_tables(x, cos, sin, self.layout)

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate and scale q by ``q_pos`` and k by ``k_pos``; returns ``(q', k')``."""
        self._check_call(q, q_pos, "q", "q_pos")
        self._check_call(k, k_pos, "k", "k_pos")
        q_tables = self.rotary_tables(q_pos.to(q.device), q.dtype)
        k_tables = q_tables if k_pos is q_pos else self.rotary_tables(k_pos.to(k.device), k.dtype)
        return self.rotate_qk(q, k, q_tables, k_tables)

    def _check_call(self, x: Tensor, positions: Tensor, name: str, pos_name: str) -> None:
        check_rotary_input(x, positions, self.head_dim, name, pos_name, "XPos")
        self.validate_positions(positions, pos_name, x.dtype)

    def validate_positions(
        self, positions: Tensor, name: str, dtype: torch.dtype = torch.float32
    ) -> None:
        """Raise ``ValueError`` naming ``name`` if a scale would overflow ``dtype``.

        Run once per forward at the attention boundary (eagerly; skipped while compiling).
        """
        if not validating_values() or positions.numel() == 0:
            return
        limit = xpos_max_distance(self.scale_base, dtype)
        offsets = (positions.to(torch.float64) - self.center).abs()
        worst = int(offsets.argmax())
        if float(offsets.flatten()[worst]) > limit:
            position = positions.flatten()[worst].item()
            raise ValueError(
                f"{name} holds position {position:g}, {offsets.flatten()[worst]:g} from "
                f"center {self.center:g}; xPos scales (2/7)^(±(p − center)/{self.scale_base:g}) "
                f"fit {dtype} only for |p − center| <= {limit:.0f}. Pass a center near the "
                "positions in use, or use float64."
            )

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> tuple[Tensor, ...]:
        """``(cos_q, sin_q, cos_k, sin_k)``: rotation tables times the query and key scales."""
        mps = positions.device.type == "mps"  # no float64 there: tables in float32
        exact = torch.float32 if mps else torch.float64
        cos, sin = cos_sin_tables(positions, self._inv_freq, self.layout, exact, 1.0)
        table = self.dtype or (torch.float64 if dtype == torch.float64 else torch.float32)
        tables = []
        for inverse in (False, True):  # query scales, then key scales
            scale = _scale(
                positions,
                self.rotary_dim,
                self.scale_base,
                self.center,
                self.layout,
                inverse=inverse,
            ).to(device=cos.device, dtype=exact)
            # One rounding of the float64 products to the table dtype.
            tables += [(cos * scale).to(table), (sin * scale).to(table)]
        return tuple(tables)

    def rotate_qk(
        self,
        q: Tensor,
        k: Tensor,
        q_tables: tuple[Tensor, ...],
        k_tables: tuple[Tensor, ...],
        *,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Rotate and scale q (``ζ^{(p − c)/B}``) and k (``ζ^{-(p − c)/B}``) in one call."""
        return rotate_pair(
            q,
            k,
            pair_tables_for(q, q_tables[0], q_tables[1], self.layout),
            pair_tables_for(k, k_tables[2], k_tables[3], self.layout),
            layout=self.layout,
            rotary_dim=self.rotary_dim,
            inplace=inplace,
        )

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}, "
            f"scale_base={self.scale_base:g}, center={self.center:g}, layout={self.layout!r}"
        )

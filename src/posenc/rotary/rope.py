"""Rotary position embedding (RoPE): rotate channel pairs of q and k by position-dependent angles.

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
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.encoding.protocols import RotaryEncoding, check_rotary_input
from posenc.positions import check_positions
from posenc.rotary.frequencies import check_rotary_dim, resolve_rotary_dim, rope_inv_freq
from posenc.rotary.kernels import _pair_views, rotate, rotate_pair
from posenc.rotary.scaling import DynamicNTK, LongRoPE, Proportional, Scaling, YaRN

__all__ = [
    "Layout",
    "LengthRule",
    "RotaryEmbedding",
    "apply_rotary",
    "rope_angles",
    "rope_cos_sin",
]

Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[str, ...] = get_args(Layout)
#: How a length-dependent scaling picks its length in a forward of several tokens:
#: ``"forward"`` (HF) one length for the forward, ``"query"`` each query its own prefix's.
LengthRule = Literal["forward", "query"]
LENGTH_RULES: tuple[str, ...] = get_args(LengthRule)


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
    return _cos_sin(positions, inv_freq, layout, dtype, attention_factor)


def _cos_sin(
    positions: Tensor, inv_freq: Tensor, layout: str, dtype: torch.dtype, attention_factor: float
) -> tuple[Tensor, Tensor]:
    """:func:`rope_cos_sin` without checks (the per-forward path)."""
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


#: :class:`RotaryEmbedding` keeps cos/sin of positions ``0 … n − 1`` for integer CPU positions
#: below this (at most 2 × 32768 × rotary_dim values: 32 MiB of float32 at rotary_dim 128)
#: and gathers rows from them instead of computing float64 cos and sin on every call.
TABLE_CACHE_POSITIONS = 1 << 15


def _gathers(positions: Tensor) -> bool:
    """True when tables for ``positions`` may come from the memoised ones: integer positions
    on the CPU, eager (a compiled graph computes them: the range check is a host sync)."""
    return (
        positions.device.type == "cpu"
        and not positions.is_floating_point()
        and positions.numel() > 0
        and not torch.compiler.is_compiling()
    )


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # float16/bfloat16 rotate in float32 (one rounding at the end); float64 stays float64.
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
    return _rotate_unchecked(x, cos, sin, layout)


def _rotate_unchecked(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """:func:`apply_rotary` without checks, from full-width tables."""
    return _rotate_halves(x, *_halves_for(x, cos, sin, layout), layout, cos.shape[-1])


def _halves_for(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """Full-width tables as one value per pair in ``x``'s compute dtype, on its device."""
    compute = _compute_dtype(x.dtype)
    cos, sin = cos.to(device=x.device, dtype=compute), sin.to(device=x.device, dtype=compute)
    return _half_tables(cos, sin, layout)


def _half_tables(cos: Tensor, sin: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """One value per pair from full-width tables, heads broadcast: ``(…, 1, seq, d/2)``."""
    rotary_dim = cos.shape[-1]
    c, s = _pair_views(cos, rotary_dim, layout)[0], _pair_views(sin, rotary_dim, layout)[0]
    if c.dim() == 3:
        c, s = c[:, None], s[:, None]  # (batch, 1, seq, rotary_dim / 2): broadcast heads
    return c, s


def _rotate_halves(x: Tensor, c: Tensor, s: Tensor, layout: str, rotary_dim: int) -> Tensor:
    """The hot path of every rotary encoding: ``c``, ``s`` are one value per pair, in the
    compute dtype on ``x``'s device (:func:`_half_tables`).

    Each pair ``(a, b)`` becomes ``(a·c − b·s, b·c + a·s)`` with the same roundings as HF's
    ``x·cos + rotate_half(x)·sin`` (bitwise equal), by the implementation
    :mod:`posenc.rotary.kernels` picks (numba's kernels on the CPU when installed).
    """
    return rotate(x, c, s, layout=layout, rotary_dim=rotary_dim)


class RotaryEmbedding(RotaryEncoding):
    """Rotary position embedding (RoPE) for q and k, with optional partial rotary.

    .. math::

        q'_m = R(m θ) q_m, \\quad k'_n = R(n θ) k_n, \\quad
        θ_i = \\mathrm{base}^{-2i/d}, \\quad q'_m · k'_n = f(q, k, m - n)

    Paper: RoFormer, https://arxiv.org/abs/2104.09864. Tested against HF Llama
    (``layout="half"``) and rotary-embedding-torch (``layout="interleaved"``).

    The module holds no tensors: ``inv_freq`` is recomputed (``rotary_dim / 2`` numbers, in
    float64 on the CPU) and memoised per device outside ``state_dict`` and ``_apply``, so
    ``model.to(torch.bfloat16)`` cannot round the frequencies (the HF/NeoX bug of casting the
    ``inv_freq`` buffer). cos/sin are built for the given positions at every call; nothing
    limits the length.

    Context extension: ``scaling`` (:mod:`posenc.rotary.scaling`) supplies the frequencies
    and :attr:`attention_factor`. Static scalings (PI, NTK, YaRN, Llama-3, proportional,
    DynamicNTK ``"fixed"``) are computed once per device. Length-dependent ones
    (``scaling.depends_on_length``: DynamicNTK ``"hf"``, LongRoPE, dynamic YaRN) follow
    HF's runtime semantics (``dynamic_rope_update``, the ``"forward"`` length rule): each
    call of :meth:`forward`, :meth:`rotate` or :meth:`cos_sin` takes ``seq_len =
    max(positions) + 1`` (over q and k) and

    * DynamicNTK and dynamic YaRN: if ``seq_len > max_seq_len_cached`` the frequencies are
      recomputed for ``seq_len`` and ``max_seq_len_cached = seq_len``; else, if ``seq_len``
      is below the threshold (``max_position_embeddings``, YaRN's ``L0``) while
      ``max_seq_len_cached`` is above it, the original frequencies come back and
      ``max_seq_len_cached`` is the threshold again (its initial value);
    * LongRoPE: the long factors are used iff ``seq_len > original_max_position_embeddings``.

    Each change counts one in :attr:`rebuilds`. This state (current frequencies,
    :attr:`max_seq_len_cached`, :attr:`rebuilds`) lives in plain attributes of *this
    module* and is mutated in forward, as in HF: share one module per model (or per layer)
    accordingly. Reading ``seq_len`` costs one host sync per call, so under
    ``torch.compile`` the length-dependent path graph-breaks and is not
    ``fullgraph``-compatible; static scalings add no sync.

    Under a KV cache, :class:`~posenc.attention.Attention` keeps such an encoding's keys
    unrotated and rotates every key with the current step's frequencies when it reads them
    (HF's cached keys keep the frequencies of the step that stored them: transformers
    #25104). With ``length_rule="query"`` a forward of several tokens gives each query the
    frequencies of its own prefix, ``p + 1`` (what decoding token by token gives; the module's
    state is not used): cached decoding then equals a fresh forward at every step and depth
    (docs/context-extension.md, "Under a KV cache"). It costs one rotation of the keys per
    distinct set of frequencies in the forward: two for LongRoPE, one per position past the
    threshold for dynamic NTK.

    Args:
        head_dim: channels per head of q and k (≥ 1).
        rotary_dim: channels rotated per head (even, ≤ ``head_dim``); the rest pass through.
            Defaults to ``head_dim``.
        base: the RoPE base (``rope_theta``), > 0.
        layout: ``"half"`` (NeoX/HF) or ``"interleaved"`` (GPT-J/Meta).
        scaling: a :class:`~posenc.rotary.scaling.Scaling` or None (plain RoPE). Dicts are
            converted at the boundaries (registry, CLI) with ``scaling_from_dict``.
            :class:`~posenc.rotary.scaling.Proportional` needs ``rotary_dim == head_dim``.
        length_rule: ``"forward"`` (default, HF) or ``"query"``: how a length-dependent
            scaling picks its length in a forward of several tokens (see above).
        device: default device of :meth:`inv_freq`.
        dtype: dtype of the cos/sin tables. ``None`` (default) keeps them exact: float32, or
            float64 when q is float64. ``torch.bfloat16`` reproduces HF's bf16 tables.

    Shape:
        - q: ``(batch, q_heads, q_len, head_dim)``; k: ``(batch, k_heads, k_len, head_dim)``
          (GQA and KV caches give other head counts and lengths).
        - q_pos: ``(q_len,)`` or ``(batch, q_len)``; k_pos: ``(k_len,)`` or ``(batch, k_len)``.
        - Output: q and k rotated, same shapes and dtypes.

    Example::

        >>> rope = RotaryEmbedding(64)
        >>> q, k = torch.randn(2, 8, 5, 64), torch.randn(2, 2, 9, 64)
        >>> q, k = rope(q, k, torch.arange(4, 9), torch.arange(9))
    """

    attention_factor: float
    #: frequency changes made by a length-dependent scaling (HF's recomputes and resets).
    rebuilds: int = 0
    length_rule: LengthRule = "forward"
    #: DynamicNTK ("hf"): the longest length the frequencies follow; None otherwise.
    max_seq_len_cached: int | None

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        layout: Layout = "half",
        scaling: Scaling | None = None,
        length_rule: LengthRule = "forward",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.rotary_dim = resolve_rotary_dim(head_dim, rotary_dim)
        self.base = check_positive_float("base", base)
        check_in_choices("layout", layout, LAYOUTS)
        self.layout: Layout = layout
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype or None, got {dtype}")
        self.dtype = dtype
        self.device = None if device is None else torch.device(device)
        if scaling is not None and not isinstance(scaling, Scaling):
            raise ValueError(
                "scaling must be a posenc.rotary.scaling.Scaling or None (convert dicts with "
                f"scaling_from_dict), got {type(scaling).__name__}"
            )
        if isinstance(scaling, Proportional) and self.rotary_dim != self.head_dim:
            raise ValueError(
                f"rotary_dim must equal head_dim ({head_dim}) with Proportional scaling "
                f"(its zero frequencies span the head), got {rotary_dim}"
            )
        if scaling is not None:
            scaling.inv_freq(self.rotary_dim, self.base)  # surface argument errors now
        self.scaling = scaling
        check_in_choices("length_rule", length_rule, LENGTH_RULES)
        self.length_rule: LengthRule = length_rule
        self.attention_factor = 1.0 if scaling is None else scaling.attention_factor
        self.rebuilds = 0
        threshold = getattr(scaling, "length_threshold", None)
        self.max_seq_len_cached = (
            threshold if scaling is not None and scaling.depends_on_length and threshold else None
        )
        # seq_len the current frequencies were computed for (None: the initial ones).
        self._freq_seq_len: int | None = None
        self._inv_freq_memo: dict[tuple[object, ...], Tensor] = {}
        self._table_memo: dict[tuple[object, ...], tuple[Tensor, Tensor]] = {}

    @property
    def depends_on_length(self) -> bool:
        """True when the frequencies follow the sequence length (one host sync per call)."""
        return self.scaling is not None and self.scaling.depends_on_length

    def update(self, seq_len: int) -> None:
        """Advance the length-dependent frequencies to ``seq_len`` (HF's
        ``dynamic_rope_update``); a no-op for plain RoPE and static scalings.

        Args:
            seq_len: ``max(positions) + 1`` of the current call, ≥ 1.
        """
        check_positive_int("seq_len", seq_len)
        scaling = self.scaling
        if scaling is None or not scaling.depends_on_length:
            return
        if isinstance(scaling, (DynamicNTK, YaRN)):
            original = scaling.length_threshold
            assert self.max_seq_len_cached is not None
            if seq_len > self.max_seq_len_cached:  # grow: follow the longest length seen
                self._set_frequencies(seq_len)
                self.max_seq_len_cached = seq_len
            elif seq_len < original < self.max_seq_len_cached:  # reset: back to plain RoPE
                self._set_frequencies(None)
                self.max_seq_len_cached = original
        elif isinstance(scaling, LongRoPE):
            original = scaling.original_max_position_embeddings
            target = original + 1 if seq_len > original else None  # long or short factors
            if target != self._freq_seq_len:
                self._set_frequencies(target)
        elif seq_len != self._freq_seq_len:  # any other length-dependent scaling
            self._set_frequencies(seq_len)

    def _set_frequencies(self, seq_len: int | None) -> None:
        self._freq_seq_len = seq_len
        self.attention_factor = self._attention_factor_at(seq_len)
        self._inv_freq_memo.clear()
        self._table_memo.clear()
        self.rebuilds += 1

    def _attention_factor_at(self, state: int | None) -> float:
        return 1.0 if self.scaling is None else self.scaling.attention_factor_at(state)

    def frequency_length(self, seq_len: int) -> int | None:
        """The state the frequencies take for a sequence of ``seq_len`` positions without
        history (the ``"query"`` length rule: each query's own prefix). None: the initial
        frequencies."""
        scaling = self.scaling
        if scaling is None or not scaling.depends_on_length:
            return None
        return scaling.frequency_length(seq_len)

    def _update_from(self, *positions: Tensor) -> None:
        """``update(max(positions) + 1)`` with one host sync; only for length-dependent ones."""
        if not self.depends_on_length:
            return
        maxima = [p.detach().max().to(torch.float64) for p in positions if p.numel() > 0]
        if not maxima:
            return
        largest = maxima[0]
        for other in maxima[1:]:
            largest = torch.maximum(largest, other.to(largest.device))
        self.update(max(math.floor(float(largest)) + 1, 1))  # the host sync

    def inv_freq(self, device: torch.device | str | None = None) -> Tensor:
        """Inverse frequencies ``(rotary_dim // 2,)`` on ``device`` (or the default device).

        Float64 (float32 on MPS, which has no float64). Memoised per device (keyed on the
        scaling and its current length too) and never registered as a buffer, so module
        dtype casts leave it alone. With a length-dependent scaling these are the frequencies
        of the current state (see :meth:`update`).
        """
        device = torch.device(device if device is not None else (self.device or "cpu"))
        key = (device, self.rotary_dim, self.base, self.scaling, self._freq_seq_len)
        if key not in self._inv_freq_memo:
            self._inv_freq_memo[key] = self._inv_freq_at(device, self._freq_seq_len)
        return self._inv_freq_memo[key]

    def _inv_freq_at(self, device: torch.device, state: int | None) -> Tensor:
        """The inverse frequencies of length state ``state`` (not memoised)."""
        dtype = torch.float32 if device.type == "mps" else torch.float64
        if self.scaling is None:
            values = rope_inv_freq(self.rotary_dim, self.base)
        else:
            values = self.scaling.inv_freq(self.rotary_dim, self.base, seq_len=state)
        return values.to(dtype).to(device)

    def cos_sin(self, positions: Tensor, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """cos/sin tables ``(..., seq, rotary_dim)`` for ``positions`` in this module's layout.

        Like HF's rotary ``forward(x, position_ids)``: a length-dependent scaling first
        updates its frequencies to ``max(positions) + 1``. Tables include ``A``.
        """
        check_positions(positions)
        self._update_from(positions)
        return self._tables(positions, dtype, gather=True)

    def _tables(
        self, positions: Tensor, dtype: torch.dtype | None, *, gather: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Full-width cos/sin for ``positions``; ``gather`` lets integer CPU positions read
        rows of the memoised tables (public calls; the attention's per-forward hook, which
        promises no host reads, computes them)."""
        table_dtype = self.dtype or dtype or torch.float32
        if gather and _gathers(positions):
            first, last = (int(v) for v in torch.aminmax(positions))
            if first >= 0 and last < TABLE_CACHE_POSITIONS:
                cos, sin = self._position_tables(table_dtype, last + 1)
                return cos[positions], sin[positions]
        # MPS has no float64: rope_angles works on the CPU there, so take the CPU frequencies.
        device = "cpu" if positions.device.type == "mps" else positions.device
        return _cos_sin(
            positions, self.inv_freq(device), self.layout, table_dtype, self.attention_factor
        )

    def _position_tables(self, dtype: torch.dtype, length: int) -> tuple[Tensor, Tensor]:
        """cos/sin of positions ``0 … n − 1`` (``n ≥ length``, a power of two), memoised:
        rows of the same elementwise float64 computation as :func:`_cos_sin`, so a gather
        from them gives the same bits as computing the positions' own tables."""
        key = (dtype, self._freq_seq_len, self.base, self.scaling, self.layout, self.rotary_dim)
        tables = self._table_memo.get(key)
        if tables is None or tables[0].shape[0] < length:
            size = min(TABLE_CACHE_POSITIONS, max(256, 1 << (length - 1).bit_length()))
            positions = torch.arange(size)
            tables = _cos_sin(
                positions, self.inv_freq("cpu"), self.layout, dtype, self.attention_factor
            )
            self._table_memo[key] = tables
        return tables

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One cos and sin per pair ``(…, 1, seq, rotary_dim / 2)`` for ``positions``, in the
        compute dtype of ``dtype`` (the rotary hook; built once per forward).

        A length-dependent scaling updates to ``max(positions) + 1`` first (HF's semantics;
        one host sync) unless ``update=False``: attention updates once from the queries'
        positions and then asks for keys, or for a segment's mapped positions, at the
        current frequencies. ``length`` gives the tables of the frequencies for that
        sequence length instead (:meth:`frequency_length`, no history), leaving the module's
        state alone: the ``"query"`` length rule. No other checks: attention validated the
        positions.
        """
        if length is not None:
            state = self.frequency_length(length)
            device = torch.device("cpu") if positions.device.type == "mps" else positions.device
            table_dtype = self.dtype or _compute_dtype(dtype)
            cos, sin = _cos_sin(
                positions,
                self._inv_freq_at(device, state),
                self.layout,
                table_dtype,
                self._attention_factor_at(state),
            )
            compute = _compute_dtype(dtype)
            return _half_tables(cos.to(compute), sin.to(compute), self.layout)
        if update:
            self._update_from(positions)
        return self._half_tables_for(positions, dtype)

    def _half_tables_for(
        self, positions: Tensor, dtype: torch.dtype, *, gather: bool = False
    ) -> tuple[Tensor, Tensor]:
        compute = _compute_dtype(dtype)
        tables = self._tables(positions, compute, gather=gather)
        cos, sin = (t.to(compute) for t in tables)  # self.dtype: widen
        return _half_tables(cos, sin, self.layout)

    def rotate_qk(
        self,
        q: Tensor,
        k: Tensor,
        q_tables: tuple[Tensor, Tensor],
        k_tables: tuple[Tensor, Tensor],
        *,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Rotate q and k with tables from :meth:`rotary_tables` (the rotary hook), in one
        kernel call; ``inplace`` overwrites them (no autograd: the attention's inference)."""
        return rotate_pair(
            q,
            k,
            q_tables,
            k_tables,
            layout=self.layout,
            rotary_dim=self.rotary_dim,
            inplace=inplace,
        )

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate one tensor by its positions (a query or key block on its own).

        Args:
            x: ``(batch, heads, seq, head_dim)``, floating.
            positions: ``(seq,)`` or ``(batch, seq)``, integer or floating.

        Returns:
            ``x`` rotated, same shape and dtype.
        """
        check_rotary_input(x, positions, self.head_dim, "x", "positions", type(self).__name__)
        self._update_from(positions)
        cos, sin = self._tables(positions.to(x.device), _compute_dtype(x.dtype), gather=True)
        return _rotate_unchecked(x, cos, sin, self.layout)

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate q by ``q_pos`` and k by ``k_pos``; returns ``(q_rot, k_rot)``.

        A length-dependent scaling updates once, to ``max(q_pos, k_pos) + 1``, before both.
        """
        self.check_rotary_call(q, k, q_pos, k_pos)
        self._update_from(q_pos, k_pos)
        q_tables = self._half_tables_for(q_pos.to(q.device), q.dtype, gather=True)
        # Self-attention passes one positions tensor for both: build its tables once.
        same = k_pos is q_pos and k.dtype == q.dtype and k.device == q.device
        k_tables = (
            q_tables if same else self._half_tables_for(k_pos.to(k.device), k.dtype, gather=True)
        )
        return self.rotate_qk(q, k, q_tables, k_tables)

    def extra_repr(self) -> str:
        text = (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}, "
            f"layout={self.layout!r}"
        )
        if self.scaling is not None:
            text += f", scaling={self.scaling!r}"
        return text

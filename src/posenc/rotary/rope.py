"""Rotary position embedding (RoPE) as a module: q and k rotated by their positions.

Paper: RoFormer, Su et al. 2021, https://arxiv.org/abs/2104.09864. The formula, the two pair
layouts and the numerics are those of :mod:`posenc.rotary.functional`, whose functions this
module calls; a context-extension scaling (:mod:`posenc.rotary.scaling`) supplies the
frequencies, the attention factor and, for a length-dependent one, the rule by which they
follow the sequence length (:mod:`posenc.rotary.scaling.length`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posenc._moved import moved_name
from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.encoding.protocols import RotaryEncoding, check_rotary_input
from posenc.positions import check_positions
from posenc.rotary.frequencies import resolve_rotary_dim, rope_inv_freq
from posenc.rotary.functional import (
    compute_dtype,
    cos_sin_tables,
    pair_tables,
    rotate_by_tables,
)
from posenc.rotary.kernels import rotate_pair
from posenc.rotary.layouts import LAYOUTS, Layout
from posenc.rotary.scaling import (
    LENGTH_RULES,
    LengthRule,
    LengthState,
    Proportional,
    Scaling,
    sequence_length,
)

__all__ = ["TABLE_CACHE_POSITIONS", "RotaryEmbedding"]

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


def _consecutive(positions: Tensor, first: int, last: int) -> bool:
    """True when 1-D ``positions`` are ``first, first + 1, …, last``."""
    return (
        positions.dim() == 1
        and positions.numel() == last - first + 1
        and torch.equal(positions, torch.arange(first, last + 1, dtype=positions.dtype))
    )


def __getattr__(name: str) -> Any:
    """The functions that moved to :mod:`posenc.rotary.functional` (``apply_rotary``,
    ``rope_angles``, ``rope_cos_sin``) still resolve here, with a ``DeprecationWarning``."""
    return moved_name(__name__, name)


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
    max(positions) + 1`` (over q and k) and advances :attr:`length_state`, the module's
    :class:`~posenc.rotary.scaling.LengthState` made by ``scaling.new_state()``, by the
    scaling's rule (:mod:`posenc.rotary.scaling.length`):

    * DynamicNTK and dynamic YaRN: if ``seq_len > max_seq_len_cached`` the frequencies are
      recomputed for ``seq_len`` and ``max_seq_len_cached = seq_len``; else, if ``seq_len``
      is below the threshold (``max_position_embeddings``, YaRN's ``L0``) while
      ``max_seq_len_cached`` is above it, the original frequencies come back and
      ``max_seq_len_cached`` is the threshold again (its initial value);
    * LongRoPE: the long factors are used iff ``seq_len > original_max_position_embeddings``.

    Each change counts one in :attr:`rebuilds`. This state belongs to *this module* and is
    mutated in forward, as in HF: share one module per model (or per layer) accordingly.
    Reading ``seq_len`` costs one host sync per call, so under ``torch.compile`` the
    length-dependent path graph-breaks and is not ``fullgraph``-compatible; static scalings
    add no sync.

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

    #: ``A`` of the current frequencies (the scaling's, at the current length).
    attention_factor: float
    #: "forward" or "query": how a length-dependent scaling picks its length (a plain
    #: attribute shadowing RotaryEncoding's property: set by the constructor).
    length_rule: LengthRule = "forward"
    #: how the frequencies follow the sequence length (plain RoPE, static scalings: never).
    length_state: LengthState

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
        self.length_state = LengthState() if scaling is None else scaling.new_state()
        self._inv_freq_memo: dict[tuple[object, ...], Tensor] = {}
        self._table_memo: dict[tuple[object, ...], tuple[Tensor, Tensor]] = {}

    @property
    def depends_on_length(self) -> bool:
        """True when the frequencies follow the sequence length (one host sync per call)."""
        return self.scaling is not None and self.scaling.depends_on_length

    @property
    def rebuilds(self) -> int:
        """Frequency changes made by a length-dependent scaling (HF's recomputes and resets)."""
        return self.length_state.rebuilds

    @property
    def max_seq_len_cached(self) -> int | None:
        """DynamicNTK (``"hf"``), dynamic YaRN: the longest length the frequencies follow
        (HF's attribute); None otherwise."""
        return self.length_state.max_seq_len_cached

    def update(self, seq_len: int) -> None:
        """Advance the length-dependent frequencies to ``seq_len`` (HF's
        ``dynamic_rope_update``, by the rule of the scaling's
        :class:`~posenc.rotary.scaling.LengthState`); a no-op for plain RoPE and static
        scalings.

        Args:
            seq_len: ``max(positions) + 1`` of the current call, ≥ 1.
        """
        seq_len = check_positive_int("seq_len", seq_len)
        if self.length_state.update(seq_len):
            self.attention_factor = self._attention_factor_at(self.length_state.length)
            self._inv_freq_memo.clear()
            self._table_memo.clear()

    def _attention_factor_at(self, length: int | None) -> float:
        return 1.0 if self.scaling is None else self.scaling.attention_factor_at(length)

    def frequency_length(self, seq_len: int) -> int | None:
        """The length the frequencies follow for a sequence of ``seq_len`` positions without
        history (the ``"query"`` length rule: each query's own prefix). None: the initial
        frequencies."""
        scaling = self.scaling
        if scaling is None or not scaling.depends_on_length:
            return None
        return scaling.frequency_length(seq_len)

    def _update_from(self, *positions: Tensor) -> None:
        """``update(max(positions) + 1)`` with one host sync; only for length-dependent ones."""
        if self.depends_on_length and (seq_len := sequence_length(*positions)) is not None:
            self.update(seq_len)

    def inv_freq(self, device: torch.device | str | None = None) -> Tensor:
        """Inverse frequencies ``(rotary_dim // 2,)`` on ``device`` (or the default device).

        Float64 (float32 on MPS, which has no float64). Memoised per device (keyed on the
        scaling and its current length too) and never registered as a buffer, so module
        dtype casts leave it alone. With a length-dependent scaling these are the frequencies
        of the current state (see :meth:`update`).
        """
        device = torch.device(device if device is not None else (self.device or "cpu"))
        key = (device, self.rotary_dim, self.base, self.scaling, self.length_state.length)
        if key not in self._inv_freq_memo:
            self._inv_freq_memo[key] = self._inv_freq_at(device, self.length_state.length)
        return self._inv_freq_memo[key]

    def _inv_freq_at(self, device: torch.device, length: int | None) -> Tensor:
        """The inverse frequencies that follow ``length`` (not memoised)."""
        dtype = torch.float32 if device.type == "mps" else torch.float64
        if self.scaling is None:
            values = rope_inv_freq(self.rotary_dim, self.base)
        else:
            values = self.scaling.inv_freq(self.rotary_dim, self.base, seq_len=length)
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
        self,
        positions: Tensor,
        dtype: torch.dtype | None,
        *,
        gather: bool = False,
        views: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Full-width cos/sin for ``positions``; ``gather`` lets integer CPU positions read
        rows of the memoised tables (public calls; the attention's per-forward hook, which
        promises no host reads, computes them). ``views``: consecutive positions (``p … p +
        n − 1``, a prompt or a cache's new block) get a slice of the memoised tables, no copy
        (for callers that only read them)."""
        table_dtype = self.dtype or dtype or torch.float32
        if gather and _gathers(positions):
            first, last = (int(v) for v in torch.aminmax(positions))
            if first >= 0 and last < TABLE_CACHE_POSITIONS:
                cos, sin = self._position_tables(table_dtype, last + 1)
                if views and _consecutive(positions, first, last):
                    return cos[first : last + 1], sin[first : last + 1]
                return cos[positions], sin[positions]
        # MPS has no float64: rope_angles works on the CPU there, so take the CPU frequencies.
        device = "cpu" if positions.device.type == "mps" else positions.device
        return cos_sin_tables(
            positions, self.inv_freq(device), self.layout, table_dtype, self.attention_factor
        )

    def _position_tables(self, dtype: torch.dtype, length: int) -> tuple[Tensor, Tensor]:
        """cos/sin of positions ``0 … n − 1`` (``n ≥ length``, a power of two), memoised:
        rows of the same elementwise float64 computation as
        :func:`~posenc.rotary.functional.cos_sin_tables`, so a gather from them gives the same
        bits as computing the positions' own tables."""
        current = self.length_state.length
        key = (dtype, current, self.base, self.scaling, self.layout, self.rotary_dim)
        tables = self._table_memo.get(key)
        if tables is None or tables[0].shape[0] < length:
            size = min(TABLE_CACHE_POSITIONS, max(256, 1 << (length - 1).bit_length()))
            positions = torch.arange(size)
            tables = cos_sin_tables(
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
            target = self.frequency_length(length)
            device = torch.device("cpu") if positions.device.type == "mps" else positions.device
            table_dtype = self.dtype or compute_dtype(dtype)
            cos, sin = cos_sin_tables(
                positions,
                self._inv_freq_at(device, target),
                self.layout,
                table_dtype,
                self._attention_factor_at(target),
            )
            compute = compute_dtype(dtype)
            return pair_tables(cos.to(compute), sin.to(compute), self.layout)
        if update:
            self._update_from(positions)
        return self._pair_tables_for(positions, dtype)

    def _pair_tables_for(
        self, positions: Tensor, dtype: torch.dtype, *, gather: bool = False
    ) -> tuple[Tensor, Tensor]:
        compute = compute_dtype(dtype)
        # The rotation only reads its tables: consecutive positions may take memoised views.
        tables = self._tables(positions, compute, gather=gather, views=True)
        cos, sin = (t.to(compute) for t in tables)  # self.dtype: widen
        return pair_tables(cos, sin, self.layout)

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
        cos, sin = self._tables(positions.to(x.device), compute_dtype(x.dtype), gather=True)
        return rotate_by_tables(x, cos, sin, self.layout)

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate q by ``q_pos`` and k by ``k_pos``; returns ``(q_rot, k_rot)``.

        A length-dependent scaling updates once, to ``max(q_pos, k_pos) + 1``, before both.
        """
        self.check_rotary_call(q, k, q_pos, k_pos)
        self._update_from(q_pos, k_pos)
        q_tables = self._pair_tables_for(q_pos.to(q.device), q.dtype, gather=True)
        # Self-attention passes one positions tensor for both: build its tables once.
        same = k_pos is q_pos and k.dtype == q.dtype and k.device == q.device
        k_tables = (
            q_tables if same else self._pair_tables_for(k_pos.to(k.device), k.dtype, gather=True)
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

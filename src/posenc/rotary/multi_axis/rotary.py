"""The :class:`MultiAxisRotary` module: pair ``p`` rotates by ``Σ_a pos_a · F[p, a]``, with
its presets (axial, M-RoPE, VideoRoPE, MM-RoPE, MHRoPE, RoPE-Mixed); the formula, papers and
conventions are in :mod:`posenc.rotary.multi_axis`, the frequency matrices in
:mod:`posenc.rotary.multi_axis.maps`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import check_in_choices, check_positive_float, check_positive_int
from posenc.encoding.protocols import RotaryEncoding
from posenc.positions import check_positions
from posenc.rotary.kernels import rotate_pair
from posenc.rotary.layouts import LAYOUTS, Layout
from posenc.rotary.multi_axis.maps import (
    axial_frequencies,
    mhrope_frequencies,
    mixed_frequencies,
    mmrope_axes,
    mrope_axes,
    place_frequencies,
    videorope_axes,
)
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import Scaling, scaling_from_dict, sequence_length

__all__ = ["MultiAxisRotary"]


class MultiAxisRotary(RotaryEncoding):
    """Rotary encoding whose pair ``p`` rotates by ``Σ_a pos_a · F[p, a]`` (see the module).

    Build it with a preset (:meth:`axial`, :meth:`mrope`, :meth:`videorope`, :meth:`mixed`)
    or from any frequency matrix.

    Args:
        head_dim: channels per head (even).
        frequencies: ``(pairs, axes)`` or ``(heads, pairs, axes)``; ``2·pairs ≤ head_dim``
            (channels past ``2·pairs`` pass through: partial rotary).
        layout: ``"half"`` (NeoX/HF, Qwen) or ``"interleaved"`` (RoPE-ViT, EVA).
        learnable: ``F`` is a parameter (RoPE-Mixed, float32) rather than a constant (float64
            on the CPU, memoised per device: no dtype cast reaches it; see the module).
        attention_factor: ``A`` multiplying cos and sin (a scaling's, e.g. YaRN's), so the
            logits scale by ``A²``.

    Shape:
        q ``(batch, heads, q_len, head_dim)``, k likewise; positions ``(axes, seq)`` or
        ``(axes, batch, seq)``.

    Example::

        >>> rope = MultiAxisRotary.axial(16, num_axes=3)
        >>> q = k = torch.randn(1, 2, 24, 16)
        >>> pos = grid_positions(2, 3, 4)
        >>> q2, k2 = rope(q, k, pos, pos)
    """

    def __init__(
        self,
        head_dim: int,
        frequencies: Tensor,
        *,
        layout: Layout = "half",
        learnable: bool = False,
        attention_factor: float = 1.0,
    ) -> None:
        super().__init__()
        self.attention_factor = check_positive_float("attention_factor", attention_factor)
        self.head_dim = check_positive_int("head_dim", head_dim)
        check_in_choices("layout", layout, LAYOUTS)
        self.layout: Layout = layout
        if not isinstance(frequencies, Tensor) or frequencies.dim() not in (2, 3):
            raise ValueError("frequencies must be a tensor (pairs, axes) or (heads, pairs, axes)")
        if not frequencies.is_floating_point():
            raise ValueError(f"frequencies must be floating, got {frequencies.dtype}")
        pairs, axes = frequencies.shape[-2:]
        if pairs < 1 or axes < 1 or 2 * pairs > head_dim:
            raise ValueError(
                f"frequencies must have 1 ≤ pairs ≤ head_dim / 2 = {head_dim // 2} and at "
                f"least one axis, got shape {tuple(frequencies.shape)}"
            )
        self.num_axes = axes
        self.rotary_dim = 2 * pairs
        self.per_head = frequencies.dim() == 3
        if frequencies.device.type == "meta":
            raise ValueError("frequencies must hold values (a tensor on the meta device has none)")
        self.learnable = learnable
        # learned frequencies belong to one layer (RoPE-Mixed learns them per layer)
        self.shared_across_layers = not learnable  # type: ignore[misc]
        # A length-dependent scaling's 1D frequencies and their state (M-RoPE, :meth:`mrope`).
        self._length_source: RotaryEmbedding | None = None
        self._pair_axes: Tensor | None = None
        # What reset_parameters restores: the given matrix, float64 on the CPU (a plain
        # attribute: module casts and to_empty leave it alone), or RoPE-Mixed's random draw.
        self._initial = frequencies.detach().to(device="cpu", dtype=torch.float64).clone()
        self._mixed_base: float | None = None
        self._memo: dict[torch.device, Tensor] = {}
        if learnable:
            # filled by reset_parameters; on the meta device under a meta build
            default = torch.get_default_device()
            device = default if default.type == "meta" else frequencies.device
            shape = frequencies.shape
            self.frequencies = nn.Parameter(torch.empty(shape, dtype=torch.float32, device=device))
            self.reset_parameters()
        else:  # fixed: the float64 CPU matrix itself, rebuilt from the arguments, not saved
            self.frequencies = self._initial

    frequencies: Tensor

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Initialize learnable frequencies: RoPE-Mixed's random directions (drawn from
        ``generator``, else from the global generator of the parameter's device, as the
        constructor does) or the matrix the constructor was given; fixed frequencies are
        constants and need nothing. Call it after ``to_empty`` on a ``meta``-built module."""
        if not self.learnable:
            return
        with torch.no_grad():
            if self._mixed_base is None:
                self.frequencies.copy_(self._initial)
            else:
                self.frequencies.copy_(
                    mixed_frequencies(
                        self.head_dim,
                        self.frequencies.shape[0],
                        self._mixed_base,
                        generator,
                        self.frequencies.device,
                    )
                )

    # ---- presets ---------------------------------------------------------------------------

    @classmethod
    def axial(
        cls,
        head_dim: int,
        num_axes: int = 2,
        *,
        base: float = 100.0,
        axis_order: Sequence[int] | None = None,
        layout: Layout = "interleaved",
    ) -> MultiAxisRotary:
        """Axial RoPE: group ``g`` of ``head_dim / (2N)`` pairs reads axis ``axis_order[g]``.

        ``axis_order`` None = ``(N−1, …, 0)``: the last axis first, RoPE-ViT's order in 2D
        (column, then row; :class:`~posenc.rotary.AxialRotary2D` is this preset over token indices);
        rotary-embedding-torch's ``get_axial_freqs`` is ``(0, 1, …)`` with ``layout``
        ``"interleaved"``. Defaults: ``base = 100`` and adjacent pairs, as RoPE-ViT.
        """
        freqs = axial_frequencies(head_dim, num_axes, base=base, axis_order=axis_order)
        return cls(head_dim, freqs, layout=layout)

    @classmethod
    def mrope(
        cls,
        head_dim: int,
        sections: Sequence[int] = (16, 24, 24),
        *,
        base: float = 1_000_000.0,
        interleaved: bool = False,
        layout: Layout = "half",
        scaling: Scaling | Mapping[str, Any] | None = None,
        rotary_dim: int | None = None,
    ) -> MultiAxisRotary:
        """M-RoPE on ``(t, h, w)`` positions: 1D frequencies, pair ``i`` reading
        :func:`mrope_axes` ``(sections)[i]``; ``sum(sections)`` pairs rotate (``head_dim/2``
        in Qwen: [16, 24, 24] for head_dim 128, Qwen3-VL interleaved [24, 20, 20]).
        Defaults: Qwen2-VL's base 1e6 and half layout.

        ``scaling`` (a :class:`~posenc.rotary.Scaling` or its dict form) replaces the 1D
        frequencies by the scaled ones and brings its attention factor, as transformers'
        Qwen-VL rotary does with a ``rope_type`` other than default: the static ones (PI,
        NTK-aware, YaRN, Llama-3, proportional) once, and the length-dependent ones (dynamic
        NTK, LongRoPE) with transformers' ``dynamic_rope_update`` semantics, exactly as
        :class:`~posenc.rotary.RotaryEmbedding` (which holds that state here): every call
        takes ``seq_len = max(positions) + 1`` over all three axes (Qwen's
        ``torch.max(position_ids) + 1``), dynamic NTK grows with the longest length seen and
        resets below ``max_position_embeddings``, LongRoPE takes its long factors iff
        ``seq_len > original_max_position_embeddings``. See :meth:`update`.

        ``rotary_dim`` (default ``head_dim``): partial M-RoPE, the frequencies
        ``θ_i = base^(−2i/rotary_dim)`` on the first ``rotary_dim`` channels and the rest passed
        through — Qwen3.5 (``partial_rotary_factor`` 0.25, head_dim 256, interleaved [11, 11,
        10]: MRoPE-I without spatial reset, Huang et al. 2025, https://arxiv.org/abs/2510.23095),
        as transformers' ``Qwen3_5TextRotaryEmbedding`` with ``apply_rotary_pos_emb``."""
        axes = mrope_axes(sections, interleaved=interleaved)
        return cls._one_axis_per_pair(
            head_dim, sections, axes, base, layout, scaling, rotary_dim=rotary_dim
        )

    @classmethod
    def videorope(
        cls,
        head_dim: int,
        sections: Sequence[int] = (16, 24, 24),
        *,
        base: float = 1_000_000.0,
        layout: Layout = "half",
        scaling: Scaling | Mapping[str, Any] | None = None,
    ) -> MultiAxisRotary:
        """VideoRoPE (Wei et al. 2025, https://arxiv.org/abs/2502.05173) on ``(t, h, w)``
        positions: Qwen2-VL's 1D frequencies, pair ``i`` reading :func:`videorope_axes`
        ``(sections)[i]`` — h and w interleaved over the highest frequencies, time on the
        ``sections[0]`` lowest (LTA). Pair it with
        :func:`posenc.positions.multimodal_layouts.videorope_position_ids` (the diagonal layout and
        temporal spacing δ). Defaults as the reference (Qwen2-VL: [16, 24, 24] at head_dim
        128, base 1e6, half layout); ``scaling`` as :meth:`mrope`."""
        axes = videorope_axes(sections)
        return cls._one_axis_per_pair(head_dim, sections, axes, base, layout, scaling)

    @classmethod
    def mmrope(
        cls,
        head_dim: int,
        *,
        base: float = 1_000_000.0,
        layout: Layout = "half",
        scaling: Scaling | Mapping[str, Any] | None = None,
    ) -> MultiAxisRotary:
        """MM-RoPE (Lumos-1, Yuan et al. 2025, https://arxiv.org/abs/2507.08801) on ``(t, h,
        w)`` positions: 1D frequencies ``θ_i = base^(−2i/head_dim)``, pair ``i`` reading
        :func:`mmrope_axes` ``[i]`` = ``(t, t, h, w, h, w, h, w)[i mod 8]`` (the distributed
        2:3:3 meta components). Pair it with
        :func:`posenc.positions.multimodal_variants.mmrope_position_ids` (scaled visual ids).
        Parity: JJJYmmm/Multimodal-RoPEs' ``mmrope`` golden tables. ``scaling`` as :meth:`mrope`."""
        head_dim = check_positive_int("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even, got {head_dim}")
        axes = mmrope_axes(head_dim // 2)
        return cls._one_axis_per_pair(head_dim, [head_dim // 2], axes, base, layout, scaling)

    @classmethod
    def mhrope(
        cls,
        head_dim: int,
        num_heads: int,
        sections: Sequence[int] = (2, 3, 3),
        *,
        base: float = 1_000_000.0,
        layout: Layout = "half",
    ) -> MultiAxisRotary:
        """MHRoPE (multi-head RoPE, Huang et al. 2025, https://arxiv.org/abs/2510.23095, §4.2)
        on ``(t, h, w)`` positions: axes assigned per head, not per frequency. Head ``n`` of
        ``num_heads`` (the key/value heads) rotates all its pairs by one axis,
        :func:`mhrope_head_axes` ``(sections, num_heads)[n]``, at the full 1D frequencies
        ``θ_i = base^(−2i/head_dim)``; heads past ``sum(sections)`` are not rotated.

        .. math:: φ_{n,i} = \\mathrm{pos}_{a(n)} · θ_i

        Queries with ``g × num_heads`` heads (grouped-query attention) use key head ``n //
        g``'s rotation (the reference's ``repeat_interleave``). Parity: JJJYmmm/
        Multimodal-RoPEs' ``mhrope`` golden tables (its ``MHRopeEmbedding``); positions from
        :func:`posenc.positions.multimodal_variants.spatial_reset_position_ids`."""
        freqs = mhrope_frequencies(head_dim, num_heads, sections, base=base)
        return cls(head_dim, freqs, layout=layout)

    @classmethod
    def _one_axis_per_pair(
        cls,
        head_dim: int,
        sections: Sequence[int],
        axes: Sequence[int],
        base: float,
        layout: Layout,
        scaling: Scaling | Mapping[str, Any] | None,
        *,
        rotary_dim: int | None = None,
    ) -> MultiAxisRotary:
        """1D frequencies over ``rotary_dim`` channels (default ``head_dim``; scaled by
        ``scaling``), pair ``i`` reading axis ``axes[i]`` of three (M-RoPE, VideoRoPE,
        MM-RoPE)."""
        head_dim = check_positive_int("head_dim", head_dim)
        width = head_dim if rotary_dim is None else check_positive_int("rotary_dim", rotary_dim)
        if width % 2 or width > head_dim:
            raise ValueError(f"rotary_dim must be even and <= head_dim = {head_dim}, got {width}")
        if 2 * len(axes) != width:
            name = "head_dim" if rotary_dim is None else "rotary_dim"
            raise ValueError(
                f"sections must sum to {name} / 2 = {width // 2} (one frequency per pair), "
                f"got {list(sections)} (sum {len(axes)})"
            )
        base = check_positive_float("base", base)
        scale = scaling_from_dict(scaling) if isinstance(scaling, Mapping) else scaling
        # The 1D frequencies (and, for a length-dependent scaling, their per-call state).
        source = RotaryEmbedding(width, base=base, layout=layout, scaling=scale)
        pair_axes = torch.tensor(axes, device="cpu")
        rope = cls(
            head_dim,
            place_frequencies(source.inv_freq("cpu"), pair_axes, 3),
            layout=layout,
            attention_factor=source.attention_factor,
        )
        if source.depends_on_length:
            rope._length_source = source
            rope._pair_axes = pair_axes
        return rope

    @classmethod
    def mixed(
        cls,
        head_dim: int,
        num_heads: int,
        *,
        base: float = 10.0,
        generator: torch.Generator | None = None,
        layout: Layout = "interleaved",
    ) -> MultiAxisRotary:
        """RoPE-Mixed: learnable per-head frequencies over (row, column).

        Initialization (RoPE-ViT ``init_random_2d_freqs``): magnitudes ``m_k =
        base^(-4k/head_dim)``, ``k < head_dim/4``, and one random angle ``φ ~ U[0, 2π)`` per
        head; column frequencies ``[m cos φ | −m sin φ]`` and row frequencies
        ``[m sin φ | m cos φ]`` over the ``head_dim/2`` pairs. Defaults: base 10 and adjacent
        pairs, as RoPE-ViT. Frequencies should be excluded from weight decay.
        """
        num_heads = check_positive_int("num_heads", num_heads)
        base = check_positive_float("base", base)
        if head_dim % 4:
            raise ValueError(f"head_dim must be divisible by 4 for mixed RoPE, got {head_dim}")
        shape = (num_heads, head_dim // 2, 2)
        rope = cls(head_dim, torch.zeros(shape, device="cpu"), layout=layout, learnable=True)
        rope._mixed_base = base  # reset_parameters draws the directions from here on
        rope.reset_parameters(generator)
        return rope

    # ---- length-dependent scalings (M-RoPE with dynamic NTK or LongRoPE) ---------------------

    @property
    def depends_on_length(self) -> bool:
        """True when the frequencies follow the sequence length (one host sync per call)."""
        return self._length_source is not None

    @property
    def rebuilds(self) -> int:
        """Frequency changes made by a length-dependent scaling (0 without one)."""
        return 0 if self._length_source is None else self._length_source.rebuilds

    @property
    def max_seq_len_cached(self) -> int | None:
        """Dynamic NTK: the longest length the frequencies follow; None otherwise."""
        return None if self._length_source is None else self._length_source.max_seq_len_cached

    def update(self, seq_len: int) -> None:
        """Advance a length-dependent scaling to ``seq_len`` (transformers'
        ``dynamic_rope_update``, see :meth:`RotaryEmbedding.update
        <posenc.rotary.RotaryEmbedding.update>`); a no-op otherwise. Keys already in a KV cache
        keep the rotation they were given, as in transformers."""
        seq_len = check_positive_int("seq_len", seq_len)
        if self._length_source is not None:
            self._length_source.update(seq_len)

    def _update_from(self, *positions: Tensor) -> None:
        """:meth:`update` to ``max(positions) + 1`` (one host sync) for a length-dependent
        scaling; nothing otherwise."""
        source = self._length_source
        if source is not None and (seq_len := sequence_length(*positions)) is not None:
            source.update(seq_len)

    def _frequencies_on(self, device: torch.device) -> Tensor:
        """``F`` on ``device``: the parameter (learnable); a length-dependent scaling's
        current 1D frequencies, placed (M-RoPE); else the constant, float64 (float32 on MPS),
        memoised per device."""
        if self.learnable:
            return self.frequencies
        source, pair_axes = self._length_source, self._pair_axes
        if source is not None and pair_axes is not None:  # follows the scaling's state
            host = torch.device("cpu") if device.type == "mps" else device
            return place_frequencies(source.inv_freq(host), pair_axes, self.num_axes).to(device)
        if device not in self._memo:
            dtype = torch.float32 if device.type == "mps" else torch.float64
            self._memo[device] = self._initial.to(device=device, dtype=dtype)
        return self._memo[device]

    # ---- hooks -----------------------------------------------------------------------------

    def coordinates(self, positions: Tensor) -> Tensor:
        """The axes the frequencies read, ``(N, [batch,] seq)``, from the positions this
        encoding takes (themselves; subclasses may map, e.g. token indices to a grid)."""
        return positions[None] if self.num_axes == 1 else positions

    def angles(self, positions: Tensor) -> Tensor:
        """``φ`` of every pair: ``(…, seq, pairs)``, or ``(…, heads, seq, pairs)`` per head;
        float64 for fixed frequencies (on the positions' device), float32 or wider (with
        autograd, on the parameter's device) for learnable ones."""
        coords = self.coordinates(positions)  # (N, [batch,] seq)
        if self.learnable:  # the parameter, in float32 at least (a bf16 module: see module)
            freqs = self.frequencies
            freqs = freqs.to(torch.promote_types(freqs.dtype, torch.float32))
        else:
            freqs = self._frequencies_on(positions.device)
        coords = coords.to(device=freqs.device, dtype=freqs.dtype).movedim(0, -1)  # (…, seq, N)
        if not self.per_head:
            return coords @ freqs.transpose(0, 1)  # (…, seq, pairs)
        # (heads, pairs, N) against (…, 1, seq, N) → (…, heads, seq, pairs)
        return torch.einsum("...sn,hpn->...hsp", coords, freqs)

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One ``(cos, sin)`` value per pair, heads broadcast unless per head (the rotary
        hook, once per forward). A length-dependent scaling first updates to
        ``max(positions) + 1`` (unless ``update=False``: tables at the current frequencies)."""
        if update:
            self._update_from(positions)
        return self._tables(positions, dtype)

    def _tables(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        angles = self.angles(positions)
        compute = torch.float64 if dtype == torch.float64 else torch.float32
        cos, sin = angles.cos(), angles.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        cos, sin = cos.to(compute), sin.to(compute)
        if not self.per_head and cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]  # (batch, 1, seq, pairs)
        return cos, sin

    def rotate_qk(
        self,
        q: Tensor,
        k: Tensor,
        q_tables: tuple[Tensor, Tensor],
        k_tables: tuple[Tensor, Tensor],
        *,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Rotate q and k by their tables; per-head or learnable tables use torch ops. Per-head
        tables of ``H`` heads serve ``g·H`` query heads, head ``n`` taking table ``n // g``
        (grouped-query attention, MHRoPE's key/value heads)."""
        q_tables = tuple(t.to(q.device) for t in q_tables)  # type: ignore[assignment]
        k_tables = tuple(t.to(k.device) for t in k_tables)  # type: ignore[assignment]
        if self.per_head:
            q_tables = _repeat_heads(q_tables, q.shape[-3], "q")
            k_tables = _repeat_heads(k_tables, k.shape[-3], "k")
        impl: Any = "torch" if self.per_head or self.learnable else None
        return rotate_pair(
            q,
            k,
            q_tables,
            k_tables,
            layout=self.layout,
            rotary_dim=self.rotary_dim,
            inplace=inplace and not self.learnable,
            impl=impl,
        )

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate q by ``q_pos`` and k by ``k_pos`` (multi-axis positions)."""
        self.check_rotary_call(q, k, q_pos, k_pos)
        for name, pos in (("q_pos", q_pos), ("k_pos", k_pos)):
            check_positions(pos, name, num_axes=self.num_axes)
        self._update_from(q_pos, k_pos)  # one update, to max(q_pos, k_pos) + 1
        q_tables = self._tables(q_pos, q.dtype)
        # Self-attention without a cache passes one positions tensor twice: one table.
        same = k_pos is q_pos and k.dtype == q.dtype
        k_tables = q_tables if same else self._tables(k_pos, k.dtype)
        return self.rotate_qk(q, k, q_tables, k_tables)

    def extra_repr(self) -> str:
        shape = tuple(self.frequencies.shape)
        return (
            f"head_dim={self.head_dim}, frequencies={shape}, layout={self.layout!r}, "
            f"learnable={self.learnable}"
        )


def _repeat_heads(tables: tuple[Tensor, Tensor], heads: int, name: str) -> tuple[Tensor, Tensor]:
    """Per-head ``(…, H, seq, pairs)`` tables for ``heads = g·H`` heads (``repeat_interleave``)."""
    have = tables[0].shape[-3]
    if heads == have:
        return tables
    if heads % have:
        raise ValueError(
            f"{name} has {heads} heads: per-head frequencies serve a multiple of their "
            f"{have} heads (grouped-query attention)"
        )
    group = heads // have
    cos, sin = (t.repeat_interleave(group, dim=-3) for t in tables)
    return cos, sin

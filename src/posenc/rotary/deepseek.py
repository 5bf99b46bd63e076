"""DeepSeek's rotary conventions: MLA's decoupled RoPE and DeepSeek-V4's value rotation.

* **MLA** (DeepSeek-V2/V3, Kimi K2, GLM-5): each head is ``[nope | rope]``; the query's rope
  part is per head, the key's one slice shared by all heads (:func:`join_decoupled`), and
  RoPE rotates only the trailing ``rope_dim`` channels (:class:`DecoupledRotary`), in
  DeepSeek's interleaved pair layout (HF's ``rope_interleave``).
* **DSA indexer** (DeepSeek-V3.2, GLM-5): RoPE on the *leading* ``qk_rope_head_dim``
  channels of each indexer head, a plain :class:`~posenc.rotary.RotaryEmbedding`
  (``posenc.integrations.hf.indexer_rotary_from_config`` picks its layout).
* **DeepSeek-V4**: the same trailing interleaved rope slice, and one latent read as both key
  and value, so values carry the key's rotation ``R(j)`` and the output's rope slice is
  rotated by ``R(−i)`` (:class:`DeepSeekV4Rotary`, a
  :class:`~posenc.encoding.ValueRotation`); compressed entries sit at
  :func:`compressed_positions` and become visible by :func:`compressed_visible`.

Papers: DeepSeek-V2, https://arxiv.org/abs/2405.04434 (§2.1.3, decoupled RoPE);
DeepSeek-V3.2, https://arxiv.org/abs/2512.02556 (DSA); DeepSeek-V4 (2026, §2.3, eq. 26).
References tested against: ``transformers`` 5.23.0 ``deepseek_v3``, ``deepseek_v32``,
``glm_moe_dsa`` and ``deepseek_v4`` modeling. docs/rotary.md, "DeepSeek MLA, DSA and V4".
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.encoding.protocols import RotaryEncoding, ValueRotation, check_rotary_input
from posenc.positions import check_positions
from posenc.rotary.kernels import rotate
from posenc.rotary.layouts import Layout
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import Scaling

__all__ = [
    "DecoupledRotary",
    "DeepSeekV4Rotary",
    "compressed_positions",
    "compressed_visible",
    "join_decoupled",
]

PairTables = tuple[Tensor, Tensor]


def _rotate_trailing(
    x: Tensor, tables: PairTables, layout: str, rope_dim: int, *, inplace: bool
) -> Tensor:
    """Rotate the last ``rope_dim`` channels of ``x`` by per-pair tables; the rest pass."""
    c, s = tables
    if rope_dim == x.shape[-1]:
        return rotate(x, c, s, layout=layout, rotary_dim=rope_dim, inplace=inplace)
    rope = x[..., x.shape[-1] - rope_dim :]
    if inplace:  # a view with unit channel stride: every kernel writes it in place
        rotate(rope, c, s, layout=layout, rotary_dim=rope_dim, inplace=True)
        return x
    rotated = rotate(rope, c, s, layout=layout, rotary_dim=rope_dim)
    return torch.cat([x[..., : x.shape[-1] - rope_dim], rotated], dim=-1)


class DecoupledRotary(RotaryEncoding):
    """RoPE on the trailing ``rope_dim`` channels of each head (MLA's decoupled RoPE).

    .. math::

        q_i = [q^{C}_i ; R(iθ) q^{R}_i], \\quad k_j = [k^{C}_j ; R(jθ) k^{R}_j], \\quad
        q_i · k_j = q^{C}_i · k^{C}_j + q^{R}_i · R((j - i)θ) k^{R}_j

    with ``θ_p = base^{−2p/rope_dim}`` (times a context-extension ``scaling``). The leading
    ``head_dim − rope_dim`` channels ("nope") carry content only. In MLA the key's rope part is
    one slice shared by all heads: :func:`join_decoupled` broadcasts it before this rotation
    (rotating it once and broadcasting gives the same numbers).

    Paper: DeepSeek-V2, https://arxiv.org/abs/2405.04434 §2.1.3. Tested against HF
    ``deepseek_v3``'s attention (``rope_interleave`` True and False). HF's interleaved
    function writes each rotated pair back de-interleaved (first all ``a``, then all ``b``);
    this class keeps the pairs in place, so HF's ``q_rot`` equals this one's up to that
    channel permutation (:func:`posenc.rotary.rotary_channel_permutation`), and the scores
    are equal.

    Args:
        head_dim: channels per head, ``nope + rope_dim``.
        rope_dim: trailing channels rotated (even, ≤ ``head_dim``; DeepSeek's
            ``qk_rope_head_dim``).
        base: the RoPE base ``rope_theta``.
        layout: ``"interleaved"`` (DeepSeek's weights, default) or ``"half"``.
        scaling: a :class:`~posenc.rotary.scaling.Scaling` (DeepSeek-V3's YaRN) or None.
        device, dtype: as :class:`~posenc.rotary.RotaryEmbedding`'s (its cos/sin tables).

    Shape:
        q ``(batch, heads, q_len, head_dim)``, k ``(batch, kv_heads, k_len, head_dim)``,
        positions ``(seq,)`` or ``(batch, seq)`` → q and k rotated, same shapes.

    Example::

        >>> rope = DecoupledRotary(192, 64)
        >>> q, k = torch.randn(1, 4, 6, 192), torch.randn(1, 1, 6, 192)
        >>> q2, k2 = rope(q, k, torch.arange(6), torch.arange(6))
        >>> torch.equal(q2[..., :128], q[..., :128])
        True
    """

    def __init__(
        self,
        head_dim: int,
        rope_dim: int,
        *,
        base: float = 10000.0,
        layout: Layout = "interleaved",
        scaling: Scaling | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        rope_dim = check_positive_int("rope_dim", rope_dim)
        if rope_dim > head_dim or rope_dim % 2:
            raise ValueError(
                f"rope_dim must be even and at most head_dim ({head_dim}); got {rope_dim}"
            )
        self.rope_dim = rope_dim
        # the frequencies, tables and scaling of plain RoPE over the rope slice
        self.rope = RotaryEmbedding(
            rope_dim, base=base, layout=layout, scaling=scaling, device=device, dtype=dtype
        )

    @property
    def layout(self) -> Layout:
        return self.rope.layout

    @property
    def base(self) -> float:
        return self.rope.base

    @property
    def scaling(self) -> Scaling | None:
        return self.rope.scaling

    @property
    def depends_on_length(self) -> bool:
        return self.rope.depends_on_length

    @property
    def length_rule(self) -> str:
        return self.rope.length_rule

    @property
    def rebuilds(self) -> int:
        return self.rope.rebuilds

    def frequency_length(self, seq_len: int) -> int | None:
        return self.rope.frequency_length(seq_len)

    def inv_freq(self, device: torch.device | str | None = None) -> Tensor:
        """Inverse frequencies ``(rope_dim // 2,)`` (float64 on the CPU by default)."""
        return self.rope.inv_freq(device)

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> PairTables:
        """One cos and sin per pair of the rope slice (:meth:`RotaryEmbedding.rotary_tables`)."""
        return self.rope.rotary_tables(positions, dtype, update=update, length=length)

    def rotate_qk(
        self,
        q: Tensor,
        k: Tensor,
        q_tables: PairTables,
        k_tables: PairTables,
        *,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Rotate the rope slices of q and k; the nope channels pass unchanged."""
        layout, width = self.layout, self.rope_dim
        return (
            _rotate_trailing(q, q_tables, layout, width, inplace=inplace),
            _rotate_trailing(k, k_tables, layout, width, inplace=inplace),
        )

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate one tensor's rope slices by ``positions`` (validated)."""
        check_rotary_input(x, positions, self.head_dim, "x", "positions", type(self).__name__)
        tables = self.rotary_tables(positions.to(x.device), x.dtype)
        return _rotate_trailing(x, tables, self.layout, self.rope_dim, inplace=False)

    def extra_repr(self) -> str:
        text = (
            f"head_dim={self.head_dim}, rope_dim={self.rope_dim}, base={self.base:g}, "
            f"layout={self.layout!r}"
        )
        return text if self.scaling is None else f"{text}, scaling={self.scaling!r}"


class DeepSeekV4Rotary(DecoupledRotary, ValueRotation):
    """DeepSeek-V4's rotary: the trailing interleaved rope slice of q and k, values rotated
    with the key and the output's rope slice rotated back by the query (eq. 26).

    .. math::

        o_i = R(-iθ) \\sum_j p_{ij} R(jθ) v_j = \\sum_j p_{ij} R((j - i)θ) v_j

    on the trailing ``rope_dim`` channels (the others as in plain attention). V4 reads one
    latent as both key and value (``K = V``, one KV head), so the values arrive rotated by
    their key positions; rotating the output back makes each value's contribution a
    function of ``j − i`` alone, as the logits are. In :class:`~posenc.attention.Attention`
    the values of a new token are rotated with the key tables before the KV cache stores
    them (the cache holds rotated values), and every output is rotated back with the query
    tables: decoding equals a full forward. Attention needs ``v``'s width at least
    ``rope_dim``; DeepSeek-V4 has ``v_dim = head_dim``.

    V4 has two of these per model: ``"main"`` (sliding-window layers: ``rope_theta`` 1e4,
    no scaling) and ``"compress"`` (layers with a compressor and their compressed entries:
    ``compress_rope_theta`` 160 000 with YaRN factor 16 over 65 536, attention factor 1);
    :func:`posenc.integrations.hf.deepseek_v4_rotary_from_config` builds either.

    Paper: DeepSeek-V4 (2026), §2.3 eq. 26. Tested against HF ``deepseek_v4``
    (``apply_rotary_pos_emb`` and ``DeepseekV4RotaryEmbedding``) in transformers 5.23.0.

    Args: as :class:`DecoupledRotary`; a scaling whose frequencies follow the length is
    refused (values are rotated once, when stored).

    Example::

        >>> from posenc.attention import Attention
        >>> rope = DeepSeekV4Rotary(32, 8)
        >>> attn = Attention(64, 2, num_kv_heads=1, head_dim=32, pos=rope)
        >>> attn(torch.randn(1, 5, 64)).shape
        torch.Size([1, 5, 64])
    """

    def __init__(
        self,
        head_dim: int,
        rope_dim: int,
        *,
        base: float = 10000.0,
        layout: Layout = "interleaved",
        scaling: Scaling | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            head_dim,
            rope_dim,
            base=base,
            layout=layout,
            scaling=scaling,
            device=device,
            dtype=dtype,
        )
        if self.depends_on_length:
            raise ValueError(
                f"scaling must have fixed frequencies for DeepSeekV4Rotary (values are rotated "
                f"once, when stored); got {scaling!r}, whose frequencies follow the length"
            )

    def rotate_values(self, v: Tensor, k_tables: PairTables) -> Tensor:
        """``R(jθ) v_j`` on the rope slice of ``v`` (the hot path; no checks)."""
        return _rotate_trailing(v, k_tables, self.layout, self.rope_dim, inplace=False)

    def derotate_output(self, out: Tensor, q_tables: PairTables) -> Tensor:
        """``R(−iθ) o_i`` on the rope slice of the output (the hot path; no checks)."""
        c, s = q_tables
        return _rotate_trailing(out, (c, -s), self.layout, self.rope_dim, inplace=False)

    def rotate_values_at(self, v: Tensor, k_pos: Tensor) -> Tensor:
        """The validated :meth:`rotate_values`: ``v`` ``(batch, kv_heads, seq, v_dim)`` with
        ``v_dim ≥ rope_dim``, rotated by its keys' positions ``k_pos``."""
        self._check_slice(v, k_pos, "v", "k_pos")
        return self.rotate_values(v, self.rotary_tables(k_pos.to(v.device), v.dtype))

    def derotate_output_at(self, out: Tensor, q_pos: Tensor) -> Tensor:
        """The validated :meth:`derotate_output`: ``out`` ``(batch, heads, seq, v_dim)``
        rotated back by its queries' positions ``q_pos``."""
        self._check_slice(out, q_pos, "out", "q_pos")
        return self.derotate_output(out, self.rotary_tables(q_pos.to(out.device), out.dtype))

    def _check_slice(self, x: Tensor, positions: Tensor, name: str, pos_name: str) -> None:
        if isinstance(x, Tensor) and x.dim() == 4 and x.shape[-1] < self.rope_dim:
            raise ValueError(
                f"{name} has last dim {x.shape[-1]}, narrower than this DeepSeekV4Rotary's "
                f"rope_dim {self.rope_dim}"
            )
        width = x.shape[-1] if isinstance(x, Tensor) and x.dim() == 4 else self.head_dim
        check_rotary_input(x, positions, width, name, pos_name, type(self).__name__)


def join_decoupled(
    q_nope: Tensor, q_rope: Tensor, k_nope: Tensor, k_rope: Tensor
) -> tuple[Tensor, Tensor]:
    """MLA's heads from their parts: ``q = [q_nope ; q_rope]`` per head and ``k = [k_nope ;
    k_rope]`` with the one shared ``k_rope`` broadcast to every key head.

    Args:
        q_nope: ``(batch, heads, q_len, nope_dim)``; q_rope ``(batch, heads, q_len,
            rope_dim)``.
        k_nope: ``(batch, kv_heads, k_len, nope_dim)``; k_rope ``(batch, 1, k_len,
            rope_dim)`` (one head, DeepSeek's ``k_pe``).

    Returns:
        ``(q, k)`` of width ``nope_dim + rope_dim``, for :class:`DecoupledRotary`.

    Raises:
        ValueError: naming the argument whose shape does not fit.
    """
    for name, x in (("q_nope", q_nope), ("q_rope", q_rope), ("k_nope", k_nope), ("k_rope", k_rope)):
        if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor (batch, heads, seq, dim)")
    if q_rope.shape[:3] != q_nope.shape[:3]:
        raise ValueError(
            f"q_rope must have q_nope's (batch, heads, seq) {tuple(q_nope.shape[:3])}; "
            f"got {tuple(q_rope.shape[:3])}"
        )
    if k_rope.shape[1] != 1:
        raise ValueError(f"k_rope must have one head (shared by all heads); got {k_rope.shape[1]}")
    if (k_rope.shape[0], k_rope.shape[2]) != (k_nope.shape[0], k_nope.shape[2]):
        raise ValueError(
            f"k_rope must have k_nope's batch and seq {(k_nope.shape[0], k_nope.shape[2])}; "
            f"got {(k_rope.shape[0], k_rope.shape[2])}"
        )
    if k_nope.shape[-1] != q_nope.shape[-1] or k_rope.shape[-1] != q_rope.shape[-1]:
        raise ValueError(
            f"k_nope and k_rope must have q_nope's and q_rope's widths ({q_nope.shape[-1]}, "
            f"{q_rope.shape[-1]}); got ({k_nope.shape[-1]}, {k_rope.shape[-1]})"
        )
    shared = k_rope.expand(-1, k_nope.shape[1], -1, -1)
    return torch.cat([q_nope, q_rope], dim=-1), torch.cat([k_nope, shared], dim=-1)


def _check_ratio(compress_ratio: int) -> int:
    if isinstance(compress_ratio, bool) or not isinstance(compress_ratio, int):
        raise ValueError(f"compress_ratio must be an int >= 1, got {compress_ratio!r}")
    if compress_ratio < 1:
        raise ValueError(f"compress_ratio must be an int >= 1, got {compress_ratio}")
    return compress_ratio


def compressed_positions(
    num_entries: int,
    compress_ratio: int,
    *,
    first_entry: int = 0,
    device: torch.device | str | None = None,
) -> Tensor:
    """The position DeepSeek-V4 rotates each compressed entry by: entry ``w`` pools tokens
    ``w·m … w·m + m − 1`` and sits at ``w·m``, the first of them.

    Reference: HF ``DeepseekV4HCACompressor`` / ``DeepseekV4CSACompressor`` (positions
    ``i · compress_rate + first_window_position``, ``first_window_position = entries so far
    · compress_rate``).

    Args:
        num_entries: entries to place (≥ 0).
        compress_ratio: ``m`` (4 for CSA, 128 for HCA), ≥ 1.
        first_entry: index of the first entry (entries emitted by earlier calls), ≥ 0.

    Returns:
        ``(num_entries,)`` int64: ``(first_entry + arange(num_entries)) · m``.
    """
    compress_ratio = _check_ratio(compress_ratio)
    for name, value in (("num_entries", num_entries), ("first_entry", first_entry)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    index = torch.arange(first_entry, first_entry + num_entries, device=device)
    return index * compress_ratio


def compressed_visible(q_pos: Tensor, num_entries: int, compress_ratio: int) -> Tensor:
    """Which compressed entries each query sees: entry ``w`` once its window has closed,
    ``w < (t + 1) // m`` for a query at position ``t``.

    Reference: HF ``DeepseekV4HCACompressor``'s ``block_bias`` (``causal_threshold =
    (position_ids + 1) // compress_rate``).

    Args:
        q_pos: integer query positions ``(q,)`` or ``(batch, q)``, ≥ 0.
        num_entries: compressed entries ``w = 0 … num_entries − 1``.
        compress_ratio: ``m`` ≥ 1.

    Returns:
        bool ``(..., q, num_entries)``, True where the query may attend to the entry.
    """
    compress_ratio = _check_ratio(compress_ratio)
    check_positions(q_pos, "q_pos")
    if q_pos.is_floating_point():
        raise ValueError(f"q_pos must be integer positions, got {q_pos.dtype}")
    if isinstance(num_entries, bool) or not isinstance(num_entries, int) or num_entries < 0:
        raise ValueError(f"num_entries must be an int >= 0, got {num_entries!r}")
    entries = torch.arange(num_entries, device=q_pos.device)
    threshold = torch.div(q_pos + 1, compress_ratio, rounding_mode="floor")
    return entries < threshold[..., None]

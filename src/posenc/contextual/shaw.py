"""Shaw et al.'s clipped relative position representations on keys and values."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._validate import check_floating_tensor, check_integer_valued, check_positive_int
from posenc.bias.alibi import relative_distances
from posenc.encoding.kinds import ClippedRelative

__all__ = [
    "ShawRelative",
    "check_head_tensor",
    "expand_index",
    "shaw_index",
    "shaw_logits",
    "shaw_values",
]


def check_head_tensor(
    name: str, x: Tensor, head_dim: int, seq: int, num_heads: int | None = None
) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``x`` is ``(batch, heads, seq, head_dim)``."""
    check_floating_tensor(name, x, ("batch", "heads", "seq", "head_dim"))
    if x.shape[-1] != head_dim:
        raise ValueError(
            f"{name} must have head_dim {head_dim} in its last axis; got {x.shape[-1]}"
        )
    if x.shape[-2] != seq:
        raise ValueError(
            f"{name} has {x.shape[-2]} positions in axis -2 but its positions tensor has {seq}"
        )
    if num_heads is not None and x.shape[1] != num_heads:
        raise ValueError(f"{name} must have num_heads={num_heads} heads; got {x.shape[1]}")


def expand_index(index: Tensor, batch: int, heads: int) -> Tensor:
    """``(q, k)`` or ``(B, q, k)`` index to ``(batch, heads, q, k)`` (B must be 1 or batch)."""
    if index.dim() == 3 and index.shape[0] not in (1, batch):
        raise ValueError(
            f"q_pos/k_pos batch size {index.shape[0]} does not match the tensor batch {batch}"
        )
    if index.dim() == 3:
        index = index[:, None]
    return index.expand(batch, heads, *index.shape[-2:])


def shaw_index(q_pos: Tensor, k_pos: Tensor, max_distance: int) -> Tensor:
    """Table row of every pair: ``clip(k_pos_j - q_pos_i, -k, k) + k``, int64.

    Shape: ``(q_len, k_len)`` or ``(batch, q_len, k_len)``.
    """
    rel = relative_distances(q_pos, k_pos, whole=True)
    return rel.clamp(-max_distance, max_distance) + max_distance


def _index(q_pos: Tensor, k_pos: Tensor, max_distance: int) -> Tensor:
    """:func:`shaw_index` without checks (positions validated at the attention boundary)."""
    rel = (k_pos[..., None, :] - q_pos[..., :, None]).to(torch.long)
    return rel.clamp(-max_distance, max_distance) + max_distance


def shaw_logits(q: Tensor, key_table: Tensor, index: Tensor, scale: float) -> Tensor:
    """``scale · q_i · a^K_{index(i, j)}`` without materializing ``(q, k, head_dim)``.

    Args:
        q: ``(batch, heads, q_len, head_dim)``.
        key_table: ``(2k + 1, head_dim)``.
        index: from :func:`shaw_index`, ``(q_len, k_len)`` or ``(batch, q_len, k_len)``.

    Returns:
        ``(batch, heads, q_len, k_len)``.
    """
    per_row = (q @ key_table.to(q.dtype).T) * scale  # (batch, heads, q_len, 2k + 1): small
    return per_row.gather(-1, expand_index(index, q.shape[0], q.shape[1]))


def shaw_values(probs: Tensor, value_table: Tensor, index: Tensor) -> Tensor:
    """``Σ_j probs_ij · a^V_{index(i, j)}``: sum probabilities per table row, then project.

    Args:
        probs: attention weights ``(batch, heads, q_len, k_len)``.
        value_table: ``(2k + 1, head_dim)``.
        index: from :func:`shaw_index`.

    Returns:
        ``(batch, heads, q_len, head_dim)``.
    """
    batch, heads, q_len, _ = probs.shape
    rows = value_table.shape[0]
    per_row = probs.new_zeros(batch, heads, q_len, rows)
    per_row = per_row.scatter_add(-1, expand_index(index, batch, heads), probs)
    return per_row @ value_table.to(probs.dtype)


class ShawRelative(ClippedRelative):
    """Relative position representations added to keys (and values), clipped at ``k``.

    .. math::
        e_{ij} = \\frac{q_i \\cdot (k_j + a^K_{ij})}{\\sqrt{d}}, \\qquad
        z_i = \\sum_j \\alpha_{ij} (v_j + a^V_{ij}), \\qquad
        a^{K,V}_{ij} = w^{K,V}_{\\text{clip}(k\\_pos_j - q\\_pos_i,\\, -k,\\, k)}

    :meth:`logit_term` returns the position term ``scale · q_i · a^K_{ij}`` (attention adds
    the content term ``scale · q_i · k_j``) and :meth:`value_term` the term
    ``Σ_j α_ij a^V_ij``.
    Both are computed per table row (``q @ key_tableᵀ`` then a gather; a scatter-add of the
    probabilities then ``@ value_table``), never as a ``(q, k, head_dim)`` tensor. The
    ``2k + 1`` vectors are shared across heads, as in the paper. Paper: Shaw et al. 2018,
    https://arxiv.org/abs/1803.02155 (main experiments k = 16); tested against a direct
    loop over the paper's formulas.

    Args:
        head_dim: size of each head ``d`` (≥ 1).
        max_distance: clipping distance ``k`` (≥ 1, default 16); farther keys use the edge
            vectors.
        values: also learn ``a^V`` and add the value term (default True). With False only
            the key term is used (BERT's ``relative_key``-style) and ``has_value_term`` is
            False.
        device, dtype: of the tables.

    Attributes:
        key_table, value_table: ``(2 * max_distance + 1, head_dim)``; row ``r + k`` holds the
            vector for distance ``r = k_pos - q_pos``. Initialized ``N(0, 0.02²)``: the paper
            does not specify an initialization; 0.02 is the usual embedding scale (BERT,
            GPT-2), small enough that training starts near plain content attention.
            ``value_table`` is None when ``values=False``.

    Shape:
        ``logit_term(q, k, q_pos, k_pos, scale)``: q ``(batch, heads, q_len, head_dim)`` ->
        ``(batch, heads, q_len, k_len)``; ``value_term(probs, q_pos, k_pos)``: probs
        ``(batch, heads, q_len, k_len)`` -> ``(batch, heads, q_len, head_dim)``.

    Example::

        >>> shaw = ShawRelative(8, max_distance=4)
        >>> q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
        >>> pos = torch.arange(5)
        >>> shaw.logit_term(q, k, pos, pos, scale=8**-0.5).shape
        torch.Size([2, 3, 5, 5])
    """

    value_table: nn.Parameter | None

    def __init__(
        self,
        head_dim: int,
        *,
        max_distance: int = 16,
        values: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.max_distance = check_positive_int("max_distance", max_distance)
        if not isinstance(values, bool):
            raise ValueError(f"values must be a bool, got {values!r}")
        # Per instance: the key-only variant has no value term.
        self.has_value_term = values
        rows = 2 * max_distance + 1
        self.key_table = nn.Parameter(torch.empty(rows, head_dim, device=device, dtype=dtype))
        if values:
            self.value_table = nn.Parameter(torch.empty(rows, head_dim, device=device, dtype=dtype))
        else:
            self.register_parameter("value_table", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.key_table, std=0.02)
        if self.value_table is not None:
            nn.init.normal_(self.value_table, std=0.02)

    def index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Table row of every (query, key) pair; see :func:`shaw_index`."""
        return shaw_index(q_pos, k_pos, self.max_distance)

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """Raise ``ValueError`` naming ``name`` unless positions are whole numbers."""
        check_integer_valued(name, positions)

    def clipped_relative_tables(self) -> tuple[Tensor, Tensor | None, int]:
        """``(a^K, a^V or None, k)``: the logit term is ``scale · q_i · a^K[c]`` and the
        value term ``Σ_j p_ij a^V[c]`` with ``c = clip(k_pos_j − q_pos_i, −k, k) + k``.

        Lets the chunked backend treat keys beyond ``k`` as one part per side
        (:mod:`posenc.attention.relative`).
        """
        return self.key_table, self.value_table, self.max_distance

    def logit_term(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float
    ) -> Tensor:
        """Position term ``scale · q_i · a^K_ij``, ``(batch, heads, q_len, k_len)``."""
        check_head_tensor("q", q, self.head_dim, q_pos.shape[-1])
        check_head_tensor("k", k, self.head_dim, k_pos.shape[-1])
        return shaw_logits(q, self.key_table, _index(q_pos, k_pos, self.max_distance), scale)

    def value_term(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Value term ``Σ_j probs_ij a^V_ij``, ``(batch, heads, q_len, head_dim)``."""
        if self.value_table is None:
            return None
        if probs.dim() != 4 or tuple(probs.shape[-2:]) != (q_pos.shape[-1], k_pos.shape[-1]):
            raise ValueError(
                "probs must be (batch, heads, q_len, k_len) matching q_pos and k_pos; "
                f"got {tuple(probs.shape)}"
            )
        return shaw_values(probs, self.value_table, _index(q_pos, k_pos, self.max_distance))

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, max_distance={self.max_distance}, "
            f"values={self.has_value_term}"
        )

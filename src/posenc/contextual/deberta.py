"""DeBERTa's disentangled attention: content-to-position and position-to-content terms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_integer_valued,
    check_positive_float,
    check_positive_int,
)
from posenc.contextual.deberta_logits import (
    POSITION_TERMS,
    PositionTerm,
    check_deberta_span,
    deberta_index,
    deberta_log_bucket,
    disentangled_logits,
    relative_rows,
)
from posenc.contextual.shaw import check_head_tensor
from posenc.encoding.base import empty_linear
from posenc.encoding.kinds import DisentangledRelative

__all__ = [
    "DebertaRelative",
    "DebertaRelativeEmbedding",
    "PositionTerm",
    "check_deberta_span",
    "deberta_index",
    "deberta_log_bucket",
    "disentangled_logits",
]


class DebertaRelativeEmbedding(nn.Module):
    """DeBERTa's relative position embeddings ``P``: ``2k`` rows of model width.

    Shared by every layer (transformers keeps ``rel_embeddings`` and its ``LayerNorm`` in
    ``DebertaV2Encoder``); ``forward`` returns the table, layer-normalized with
    ``layer_norm`` (v2/v3's ``norm_rel_ebd = "layer_norm"``).

    Args:
        span: ``k`` (≥ 1); the table has ``2k`` rows, row ``r`` for bucket ``r − k``.
        dim: model width (the input width of the position projections).
        layer_norm: normalize the table (default True, as the v3 configurations).
        eps: LayerNorm epsilon (default 1e-7, transformers' ``layer_norm_eps``).
        device, dtype: of the parameters.

    Attributes:
        weight: ``(2 * span, dim)``, initialized ``N(0, 0.02²)`` (transformers'
            ``initializer_range``).
        norm: the ``nn.LayerNorm`` or None.
    """

    norm: nn.LayerNorm | None

    def __init__(
        self,
        span: int,
        dim: int,
        *,
        layer_norm: bool = True,
        eps: float = 1e-7,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.span = check_positive_int("span", span)
        self.dim = check_positive_int("dim", dim)
        if not isinstance(layer_norm, bool):
            raise ValueError(f"layer_norm must be a bool, got {layer_norm!r}")
        self.eps = check_positive_float("eps", eps)
        check_floating_dtype("dtype", dtype)
        self.weight = nn.Parameter(torch.empty(2 * span, dim, device=device, dtype=dtype))
        self.norm = nn.LayerNorm(dim, eps=eps, device=device, dtype=dtype) if layer_norm else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)
        if self.norm is not None:
            self.norm.reset_parameters()

    def forward(self, dtype: torch.dtype | None = None) -> Tensor:
        """The table ``(2 * span, dim)``, computed in ``dtype`` (default: the weight's)."""
        dtype = dtype or self.weight.dtype
        table = self.weight.to(dtype)
        if self.norm is None:
            return table
        weight, bias = self.norm.weight.to(dtype), self.norm.bias.to(dtype)
        return F.layer_norm(table, (self.dim,), weight, bias, self.eps)

    def extra_repr(self) -> str:
        return f"span={self.span}, dim={self.dim}, layer_norm={self.norm is not None}"


class DebertaRelative(DisentangledRelative):
    """DeBERTa's disentangled relative attention (v2/v3): c2p and p2c logit terms.

    .. math::
        A_{ij} = \\frac{q_i \\cdot k_j + q_i \\cdot K^r_{c(i,j)} + k_j \\cdot Q^r_{c(i,j)}}
        {\\sqrt{d\\, s}},\\qquad c(i, j) = \\text{clamp}(b(q\\_pos_i - k\\_pos_j) + k,\\,
        0,\\, 2k - 1)

    with ``K^r = P W^K_r``, ``Q^r = P W^Q_r`` per head, ``P`` the shared ``2k``-row table
    (:class:`DebertaRelativeEmbedding`), ``b`` the log buckets (:func:`deberta_log_bucket`)
    or the identity, and ``s = 1 + len(pos_att_type)`` (``1/√(3d)`` with both terms: the
    :meth:`logit_scale` hook). Attention adds ``scale · q_i·k_j``; :meth:`logit_term`
    returns the position terms, scaled the same way (transformers divides each term by
    ``√(d s)``). Paper: He et al. 2021, https://arxiv.org/abs/2006.03654; tested against
    transformers' ``DisentangledSelfAttention`` (``models/deberta_v2``, v5.23) and a float64
    loop over the formula.

    **p2c's row.** The paper's Algorithm 1 reads ``Q^r`` at ``δ(j, i)`` (``j − i``); the
    reference code (microsoft/DeBERTa and transformers) gathers ``K Q^rᵀ`` at ``−δ`` on the
    key-row grid and transposes, which reads row ``c(i, j)``, the same row as c2p. This
    follows the code, which the checkpoints were trained with.

    **Sharing.** ``P`` (and its LayerNorm) belongs to the whole model; the projections to
    each layer. Build the first layer's encoding, then :meth:`new_layer` for every other
    layer (or pass ``embedding=`` yourself). With ``share_att_key=True`` (v2/v3) ``W^K_r``,
    ``W^Q_r`` are the layer's own content projections: :class:`~posenc.attention.Attention`
    hands them over at construction through :meth:`bind_projections` (references, not
    submodules, so nothing is registered twice), so each layer needs its own instance.

    Positions may be ``(seq,)`` or ``(batch, seq)`` whole numbers; queries and keys may
    differ in length (KV cache). Distances beyond the span share the edge rows (no error).
    Attention dropout aside, transformers also applies hidden dropout to ``P`` in training;
    this encoding does not (a per-block dropout would differ between backends).

    Args:
        num_heads, head_dim: ``H`` and ``d`` (≥ 1).
        dim: model width, the width of ``P`` (the input of the content projections, which
            ``share_att_key`` applies to ``P``).
        max_relative_positions: ``M`` (default 512); the span without buckets.
        position_buckets: log buckets (default 256, the v3 configurations; 0: none, span
            ``M``); the span is ``position_buckets`` then.
        pos_att_type: a non-empty subset of ``("c2p", "p2c")`` (default both).
        share_att_key: position keys and queries use the layer's content projections
            (default True, v2/v3); False gives separate ``pos_key_proj``/``pos_query_proj``.
        norm_rel_ebd: LayerNorm on ``P`` (default True, v3's ``"layer_norm"``).
        layer_norm_eps: its epsilon (default 1e-7).
        projection_bias: the separate projections have a bias (default True, as in
            transformers).
        embedding: a shared :class:`DebertaRelativeEmbedding` to use instead of a new one;
            its span, width and normalization must match the arguments.
        device, dtype: of the parameters.

    Attributes:
        embedding: the table module (shared across layers when built so).
        pos_key_proj, pos_query_proj: ``nn.Linear(dim, H * d)`` (present for their term
            when ``share_att_key=False``, else None); weights ``N(0, 0.02²)``, bias 0, as
            transformers initializes them.

    Shape:
        ``logit_term(q, k, q_pos, k_pos, scale)``: q ``(batch, H, q_len, d)``, k ``(batch,
        H, k_len, d)`` -> ``(batch, H, q_len, k_len)``; nothing larger is built than that and
        ``(batch, H, max(q_len, 256), 2k)``.

    Example::

        >>> from posenc.attention import Attention
        >>> pos = DebertaRelative(4, 8, 32, max_relative_positions=64, position_buckets=16)
        >>> attn = Attention(32, 4, pos=pos, causal=False)  # binds q_proj, k_proj
        >>> attn(torch.randn(2, 10, 32)).shape
        torch.Size([2, 10, 32])
        >>> layer2 = Attention(32, 4, pos=pos.new_layer(), causal=False)  # same P
    """

    num_heads: int

    pos_key_proj: nn.Linear | None
    pos_query_proj: nn.Linear | None

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        dim: int,
        *,
        max_relative_positions: int = 512,
        position_buckets: int = 256,
        pos_att_type: Sequence[PositionTerm] = ("c2p", "p2c"),
        share_att_key: bool = True,
        norm_rel_ebd: bool = True,
        layer_norm_eps: float = 1e-7,
        projection_bias: bool = True,
        embedding: DebertaRelativeEmbedding | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.dim = check_positive_int("dim", dim)
        self.span = check_deberta_span(max_relative_positions, position_buckets)
        self.max_relative_positions = max_relative_positions
        self.position_buckets = position_buckets
        self.pos_att_type = _check_terms(pos_att_type)
        for name, flag in (
            ("share_att_key", share_att_key),
            ("norm_rel_ebd", norm_rel_ebd),
            ("projection_bias", projection_bias),
        ):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be a bool, got {flag!r}")
        self.share_att_key, self.projection_bias = share_att_key, projection_bias
        check_positive_float("layer_norm_eps", layer_norm_eps)
        check_floating_dtype("dtype", dtype)
        # The layer that makes the shared table initializes it (reset_parameters).
        self._owns_embedding = embedding is None
        if embedding is None:
            embedding = DebertaRelativeEmbedding(
                self.span,
                dim,
                layer_norm=norm_rel_ebd,
                eps=layer_norm_eps,
                device=device,
                dtype=dtype,
            )
        elif not isinstance(embedding, DebertaRelativeEmbedding):
            raise ValueError(
                "embedding must be a DebertaRelativeEmbedding or None, got "
                f"{type(embedding).__name__}"
            )
        else:
            have = (embedding.span, embedding.dim, embedding.norm is not None, embedding.eps)
            want = (self.span, dim, norm_rel_ebd, layer_norm_eps)
            if have[:3] != want[:3] or (norm_rel_ebd and have[3] != want[3]):
                raise ValueError(f"embedding has (span, dim, layer_norm, eps) {have}, not {want}")
        self.embedding = embedding
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        width = num_heads * head_dim
        separate = not share_att_key
        self.pos_key_proj = (  # drawn once, by _reset_projections
            empty_linear(dim, width, bias=projection_bias, **factory)
            if separate and "c2p" in self.pos_att_type
            else None
        )
        self.pos_query_proj = (
            empty_linear(dim, width, bias=projection_bias, **factory)
            if separate and "p2c" in self.pos_att_type
            else None
        )
        # The layer's (q_proj, k_proj) under share_att_key: a tuple, so not registered.
        self._bound: tuple[nn.Linear, nn.Linear] | None = None
        self._reset_projections()

    def _reset_projections(self) -> None:
        for proj in (self.pos_key_proj, self.pos_query_proj):
            if proj is not None:
                nn.init.normal_(proj.weight, std=0.02)
                if proj.bias is not None:
                    nn.init.zeros_(proj.bias)

    def reset_parameters(self) -> None:
        """Re-initialize the projections, and the table when this layer made it (the layers
        of :meth:`new_layer` share it; the first one draws it), drawing what the constructor
        draws."""
        if self._owns_embedding:
            self.embedding.reset_parameters()
        self._reset_projections()

    def new_layer(self) -> DebertaRelative:
        """Another layer's encoding: the same settings and the same :attr:`embedding` module,
        its own position projections (or its own layer's, under ``share_att_key``)."""
        weight = self.embedding.weight
        return DebertaRelative(
            self.num_heads,
            self.head_dim,
            self.dim,
            max_relative_positions=self.max_relative_positions,
            position_buckets=self.position_buckets,
            pos_att_type=self.pos_att_type,
            share_att_key=self.share_att_key,
            norm_rel_ebd=self.embedding.norm is not None,
            layer_norm_eps=self.embedding.eps,
            projection_bias=self.projection_bias,
            embedding=self.embedding,
            device=weight.device,
            dtype=weight.dtype,
        )

    def logit_scale(self, head_dim: int) -> float:
        """``1 / sqrt(head_dim · (1 + len(pos_att_type)))`` (``1/√(3d)`` with both terms)."""
        if head_dim != self.head_dim:
            raise ValueError(
                f"head_dim must be this encoding's head_dim {self.head_dim}; got {head_dim}"
            )
        return float((head_dim * (1 + len(self.pos_att_type))) ** -0.5)

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """Raise ``ValueError`` naming ``name`` unless positions are whole numbers."""
        check_integer_valued(name, positions)

    def bind_projections(self, q_proj: nn.Linear, k_proj: nn.Linear) -> None:
        """Use the layer's content projections for ``P`` (``share_att_key``); a no-op
        without it. :class:`~posenc.attention.Attention` calls this at construction.

        Raises:
            ValueError: naming ``q_proj``/``k_proj`` for a wrong type or width, or ``pos``
                when already bound to another layer's projections.
        """
        if not self.share_att_key:
            return
        for name, proj in (("q_proj", q_proj), ("k_proj", k_proj)):
            if not isinstance(proj, nn.Linear) or proj.in_features != self.dim:
                raise ValueError(f"{name} must be an nn.Linear taking dim={self.dim} features")
        kv_heads, rest = divmod(k_proj.out_features, self.head_dim)
        if q_proj.out_features != self.num_heads * self.head_dim:
            raise ValueError(
                f"q_proj must give num_heads * head_dim = {self.num_heads * self.head_dim} "
                f"features; got {q_proj.out_features}"
            )
        if rest or kv_heads == 0 or self.num_heads % kv_heads:
            raise ValueError(
                f"k_proj must give a divisor of num_heads={self.num_heads} heads of head_dim="
                f"{self.head_dim}; got {k_proj.out_features} features"
            )
        if self._bound is not None and (
            self._bound[0] is not q_proj or self._bound[1] is not k_proj
        ):
            raise ValueError(
                "pos (DebertaRelative with share_att_key=True) is already bound to another "
                "layer's projections: build one per layer (new_layer())"
            )
        self._bound = (q_proj, k_proj)

    def position_tables(self, dtype: torch.dtype) -> tuple[Tensor | None, Tensor | None]:
        """``(K^r, Q^r)``, each ``(num_heads, 2k, head_dim)`` in ``dtype``, or None for a
        term not in ``pos_att_type``."""
        table = self.embedding(dtype)  # (2k, dim)
        key_proj: nn.Linear | None
        query_proj: nn.Linear | None
        if self.share_att_key:
            if self._bound is None:
                raise ValueError(
                    "share_att_key=True needs the layer's projections: pass this encoding to "
                    "posenc.attention.Attention, or call bind_projections(q_proj, k_proj)"
                )
            key_proj, query_proj = self._bound[1], self._bound[0]
        else:
            key_proj, query_proj = self.pos_key_proj, self.pos_query_proj
        keys = self._project(table, key_proj) if "c2p" in self.pos_att_type else None
        queries = self._project(table, query_proj) if "p2c" in self.pos_att_type else None
        return keys, queries

    def _project(self, table: Tensor, proj: nn.Linear | None) -> Tensor:
        assert proj is not None
        bias = None if proj.bias is None else proj.bias.to(table.dtype)
        out = F.linear(table, proj.weight.to(table.dtype), bias)  # (2k, heads' * d)
        out = out.view(table.shape[0], -1, self.head_dim).transpose(0, 1)  # (heads', 2k, d)
        repeat = self.num_heads // out.shape[0]  # grouped key heads: as attention expands k
        return out if repeat == 1 else out.repeat_interleave(repeat, dim=0)

    def distance_rows(self, relative: Tensor) -> Tensor:
        """The table row ``c`` of integer ``q_pos − k_pos`` (any shape), int64: the rows both
        terms read. The chunked backend's plan reads it per distance (the rows stop changing
        beyond the buckets' reach, where both terms become row and key vectors)."""
        return relative_rows(
            relative, self.span, self.position_buckets, self.max_relative_positions
        )

    def logit_term(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float
    ) -> Tensor:
        """``scale · (c2p + p2c)``, ``(batch, heads, q_len, k_len)``; no value checks."""
        check_head_tensor("q", q, self.head_dim, q_pos.shape[-1], self.num_heads)
        check_head_tensor("k", k, self.head_dim, k_pos.shape[-1], self.num_heads)
        if k.shape[0] != q.shape[0]:
            raise ValueError(f"k must have the batch size of q ({q.shape[0]}); got {k.shape[0]}")
        relative = (q_pos[..., :, None] - k_pos[..., None, :]).to(torch.int64)
        index = relative_rows(
            relative, self.span, self.position_buckets, self.max_relative_positions
        )
        keys, queries = self.position_tables(q.dtype)
        return disentangled_logits(q, k, index, scale, position_keys=keys, position_queries=queries)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, dim={self.dim}, "
            f"span={self.span}, position_buckets={self.position_buckets}, "
            f"max_relative_positions={self.max_relative_positions}, "
            f"pos_att_type={self.pos_att_type}, share_att_key={self.share_att_key}"
        )


def _check_terms(pos_att_type: object) -> tuple[PositionTerm, ...]:
    """``pos_att_type`` as a tuple in canonical order; ValueError naming it otherwise."""
    if isinstance(pos_att_type, str) or not isinstance(pos_att_type, Sequence):
        raise ValueError(
            f"pos_att_type must be a sequence of 'c2p' and/or 'p2c', got {pos_att_type!r}"
        )
    terms = list(pos_att_type)
    if not terms or len(set(terms)) != len(terms) or any(t not in POSITION_TERMS for t in terms):
        raise ValueError(
            "pos_att_type must be a non-empty subset of ('c2p', 'p2c') without repeats; "
            f"got {pos_att_type!r}"
        )
    return tuple(t for t in POSITION_TERMS if t in terms)

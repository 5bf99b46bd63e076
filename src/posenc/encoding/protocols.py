"""The places an encoding acts: one base class each, with required, typed methods.

An encoding declares where it acts by the classes it derives from; attention and the model
resolve it once (:func:`posenc.encoding.resolve.hooks_of`) and call these methods, never
probing for others. One encoding may act in several places (CAPE is additive and transforms
positions). docs/architecture.md has the table of which backend serves which place.

=====================  =================================================================
place                  base class and its methods
=====================  =================================================================
additive               :class:`AdditiveEncoding`: ``position_embedding(positions)``
token embedding        :class:`TokenEmbedding`: ``embed_tokens(tokens, positions)``
rotary                 :class:`RotaryEncoding`: ``rotary_tables(positions, dtype, *,
                       update)``, ``rotate_qk(q, k, q_tables, k_tables, *, inplace)``
value rotation         :class:`ValueRotation` (a rotary): ``rotate_values(v, k_tables)``,
                       ``derotate_output(out, q_tables)``
segments               :class:`SegmentEncoding` (a rotary): ``segments()``,
                       ``query_scale(positions)``, ``keeps(k_pos, q_min)``
pointwise bias         :class:`BiasEncoding`: ``bias_at(head, q_pos, k_pos, dtype)``,
                       ``prepare_bias``, ``bias_grid``, ``distance_only_up_to``
contextual term        :class:`ContextualEncoding`: ``logit_term``, ``value_term``,
                       ``logit_term_contiguous``
scores reader          :class:`ScoresReader`: ``transform_scores(scores, *, q, k, q_pos,
                       k_pos, allowed)``
softmax transform      :class:`ScoreMap` (``map_scores``), :class:`SinkLogits`
                       (``sink_logits``), :class:`AttentionWeights` (``attention_weights``,
                       ``remainder_term``)
token state            :class:`TokenStateEncoding` (:mod:`~posenc.encoding.token_places`):
                       ``token_state(x, previous, real)``, ``state_bias(q_state, k_state)``
positions              :class:`PositionTransform` (:mod:`~posenc.encoding.token_places`):
                       ``transform_positions(positions, *, batch, continuing, real)``
token transform        :class:`TokenTransformEncoding` (:mod:`~posenc.encoding.token_places`):
                       ``transform_inputs(x, real)``,
                       ``token_transforms(inputs, real, same_document)``,
                       ``gate_states(x, previous, real)``
token phases           :class:`TokenPhaseEncoding` (:mod:`~posenc.encoding.token_phases`):
                       ``token_phases(x, previous, real, starts)``,
                       ``rotate_by_phases(q, k, phases)``
=====================  =================================================================

The methods attention calls on the hot path do no value checks; each class's ``forward`` is
the validated public call.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc.encoding._common import required
from posenc.encoding.base import PositionalEncoding, state_device
from posenc.encoding.token_phases import TokenPhaseEncoding
from posenc.encoding.token_places import (
    PositionTransform,
    TokenStateEncoding,
    TokenTransformEncoding,
)
from posenc.positions import check_positions

__all__ = [
    "AdditiveEncoding",
    "AttentionWeights",
    "BiasEncoding",
    "ContextualEncoding",
    "PositionTransform",
    "RotaryEncoding",
    "ScoreMap",
    "ScoresReader",
    "SegmentEncoding",
    "SinkLogits",
    "TokenEmbedding",
    "TokenPhaseEncoding",
    "TokenStateEncoding",
    "TokenTransformEncoding",
    "ValueRotation",
    "check_rotary_input",
    "materialize_bias",
]


class AdditiveEncoding(PositionalEncoding):
    """``x + P(positions)``: ``forward(positions) -> (..., seq, dim)``; the model adds it to
    the token embeddings."""

    dim: int

    def position_embedding(self, positions: Tensor) -> Tensor:
        """``P(positions)``, ``(..., seq, dim)`` (the module's ``forward``)."""
        return self(positions)


class TokenEmbedding(PositionalEncoding):
    """Replaces the model's token embedding: reads the token ids as well as their positions
    (complex-order embeddings). The model checks ``vocab_size`` and ``dim`` against its own."""

    vocab_size: int
    dim: int

    def embed_tokens(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """``(..., seq)`` token ids at validated ``positions`` → ``(..., seq, dim)``."""
        raise required(self, "embed_tokens")


class RotaryEncoding(PositionalEncoding):
    """Rotates q and k by their positions.

    Subclasses implement the two hot-path methods; :meth:`forward` is the validated public
    call ``forward(q, k, q_pos, k_pos) -> (q, k)``.
    """

    head_dim: int
    #: Heads of per-head parameters (PoPE's δ, LearnedRotation's generators): one set per
    #: query head, or 1 for one shared set; None when the rotation has no per-head parameters.
    num_heads: int | None = None
    shared_across_layers: ClassVar[bool] = True

    @property
    def depends_on_length(self) -> bool:
        """True when the frequencies follow the sequence length (dynamic NTK, LongRoPE,
        dynamic YaRN): attention then keeps cached keys unrotated and rotates them when read."""
        return False

    @property
    def length_rule(self) -> str:
        """How a length-dependent rotary picks its length: ``"forward"`` (HF: the longest
        position of each forward) or ``"query"`` (each query its own)."""
        return "forward"

    @property
    def rebuilds(self) -> int:
        """A counter that changes whenever the frequencies change (cached tables key on it)."""
        return 0

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> Any:
        """Whatever :meth:`rotate_qk` needs for ``positions`` (cos/sin tables), in ``dtype``.

        Called once per model forward for the new tokens; no value checks. A length-dependent
        rotary (:attr:`depends_on_length`) first follows ``max(positions) + 1``;
        ``update=False`` asks for tables at its current frequencies instead (keys read from an
        unrotated KV cache, a segment's mapped positions), ``length`` for the frequencies of a
        sequence of ``length`` positions, its state untouched (the ``"query"`` rule). A rotary
        whose frequencies do not follow the length ignores both.
        """
        raise required(self, "rotary_tables")

    def frequency_length(self, seq_len: int) -> int | None:
        """The state the frequencies take for a sequence of ``seq_len`` positions without
        history (the ``"query"`` rule), None for the initial frequencies (always None for a
        rotary whose frequencies do not follow the length)."""
        return None

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_tables: Any, k_tables: Any, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Rotate q with ``q_tables`` and k with ``k_tables`` (from :meth:`rotary_tables`).

        ``inplace=True`` may overwrite q and k (attention asks for it when no gradient is
        needed: its q and k are fresh projections); an encoding may still return new tensors.
        """
        raise required(self, "rotate_qk")

    def check_rotary_call(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> None:
        """Validate a public call (shapes, dtypes, positions); errors name the argument."""
        owner = type(self).__name__
        check_rotary_input(q, q_pos, self.head_dim, "q", "q_pos", owner, self.num_axes)
        check_rotary_input(k, k_pos, self.head_dim, "k", "k_pos", owner, self.num_axes)

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate q by ``q_pos`` and k by ``k_pos``; returns ``(q_rot, k_rot)``."""
        self.check_rotary_call(q, k, q_pos, k_pos)
        q_tables = self.rotary_tables(q_pos, q.dtype)
        same = k_pos is q_pos and k.dtype == q.dtype  # self-attention: build the tables once
        k_tables = q_tables if same else self.rotary_tables(k_pos, k.dtype)
        return self.rotate_qk(q, k, q_tables, k_tables)


class ValueRotation(RotaryEncoding):
    """A rotary whose values carry the key's rotation and whose output is rotated back by
    the query's (DeepSeek-V4's shared key-value latent, paper eq. 26).

    .. math::

        o_i = R(-i) \\sum_j p_{ij} R(j) v_j = \\sum_j p_{ij} R(j - i) v_j

    so each value enters the output as a function of ``j − i`` alone. Attention rotates the
    new values with the keys' tables before it stores them (a KV cache holds rotated values,
    as it holds rotated keys) and rotates the output with the queries' tables after the
    softmax; the tables are those of :meth:`RotaryEncoding.rotary_tables` of this same
    encoding. The backend between sees ordinary q, k, v, so every backend that takes a
    rotary serves it; paths that rotate keys per segment or when read (segment methods,
    frequencies that follow the length) refuse it.
    """

    def rotate_values(self, v: Tensor, k_tables: Any) -> Tensor:
        """``R(j) v_j``: ``v`` ``(batch, kv_heads, seq, v_dim)`` rotated with the keys'
        tables (from :meth:`~RotaryEncoding.rotary_tables` at the keys' positions)."""
        raise required(self, "rotate_values")

    def derotate_output(self, out: Tensor, q_tables: Any) -> Tensor:
        """``R(-i) o_i``: the attention output ``(batch, heads, seq, v_dim)`` rotated back
        with the queries' tables."""
        raise required(self, "derotate_output")


class SegmentEncoding(RotaryEncoding):
    """A rotary that positions each (query, key) pair by the segment holding it (Self-Extend,
    Dual Chunk Attention, ReRoPE, LM-Infinite, attention sinks; :mod:`posenc.segments`).

    Attention keeps the keys of its KV cache unrotated and rotates them per segment when read.
    """

    causal_only: ClassVar[bool] = True

    def segments(self) -> tuple[Any, ...]:
        """The :class:`posenc.segments.Segment` s that split the visible pairs."""
        raise required(self, "segments")

    def query_scale(self, positions: Tensor) -> Tensor | None:
        """A factor per query position multiplying q before rotation (log-n), or None."""
        return None

    def keeps(self, k_pos: Tensor, q_min: Tensor | float) -> Tensor:
        """Which cached keys a query at ``q_min`` or later may still see (a rolling cache)."""
        raise required(self, "keeps")


class BiasEncoding(PositionalEncoding):
    """Adds a pointwise bias ``b(head, q_pos, k_pos)`` to the scaled attention logits.

    Subclasses write :meth:`bias_at` once; :meth:`bias` materializes it and
    :mod:`posenc.attention` derives FlexAttention's ``score_mod`` from the same method.
    """

    num_heads: int
    #: True when ``bias_at(h, q, k)`` is a function of ``q - k`` alone at any positions
    #: (KERPLE, Sandwich, T5, the dynamic bias): attention then reads one table of distances.
    depends_on_distance_only: ClassVar[bool] = False

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """The bias of ``head`` between a query at ``q_pos`` and a key at ``k_pos``.

        Written with broadcastable tensor ops only (no Python branching on values, no
        checks), so that it evaluates both on whole broadcast grids (``head (H, 1, 1)``,
        ``q_pos (..., 1, q, 1)``, ``k_pos (..., 1, 1, k)``) and on the scalars FlexAttention
        passes to a ``score_mod``. Returns the bias in ``dtype``.
        """
        raise required(self, "bias_at")

    def prepare_bias(
        self, device: torch.device, dtype: torch.dtype, *, reach: int | None = None
    ) -> None:
        """Build whatever :meth:`bias_at` reads on ``device`` in ``dtype`` (a memoised table).

        Attention calls it once per call before :meth:`bias_at` may be traced (FlexAttention,
        checkpointing under ``torch.compile``), so that ``bias_at`` itself mutates nothing.
        ``reach``: the call reads distances ``|q - k| < reach`` only (known at default
        positions), for a method that evaluates a network on them (the dynamic bias).
        """

    def bias_grid(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """:meth:`bias_at` on the whole ``(heads, q, k)`` grid, unchecked (a method with a
        cheaper route to the same values overrides it: FIRE's MLP as its linear pieces).

        Shape:
            q_pos ``(q,)`` or ``(batch, q)``, k_pos ``(k,)`` or ``(batch, k)`` →
            ``(heads, q, k)`` when both are 1-D, else ``(batch, heads, q, k)``.
        """
        heads = torch.arange(self.num_heads, device=q_pos.device).view(-1, 1, 1)
        q_grid = q_pos[..., None, :, None]  # (..., 1, q, 1)
        k_grid = k_pos[..., None, None, :]  # (..., 1, 1, k)
        return self.bias_at(heads, q_grid, k_grid, dtype)

    def distance_only_up_to(self, position: float) -> bool:
        """True when the bias is a function of ``q - k`` alone for queries at positions up to
        ``position`` (FIRE below its threshold); :attr:`depends_on_distance_only` by default."""
        return self.depends_on_distance_only

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """Materialized bias ``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q, k)``.

        Validates the positions (shape, dtype, finiteness, whole numbers where the method
        needs them) and evaluates :meth:`bias_at` on the whole grid. ``dtype`` defaults to
        float32 (float64 when either position tensor is float64).
        """
        self.check_bias_positions(q_pos, k_pos)
        if dtype is None:
            wide = torch.float64 in (q_pos.dtype, k_pos.dtype)
            dtype = torch.float64 if wide else torch.float32
        return materialize_bias(self, q_pos, k_pos.to(q_pos.device), dtype)

    def check_bias_positions(self, q_pos: Tensor, k_pos: Tensor) -> None:
        """Validate positions for :meth:`bias` (overridden where whole numbers are needed):
        ``q_pos`` on the device of the encoding's parameters (if any), ``k_pos`` on
        ``q_pos``'s, batches equal or 1."""
        check_positions(q_pos, "q_pos", device=state_device(self))
        check_positions(k_pos, "k_pos", device=q_pos.device)
        if q_pos.dim() == 2 and k_pos.dim() == 2:
            qb, kb = q_pos.shape[0], k_pos.shape[0]
            if qb != kb and 1 not in (qb, kb):
                raise ValueError(
                    f"q_pos and k_pos must have the same batch size (or 1); got {qb} and {kb}"
                )

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.bias(q_pos, k_pos)


def materialize_bias(
    encoding: BiasEncoding, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype
) -> Tensor:
    """``encoding``'s bias on the whole ``(heads, q, k)`` grid, unchecked: its tables
    prepared (:meth:`BiasEncoding.prepare_bias`), then :meth:`BiasEncoding.bias_grid`."""
    encoding.prepare_bias(q_pos.device, dtype)
    return encoding.bias_grid(q_pos, k_pos, dtype)


class ContextualEncoding(PositionalEncoding):
    """A logit term that reads q or k as well as positions (Shaw, Transformer-XL, DeBERTa).

    ``logit_term(q, k, q_pos, k_pos, scale)`` returns ``(batch, heads, q_len, k_len)``, added
    to ``scale · q @ kᵀ``; the encoding applies ``scale`` itself where its formula does.
    ``value_term(probs, q_pos, k_pos)`` returns ``(batch, heads, q_len, head_dim)`` added to
    the attention output when ``has_value_term`` is True. Both may be called on a block of
    queries and any contiguous range of keys; positions are those of the block and range.
    """

    head_dim: int
    #: Heads of per-head parameters (XL's u and v, DeBERTa's projections); None when the
    #: term serves any number of heads (Shaw's tables).
    num_heads: int | None = None
    #: True when :meth:`value_term` contributes; attention then needs the probabilities.
    has_value_term: bool = False

    def logit_term(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float
    ) -> Tensor:
        """The term added to ``scale · q kᵀ``: ``(batch, heads, q_len, k_len)``."""
        raise required(self, "logit_term")

    def logit_term_contiguous(
        self, q: Tensor, k: Tensor, q_start: int, k_start: int, scale: float, causal: bool
    ) -> Tensor:
        """:meth:`logit_term` at positions ``q_start + arange`` and ``k_start + arange`` (a
        method with a cheaper route for such positions overrides it: XL's relative shift).
        ``causal``: pairs the causal mask hides may get any finite value."""
        q_pos = torch.arange(q_start, q_start + q.shape[-2], device=q.device)
        k_pos = torch.arange(k_start, k_start + k.shape[-2], device=q.device)
        return self.logit_term(q, k, q_pos, k_pos, scale)

    def value_term(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The term added to the attention output (Shaw's relative values), or None."""
        return None

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The validated :meth:`logit_term` at the encoding's :meth:`logit_scale`:
        ``(batch, heads, q, k)``.

        Raises:
            ValueError: naming ``q``/``k`` (not floating ``(batch, heads, seq, head_dim)``
                of this ``head_dim``) or ``q_pos``/``k_pos`` (shape, dtype, device, batch,
                the encoding's own checks).
        """
        head_dim = self.head_dim
        owner = type(self).__name__
        check_rotary_input(q, q_pos, head_dim, "q", "q_pos", owner, self.num_axes)
        device = state_device(self)
        if device is not None and q.device != device:
            raise ValueError(f"q must be on {device} (the {owner}'s parameters); got {q.device}")
        check_rotary_input(k, k_pos, head_dim, "k", "k_pos", owner, self.num_axes)
        if k.shape[0] != q.shape[0]:
            raise ValueError(f"k must have the batch of q ({q.shape[0]}); got {k.shape[0]}")
        self.validate_positions(q_pos, "q_pos")
        self.validate_positions(k_pos, "k_pos")
        return self.logit_term(q, k, q_pos, k_pos, float(self.logit_scale(head_dim)))


class ScoresReader(PositionalEncoding):
    """Reads the scaled content (+ bias) scores of complete rows of all heads and returns new
    ones (CoPE, DAPE); attention applies the mask after it."""

    num_heads: int
    #: The per-head width of a reader that reads q or k channels (CoPE), else None.
    head_dim: int | None = None

    def transform_scores(
        self,
        scores: Tensor,
        *,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        allowed: Tensor | None,
    ) -> Tensor:
        """``(batch, heads, rows, keys)`` scores → new scores of that shape. ``allowed``:
        the visible pairs (bool, broadcastable), None when all are."""
        raise required(self, "transform_scores")


class ScoreMap(PositionalEncoding):
    """An elementwise map of each scaled (+ bias) score, before the mask (Gemma 2's tanh
    soft-capping); FlexAttention takes it inside its ``score_mod``."""

    def map_scores(self, scores: Tensor) -> Tensor:
        raise required(self, "map_scores")


class SinkLogits(PositionalEncoding):
    """One logit per head joins every row's softmax with no value (gpt-oss's learned sinks);
    the sink's probability is dropped."""

    num_heads: int

    def sink_logits(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``(heads,)`` logits in ``dtype`` on ``device``."""
        raise required(self, "sink_logits")


class AttentionWeights(PositionalEncoding):
    """Weights in place of the softmax (stick-breaking attention)."""

    num_heads: int
    #: The per-head width of what :meth:`remainder_term` adds (the values'), None if nothing.
    head_dim: int | None = None
    #: True when a query's own key takes part (its stick is broken last).
    attend_current: bool = False

    def attention_weights(self, scores: Tensor, visible: Tensor | None) -> Tensor:
        """Weights ``(batch, heads, rows, keys)`` from scaled scores; ``visible`` as a mask."""
        raise required(self, "attention_weights")

    def remainder_term(self, remaining: Tensor) -> Tensor | None:
        """What the mass no key took adds to the output ``(batch, heads, rows, ·)``, or None."""
        return None


def check_rotary_input(
    x: Tensor,
    positions: Tensor,
    head_dim: int,
    name: str,
    pos_name: str,
    owner: str,
    num_axes: int = 1,
) -> None:
    """Check one rotary call's tensor and positions; errors name ``name`` / ``pos_name``.

    ``x`` must be a floating ``(batch, heads, seq, head_dim)`` tensor; ``positions`` valid
    (:func:`posenc.positions.check_positions`) on ``x``'s device, with ``seq`` entries and a
    batch of 1 or ``x``'s.
    """
    if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor (batch, heads, seq, head_dim)")
    if x.shape[-1] != head_dim:
        raise ValueError(
            f"{name} has last dim {x.shape[-1]} but this {owner} has head_dim {head_dim}"
        )
    check_positions(positions, pos_name, num_axes=num_axes, device=x.device)
    if positions.shape[-1] != x.shape[-2]:
        raise ValueError(
            f"{pos_name} has {positions.shape[-1]} positions but {name} has seq {x.shape[-2]}"
        )
    batched = positions.dim() == (2 if num_axes == 1 else 3)
    if batched and positions.shape[-2] not in (1, x.shape[0]):
        raise ValueError(
            f"{pos_name} has batch {positions.shape[-2]} but {name} has batch {x.shape[0]}"
        )

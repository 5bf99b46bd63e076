"""One resolved description of an encoding: where it acts, built once, read by attention.

:func:`hooks_of` looks at an encoding's classes (:mod:`posenc.encoding.protocols`), never at
its methods, and returns a :class:`Hooks` whose fields are the objects acting at each place,
typed by their protocol (``hooks.bias`` is a
:class:`~posenc.encoding.protocols.BiasEncoding` or None). Attention, the model and the
backends read the :class:`Hooks` and call the protocols' methods; nothing else inspects an
encoding.

A wrapper (:class:`~posenc.encoding.base.EncodingWrapper`: soft-capping, learned sinks,
randomized positions) resolves to the places of the encoding it holds, plus its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from posenc.encoding.base import EncodingWrapper, NoPE, PositionalEncoding
from posenc.encoding.protocols import (
    AdditiveEncoding,
    AttentionWeights,
    BiasEncoding,
    ContextualEncoding,
    PositionTransform,
    RotaryEncoding,
    ScoreMap,
    ScoresReader,
    SegmentEncoding,
    SinkLogits,
    TokenEmbedding,
    TokenPhaseEncoding,
    TokenStateEncoding,
    TokenTransformEncoding,
    ValueRotation,
    materialize_bias,
)

__all__ = ["Hooks", "hooks_of"]


@dataclass(frozen=True)
class Hooks:
    """Where one encoding acts: for each place, the object acting there, or None.

    Attributes:
        encoding: the encoding as given (a wrapper's outer module); None without one.
        additive … position_transform: the object implementing each protocol.
        num_axes: position axes the encoding reads.
    """

    encoding: PositionalEncoding | None
    additive: AdditiveEncoding | None = None
    token_embedding: TokenEmbedding | None = None
    rotary: RotaryEncoding | None = None
    value_rotation: ValueRotation | None = None
    segments: SegmentEncoding | None = None
    bias: BiasEncoding | None = None
    contextual: ContextualEncoding | None = None
    scores: ScoresReader | None = None
    score_map: ScoreMap | None = None
    sinks: SinkLogits | None = None
    token_state: TokenStateEncoding | None = None
    weights: AttentionWeights | None = None
    position_transform: PositionTransform | None = None
    token_transform: TokenTransformEncoding | None = None
    token_phases: TokenPhaseEncoding | None = None
    num_axes: int = 1

    @property
    def length_dependent(self) -> bool:
        """A rotary whose frequencies follow the sequence length."""
        return self.rotary is not None and self.rotary.depends_on_length

    @property
    def per_query_lengths(self) -> bool:
        """A length-dependent rotary whose every query picks its own length."""
        return (
            self.length_dependent
            and self.rotary is not None
            and (self.rotary.length_rule == "query")
        )

    @property
    def value_term(self) -> bool:
        """A contextual term that also adds to the output (Shaw's relative values)."""
        return self.contextual is not None and self.contextual.has_value_term

    @property
    def logit_terms(self) -> bool:
        """True when something is added to (or reads) the logits: a bias, a contextual term,
        a scores reader, a score map, sink logits, a token-state bias or weights in place of
        the softmax; without one, attention is plain SDPA."""
        return any(
            part is not None
            for part in (
                self.bias,
                self.contextual,
                self.scores,
                self.score_map,
                self.sinks,
                self.token_state,
                self.weights,
                self.token_transform,
            )
        )

    @property
    def needs_probabilities(self) -> bool:
        """True when the softmax must be explicit (a value term, a scores reader, a score
        map or sink logits)."""
        return self.value_term or any(
            part is not None for part in (self.scores, self.score_map, self.sinks)
        )

    @property
    def num_heads(self) -> int | None:
        """The heads of the encoding's per-head parts (a bias, a contextual term, sinks …),
        None when it has none."""
        parts = (
            self.bias,
            self.contextual,
            self.scores,
            self.token_state,
            self.weights,
            self.sinks,
            self.rotary,
            self.token_transform,
        )
        for part in parts:
            if part is not None and part.num_heads is not None:
                return part.num_heads
        return None

    @property
    def head_dim(self) -> int | None:
        """The per-head width of an encoding that reads q or k channels, else that of its
        attention weights' remainder (stick-breaking's ``r_h`` has the value width), else None."""
        width: int | None
        if self.rotary is not None:
            width = self.rotary.head_dim
        elif self.contextual is not None:
            width = self.contextual.head_dim
        elif self.token_transform is not None:
            width = self.token_transform.head_dim
        elif self.token_phases is not None:
            width = self.token_phases.head_dim
        else:
            width = None if self.scores is None else self.scores.head_dim
        if width is None and self.weights is not None:
            return self.weights.head_dim
        return width

    @property
    def name(self) -> str:
        """The encoding's class name, for messages."""
        return type(self.encoding).__name__

    def scale(self, head_dim: int) -> float:
        """The logit scale: the encoding's ``logit_scale(head_dim)`` (``head_dim ** -0.5``
        unless the method has its own)."""
        if self.encoding is None:
            return float(head_dim) ** -0.5
        return float(self.encoding.logit_scale(head_dim))

    def materialized_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """The bias ``(heads, q, k)`` or ``(batch, heads, q, k)`` from ``bias_at``, unchecked."""
        assert self.bias is not None
        return materialize_bias(self.bias, q_pos, k_pos, dtype)

    def prepare(
        self, device: torch.device, dtype: torch.dtype, *, reach: int | None = None
    ) -> None:
        """Let a bias build its tables for ``dtype`` (and float32, FlexAttention's score dtype)
        before ``bias_at`` is traced or checkpointed. ``reach``: the call reads distances
        ``|q - k| < reach`` only (known at default positions)."""
        if self.bias is not None:
            for each in {dtype, torch.float32}:
                self.bias.prepare_bias(device, each, reach=reach)

    def distance_only(self, largest_query_position: int) -> bool:
        """True when the bias is a function of ``q - k`` alone for queries at positions up to
        ``largest_query_position``."""
        return self.bias is not None and self.bias.distance_only_up_to(largest_query_position)

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """The encoding's own value checks of positions (whole numbers, table ranges)."""
        if self.encoding is not None:
            self.encoding.validate_positions(positions, name)


# what each place's method was called, for the message to a module that has the method but
# not the base class (an encoding written for the method names alone)
_PLACES: dict[str, str] = {
    "position_embedding": "AdditiveEncoding",
    "embed_tokens": "TokenEmbedding",
    "rotate_qk": "RotaryEncoding",
    "rotate_values": "ValueRotation",
    "derotate_output": "ValueRotation",
    "segments": "SegmentEncoding",
    "bias_at": "BiasEncoding",
    "logit_term": "ContextualEncoding",
    "transform_scores": "ScoresReader",
    "map_scores": "ScoreMap",
    "sink_logits": "SinkLogits",
    "token_state": "TokenStateEncoding",
    "attention_weights": "AttentionWeights",
    "transform_positions": "PositionTransform",
    "token_transforms": "TokenTransformEncoding",
    "token_phases": "TokenPhaseEncoding",
}


def _undeclared(encoding: nn.Module) -> list[str]:
    defined = {name for cls in type(encoding).__mro__ for name in vars(cls)}
    return sorted({base for method, base in _PLACES.items() if method in defined})


def _own_places(encoding: PositionalEncoding) -> dict[str, object]:
    """The places ``encoding`` itself acts at, by its classes."""
    places: dict[str, object] = {}
    for name, protocol in (
        ("additive", AdditiveEncoding),
        ("token_embedding", TokenEmbedding),
        ("rotary", RotaryEncoding),
        ("value_rotation", ValueRotation),
        ("segments", SegmentEncoding),
        ("bias", BiasEncoding),
        ("contextual", ContextualEncoding),
        ("scores", ScoresReader),
        ("score_map", ScoreMap),
        ("sinks", SinkLogits),
        ("token_state", TokenStateEncoding),
        ("weights", AttentionWeights),
        ("position_transform", PositionTransform),
        ("token_transform", TokenTransformEncoding),
        ("token_phases", TokenPhaseEncoding),
    ):
        if isinstance(encoding, protocol):
            places[name] = encoding
    return places


def hooks_of(encoding: nn.Module | None) -> Hooks:
    """The :class:`Hooks` of ``encoding`` (None gives none).

    Raises:
        ValueError: naming ``pos``: not a :class:`~posenc.encoding.base.PositionalEncoding`,
            one that acts nowhere (and is not :class:`~posenc.encoding.base.NoPE`), a bias
            without an integer ``num_heads``, or a ``num_axes`` that is not a positive integer.
    """
    if encoding is None:
        return Hooks(None)
    name = type(encoding).__name__
    if not isinstance(encoding, PositionalEncoding):
        bases = _undeclared(encoding) if isinstance(encoding, nn.Module) else []
        hint = (
            f": it has the methods of {', '.join(bases)} but does not derive from "
            f"{'them' if len(bases) > 1 else 'it'} (posenc.encoding.protocols; see "
            "docs/architecture.md)"
            if bases
            else ""
        )
        raise ValueError(
            f"pos must be a positional encoding (posenc.encoding.PositionalEncoding) or None, "
            f"got {name}{hint}"
        )
    num_axes = encoding.num_axes
    if isinstance(num_axes, bool) or not isinstance(num_axes, int) or num_axes < 1:
        raise ValueError(f"{name}.num_axes must be an int >= 1, got {num_axes!r}")
    places: dict[str, object] = {}
    if isinstance(encoding, EncodingWrapper):
        inner = hooks_of(encoding.encoding)
        places = {
            field: getattr(inner, field)
            for field in Hooks.__dataclass_fields__
            if field not in ("encoding", "num_axes") and getattr(inner, field) is not None
        }
    places.update(_own_places(encoding))
    hooks = Hooks(encoding, num_axes=num_axes, **places)  # type: ignore[arg-type]
    if hooks.value_rotation is not None and (
        hooks.segments is not None or hooks.value_rotation.depends_on_length
    ):
        why = (
            "a segment method"
            if hooks.segments is not None
            else "frequencies that follow the length"
        )
        raise ValueError(
            f"pos: {name} rotates values with the keys' rotation (ValueRotation), which needs "
            f"values stored rotated once; {why} rotates keys when they are read instead"
        )
    if hooks.bias is not None and not isinstance(hooks.bias.num_heads, int):
        raise ValueError(f"{name} is a bias but has no integer num_heads")
    acting = (hooks.additive, hooks.token_embedding, hooks.rotary, hooks.token_phases)
    acts = any(place is not None for place in acting) or hooks.logit_terms
    if not (acts or hooks.position_transform or isinstance(encoding, NoPE)):
        raise ValueError(
            f"pos must be a positional encoding: {name} derives from none of the protocols of "
            "posenc.encoding.protocols (AdditiveEncoding, RotaryEncoding, BiasEncoding, "
            "ContextualEncoding, ScoresReader, ...); pass None or posenc.encoding.NoPE for "
            "no encoding"
        )
    return hooks

"""The contract between an encoding and attention (docs/architecture.md).

* :mod:`~posenc.encoding.base`: :class:`PositionalEncoding`, the base of every encoding, its
  typed defaults, :class:`NoPE` and :class:`EncodingWrapper`;
* :mod:`~posenc.encoding.protocols`: one base class per place an encoding acts (additive,
  rotary, segments, pointwise bias, contextual term, scores reader, softmax transforms; the
  token-level places, token state, position transform and token transform, in
  :mod:`~posenc.encoding.token_places`; token phases, in :mod:`~posenc.encoding.token_phases`);
* :mod:`~posenc.encoding.kinds`: structures an encoding may declare for attention's plans;
* :mod:`~posenc.encoding.resolve`: :func:`hooks_of`, the one resolved description attention
  reads;
* :mod:`~posenc.registry`: encodings by name (``posenc list``).
"""

from __future__ import annotations

from posenc.encoding.base import (
    EncodingWrapper,
    NoPE,
    PositionalEncoding,
    empty_linear,
    state_device,
)
from posenc.encoding.kinds import (
    AdditiveScores,
    ClippedRelative,
    DisentangledRelative,
    LinearBias,
    SinusoidRelative,
)
from posenc.encoding.protocols import (
    AdditiveEncoding,
    AttentionWeights,
    BiasEncoding,
    ContextualEncoding,
    RotaryEncoding,
    ScoreMap,
    ScoresReader,
    SegmentEncoding,
    SinkLogits,
    TokenEmbedding,
    ValueRotation,
    check_rotary_input,
    materialize_bias,
)
from posenc.encoding.resolve import Hooks, hooks_of
from posenc.encoding.token_phases import TokenPhaseEncoding
from posenc.encoding.token_places import PositionTransform, TokenStateEncoding

__all__ = [
    "AdditiveEncoding",
    "AdditiveScores",
    "AttentionWeights",
    "BiasEncoding",
    "ClippedRelative",
    "ContextualEncoding",
    "DisentangledRelative",
    "EncodingWrapper",
    "Hooks",
    "LinearBias",
    "NoPE",
    "PositionTransform",
    "PositionalEncoding",
    "RotaryEncoding",
    "ScoreMap",
    "ScoresReader",
    "SegmentEncoding",
    "SinkLogits",
    "SinusoidRelative",
    "TokenEmbedding",
    "TokenPhaseEncoding",
    "TokenStateEncoding",
    "ValueRotation",
    "check_rotary_input",
    "empty_linear",
    "hooks_of",
    "materialize_bias",
    "state_device",
]

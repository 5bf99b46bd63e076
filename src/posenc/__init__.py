"""posenc: positional encodings for transformers.

The public API, by where an encoding enters attention:

* additive (``x + P(pos)``): :class:`SinusoidalEncoding`, :class:`ScaledSinusoidalEncoding`,
  :class:`LearnedPositionalEmbedding`;
* rotary (rotate q and k): :class:`RotaryEmbedding`, :func:`permute_rotary_weight`;
* bias (add to logits): :class:`AlibiBias`, :class:`T5RelativeBias`;
* contextual (logit terms that read q or k): :class:`ShawRelative`,
  :class:`TransformerXLRelative`;
* none: :class:`NoPE`.

Attention and models: :class:`Attention`, :class:`KVCache`, :class:`DecoderLM`,
:class:`EncoderClassifier`, :class:`ModelConfig`, :func:`build_encoding`.
"""

from posenc.additive import (
    LearnedPositionalEmbedding,
    ScaledSinusoidalEncoding,
    SinusoidalEncoding,
    sinusoidal_encoding,
)
from posenc.attention import Attention, KVCache, attend
from posenc.base import (
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    NoPE,
    PositionalEncoding,
    RotaryEncoding,
)
from posenc.bias import AlibiBias, ShawRelative, T5RelativeBias, TransformerXLRelative
from posenc.model import DecoderLM, EncoderClassifier, ModelConfig
from posenc.positions import (
    document_mask,
    packed_positions,
    positions_from_length,
    positions_from_padding_mask,
)
from posenc.registry import ModelDims, build_encoding, list_encodings
from posenc.rotary import RotaryEmbedding, apply_rotary, permute_rotary_weight

__version__ = "0.1.0"

__all__ = [
    "AdditiveEncoding",
    "AlibiBias",
    "Attention",
    "BiasEncoding",
    "ContextualEncoding",
    "DecoderLM",
    "EncoderClassifier",
    "KVCache",
    "LearnedPositionalEmbedding",
    "ModelConfig",
    "ModelDims",
    "NoPE",
    "PositionalEncoding",
    "RotaryEmbedding",
    "RotaryEncoding",
    "ScaledSinusoidalEncoding",
    "ShawRelative",
    "SinusoidalEncoding",
    "T5RelativeBias",
    "TransformerXLRelative",
    "apply_rotary",
    "attend",
    "build_encoding",
    "document_mask",
    "list_encodings",
    "packed_positions",
    "permute_rotary_weight",
    "positions_from_length",
    "positions_from_padding_mask",
    "sinusoidal_encoding",
]

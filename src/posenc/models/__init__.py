"""Models that take any positional encoding by name: a decoder LM and encoders."""

from __future__ import annotations

from posenc.models.config import LayerAttention, ModelConfig
from posenc.models.layout import LayerEncodings, check_tokens, layer_encodings
from posenc.models.transformer import Block, DecoderLM, EncoderClassifier

__all__ = [
    "Block",
    "DecoderLM",
    "EncoderClassifier",
    "LayerAttention",
    "LayerEncodings",
    "ModelConfig",
    "check_tokens",
    "layer_encodings",
]

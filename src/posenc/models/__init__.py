"""Models that take any positional encoding by name: a decoder LM and encoders, their
per-layer schedules (:mod:`posenc.models.schedules`) and attention probes."""

from __future__ import annotations

from posenc.models.block import Block
from posenc.models.config import LayerAttention, Mixer, ModelConfig
from posenc.models.layout import LayerEncodings, check_tokens, layer_encodings
from posenc.models.probes import first_token_attention_mass
from posenc.models.schedules import hybrid_mixers, nope_every, rnope_swa, swan
from posenc.models.transformer import DecoderLM, EncoderClassifier

__all__ = [
    "Block",
    "DecoderLM",
    "EncoderClassifier",
    "LayerAttention",
    "LayerEncodings",
    "Mixer",
    "ModelConfig",
    "check_tokens",
    "first_token_attention_mass",
    "hybrid_mixers",
    "layer_encodings",
    "nope_every",
    "rnope_swa",
    "swan",
]

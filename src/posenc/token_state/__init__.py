"""Encodings read from the layer's input: per-token states giving a bias (FoX) and per-token
transforms accumulated between key and query (PaTH)."""

from __future__ import annotations

from posenc.token_state.fox import ForgettingGate, fox_bias, fox_log_gates
from posenc.token_state.path import (
    PathTransform,
    path_attention,
    path_attention_reference,
    path_carried_keys,
    path_carry_keys,
    path_logits_reference,
)
from posenc.token_state.token_bias import TokenBias, check_token_bias_fits

__all__ = [
    "ForgettingGate",
    "PathTransform",
    "TokenBias",
    "check_token_bias_fits",
    "fox_bias",
    "fox_log_gates",
    "path_attention",
    "path_attention_reference",
    "path_carried_keys",
    "path_carry_keys",
    "path_logits_reference",
]

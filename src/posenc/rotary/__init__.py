"""Rotary position embeddings: rotate q and k by their positions (RoPE and its layouts)."""

from __future__ import annotations

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.layouts import permute_rotary_weight, rotary_channel_permutation
from posenc.rotary.rope import Layout, RotaryEmbedding, apply_rotary, rope_angles, rope_cos_sin

__all__ = [
    "Layout",
    "RotaryEmbedding",
    "apply_rotary",
    "permute_rotary_weight",
    "rope_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotary_channel_permutation",
]

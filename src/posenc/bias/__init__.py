"""Encodings that act on the attention logits.

* Biases (:class:`~posenc.encoding.protocols.BiasEncoding`, ``bias(q_pos, k_pos)``):
  :class:`AlibiBias`, :class:`T5RelativeBias`, :class:`KerpleBias`, :class:`SandwichBias`,
  :class:`FireBias`, :class:`DynamicPositionBias`, :class:`GrapeAdditiveBias`.
* Contextual terms (:class:`~posenc.encoding.protocols.ContextualEncoding`, read q or k as well):
  :class:`ShawRelative`, :class:`TransformerXLRelative`, :class:`DebertaRelative`.
* Scores readers (``transform_scores``: complete rows of all heads' scores): :class:`CoPE`,
  :class:`DapeBias`.
* Token-state biases (``token_state``: read the layer's hidden states): :class:`ForgettingGate`
  (FoX).
* Wrappers around any encoding that change the softmax: :class:`SoftCap` (Gemma 2's tanh
  soft-capping, a score map) and :class:`LearnedSinks` (gpt-oss's per-head sink logits).
"""

from __future__ import annotations

from typing import Any

from posenc._moved import moved_name
from posenc.bias.alibi import AlibiBias, AlibiMode, alibi_bias, alibi_slopes, relative_distances
from posenc.bias.dynamic import DynamicMode, DynamicPositionBias, dynamic_distance_feature
from posenc.bias.fire import FireBias, fire_log, fire_normalized_distance
from posenc.bias.grape_additive import GrapeAdditiveBias, grape_additive_logits
from posenc.bias.kerple import KerpleBias, KerpleKernel, kerple_bias
from posenc.bias.sandwich import (
    SandwichBias,
    sandwich_bias,
    sandwich_frequencies,
    sandwich_head_scales,
)
from posenc.bias.t5 import T5RelativeBias, check_t5_buckets, t5_bucket

__all__ = [
    "AlibiBias",
    "AlibiMode",
    "DynamicMode",
    "DynamicPositionBias",
    "FireBias",
    "GrapeAdditiveBias",
    "KerpleBias",
    "KerpleKernel",
    "SandwichBias",
    "T5RelativeBias",
    "alibi_bias",
    "alibi_slopes",
    "check_t5_buckets",
    "dynamic_distance_feature",
    "fire_log",
    "fire_normalized_distance",
    "grape_additive_logits",
    "kerple_bias",
    "relative_distances",
    "sandwich_bias",
    "sandwich_frequencies",
    "sandwich_head_scales",
    "t5_bucket",
]


def __getattr__(name: str) -> Any:
    """Names that moved to :mod:`posenc.contextual`, :mod:`posenc.scores`, :mod:`posenc.softmax`
    and :mod:`posenc.token_state` still resolve here, with a ``DeprecationWarning``."""
    return moved_name(__name__, name)

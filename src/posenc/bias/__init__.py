"""Encodings that act on the attention logits.

* Biases (:class:`~posenc.base.BiasEncoding`, ``bias(q_pos, k_pos)``): :class:`AlibiBias`,
  :class:`T5RelativeBias`, :class:`KerpleBias`, :class:`SandwichBias`, :class:`FireBias`,
  :class:`DynamicPositionBias`.
* Contextual terms (:class:`~posenc.base.ContextualEncoding`, read q or k as well):
  :class:`ShawRelative`, :class:`TransformerXLRelative`, :class:`DebertaRelative`.
* Scores readers (``transform_scores``: complete rows of all heads' scores): :class:`CoPE`,
  :class:`DapeBias`.
* Token-state biases (``token_state``: read the layer's hidden states): :class:`ForgettingGate`
  (FoX).
* Wrappers around any encoding that change the softmax: :class:`SoftCap` (Gemma 2's tanh
  soft-capping, a score map) and :class:`LearnedSinks` (gpt-oss's per-head sink logits).
"""

from __future__ import annotations

from posenc.bias.alibi import AlibiBias, AlibiMode, alibi_bias, alibi_slopes, relative_distances
from posenc.bias.cope import CoPE, CoPEInterpolation, cope_bias, cope_positions
from posenc.bias.dape import DapeBias, dape_scores
from posenc.bias.deberta import (
    DebertaRelative,
    DebertaRelativeEmbedding,
    deberta_index,
    deberta_log_bucket,
    disentangled_logits,
)
from posenc.bias.dynamic import DynamicMode, DynamicPositionBias, dynamic_distance_feature
from posenc.bias.fire import FireBias, fire_log, fire_normalized_distance
from posenc.bias.fox import ForgettingGate, fox_bias, fox_log_gates
from posenc.bias.kerple import KerpleBias, KerpleKernel, kerple_bias
from posenc.bias.sandwich import (
    SandwichBias,
    sandwich_bias,
    sandwich_frequencies,
    sandwich_head_scales,
)
from posenc.bias.shaw import ShawRelative, shaw_index, shaw_logits, shaw_values
from posenc.bias.sinks import LearnedSinks
from posenc.bias.softcap import GEMMA2_ATTN_SOFTCAP, SoftCap, tanh_softcap
from posenc.bias.t5 import T5RelativeBias, check_t5_buckets, t5_bucket
from posenc.bias.xl import TransformerXLRelative, relative_shift, xl_sinusoid

__all__ = [
    "GEMMA2_ATTN_SOFTCAP",
    "AlibiBias",
    "AlibiMode",
    "CoPE",
    "CoPEInterpolation",
    "DapeBias",
    "DebertaRelative",
    "DebertaRelativeEmbedding",
    "DynamicMode",
    "DynamicPositionBias",
    "FireBias",
    "ForgettingGate",
    "KerpleBias",
    "KerpleKernel",
    "LearnedSinks",
    "SandwichBias",
    "ShawRelative",
    "SoftCap",
    "T5RelativeBias",
    "TransformerXLRelative",
    "alibi_bias",
    "alibi_slopes",
    "check_t5_buckets",
    "cope_bias",
    "cope_positions",
    "dape_scores",
    "deberta_index",
    "deberta_log_bucket",
    "disentangled_logits",
    "dynamic_distance_feature",
    "fire_log",
    "fire_normalized_distance",
    "fox_bias",
    "fox_log_gates",
    "kerple_bias",
    "relative_distances",
    "relative_shift",
    "sandwich_bias",
    "sandwich_frequencies",
    "sandwich_head_scales",
    "shaw_index",
    "shaw_logits",
    "shaw_values",
    "t5_bucket",
    "tanh_softcap",
    "xl_sinusoid",
]

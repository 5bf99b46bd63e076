"""Encodings that act on the attention logits.

* Biases (:class:`~posenc.base.BiasEncoding`, ``bias(q_pos, k_pos)``): :class:`AlibiBias`,
  :class:`T5RelativeBias`.
* Contextual terms (:class:`~posenc.base.ContextualEncoding`, read q or k as well):
  :class:`ShawRelative`, :class:`TransformerXLRelative`.
"""

from __future__ import annotations

from posenc.bias.alibi import AlibiBias, AlibiMode, alibi_bias, alibi_slopes, relative_distances
from posenc.bias.shaw import ShawRelative, shaw_index, shaw_logits, shaw_values
from posenc.bias.t5 import T5RelativeBias, check_t5_buckets, t5_bucket
from posenc.bias.xl import TransformerXLRelative, relative_shift, xl_sinusoid

__all__ = [
    "AlibiBias",
    "AlibiMode",
    "ShawRelative",
    "T5RelativeBias",
    "TransformerXLRelative",
    "alibi_bias",
    "alibi_slopes",
    "check_t5_buckets",
    "relative_distances",
    "relative_shift",
    "shaw_index",
    "shaw_logits",
    "shaw_values",
    "t5_bucket",
    "xl_sinusoid",
]

"""Contextual terms: logit terms that read q or k as well as positions (Shaw,
Transformer-XL, DeBERTa, gated additive GRAPE).
"""

from __future__ import annotations

from posenc.contextual.deberta import (
    DebertaRelative,
    DebertaRelativeEmbedding,
    PositionTerm,
    check_deberta_span,
    deberta_index,
    deberta_log_bucket,
    disentangled_logits,
)
from posenc.contextual.grape_gated import GrapeGate, GrapeGatedBias, grape_gated_logits
from posenc.contextual.shaw import (
    ShawRelative,
    check_head_tensor,
    shaw_index,
    shaw_logits,
    shaw_values,
)
from posenc.contextual.xl import TransformerXLRelative, relative_shift, xl_sinusoid

__all__ = [
    "DebertaRelative",
    "DebertaRelativeEmbedding",
    "GrapeGate",
    "GrapeGatedBias",
    "PositionTerm",
    "ShawRelative",
    "TransformerXLRelative",
    "check_deberta_span",
    "check_head_tensor",
    "deberta_index",
    "deberta_log_bucket",
    "disentangled_logits",
    "grape_gated_logits",
    "relative_shift",
    "shaw_index",
    "shaw_logits",
    "shaw_values",
    "xl_sinusoid",
]

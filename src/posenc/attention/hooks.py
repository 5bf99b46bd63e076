"""Which hooks an encoding implements, found by duck typing (see :mod:`posenc.encoding.base`).

:func:`hooks_of` is the only place that looks at an encoding's methods; attention, the
model and the backends read the resulting :class:`Hooks`. A new kind of method adds a hook
here and its use in the backends, nothing else.

Besides the hooks listed in :mod:`posenc.encoding.base`, an encoding that reads the token ids
(complex-order embeddings) implements the **token-embedding** hook ``embed_tokens(tokens,
positions) -> (..., seq, dim)``: the model uses it in place of its own token embedding, with
the validated positions of the new tokens; ``vocab_size`` and ``dim``, when the encoding has
them, are checked against the model's at construction.

Two hooks change the softmax rather than add a position term, for wrappers around any
encoding (:mod:`posenc.softmax.softcap`, :mod:`posenc.softmax.sinks`):

* **score map** ``map_scores(scores) -> scores``: an elementwise function of each scaled
  (+ bias) score, applied before the mask (Gemma 2's tanh soft-capping); FlexAttention takes
  it inside its ``score_mod``.
* **sink logits** ``sink_logits(dtype, device) -> (heads,)``: one logit per head joins every
  row's softmax with no value (gpt-oss's learned sinks); the sink's probability is dropped.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.encoding.base import NoPE, materialize_bias

__all__ = ["Hooks", "accepts_keyword", "hooks_of"]


def _has(encoding: object, name: str) -> bool:
    return callable(getattr(encoding, name, None))


def accepts_keyword(method: Any, keyword: str) -> bool:
    """True when ``method`` takes the keyword argument ``keyword`` (optional hook features:
    an encoding written before the keyword existed keeps working without it)."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return keyword in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


@dataclass(frozen=True)
class Hooks:
    """The hooks of one encoding (None: no encoding)."""

    encoding: Any
    additive: bool = False
    token_embedding: bool = False
    rotary: bool = False
    rotary_inplace: bool = False
    bias: bool = False
    contextual: bool = False
    value_term: bool = False
    scores: bool = False
    score_map: bool = False
    sinks: bool = False
    token_bias: bool = False
    weights: bool = False
    transforms_positions: bool = False
    segments: bool = False
    length_dependent: bool = False
    per_query_lengths: bool = False
    num_axes: int = 1

    @property
    def logit_terms(self) -> bool:
        """True when something is added to (or reads) the logits: a bias, a contextual term,
        a scores reader, a pointwise score map or sink logits; without one, attention is
        plain SDPA."""
        return (
            self.bias
            or self.contextual
            or self.scores
            or self.score_map
            or self.sinks
            or self.token_bias  # FoX: a bias from per-token states (token_bias.py)
            or self.weights  # stick-breaking: weights in place of the softmax
        )

    @property
    def needs_probabilities(self) -> bool:
        """True when the softmax must be explicit (a value term, a scores reader, a score
        map or sink logits)."""
        return self.value_term or self.scores or self.score_map or self.sinks

    def scale(self, head_dim: int) -> float:
        """The logit scale: the encoding's ``logit_scale(head_dim)`` or ``head_dim ** -0.5``."""
        if _has(self.encoding, "logit_scale"):
            return float(self.encoding.logit_scale(head_dim))
        return 1.0 / math.sqrt(head_dim)

    def materialized_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """The bias ``(heads, q, k)`` or ``(batch, heads, q, k)`` from ``bias_at``, unchecked."""
        return materialize_bias(self.encoding, q_pos, k_pos, dtype)

    def prepare(
        self, device: torch.device, dtype: torch.dtype, *, reach: int | None = None
    ) -> None:
        """Let a bias build its tables for ``dtype`` (and float32, FlexAttention's score dtype)
        before ``bias_at`` is traced or checkpointed. ``reach``: the call reads distances
        ``|q − k| < reach`` only (known at default positions), for an encoding whose
        ``prepare_bias`` takes it (the dynamic bias evaluates its MLP on those alone)."""
        if self.bias and _has(self.encoding, "prepare_bias"):
            prepare = self.encoding.prepare_bias
            extra = (
                {"reach": reach} if reach is not None and accepts_keyword(prepare, "reach") else {}
            )
            for each in {dtype, torch.float32}:
                prepare(device, each, **extra)

    def distance_only(self, largest_query_position: int) -> bool:
        """True when the bias is a function of ``q − k`` alone for queries at positions up to
        ``largest_query_position`` (``depends_on_distance_only``, or the encoding's
        ``distance_only_up_to(position)``: FIRE below its threshold)."""
        encoding = self.encoding
        if not self.bias:
            return False
        if getattr(encoding, "depends_on_distance_only", False):
            return True
        up_to = getattr(encoding, "distance_only_up_to", None)
        return callable(up_to) and bool(up_to(largest_query_position))

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """The encoding's own value checks of positions (whole numbers, table ranges)."""
        if _has(self.encoding, "validate_positions"):
            self.encoding.validate_positions(positions, name)


def hooks_of(encoding: nn.Module | None) -> Hooks:
    """The :class:`Hooks` of ``encoding`` (None gives none).

    Raises:
        ValueError: if ``encoding`` is not a module, implements no hook (and is not
            :class:`~posenc.encoding.base.NoPE`), declares a bias without ``num_heads``, or has a
            ``num_axes`` that is not a positive integer.
    """
    if encoding is None:
        return Hooks(None)
    if not isinstance(encoding, nn.Module):
        raise ValueError(
            f"pos must be a positional encoding module or None, got {type(encoding).__name__}"
        )
    bias = _has(encoding, "bias_at")
    if bias and not isinstance(getattr(encoding, "num_heads", None), int):
        raise ValueError(f"{type(encoding).__name__} has bias_at but no integer num_heads")
    num_axes = getattr(encoding, "num_axes", 1)
    if isinstance(num_axes, bool) or not isinstance(num_axes, int) or num_axes < 1:
        raise ValueError(
            f"{type(encoding).__name__}.num_axes must be an int >= 1, got {num_axes!r}"
        )
    contextual = _has(encoding, "logit_term")
    rotary = _has(encoding, "rotate_qk") and _has(encoding, "rotary_tables")
    hooks = Hooks(
        encoding,
        additive=_has(encoding, "position_embedding"),
        token_embedding=_has(encoding, "embed_tokens"),
        rotary=rotary,
        rotary_inplace=rotary and accepts_keyword(encoding.rotate_qk, "inplace"),
        segments=rotary and _has(encoding, "segments"),
        length_dependent=rotary and bool(getattr(encoding, "depends_on_length", False)),
        per_query_lengths=rotary
        and bool(getattr(encoding, "depends_on_length", False))
        and getattr(encoding, "length_rule", "forward") == "query",
        bias=bias,
        contextual=contextual,
        value_term=contextual and bool(getattr(encoding, "has_value_term", False)),
        scores=_has(encoding, "transform_scores"),
        score_map=_has(encoding, "map_scores"),
        sinks=_has(encoding, "sink_logits"),
        token_bias=_has(encoding, "token_state") and _has(encoding, "state_bias"),
        weights=_has(encoding, "attention_weights"),
        transforms_positions=_has(encoding, "transform_positions"),
        num_axes=num_axes,
    )
    acts = hooks.additive or hooks.token_embedding or hooks.rotary or hooks.logit_terms
    if not (acts or isinstance(encoding, NoPE)):
        raise ValueError(
            f"pos must be a positional encoding: {type(encoding).__name__} implements none of "
            "the hooks (position_embedding, embed_tokens, rotary_tables + rotate_qk, bias_at, "
            "logit_term, transform_scores, token_state + state_bias, attention_weights); "
            "pass None or posenc.encoding.base.NoPE for no encoding"
        )
    return hooks

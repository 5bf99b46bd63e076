"""The base of wrappers that change attention's softmax around any encoding.

Soft-capping (:mod:`posenc.softmax.softcap`) and learned sinks (:mod:`posenc.softmax.sinks`) are
not positional encodings: a model has them *besides* its encoding (Gemma 2 caps RoPE's
logits, gpt-oss adds sinks to RoPE's). Each is a module that holds the encoding, takes its
hooks by delegation (its ``rotate_qk``, ``bias_at``, ``position_embedding`` …) and adds one
hook of its own (``map_scores`` or ``sink_logits``, :mod:`posenc.encoding.resolve`), so it
composes with any rotary, additive, bias, contextual or scores-reader encoding, and with
the other wrapper.

Segment methods are refused: they rotate and merge softmaxes of their own per segment
(:mod:`posenc.attention.segmented`), which these hooks do not enter.
"""

from __future__ import annotations

import copy
from typing import Any

from posenc.encoding.base import EncodingWrapper, NoPE, PositionalEncoding
from posenc.encoding.resolve import hooks_of

__all__ = ["SoftmaxWrapper"]


class SoftmaxWrapper(EncodingWrapper):
    """An encoding with one more attention hook (a subclass defines it).

    Args:
        encoding: the wrapped encoding (None: :class:`~posenc.encoding.base.NoPE`).
        hook: the place the subclass acts (a field of :class:`~posenc.encoding.resolve.Hooks`:
            ``"score_map"``, ``"sinks"``); an ``encoding`` that already acts there is refused.

    Raises:
        ValueError: naming ``encoding``: not an encoding, a segment method (or a rotary whose
            frequencies follow each query's length), or one that already has ``hook``.
    """

    def __init__(self, encoding: PositionalEncoding | None, hook: str) -> None:
        super().__init__()
        inner = NoPE() if encoding is None else encoding
        if not isinstance(inner, PositionalEncoding):
            raise ValueError(
                f"encoding must be a positional encoding or None, got {type(inner).__name__}"
            )
        hooks = hooks_of(inner)
        if hooks.segments or hooks.per_query_lengths:
            raise ValueError(
                f"encoding: {type(inner).__name__} splits attention into segments with "
                f"softmaxes merged its own way; {type(self).__name__} cannot enter them"
            )
        if getattr(hooks, hook) is not None:
            method = {"score_map": "map_scores", "sinks": "sink_logits"}.get(hook, hook)
            raise ValueError(f"encoding: {type(inner).__name__} already has {method}")
        self.encoding = inner
        #: False for a later layer's wrapper around a shared encoding: the first layer's
        #: wrapper initializes it (reset_parameters draws as the constructors drew).
        self.owns_encoding = True

    def rewrap(self, encoding: PositionalEncoding) -> SoftmaxWrapper:
        """A wrapper like this one (same settings, fresh parameters) around ``encoding``."""
        raise NotImplementedError

    def new_layer(self) -> SoftmaxWrapper:
        """The next layer's wrapper (the model calls it unless every layer shares this one):
        around the same encoding when the method shares it across layers (RoPE, T5), else
        around the encoding's own ``new_layer()`` or a freshly initialized copy."""
        inner = self.encoding
        shared = inner.shared_across_layers
        if not shared:
            made = inner.new_layer()
            if made is not None:
                inner = made
            else:
                inner = copy.deepcopy(inner)
                inner.reset_parameters()
        wrapper = self.rewrap(inner)
        wrapper.owns_encoding = not shared
        return wrapper

    def reset_parameters(self) -> None:
        """Re-draw the wrapped encoding's parameters (when this wrapper owns it), then this
        wrapper's own, in the constructors' order."""
        if self.owns_encoding:
            self.encoding.reset_parameters()
        self.reset_own_parameters()

    def reset_own_parameters(self) -> None:
        """Re-draw this wrapper's own parameters (none by default)."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped encoding's forward."""
        return self.encoding(*args, **kwargs)

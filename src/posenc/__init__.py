"""posenc: positional encodings for transformers.

The public API, by where an encoding enters attention:

* additive (``x + P(pos)``): :class:`SinusoidalEncoding`, :class:`ScaledSinusoidalEncoding`,
  :class:`LearnedPositionalEmbedding`;
* rotary (rotate q and k): :class:`RotaryEmbedding`, :func:`permute_rotary_weight`;
* bias (add to logits): :class:`AlibiBias`, :class:`T5RelativeBias`;
* contextual (logit terms that read q or k): :class:`ShawRelative`,
  :class:`TransformerXLRelative`;
* none: :class:`NoPE`.

Attention and models: :class:`Attention`, :class:`KVCache`, :class:`DecoderLM`,
:class:`EncoderClassifier`, :class:`ModelConfig`, :func:`build_encoding`.

The names load on first use (PEP 562): ``import posenc`` does not import torch, so that the
``posenc`` command starts in a fraction of a second; ``from posenc import X`` is unchanged.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from posenc import _moved

_moved.install()  # old module paths keep working, with a DeprecationWarning

if TYPE_CHECKING:
    from posenc.additive import (
        LearnedPositionalEmbedding,
        ScaledSinusoidalEncoding,
        SinusoidalEncoding,
        sinusoidal_encoding,
    )
    from posenc.attention import Attention, KVCache, attend
    from posenc.bias import AlibiBias, T5RelativeBias
    from posenc.contextual import ShawRelative, TransformerXLRelative
    from posenc.encoding.base import NoPE, PositionalEncoding
    from posenc.encoding.protocols import (
        AdditiveEncoding,
        BiasEncoding,
        ContextualEncoding,
        RotaryEncoding,
    )
    from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
    from posenc.positions import (
        document_mask,
        packed_positions,
        positions_from_length,
        positions_from_padding_mask,
    )
    from posenc.registry import ModelDims, build_encoding, list_encodings
    from posenc.rotary import RotaryEmbedding, apply_rotary, permute_rotary_weight

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "LearnedPositionalEmbedding": "posenc.additive",
    "ScaledSinusoidalEncoding": "posenc.additive",
    "SinusoidalEncoding": "posenc.additive",
    "sinusoidal_encoding": "posenc.additive",
    "Attention": "posenc.attention",
    "KVCache": "posenc.attention",
    "attend": "posenc.attention",
    "AdditiveEncoding": "posenc.encoding",
    "BiasEncoding": "posenc.encoding",
    "ContextualEncoding": "posenc.encoding",
    "NoPE": "posenc.encoding",
    "PositionalEncoding": "posenc.encoding",
    "RotaryEncoding": "posenc.encoding",
    "AlibiBias": "posenc.bias",
    "ShawRelative": "posenc.bias",
    "T5RelativeBias": "posenc.bias",
    "TransformerXLRelative": "posenc.bias",
    "DecoderLM": "posenc.models",
    "EncoderClassifier": "posenc.models",
    "ModelConfig": "posenc.models",
    "document_mask": "posenc.positions",
    "packed_positions": "posenc.positions",
    "positions_from_length": "posenc.positions",
    "positions_from_padding_mask": "posenc.positions",
    "ModelDims": "posenc.registry",
    "build_encoding": "posenc.registry",
    "list_encodings": "posenc.registry",
    "RotaryEmbedding": "posenc.rotary",
    "apply_rotary": "posenc.rotary",
    "permute_rotary_weight": "posenc.rotary",
}

__all__ = [
    "AdditiveEncoding",
    "AlibiBias",
    "Attention",
    "BiasEncoding",
    "ContextualEncoding",
    "DecoderLM",
    "EncoderClassifier",
    "KVCache",
    "LearnedPositionalEmbedding",
    "ModelConfig",
    "ModelDims",
    "NoPE",
    "PositionalEncoding",
    "RotaryEmbedding",
    "RotaryEncoding",
    "ScaledSinusoidalEncoding",
    "ShawRelative",
    "SinusoidalEncoding",
    "T5RelativeBias",
    "TransformerXLRelative",
    "apply_rotary",
    "attend",
    "build_encoding",
    "document_mask",
    "list_encodings",
    "packed_positions",
    "permute_rotary_weight",
    "positions_from_length",
    "positions_from_padding_mask",
    "sinusoidal_encoding",
]  # the keys of _EXPORTS (tests/test_imports.py checks)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (then cache the name here)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'posenc' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

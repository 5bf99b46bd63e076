"""The contract between an encoding and attention: base classes, protocols and the registry.

See docs/architecture.md.
"""

from __future__ import annotations

from posenc.encoding.base import (
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    EncodingWrapper,
    NoPE,
    PositionalEncoding,
    RotaryEncoding,
    check_rotary_input,
    empty_linear,
    materialize_bias,
    state_device,
)

__all__ = [
    "AdditiveEncoding",
    "BiasEncoding",
    "ContextualEncoding",
    "EncodingWrapper",
    "NoPE",
    "PositionalEncoding",
    "RotaryEncoding",
    "check_rotary_input",
    "empty_linear",
    "materialize_bias",
    "state_device",
]

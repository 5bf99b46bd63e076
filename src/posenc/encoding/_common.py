"""What the contract's modules share."""

from __future__ import annotations


def required(owner: object, method: str) -> NotImplementedError:
    """The error a protocol's method raises when the encoding deriving from it lacks it."""
    return NotImplementedError(f"{type(owner).__name__} must implement {method}")

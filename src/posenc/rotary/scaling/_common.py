"""Field checks the scalings of this package share (``ValueError`` naming the field).

Used only inside :mod:`posenc.rotary.scaling`: each scaling validates and normalises its
fields in ``__post_init__`` with these and with :mod:`posenc._validate`.
"""

from __future__ import annotations

import math

from posenc._validate import check_positive_float, check_positive_int

__all__ = ["at_least_one", "check_seq_len", "non_negative", "set_field"]


def at_least_one(name: str, value: object) -> float:
    """``value`` as a float, finite and ≥ 1 (a context-extension factor ``s``)."""
    value = check_positive_float(name, value)
    if value < 1.0:
        raise ValueError(f"{name} must be a finite number >= 1, got {value!r}")
    return value


def non_negative(name: str, value: object) -> float:
    """``value`` as a float, finite and ≥ 0 (a bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def check_seq_len(seq_len: object) -> int | None:
    """The ``seq_len`` of :meth:`~posenc.rotary.scaling.Scaling.inv_freq`: None or an int ≥ 1."""
    if seq_len is None:
        return None
    return check_positive_int("seq_len", seq_len)


def set_field(obj: object, name: str, value: object) -> None:
    """Normalise field ``name`` of a frozen dataclass in its ``__post_init__``."""
    object.__setattr__(obj, name, value)

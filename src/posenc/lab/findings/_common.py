"""What the findings' modules share: the rows they read and the names their sentences use."""

from __future__ import annotations

from typing import Any

__all__ = ["Row", "display_name", "seed_count"]

Row = dict[str, Any]


#: Display names of the encodings and methods in sentences.
_NAMES = {
    "nope": "NoPE",
    "sinusoidal": "sinusoidal",
    "learned": "learned",
    "rope": "RoPE",
    "alibi": "ALiBi",
    "t5": "T5",
    "pi": "PI",
    "linear": "PI",
    "ntk": "NTK-aware",
    "dynamic_ntk": "dynamic NTK",
    "yarn": "YaRN",
    "llama3": "Llama-3",
    "rerope": "ReRoPE",
}


def display_name(key: Any) -> str:
    """The name a sentence gives an encoding or method (``"rope"`` -> ``"RoPE"``)."""
    return _NAMES.get(str(key), str(key))


def seed_count(count: int) -> str:
    """``"1 seed"``, ``"3 seeds"``."""
    return f"{count} seed{'s' if count != 1 else ''}"

"""posenc's dict form of the scalings, ``{"type": "yarn", **fields}``, and the table of types.

Dicts appear only at the boundaries (registry, CLI, lab configs) and are converted once;
HF's ``rope_parameters`` go through :mod:`posenc.integrations.hf`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from posenc.rotary.scaling.base import Scaling
from posenc.rotary.scaling.linear import Linear
from posenc.rotary.scaling.ntk import DynamicNTK, NTKAware
from posenc.rotary.scaling.per_frequency import Llama3, LongRoPE, Proportional
from posenc.rotary.scaling.vllm import BasePower, FixedNTK, GeometricYaRN
from posenc.rotary.scaling.yarn import YaRN

__all__ = ["scaling_from_dict", "scaling_to_dict", "scaling_types"]


_TYPES: dict[str, type[Scaling]] = {
    cls.type_name: cls
    for cls in (
        Linear,
        NTKAware,
        DynamicNTK,
        YaRN,
        LongRoPE,
        Llama3,
        Proportional,
        FixedNTK,
        GeometricYaRN,
        BasePower,
    )
}


def scaling_types() -> dict[str, type[Scaling]]:
    """Every ``type`` :func:`scaling_from_dict` accepts (besides ``default``: none), with its
    class; a new scaling registered here reaches every user of this table (the lab's
    ``extend``)."""
    return dict(_TYPES)


def scaling_from_dict(d: Mapping[str, Any] | None) -> Scaling | None:
    """Build a scaling from posenc's dict form ``{"type": "yarn", **fields}``.

    The keys are the dataclass field names (e.g. ``attention_factor_override``, not HF's
    ``attention_factor``; HF configs go through :mod:`posenc.integrations.hf`). ``None``,
    ``{"type": "default"}`` and ``{"type": None}`` give None (plain RoPE). An unknown type, an
    unknown key or a missing required key raises ``ValueError`` naming it.

    Example::

        >>> scaling_from_dict({"type": "linear", "factor": 2})
        Linear(factor=2.0)
    """
    if d is None:
        return None
    if not isinstance(d, Mapping):
        raise ValueError(f"scaling must be a mapping with a 'type' key, got {type(d).__name__}")
    if "type" not in d:
        raise ValueError(f"scaling dict needs a 'type' key (one of default, {', '.join(_TYPES)})")
    kind = d["type"]
    rest = {key: value for key, value in d.items() if key != "type"}
    if kind in (None, "default"):
        if rest:
            raise ValueError(
                f"unknown key(s) {', '.join(map(str, rest))} for scaling type 'default'"
            )
        return None
    if kind not in _TYPES:
        raise ValueError(
            f"unknown scaling type {kind!r}; choose one of default, {', '.join(_TYPES)}"
        )
    cls = _TYPES[kind]
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(map(str, rest)) - names)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)} for scaling type {kind!r}; "
            f"allowed: {', '.join(sorted(names))}"
        )
    required = [
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    ]
    missing = [name for name in required if name not in rest]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)} for scaling type {kind!r}")
    return cls(**rest)


def scaling_to_dict(s: Scaling | None) -> dict[str, Any]:
    """posenc's dict form of a scaling (every field; tuples as lists); inverse of
    :func:`scaling_from_dict`. ``None`` gives ``{"type": "default"}``.

    Example::

        >>> scaling_to_dict(Linear(2.0))
        {'type': 'linear', 'factor': 2.0}
    """
    if s is None:
        return {"type": "default"}
    if not isinstance(s, Scaling) or type(s).type_name not in _TYPES:
        raise ValueError(f"s must be a Scaling or None, got {type(s).__name__}")
    out: dict[str, Any] = {"type": type(s).type_name}
    for f in fields(s):
        value = getattr(s, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out

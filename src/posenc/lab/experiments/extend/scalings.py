"""The extend experiment's methods: plain RoPE and every scaling the experiment can build.

A method is ``rope`` (no scaling) or a scaling type of posenc's conversion
:func:`posenc.rotary.scaling_from_dict` whose fields the experiment can fill from the
extension factor ``s`` and the training length ``T`` (:func:`scaling_for`); ``pi`` and
``dynamic_ntk`` are the papers' names of ``linear`` and ``dynamic`` (:data:`ALIASES`).
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from posenc.rotary import scaling as rotary_scaling

__all__ = ["ALIASES", "DEFAULT_METHODS", "METHODS", "ROPE", "scaling_for", "scaling_types"]

#: No scaling: the plain RoPE the base model is trained with.
ROPE = "rope"
#: The papers' names of two scaling types (PI; dynamic NTK): method -> the conversion's type.
ALIASES = {"pi": "linear", "dynamic_ntk": "dynamic"}
#: The documented setting, and the methods of the first results and of the seed claims.
DEFAULT_METHODS = (ROPE, "pi", "ntk", "dynamic_ntk", "yarn", "llama3")


def scaling_types() -> dict[str, type[rotary_scaling.Scaling]]:
    """The scaling types :func:`~posenc.rotary.scaling_from_dict` accepts, by type name."""
    return rotary_scaling.scaling_types()  # the conversion's own table: no second list here


def _known(factor: float, train_len: int) -> dict[str, Any]:
    """All the experiment knows about a scaling, under the conversion's keys."""
    return {
        "factor": float(factor),  # s
        "original_max_position_embeddings": train_len,  # L0 = T (YaRN, Llama-3, LongRoPE)
        "max_position_embeddings": train_len,  # L_max = T: dynamic NTK is plain RoPE up to T
        "low_freq_factor": 1.0,  # Llama-3.1's smoothing band
        "high_freq_factor": 4.0,
    }


def _missing(kind: str) -> list[str]:
    """Required fields of scaling type ``kind`` that :func:`_known` does not fill."""
    known = _known(1.0, 1)
    return [
        f.name
        for f in fields(scaling_types()[kind])
        if f.default is MISSING and f.default_factory is MISSING and f.name not in known
    ]


#: Every method name: ``rope``, the aliases, and each scaling type the experiment can fill.
METHODS = (ROPE, *ALIASES, *(kind for kind in scaling_types() if not _missing(kind)))


def scaling_for(method: str, factor: float, train_len: int) -> dict[str, Any] | None:
    """posenc's dict form of ``method``'s scaling at extension factor ``factor`` (None = rope).

    The dict holds the keys of :func:`_known` that the type's dataclass has; the model turns
    it into a :class:`~posenc.rotary.Scaling` through
    :func:`~posenc.rotary.scaling_from_dict`.

    Raises:
        ValueError: naming ``method`` when it is not a method, or naming the fields a
            scaling type needs that the experiment cannot supply.

    Example::

        >>> scaling_for("yarn", 4.0, 128)
        {'type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 128}
    """
    if method == ROPE:
        return None
    kind = ALIASES.get(method, method)
    types = scaling_types()
    if kind not in types:
        hint = " ('default' is plain RoPE: name it 'rope')" if kind == "default" else ""
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}{hint}")
    missing = _missing(kind)
    if missing:
        raise ValueError(
            f"method {method!r} needs {', '.join(missing)}, which the extend experiment cannot "
            f"supply: it fills only {', '.join(_known(1.0, 1))} from the factor s and the "
            "training length T"
        )
    names = {f.name for f in fields(types[kind])}
    known = _known(factor, train_len)
    return {"type": kind, **{key: value for key, value in known.items() if key in names}}

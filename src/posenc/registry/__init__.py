"""Encodings by name: the boundary where strings and dicts become typed objects.

* :mod:`~posenc.registry.specs`: :class:`ModelDims`, :class:`EncodingSpec`,
  :func:`build_encoding`, :func:`register_encoding`;
* :mod:`~posenc.registry.catalogue`: the built-in encodings, registered on import.
"""

from __future__ import annotations

from posenc.registry.catalogue import BUILTIN_SPECS
from posenc.registry.specs import (
    EncodingSpec,
    Family,
    ModelDims,
    add_builtin_encodings,
    build_encoding,
    encoding_spec,
    keyword_parameters,
    list_encodings,
    register_encoding,
    sequence_encoding_spec,
    unregister_encoding,
)

add_builtin_encodings(BUILTIN_SPECS)

__all__ = [
    "BUILTIN_SPECS",
    "EncodingSpec",
    "Family",
    "ModelDims",
    "build_encoding",
    "encoding_spec",
    "keyword_parameters",
    "list_encodings",
    "register_encoding",
    "sequence_encoding_spec",
    "unregister_encoding",
]

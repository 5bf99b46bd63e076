"""The built-in encodings: one :class:`~posenc.registry.specs.EncodingSpec` each, in the
order ``posenc list`` shows them (a new method is one entry in the module of its kind, or one
:func:`~posenc.registry.specs.register_encoding` call of its own).

* :mod:`~posenc.registry.catalogue.sequence`: one position per token;
* :data:`~posenc.registry.builders.SEGMENT_SPECS`: the segment methods;
* :mod:`~posenc.registry.catalogue.multi_axis`: a token's coordinates (grids, time, row and
  column).
"""

from __future__ import annotations

from posenc.registry.builders import SEGMENT_SPECS
from posenc.registry.catalogue.multi_axis import MULTI_AXIS_SPECS
from posenc.registry.catalogue.sequence import GRAPE_SPEC, SEQUENCE_SPECS
from posenc.registry.specs import EncodingSpec

__all__ = ["BUILTIN_SPECS"]

BUILTIN_SPECS: tuple[EncodingSpec, ...] = (
    *SEQUENCE_SPECS,
    *SEGMENT_SPECS,
    *MULTI_AXIS_SPECS,
    GRAPE_SPEC,
)

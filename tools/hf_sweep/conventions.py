"""HF's conventions read from the installed ``transformers``' code: the source of the tables in
:mod:`posenc.integrations.hf.conventions`, which ``tests/integrations/hf/test_conventions.py``
checks against these functions. ``python -m tools.hf_sweep --conventions`` prints both."""

from __future__ import annotations

import importlib
import inspect
import json
import re

from tools.hf_sweep.families import (
    family_model_types,
    modeling_source,
    models_dir,
    rope_families,
)


def default_ignores_partial() -> frozenset[str]:
    """Model types whose default RoPE ignores ``partial_rotary_factor``, read from HF's code:
    the model types of every RoPE folder with a rotary class whose
    ``compute_default_rope_parameters`` does not read the factor (the source of
    :data:`posenc.integrations.hf.conventions.DEFAULT_IGNORES_PARTIAL`)."""
    out: set[str] = set()
    for family in rope_families():
        for path in sorted((models_dir() / family).glob("modeling_*.py")):
            module = importlib.import_module(f"transformers.models.{family}.{path.stem}")
            for name, cls in vars(module).items():
                default = getattr(cls, "compute_default_rope_parameters", None)
                if (
                    isinstance(cls, type)
                    and name.endswith("RotaryEmbedding")
                    and cls.__module__ == module.__name__
                    and default is not None
                    and "partial_rotary_factor" not in inspect.getsource(default)
                ):
                    out.update(family_model_types(family))
    return frozenset(out)


def undeclared_mrope_axes() -> dict[str, int]:
    """Model folders whose rotary expands ``position_ids`` to a literal number of axes other
    than three, with that number (the source of
    :data:`posenc.integrations.hf.conventions.UNDECLARED_MROPE_AXES`)."""
    expand = re.compile(r"position_ids\.expand\((\d+), -1, -1\)")
    found = {
        family: {int(n) for n in expand.findall(modeling_source(family))} - {3}
        for family in rope_families()
    }
    return {family: axes.pop() for family, axes in found.items() if len(axes) == 1}


def conventions_source() -> str:
    """Both tables as the Python that :mod:`posenc.integrations.hf.conventions` holds."""
    ignores = "".join(f'        "{t}",\n' for t in sorted(default_ignores_partial()))
    return (
        f"UNDECLARED_MROPE_AXES: dict[str, int] = {json.dumps(undeclared_mrope_axes())}\n\n"
        f"DEFAULT_IGNORES_PARTIAL: frozenset[str] = frozenset(\n    {{\n{ignores}    }}\n)\n"
    )

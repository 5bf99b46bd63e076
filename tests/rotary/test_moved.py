"""The old paths of rotary's moved modules and names keep working, with a warning.

posenc-migrate: skip (tools/migrate_imports.py leaves these old paths as they are)
"""

from __future__ import annotations

import importlib
import sys

import pytest

import posenc.rotary.functional as functional
import posenc.rotary.scaling as scaling
from posenc.rotary.multi_axis import maps
from posenc.rotary.scaling import laws, per_frequency, vllm


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("posenc.rotary.scaling_base", scaling, "Scaling"),
        ("posenc.rotary.scaling_base", scaling, "yarn_ramp"),
        ("posenc.rotary.scaling_laws", laws, "critical_dimension"),
        ("posenc.rotary.scaling_per_frequency", per_frequency, "LongRoPE"),
        ("posenc.rotary.scaling_vllm", vllm, "GeometricYaRN"),
        ("posenc.rotary.multi_axis_maps", maps, "place_frequencies"),
        ("posenc.rotary.multi_axis_maps", maps, "mrope_axes"),
    ],
)
def test_old_module_paths_forward_to_the_new_modules(old, new, name) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=old):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(new, name)


@pytest.mark.parametrize("name", ["apply_rotary", "rope_angles", "rope_cos_sin"])
def test_functions_moved_out_of_rope_still_resolve_there(name) -> None:
    rope = importlib.import_module("posenc.rotary.rope")
    with pytest.warns(DeprecationWarning, match="posenc.rotary.functional"):
        assert getattr(rope, name) is getattr(functional, name)
    with pytest.raises(AttributeError, match="nope"):
        rope.nope  # noqa: B018

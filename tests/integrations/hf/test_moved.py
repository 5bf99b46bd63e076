"""The HF modules' old paths (posenc.integrations.hf_*) keep working with a DeprecationWarning
and give every name they exported; the sweep tooling's old paths are gone (tools/hf_sweep/)."""

# posenc-migrate: skip (the old paths are what this file tests)
from __future__ import annotations

import importlib
import sys

import pytest

OLD_EXPORTS = {
    "posenc.integrations.hf_config": [
        "DEFAULT_IGNORES_PARTIAL",
        "attention_scale_from_config",
        "frequencies_from_config",
        "layer_schedule_from_config",
        "model_options_from_config",
        "mrope_from_config",
        "rope_from_config",
        "to_rope_parameters",
    ],
    "posenc.integrations.hf_conventions": ["DEFAULT_IGNORES_PARTIAL", "UNDECLARED_MROPE_AXES"],
    "posenc.integrations.hf_keys": [],
    "posenc.integrations.hf_layers": [
        "LLAMA4_DEFAULTS",
        "layer_schedule_from_config",
        "model_options_from_config",
    ],
    "posenc.integrations.hf_patch": [
        "HFRotaryAdapter",
        "TableFormat",
        "patch_rotary",
        "rotary_modules",
        "unpatch_rotary",
    ],
    "posenc.integrations.hf_segments": [
        "ATTENTION_NAME",
        "patch_segments",
        "segment_attention",
        "unpatch_segments",
    ],
}


@pytest.mark.parametrize("old", list(OLD_EXPORTS))
def test_old_path_warns_and_gives_its_names(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc._moved import MOVED_MODULES

    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED_MODULES[old]}"):
        module = importlib.import_module(old)
    new = importlib.import_module(MOVED_MODULES[old])
    for name in OLD_EXPORTS[old]:
        assert getattr(module, name) is getattr(new, name), name


@pytest.mark.parametrize(
    "old",
    [
        "posenc.integrations.hf_sweep",
        "posenc.integrations.hf_sweep_table",
        "posenc.integrations.hf_tiny",
        "posenc.integrations.hf_tiny_overrides",
    ],
)
def test_sweep_tooling_left_the_package(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)

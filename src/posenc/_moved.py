"""Old import paths of modules and names that moved, kept working with a ``DeprecationWarning``.

The package was laid out by concept (``encoding/``, ``positions/``, ``models/``, ``viz/``,
``checks/``, one folder per registry family, ``integrations/hf/``, ``rotary/scaling/``). Code
written against the old paths keeps running: importing an old module gives a stand-in that
forwards every attribute to the new module and warns once, and an old package's moved names
(``from posenc.bias import ShawRelative``) are forwarded by that package's ``__getattr__``.
CHANGELOG.md lists every move; ``python tools/migrate_imports.py PATH...`` rewrites a code
base to the new paths. The old paths go away in posenc 0.3.
"""

# posenc-migrate: skip (tools/migrate_imports.py leaves the tables as they are)
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["MOVED_MODULES", "MOVED_NAMES", "install", "moved_name"]

#: old module path -> its new path (the new module has every public name the old one had)
MOVED_MODULES: dict[str, str] = {
    "posenc.attention.hooks": "posenc.encoding.resolve",
    "posenc.attention.query_scale": "posenc.softmax.query_scale",
    "posenc.attention.stickbreaking": "posenc.softmax.stick_breaking",
    "posenc.attention.token_bias": "posenc.token_state.token_bias",
    "posenc.base": "posenc.encoding",
    "posenc.bias.cope": "posenc.scores.cope",
    "posenc.bias.dape": "posenc.scores.dape",
    "posenc.bias.deberta": "posenc.contextual.deberta",
    "posenc.bias.deberta_logits": "posenc.contextual.deberta_logits",
    "posenc.bias.fox": "posenc.token_state.fox",
    "posenc.bias.shaw": "posenc.contextual.shaw",
    "posenc.bias.sinks": "posenc.softmax.sinks",
    "posenc.bias.softcap": "posenc.softmax.softcap",
    "posenc.bias.wrapping": "posenc.softmax.wrapping",
    "posenc.bias.xl": "posenc.contextual.xl",
    "posenc.checks_graph": "posenc.checks.graph",
    "posenc.demo": "posenc.lab.demo",
    "posenc.integrations.hf_config": "posenc.integrations.hf",
    "posenc.integrations.hf_conventions": "posenc.integrations.hf.conventions",
    "posenc.integrations.hf_keys": "posenc.integrations.hf.rope_parameters",
    "posenc.integrations.hf_layers": "posenc.integrations.hf.layers",
    "posenc.integrations.hf_patch": "posenc.integrations.hf.patch",
    "posenc.integrations.hf_segments": "posenc.integrations.hf.segments",
    "posenc.model": "posenc.models",
    "posenc.model_config": "posenc.models.config",
    "posenc.model_layout": "posenc.models.layout",
    "posenc.multimodal": "posenc.positions.multimodal",
    "posenc.multimodal_layouts": "posenc.positions.multimodal_layouts",
    "posenc.randomized": "posenc.encoding.randomized",
    "posenc.rotary.multi_axis_maps": "posenc.rotary.multi_axis.maps",
    "posenc.rotary.scaling_base": "posenc.rotary.scaling",
    "posenc.rotary.scaling_laws": "posenc.rotary.scaling.laws",
    "posenc.rotary.scaling_per_frequency": "posenc.rotary.scaling.per_frequency",
    "posenc.rotary.scaling_vllm": "posenc.rotary.scaling.vllm",
    "posenc.viz_base": "posenc.viz.base",
    "posenc.viz_graph": "posenc.viz.graph",
    "posenc.viz_grids": "posenc.viz.grids",
    "posenc.viz_rope": "posenc.viz.rope",
    "posenc.viz_segments": "posenc.viz.segments",
    "posenc.viz_softmax": "posenc.viz.softmax",
}

#: old package -> {name: the package that has it now}, for names a package re-exported
MOVED_NAMES: dict[str, dict[str, str]] = {
    "posenc.bias": {
        "CoPE": "posenc.scores",
        "CoPEInterpolation": "posenc.scores",
        "DapeBias": "posenc.scores",
        "DebertaRelative": "posenc.contextual",
        "DebertaRelativeEmbedding": "posenc.contextual",
        "ForgettingGate": "posenc.token_state",
        "GEMMA2_ATTN_SOFTCAP": "posenc.softmax",
        "LearnedSinks": "posenc.softmax",
        "ShawRelative": "posenc.contextual",
        "SoftCap": "posenc.softmax",
        "TransformerXLRelative": "posenc.contextual",
        "cope_bias": "posenc.scores",
        "cope_positions": "posenc.scores",
        "dape_scores": "posenc.scores",
        "deberta_index": "posenc.contextual",
        "deberta_log_bucket": "posenc.contextual",
        "disentangled_logits": "posenc.contextual",
        "fox_bias": "posenc.token_state",
        "fox_log_gates": "posenc.token_state",
        "relative_shift": "posenc.contextual",
        "shaw_index": "posenc.contextual",
        "shaw_logits": "posenc.contextual",
        "shaw_values": "posenc.contextual",
        "tanh_softcap": "posenc.softmax",
        "xl_sinusoid": "posenc.contextual",
    },
    "posenc.rotary.rope": {
        "apply_rotary": "posenc.rotary.functional",
        "rope_angles": "posenc.rotary.functional",
        "rope_cos_sin": "posenc.rotary.functional",
    },
}

_REMOVAL = "posenc 0.3"


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new}; import from {new} ({old} stops working in {_REMOVAL})",
        DeprecationWarning,
        stacklevel=3,
        **_skip_import_frames(),
    )


def _skip_import_frames() -> dict[str, Any]:
    # Python 3.12 can point the warning past the import machinery at the importing line.
    if sys.version_info >= (3, 12):
        return {"skip_file_prefixes": ("<frozen importlib", __file__)}
    return {}


class _MovedModule(types.ModuleType):
    """Stands in for a moved module: every attribute is the new module's."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__(old, f"Moved to :mod:`{new}`.")
        self.__dict__["_new_name"] = new

    def _target(self) -> types.ModuleType:
        return importlib.import_module(self.__dict__["_new_name"])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._target())))


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED_MODULES`; nothing else."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _MovedModule(spec.name, MOVED_MODULES[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED_MODULES[module.__name__]
        _warn(module.__name__, new)
        importlib.import_module(new)  # an error in the new module surfaces at the import


_FINDER = _MovedFinder()


def install() -> None:
    """Put the finder of old module paths on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def moved_name(package: str, name: str) -> Any:
    """The object ``name`` that ``package`` exported before it moved, with a warning.

    For a package's module ``__getattr__``; raises ``AttributeError`` for any other name.
    """
    target = MOVED_NAMES.get(package, {}).get(name)
    if target is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{target}.{name}")
    return getattr(importlib.import_module(target), name)

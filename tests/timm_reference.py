"""timm's position-embedding modules as a reference, where the timm distribution is installed.

timm's package ``__init__`` imports its models, and through them torchvision; a torchvision
built for another torch fails to load (``operator torchvision::nms does not exist``) although
the modules compared here (``timm/layers/pos_embed.py``, ``pos_embed_sincos.py`` and their
helpers) need torch only. So :func:`timm_layer` imports ``timm.layers.<name>`` normally and,
when the package import fails but the distribution is on the path, loads the layer module
from timm's own files under a private package name (timm's code, unmodified; the real
``timm`` entry of ``sys.modules`` is left alone). Without timm the calling test skips.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

_PRIVATE = "_posenc_timm_layers"


def timm_layer(name: str) -> types.ModuleType:
    """``timm.layers.<name>`` (e.g. ``"pos_embed_sincos"``); skips the test without timm."""
    try:
        return importlib.import_module(f"timm.layers.{name}")
    except ImportError as error:
        reason = f"{type(error).__name__}: {error}"
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed")
    layers = Path(next(iter(spec.submodule_search_locations))) / "layers"
    if not (layers / f"{name}.py").is_file():
        pytest.skip(f"this timm has no layers/{name}.py (import failed: {reason})")
    if _PRIVATE not in sys.modules:
        package = types.ModuleType(_PRIVATE)
        package.__path__ = [str(layers)]  # submodules load from timm's files; no __init__ runs
        sys.modules[_PRIVATE] = package
    return importlib.import_module(f"{_PRIVATE}.{name}")

"""The RoPE families of the installed ``transformers``: the model folders whose modeling file
defines a rotary embedding, and the model types each folder's configs declare."""

from __future__ import annotations

import re
from pathlib import Path

_ROTARY = re.compile(r"RotaryEmbedding|rotary_emb")


def models_dir() -> Path:
    """``transformers/models`` of the installed release."""
    import transformers

    return Path(transformers.__file__).parent / "models"


def rope_families() -> list[str]:
    """Model folders of the installed transformers whose modeling file defines a rotary."""
    out = []
    for folder in sorted(models_dir().iterdir()):
        files = sorted(folder.glob("modeling_*.py"))
        if any(_ROTARY.search(f.read_text(errors="ignore")) for f in files):
            out.append(folder.name)
    return out


def family_model_types(family: str) -> list[str]:
    """The model types whose config class lives in the ``family`` folder (the folder's own
    type first)."""
    from transformers.models.auto.configuration_auto import (
        CONFIG_MAPPING_NAMES,
        model_type_to_module_name,
    )

    types = [t for t in CONFIG_MAPPING_NAMES if model_type_to_module_name(t) == family]
    return sorted(types, key=lambda t: (t != family, not t.endswith("_text"), t))


def modeling_source(family: str) -> str:
    """The text of every ``modeling_*.py`` file of the ``family`` folder, concatenated."""
    return "".join(f.read_text() for f in sorted((models_dir() / family).glob("modeling_*.py")))

"""The lab's experiments by name, and building their configs from ``KEY=VALUE`` settings.

Each experiment is a module with a frozen dataclass config and a ``run_*(config, out, *,
echo)`` function (see :mod:`posenc.lab.extrapolate`); this table is what ``posenc lab NAME``
dispatches on.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EXPERIMENTS", "Experiment", "config_from_settings", "get_experiment"]


@dataclass(frozen=True)
class Experiment:
    """Where an experiment lives: its module, config class and run function."""

    name: str
    module: str
    config: str
    run: str
    summary: str

    def load(self) -> tuple[type, Callable[..., list[dict[str, Any]]]]:
        module = importlib.import_module(self.module)
        return getattr(module, self.config), getattr(module, self.run)


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "extrapolate",
            "posenc.lab.extrapolate",
            "ExtrapolateConfig",
            "run_extrapolate",
            "train each encoding at T, perplexity at 1x..16x T (ALiBi Tables 1-3)",
        ),
        Experiment(
            "extend",
            "posenc.lab.extend",
            "ExtendConfig",
            "run_extend",
            "RoPE trained at T, extended by PI/NTK/dynamic NTK/YaRN/Llama-3; passkey",
        ),
        Experiment(
            "tasks",
            "posenc.lab.generalize",
            "TasksConfig",
            "run_tasks",
            "length generalization on synthetic tasks, plain and randomized positions",
        ),
        Experiment(
            "vit",
            "posenc.lab.vit",
            "VitConfig",
            "run_vit",
            "digits ViT: no encoding, 1D learned, 2D sinusoidal, 2D axial RoPE",
        ),
    )
}


def get_experiment(name: str) -> Experiment:
    """The experiment registered as ``name``; ``ValueError`` listing the names otherwise."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def config_from_settings(config_class: type, settings: Mapping[str, str]) -> Any:
    """Build ``config_class`` from ``{field: text}``; values are JSON, else plain strings.

    Lists become tuples where the field's default is a tuple. Unknown fields raise
    ``ValueError`` naming them and listing the fields.
    """
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    hints = typing.get_type_hints(config_class)
    values: dict[str, Any] = {}
    for key, text in settings.items():
        if key not in fields:
            raise ValueError(
                f"unknown setting {key!r} for {config_class.__name__}; fields: {', '.join(fields)}"
            )
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if isinstance(value, list) and "tuple" in str(hints.get(key, "")):
            value = tuple(value)
        values[key] = value
    return config_class(**values)

"""The lab's experiments by name: what ``posenc lab NAME`` dispatches on.

Each experiment module defines ``EXPERIMENT`` (a :class:`posenc.lab.runner.Experiment`);
this registry imports them, so the import graph shows every experiment. Adding one is its
module in this folder plus its name here (docs/lab.md shows a whole example).
``python -m posenc.lab.experiments NAME`` runs one (:mod:`~posenc.lab.experiments.__main__`,
what ``torchrun`` starts).
"""

from __future__ import annotations

from typing import Any

from posenc.lab.experiments import (
    audio,
    bases,
    csl,
    extend,
    extrapolate,
    generalize,
    lm,
    longctx,
    resolution,
    temporal_links,
    triangles,
    video,
    vit,
    vla,
)
from posenc.lab.runner import Experiment

__all__ = ["EXPERIMENTS", "get_experiment", "register_experiment"]

EXPERIMENTS: dict[str, Experiment[Any]] = {}


def register_experiment(experiment: Experiment[Any]) -> Experiment[Any]:
    """Add ``experiment`` under its name; ``ValueError`` when the name is taken."""
    if experiment.name in EXPERIMENTS and EXPERIMENTS[experiment.name] is not experiment:
        raise ValueError(f"an experiment named {experiment.name!r} is already registered")
    EXPERIMENTS[experiment.name] = experiment
    return experiment


def get_experiment(name: str) -> Experiment[Any]:
    """The experiment registered as ``name``; ``ValueError`` listing the names otherwise."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


for _module in (
    extrapolate,
    extend,
    bases,
    longctx,
    generalize,
    vit,
    resolution,
    lm,
    csl,
    triangles,
    temporal_links,
    audio,
    video,
    vla,
):
    register_experiment(_module.EXPERIMENT)

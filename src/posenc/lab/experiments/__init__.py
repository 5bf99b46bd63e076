"""The lab's experiments by name: what ``posenc lab NAME`` dispatches on.

Each experiment module (or package, for the larger ones) defines ``EXPERIMENT`` (a
:class:`posenc.lab.runner.Experiment`: its config, runs, report sections, figures and
claims); this registry imports them, so the import graph shows every experiment. Adding one
is its module in this folder plus its line here, or :func:`register_experiment` for one kept
elsewhere (docs/lab.md shows a whole example).
``python -m posenc.lab.experiments NAME`` runs one (:mod:`~posenc.lab.experiments.__main__`,
what ``torchrun`` starts).
"""

from __future__ import annotations

from typing import Any

from posenc.lab.claims import Claim
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
    suite,
    temporal_links,
    triangles,
    video,
    vit,
    vla,
)
from posenc.lab.runner import Experiment

__all__ = ["EXPERIMENTS", "all_claims", "get_experiment", "register_experiment"]

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


def all_claims() -> tuple[Claim, ...]:
    """Every registered experiment's claims in registry order, each once (``longctx``
    carries ``extend``'s): the lab's catalogue of published findings."""
    seen: dict[int, Claim] = {}
    for experiment in EXPERIMENTS.values():
        for claim in experiment.claims:
            seen.setdefault(id(claim), claim)
    return tuple(seen.values())


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
    suite,
):
    register_experiment(_module.EXPERIMENT)

"""Requirements: what must be true of result rows before a claim about them means anything.

A :class:`~posenc.lab.claims.Claim` lists its requirements (``requires``);
:func:`~posenc.lab.claims.judge` checks each (:meth:`Requirement.check` gives a
:class:`Check`) and turns a verdict that would hold or fail into *undecided*, with the
requirement's reason, when one fails or the rows cannot tell:

- :class:`Learned`: the model learned its data (language modelling: its eval loss at the
  training length is at most :data:`LEARNED_LOSS_FRACTION` of the context-free unigram loss);
- :class:`Reaches`: a measured value reaches a bound (a task model that retrieves the needle
  at its training length before its extrapolation is judged; an attention sink to reduce
  before a claim that a gate reduces it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from posenc.lab.quantities import Cell, MeanOverSeeds, Row

__all__ = ["LEARNED_LOSS_FRACTION", "Check", "Learned", "Reaches", "Requirement"]

#: A model **learned its data** when its eval loss at the training length is at most this
#: fraction of the context-free loss (a unigram fitted on the train tokens:
#: :func:`posenc.lab.data.corpus.context_free_loss`); above it, what it says about position is
#: noise on a model that has not used its context.
LEARNED_LOSS_FRACTION = 0.9


class Check(NamedTuple):
    """A requirement's answer: ``passed`` (``None``: the rows cannot tell) and why, in words."""

    passed: bool | None
    reason: str


class Requirement(Protocol):
    """What must be true of the rows before a claim about them means anything."""

    @property
    def label(self) -> str: ...

    def check(self, rows: Sequence[Row]) -> Check: ...


@dataclass(frozen=True)
class Learned:
    """Requirement: the model of the rows matching ``where`` learned its data.

    Its eval ``loss`` at the training length (``where`` selects those rows, one per seed), mean
    over seeds, is at most :data:`LEARNED_LOSS_FRACTION` of the ``context_free_loss`` the same
    rows carry (a unigram fitted on the train tokens, scored on the same targets). A model
    above it predicts the next token little better than its frequency: whatever its curve
    does past ``T`` says nothing about its encoding.

    Args:
        experiment: the rows' experiment.
        where: selects the model's rows at the training length (``{"encoding": "alibi",
            "multiplier": 1.0}``).
        model: how the reason names the model (``"alibi"``).
    """

    experiment: str
    where: Mapping[str, Any] = field(hash=False)
    model: str

    @property
    def label(self) -> str:
        return f"the {self.model} model learned its data"

    def check(self, rows: Sequence[Row]) -> Check:
        losses = MeanOverSeeds(Cell(self.experiment, dict(self.where), "loss"))(rows)
        baselines = MeanOverSeeds(Cell(self.experiment, dict(self.where), "context_free_loss"))(
            rows
        )
        if losses is None or baselines is None or baselines.value <= 0:
            missing = "its loss" if losses is None else "the context-free loss"
            return Check(
                None,
                f"cannot tell whether the {self.model} model learned its data: {missing} at "
                "the training length is missing from the rows",
            )
        fraction = losses.value / baselines.value
        numbers = (
            f"loss {losses.value:.3g} = {fraction:.2f} of the context-free {baselines.value:.3g}"
        )
        if fraction <= LEARNED_LOSS_FRACTION:
            return Check(True, f"the {self.model} model learned its data ({numbers})")
        return Check(
            False,
            f"the {self.model} model has not learned its data ({numbers}; it must be at "
            f"most {LEARNED_LOSS_FRACTION:g})",
        )


@dataclass(frozen=True)
class Reaches:
    """Requirement: a value of the rows reaches a bound, in every model named (or in one).

    For each selection of ``wheres`` the mean over seeds of column ``value`` (one row per
    seed, as :class:`~posenc.lab.quantities.Cell`) must be ``>= bound`` (``direction=">="``)
    or ``<= bound``; ``need="all"``: every selection must, ``"any"``: at least one must (a
    task some model learns at this budget). The rows cannot tell when a needed selection is
    missing.

    Args:
        experiment: the rows' experiment.
        wheres: one ``where`` per model (``({"encoding": "rope", "multiple": 1.0},)``).
        value: the column (``"seq_acc"``, ``"first_token_mass"``).
        bound: the bound the mean must reach.
        what: the requirement in words (``"the rope model retrieves the needle at L"``).
        direction: ``">="`` or ``"<="``.
        need: ``"all"`` or ``"any"``.

    Example::

        Reaches("suite", ({"task": "niah_single", "encoding": "rope", "multiple": 1.0},),
                "seq_acc", 0.9, "the rope model retrieves the needle at L")
    """

    experiment: str
    wheres: tuple[Mapping[str, Any], ...] = field(hash=False)
    value: str
    bound: float
    what: str
    direction: Literal["<=", ">="] = ">="
    need: Literal["all", "any"] = "all"

    def __post_init__(self) -> None:
        if not isinstance(self.wheres, tuple) or not self.wheres:
            raise ValueError(f"wheres must be a non-empty tuple of mappings, got {self.wheres!r}")
        if self.direction not in ("<=", ">="):
            raise ValueError(f"direction must be '<=' or '>=', got {self.direction!r}")
        if self.need not in ("all", "any"):
            raise ValueError(f"need must be 'all' or 'any', got {self.need!r}")

    @property
    def label(self) -> str:
        return self.what

    def check(self, rows: Sequence[Row]) -> Check:
        means = []
        for where in self.wheres:
            m = MeanOverSeeds(Cell(self.experiment, dict(where), self.value))(rows)
            means.append(None if m is None else m.value)
        known = [v for v in means if v is not None]
        reached = [v >= self.bound if self.direction == ">=" else v <= self.bound for v in known]
        numbers = ", ".join("missing" if v is None else f"{v:.3g}" for v in means)
        numbers = f"{self.value} {numbers} ({self.direction} {self.bound:g} needed"
        numbers += ", in one)" if self.need == "any" and len(self.wheres) > 1 else ")"
        if self.need == "any" and any(reached):
            return Check(True, f"{self.what}: {numbers}")
        if self.need == "all" and len(known) == len(means) and all(reached):
            return Check(True, f"{self.what}: {numbers}")
        if len(known) < len(means) and (
            (self.need == "all" and all(reached)) or self.need == "any"
        ):
            return Check(None, f"cannot tell whether {self.what}: {numbers}")
        return Check(False, f"not so at this scale that {self.what}: {numbers}")

"""A claim (:class:`Claim`) and the baseline it is decided against (:class:`Control`): a
paper's finding as a statistic of lab rows with a threshold; the rule that judges it is in
:mod:`posenc.lab.claims` and :mod:`posenc.lab.claims.judge`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from posenc.lab.quantities import Statistic
from posenc.lab.requirements import Requirement

__all__ = ["LAYERS_COLUMN", "Claim", "Control", "Direction", "Kind"]

Direction = Literal["<=", ">="]
Kind = Literal["claim", "fact"]


#: The result column naming a row's per-layer options (:meth:`posenc.lab.config.ModelArgs.label`:
#: ``"rnope_swa+w64"``, ``"gate"``); empty for a plain transformer. A claim reads only plain
#: transformers' rows unless it is ``layered``.
LAYERS_COLUMN = "schedule"


# --- controls -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """The baseline a claim is decided against: the one its paper compares with, or NoPE.

    Args:
        label: the control's name as the rows call it (``"nope"``, ``"rope"``, ``"pi"``).
        statistic: the claim's statistic computed on the control's rows (ALiBi's
            ``ppl(4T) / ppl(T)`` becomes NoPE's), judged by the same threshold and direction;
            ``None`` when the claim's own statistic already compares with the control (a
            difference or ratio against it): then it is decided against it directly.
    """

    label: str
    statistic: Statistic | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"label must be a non-empty string, got {self.label!r}")


# --- claims ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A published finding checked on lab rows (the rule: :mod:`posenc.lab.claims`).

    Args:
        name: identifier.
        text: the claim in words, its threshold explained.
        paper: short citation and arXiv link.
        published: the paper's numbers behind the claim, with table.
        experiment: the experiment whose rows the statistic reads.
        statistic: rows -> :class:`Measurement`, or ``None`` when the rows cannot decide.
        threshold, direction: the mean must be ``>=`` or ``<=`` the threshold.
        margin_in_std: ``k ≥ 0``: the mean must clear the threshold by ``k`` stds.
        control: the baseline it is decided against (:class:`Control`); ``None`` only for a
            fact or a claim about no one encoding.
        requires: what must hold of the rows first (:class:`Learned`, :class:`Reaches`).
        kind: ``"claim"`` (a finding, counted) or ``"fact"`` (true by definition, shown apart
            and never counted).
        layered: ``False`` (a claim about an encoding): it reads the rows of plain
            transformers only, those with an empty :data:`LAYERS_COLUMN`, so runs with a
            window, a gate or a schedule in the same results never enter it; ``True`` (a
            claim about the per-layer options themselves): it reads every row, and its cells
            select :data:`LAYERS_COLUMN` themselves (``None`` for the plain transformer).
    """

    name: str
    text: str
    paper: str
    published: str
    experiment: str
    statistic: Statistic = field(repr=False)
    threshold: float
    direction: Direction
    margin_in_std: float = 0.0
    control: Control | None = None
    requires: tuple[Requirement, ...] = ()
    kind: Kind = "claim"
    layered: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must be a non-empty string")
        if self.kind not in ("claim", "fact"):
            raise ValueError(f"kind must be 'claim' or 'fact', got {self.kind!r}")
        if self.control is not None and not isinstance(self.control, Control):
            raise TypeError(f"control must be a Control or None, got {self.control!r}")
        if not isinstance(self.requires, tuple):
            raise TypeError(f"requires must be a tuple of requirements, got {self.requires!r}")
        if self.direction not in ("<=", ">="):
            raise ValueError(f"direction must be '<=' or '>=', got {self.direction!r}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be a finite number, got {self.threshold}")
        if not (math.isfinite(self.margin_in_std) and self.margin_in_std >= 0):
            raise ValueError(
                f"margin_in_std must be a finite number >= 0, got {self.margin_in_std}"
            )

"""The speed and memory targets of the benchmarks, and which printed figure measures each.

:data:`TARGETS` is the one table of goals: ``posenc bench`` prints each goal beside the figure
that measures it (:func:`annotate`), and the goals table at the top of ``docs/performance.md``
is checked against it by a test. A target names the row of a suite that measures it (the
fields the row must hold), the row's field with the figure, and optionally a second row of the
same group (same threads, dtype, length, mode) whose figure divides it: ``posenc bench rope``
times everything against the ``copy_`` floor, so "× clone" is the row's ratio over clone's.

Example::

    >>> from posenc.bench.targets import TARGETS, annotate
    >>> rows = [{"name": "shaw", "vs_nope": 0.67}]
    >>> annotate(rows, "attention", "lm", TARGETS)
    ['0.67× NoPE tokens/s  (goal ≥ 0.85×: missed)']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["GROUP_FIELDS", "TARGETS", "Target", "annotate", "evaluate", "unmeasured"]

Comparison = Literal["<=", "<", ">=", ">"]

_SYMBOLS: dict[str, str] = {"<=": "≤", "<": "<", ">=": "≥", ">": ">"}

#: Fields that put rows of one suite into the same group: a target's ``baseline`` row is
#: looked up among the rows that agree with the measured row on each of these it holds.
GROUP_FIELDS = ("threads", "dtype", "seq", "mode")


@dataclass(frozen=True)
class Target:
    """One goal: ``figure comparison goal`` (e.g. ``ratio ≤ 1.1`` × clone).

    Args:
        name: a short identifier, unique in :data:`TARGETS`.
        measures: what is measured, in words (the goals table's first column).
        comparison: ``"<="``, ``"<"``, ``">="`` or ``">"``.
        goal: the number the figure is compared with (finite, > 0).
        unit: printed after the number, figure and goal alike (``"×"``, ``" GiB"``, ``" s"``).
        label: what the unit is of (``"clone"``, ``"NoPE tokens/s"``); printed after the
            figure only.
        command: the command that measures it.
        bench: the ``posenc bench`` target whose output holds the figure (``"rope"``,
            ``"attention"``), or ``None`` where no suite measures it yet.
        suite: the suite of ``bench`` (``None`` with ``bench``).
        match: the fields a row must hold to be the measured row.
        key: the row's field with the figure.
        baseline: the ``name`` of the row in the same group that divides the figure
            (``None``: the figure is ``row[key]`` itself).
        faster: the figure is the baseline's over the row's ("× faster than"), not the row's
            over the baseline's.
    """

    name: str
    measures: str
    comparison: Comparison
    goal: float
    unit: str
    label: str
    command: str
    bench: str | None = None
    suite: str | None = None
    match: Mapping[str, Any] = field(default_factory=dict)
    key: str = "ratio"
    baseline: str | None = None
    faster: bool = False

    def __post_init__(self) -> None:
        if self.comparison not in _SYMBOLS:
            raise ValueError(
                f"comparison must be one of {', '.join(_SYMBOLS)}, got {self.comparison!r}"
            )
        if (
            isinstance(self.goal, bool)
            or not isinstance(self.goal, int | float)
            or not math.isfinite(self.goal)
            or self.goal <= 0
        ):
            raise ValueError(f"goal must be a finite number > 0, got {self.goal!r}")
        if (self.bench is None) != (self.suite is None):
            raise ValueError(
                f"bench and suite must be given together, got bench={self.bench!r}, "
                f"suite={self.suite!r}"
            )
        if self.bench is not None and not self.match:
            raise ValueError(f"target {self.name!r}: a target with a suite needs match fields")
        if self.faster and self.baseline is None:
            raise ValueError(f"target {self.name!r}: faster=True needs a baseline row")

    @property
    def goal_text(self) -> str:
        """The goal as printed: ``"≤ 1.1×"``, ``"< 1 GiB"``."""
        return f"{_SYMBOLS[self.comparison]} {self.goal:g}{self.unit}"

    def met(self, figure: float) -> bool:
        """Whether ``figure`` meets the goal (a NaN or infinite figure never does)."""
        if isinstance(figure, bool) or not isinstance(figure, int | float):
            raise TypeError(f"figure must be a real number, got {type(figure).__name__}")
        if not math.isfinite(figure):
            return False
        return {
            "<=": figure <= self.goal,
            "<": figure < self.goal,
            ">=": figure >= self.goal,
            ">": figure > self.goal,
        }[self.comparison]

    def describe(self, figure: float) -> str:
        """``"1.25× clone  (goal ≤ 1.1×: missed)"``."""
        verdict = "met" if self.met(figure) else "missed"
        value = f"{figure:.2f}{self.unit} {self.label}".rstrip()
        return f"{value}  (goal {self.goal_text}: {verdict})"

    def measured_row(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row`` is the row this target's figure comes from."""
        return all(key in row and row[key] == value for key, value in self.match.items())

    def figure(self, row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> float | None:
        """The figure of the measured ``row`` (``rows``: its whole suite, for the baseline);
        ``None`` where the row or its baseline lacks the figure."""
        value = row.get(self.key)
        if value is None:
            return None
        if self.baseline is None:
            return float(value)
        group = {key: row[key] for key in GROUP_FIELDS if key in row}
        for other in rows:
            if other.get("name") == self.baseline and all(
                other.get(key) == wanted for key, wanted in group.items()
            ):
                base = other.get(self.key)
                if base is None or base == 0 or value == 0:
                    return None
                return float(base) / float(value) if self.faster else float(value) / float(base)
        return None


_ROPE = "posenc bench rope --only forward"
_LM = "posenc bench attention --only lm"


def _training_speed(encoding: str, method: str, goal: float) -> Target:
    """The target on ``encoding``'s training tokens/s of the small LM, relative to NoPE's."""
    return Target(
        name=f"lm-{encoding}",
        measures=f"{method}: training tokens/s of the small LM",
        comparison=">=",
        goal=goal,
        unit="×",
        label="NoPE tokens/s",
        command=_LM,
        bench="attention",
        suite="lm",
        match={"name": encoding},
        key="vs_nope",
    )


#: The project's speed targets, each mapped to the figure that measures it.
TARGETS: tuple[Target, ...] = (
    Target(
        name="rope-inplace",
        measures="RoPE in place, q and k in one call (float32, precomputed tables)",
        comparison="<=",
        goal=0.8,
        unit="×",
        label="copy_ floor",
        command=_ROPE,
        bench="rope",
        suite="forward",
        match={"name": "numba q+k inplace", "dtype": "float32"},
    ),
    Target(
        name="rope-out-of-place",
        measures="RoPE out of place: RotaryEmbedding.forward on q, k (float32)",
        comparison="<=",
        goal=1.1,
        unit="×",
        label="clone",
        command=_ROPE,
        bench="rope",
        suite="forward",
        match={"name": "RotaryEmbedding.forward (auto)", "dtype": "float32"},
        baseline="clone",
    ),
    Target(
        name="rope-bf16",
        measures="RoPE in bfloat16: RotaryEmbedding.forward on q, k",
        comparison="<=",
        goal=1.2,
        unit="×",
        label="bf16 clone",
        command=_ROPE,
        bench="rope",
        suite="forward",
        match={"name": "RotaryEmbedding.forward (auto)", "dtype": "bfloat16"},
        baseline="clone",
    ),
    Target(
        name="rope-vs-hf",
        measures="RoPE per forward from positions (the attention's step) against HF's "
        "rotary forward + apply_rotary_pos_emb (float32)",
        comparison=">=",
        goal=15,
        unit="×",
        label="faster than HF",
        command=_ROPE,
        bench="rope",
        suite="forward",
        match={"name": "attention step (auto)", "dtype": "float32"},
        baseline="HF end to end",
        faster=True,
    ),
    Target(
        name="rope-triton-bandwidth",
        measures="RoPE's Triton kernel: achieved memory bandwidth (GPU only)",
        comparison=">=",
        goal=70,
        unit=" %",
        label="of peak bandwidth",
        command="posenc bench rope --only gpu",
        bench="rope",
        suite="gpu",
        match={"name": "triton q+k inplace"},
        key="percent_of_peak",
    ),
    _training_speed("shaw", "Shaw", 0.85),
    _training_speed("xl", "Transformer-XL", 0.85),
    _training_speed("t5", "T5", 0.9),
    Target(
        name="t5-memory-64k",
        measures="T5: peak memory of one forward at 64k tokens (8 heads × 64, no grad)",
        comparison="<",
        goal=1,
        unit=" GiB",
        label="",
        command="posenc bench attention --only memory",
        bench="attention",
        suite="memory",
        match={"encoding": "t5", "seq": 65536},
        key="peak_gib",
    ),
    Target(
        name="check-time",
        measures="`posenc check`: wall time",
        comparison="<",
        goal=5,
        unit=" s",
        label="",
        command="time posenc check",
    ),
    Target(
        name="hf-sweep-time",
        measures="The HF conformance sweep over every RoPE family of the installed "
        "transformers: wall time",
        comparison="<",
        goal=300,
        unit=" s",
        label="",
        command="time python -m tools.hf_sweep --json sweep.json",
    ),
)


def annotate(
    rows: Sequence[Mapping[str, Any]], bench: str, suite: str, targets: Sequence[Target]
) -> list[str]:
    """One cell per row: each target the row measures, its figure, goal and met/missed
    (``"; "`` between several); ``""`` for a row without a target."""
    cells = []
    for row in rows:
        parts = []
        for target in targets:
            if target.bench != bench or target.suite != suite or not target.measured_row(row):
                continue
            figure = target.figure(row, rows)
            if figure is None:
                parts.append(f"no figure  (goal {target.goal_text})")
            else:
                parts.append(target.describe(figure))
        cells.append("; ".join(parts))
    return cells


def unmeasured(
    rows: Sequence[Mapping[str, Any]], bench: str, suite: str, targets: Sequence[Target]
) -> list[str]:
    """A line for each target of this suite that no row measures (a candidate left out, e.g.
    numba not installed, or renamed), so that a missing figure is said, not skipped."""
    return [
        f"{target.name} (goal {target.goal_text}): not measured, no row with "
        + ", ".join(f"{key}={value!r}" for key, value in target.match.items())
        for target in targets
        if target.bench == bench
        and target.suite == suite
        and not any(target.measured_row(row) for row in rows)
    ]


def evaluate(
    result: Mapping[str, Any], bench: str, targets: Sequence[Target]
) -> list[dict[str, Any]]:
    """The targets measured in a ``run`` result of ``bench``: one entry per measured row,
    ``{"target", "goal", "figure", "met", "row"}`` (for ``--json``)."""
    entries = []
    for target in targets:
        if target.bench != bench or target.suite is None or target.suite not in result:
            continue
        rows = result[target.suite]
        for row in rows:
            if not target.measured_row(row):
                continue
            figure = target.figure(row, rows)
            entries.append(
                {
                    "target": target.name,
                    "goal": target.goal_text,
                    "figure": figure,
                    "met": None if figure is None else target.met(figure),
                    "row": {key: row[key] for key in (*target.match, *GROUP_FIELDS) if key in row},
                }
            )
    return entries

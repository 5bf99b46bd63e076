"""Seed claims: published findings stated as checks on lab result rows, judged across seeds.

A :class:`Claim` is a paper's finding in words, the published number it rests on, and a
statistic of the result rows (a :class:`Measurement`: mean ± std across seeds) with a threshold.
:func:`judge` gives its :class:`Verdict`:

- **holds** when the mean across seeds satisfies ``mean >= threshold + k·std`` (direction
  ``">="``) or ``mean <= threshold - k·std`` (direction ``"<="``), with ``k = margin_in_std``
  (0 by default: the mean alone decides). A claim with ``k > 0`` needs at least two seeds;
  with one seed it is undefined, since its std is unknown.
- **fails** otherwise;
- **undefined** when the rows cannot decide: the statistic returns ``None`` (rows missing, a
  cell undefined in some seed, such as a learned table past ``T`` or a NaN loss).

No significance test beyond that: the verdict is the mean against the threshold, and the std and
the number of seeds are reported next to it.

Seeds: every row belongs to the seed in its ``seed`` column (rows without one are seed 0). A
statistic is computed per seed, then summarized over seeds. Two cells combined in a ratio or a
difference are paired by seed; a seed present on one side only is left out (a run not done),
but a seed whose cell is undefined makes the whole statistic undefined (a run that went wrong is
never dropped silently).

Example::

    verdicts = judge_all(SEED_CLAIMS, read_results_csv("runs/extrapolate/results.csv"))

The catalogue of seed claims is :mod:`posenc.lab.seed_claims`.
    print("\\n".join(v.summary for v in verdicts))
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

__all__ = [
    "Above",
    "Cell",
    "Claim",
    "Difference",
    "FractionDefined",
    "MeanOverSeeds",
    "Measurement",
    "OneOf",
    "Quantity",
    "Ratio",
    "Sample",
    "Statistic",
    "Verdict",
    "aggregate",
    "applicable",
    "defined_value",
    "difference_at",
    "format_mean_std",
    "format_verdicts",
    "fraction_defined",
    "fraction_undefined",
    "judge",
    "judge_all",
    "ratio_at",
    "value_at",
    "verdict_record",
]

Row = Mapping[str, Any]
Direction = Literal["<=", ">="]
Status = Literal["holds", "fails", "undefined"]


# --- numbers of rows ------------------------------------------------------------------------


def defined_value(row: Row, value: str) -> float | None:
    """The number in column ``value`` of ``row``, or ``None`` where it is undefined.

    Undefined: the row's ``defined`` column is ``False``, or the cell is missing, ``None`` or
    NaN. A cell holding anything else than a number (text, a bool) raises ``ValueError``.
    """
    if row.get("defined") is False:
        return None
    cell = row.get(value)
    if cell is None:
        return None
    if isinstance(cell, bool) or not isinstance(cell, numbers.Real):
        raise ValueError(f"column {value!r} must hold numbers, got {cell!r}")
    number = float(cell)
    return None if math.isnan(number) else number


def _mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample std (ddof = 1; ``None`` for fewer than two values) of ``values``."""
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _seed(row: Row) -> int:
    seed = row.get("seed")
    return 0 if seed is None else int(seed)


def aggregate(rows: Sequence[Row], by: Sequence[str], value: str) -> list[dict[str, Any]]:
    """Rows grouped by the ``by`` columns, pooling seeds, with statistics of ``value``.

    Each group (in order of first appearance) gives its ``by`` values and ``n`` (rows whose
    value is defined, see :func:`defined_value`), ``mean``, ``std`` (sample std, ddof = 1;
    ``None`` for ``n < 2``), ``min``, ``max`` (``None`` for ``n = 0``) and ``undefined`` (rows
    whose value is not). ``seed`` cannot be a group column: the groups pool seeds.

    Example::

        aggregate(rows, by=("encoding", "multiplier"), value="ppl")
    """
    if "seed" in by:
        raise ValueError("by must not hold 'seed': aggregate pools the seeds of a group")
    groups: dict[tuple[Any, ...], list[float | None]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(c) for c in by), []).append(defined_value(row, value))
    table = []
    for key, values in groups.items():
        defined = [v for v in values if v is not None]
        mean, std = _mean_std(defined) if defined else (None, None)
        table.append(
            {
                **dict(zip(by, key, strict=True)),
                "n": len(defined),
                "mean": mean,
                "std": std,
                "min": min(defined, default=None),
                "max": max(defined, default=None),
                "undefined": len(values) - len(defined),
            }
        )
    return table


def format_mean_std(mean: float | None, std: float | None, digits: int = 3) -> str:
    """``"3.210 ± 0.050"``; ``"3.210"`` without a std (one seed); ``"–"`` if undefined."""
    if mean is None or math.isnan(mean):
        return "–"
    text = f"{mean:.{digits}f}"
    return text if std is None or math.isnan(std) else f"{text} ± {std:.{digits}f}"


# --- cells of the result table, per seed ----------------------------------------------------


@dataclass(frozen=True)
class Above:
    """Where-condition: the column holds a number greater than ``bound`` (``multiplier > 1``)."""

    bound: float

    def __call__(self, cell: Any) -> bool:
        return (
            isinstance(cell, numbers.Real)
            and not isinstance(cell, bool)
            and float(cell) > self.bound
        )

    def __str__(self) -> str:
        return f">{self.bound:g}"


@dataclass(frozen=True)
class OneOf:
    """Where-condition: the column holds one of ``values``."""

    values: tuple[Any, ...]

    def __call__(self, cell: Any) -> bool:
        return cell in self.values

    def __str__(self) -> str:
        return "|".join(str(v) for v in self.values)


def _matches(row: Row, experiment: str, where: Mapping[str, Any]) -> bool:
    if row.get("experiment") != experiment:
        return False
    for column, want in where.items():
        cell = row.get(column)
        if not (want(cell) if isinstance(want, Above | OneOf) else cell == want):
            return False
    return True


def _where_text(where: Mapping[str, Any]) -> str:
    return ", ".join(f"{column}={want}" for column, want in where.items())


class Sample(NamedTuple):
    """One seed's value (``None``: undefined) and the ``mean_over`` keys it averages."""

    value: float | None
    over: frozenset[tuple[Any, ...]]


class Quantity(Protocol):
    """A number per seed computed from rows, with a label saying what it is."""

    @property
    def label(self) -> str: ...

    def per_seed(self, rows: Sequence[Row]) -> dict[int, Sample]: ...


_ONE = frozenset({()})


@dataclass(frozen=True)
class Cell:
    """Column ``value`` of the rows of ``experiment`` matching ``where``, per seed.

    ``where`` maps columns to a value (equality), :class:`Above` or :class:`OneOf`. Within one
    seed the matching rows are averaged over ``mean_over`` (e.g. ``("length",)`` for the mean
    over test lengths); without ``mean_over`` a seed must match one row. Two rows of one seed
    with the same ``mean_over`` values raise ``ValueError`` (``where`` is missing a column).
    A seed with an undefined row is undefined.
    """

    experiment: str
    where: Mapping[str, Any] = field(hash=False)
    value: str
    mean_over: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        text = f"{self.value}[{_where_text(self.where)}]"
        return f"mean over {'/'.join(self.mean_over)} of {text}" if self.mean_over else text

    def per_seed(self, rows: Sequence[Row]) -> dict[int, Sample]:
        cells: dict[int, dict[tuple[Any, ...], float | None]] = {}
        for row in rows:
            if not _matches(row, self.experiment, self.where):
                continue
            seed, key = _seed(row), tuple(row.get(c) for c in self.mean_over)
            cell = cells.setdefault(seed, {})
            if key in cell:
                raise ValueError(
                    f"{self.experiment} {self.label}: several rows for seed {seed}"
                    + (f" and {dict(zip(self.mean_over, key, strict=True))}" if key else "")
                    + "; add the column that tells them apart to where"
                )
            cell[key] = defined_value(row, self.value)
        samples = {}
        for seed, cell in sorted(cells.items()):
            defined = [v for v in cell.values() if v is not None]
            mean = math.fsum(defined) / len(defined) if len(defined) == len(cell) else None
            samples[seed] = Sample(mean, frozenset(cell))
        return samples


def _paired(
    left: Quantity,
    right: Quantity,
    rows: Sequence[Row],
    op: Callable[[float, float], float | None],
) -> dict[int, Sample]:
    """``op`` of two quantities per seed present in both; undefined where either is, or where
    they average different ``mean_over`` keys (e.g. different test lengths)."""
    a, b = left.per_seed(rows), right.per_seed(rows)
    samples = {}
    for seed in sorted(a.keys() & b.keys()):
        x, y = a[seed].value, b[seed].value
        same_keys = a[seed].over == b[seed].over
        value = op(x, y) if x is not None and y is not None and same_keys else None
        samples[seed] = Sample(value, a[seed].over)
    return samples


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` per seed (undefined where the denominator is 0)."""

    numerator: Quantity
    denominator: Quantity

    @property
    def label(self) -> str:
        return f"({self.numerator.label}) / ({self.denominator.label})"

    def per_seed(self, rows: Sequence[Row]) -> dict[int, Sample]:
        return _paired(self.numerator, self.denominator, rows, lambda x, y: x / y if y else None)


@dataclass(frozen=True)
class Difference:
    """``minuend - subtrahend`` per seed."""

    minuend: Quantity
    subtrahend: Quantity

    @property
    def label(self) -> str:
        return f"({self.minuend.label}) − ({self.subtrahend.label})"

    def per_seed(self, rows: Sequence[Row]) -> dict[int, Sample]:
        return _paired(self.minuend, self.subtrahend, rows, lambda x, y: x - y)


@dataclass(frozen=True)
class FractionDefined:
    """Per seed, the fraction of matching rows whose ``value`` is defined (or, with
    ``undefined=True``, undefined); a seed with no matching row is absent."""

    experiment: str
    where: Mapping[str, Any] = field(hash=False)
    value: str
    undefined: bool = False

    @property
    def label(self) -> str:
        kind = "undefined" if self.undefined else "defined"
        return f"fraction {kind} of {self.value}[{_where_text(self.where)}]"

    def per_seed(self, rows: Sequence[Row]) -> dict[int, Sample]:
        counts: dict[int, list[int]] = {}
        for row in rows:
            if _matches(row, self.experiment, self.where):
                hit = (defined_value(row, self.value) is None) == self.undefined
                counts.setdefault(_seed(row), []).append(int(hit))
        return {s: Sample(sum(c) / len(c), _ONE) for s, c in sorted(counts.items())}


# --- statistics: a quantity summarized over seeds -------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """A statistic across seeds: ``value`` (mean), ``std`` (ddof = 1, ``None`` for one seed),
    ``n`` (seeds) and ``detail`` (what was computed, with the per-seed numbers)."""

    value: float
    std: float | None
    n: int
    detail: str


Statistic = Callable[[Sequence[Row]], Measurement | None]


@dataclass(frozen=True)
class MeanOverSeeds:
    """The statistic of a :class:`Quantity`: its mean ± std over seeds, ``None`` when no seed
    has it or some seed's value is undefined."""

    quantity: Quantity

    def __call__(self, rows: Sequence[Row]) -> Measurement | None:
        samples = self.quantity.per_seed(rows)
        values = [s.value for s in samples.values()]
        if not values or any(v is None or math.isnan(v) for v in values):
            return None
        defined = [v for v in values if v is not None]
        mean, std = _mean_std(defined)
        seeds = ", ".join(f"seed {s} {v:.4g}" for s, v in zip(samples, defined, strict=True))
        spread = "" if std is None else f" ± {std:.4g}"
        detail = f"{self.quantity.label}: {seeds}; mean {mean:.4g}{spread} (n={len(defined)})"
        return Measurement(mean, std, len(defined), detail)


def value_at(
    experiment: str, where: Mapping[str, Any], value: str, mean_over: Sequence[str] = ()
) -> Statistic:
    """Mean over seeds of one cell (:class:`Cell`)."""
    return MeanOverSeeds(Cell(experiment, dict(where), value, tuple(mean_over)))


def ratio_at(
    experiment: str,
    where: Mapping[str, Any],
    value: str,
    numerator_where: Mapping[str, Any],
    denominator_where: Mapping[str, Any],
    mean_over: Sequence[str] = (),
) -> Statistic:
    """Mean over seeds of the per-seed ratio of two cells, each ``where`` updated with (and
    overridden by) its own conditions. E.g. ALiBi's ppl at 4×T over its ppl at T::

        ratio_at("extrapolate", {"encoding": "alibi"}, "ppl", {"multiplier": 4.0},
                 {"multiplier": 1.0})
    """
    over = tuple(mean_over)
    top = Cell(experiment, {**where, **numerator_where}, value, over)
    bottom = Cell(experiment, {**where, **denominator_where}, value, over)
    return MeanOverSeeds(Ratio(top, bottom))


def difference_at(
    experiment: str,
    where: Mapping[str, Any],
    value: str,
    minuend_where: Mapping[str, Any],
    subtrahend_where: Mapping[str, Any],
    mean_over: Sequence[str] = (),
) -> Statistic:
    """Mean over seeds of the per-seed difference of two cells (as :func:`ratio_at`)."""
    over = tuple(mean_over)
    left = Cell(experiment, {**where, **minuend_where}, value, over)
    right = Cell(experiment, {**where, **subtrahend_where}, value, over)
    return MeanOverSeeds(Difference(left, right))


def fraction_defined(experiment: str, where: Mapping[str, Any], value: str) -> Statistic:
    """Mean over seeds of the fraction of matching rows whose ``value`` is defined."""
    return MeanOverSeeds(FractionDefined(experiment, dict(where), value))


def fraction_undefined(experiment: str, where: Mapping[str, Any], value: str) -> Statistic:
    """Mean over seeds of the fraction of matching rows whose ``value`` is undefined."""
    return MeanOverSeeds(FractionDefined(experiment, dict(where), value, undefined=True))


# --- claims and verdicts --------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A published finding checked on lab rows (see the module docstring for the rule).

    Args:
        name: identifier.
        text: the claim in words, its threshold explained.
        paper: short citation and arXiv link.
        published: the paper's numbers behind the claim, with table.
        experiment: the experiment whose rows the statistic reads.
        statistic: rows -> :class:`Measurement`, or ``None`` when the rows cannot decide.
        threshold, direction: the mean must be ``>=`` or ``<=`` the threshold.
        margin_in_std: ``k ≥ 0``: the mean must clear the threshold by ``k`` stds.
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

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must be a non-empty string")
        if self.direction not in ("<=", ">="):
            raise ValueError(f"direction must be '<=' or '>=', got {self.direction!r}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be a finite number, got {self.threshold}")
        if not (math.isfinite(self.margin_in_std) and self.margin_in_std >= 0):
            raise ValueError(
                f"margin_in_std must be a finite number >= 0, got {self.margin_in_std}"
            )


@dataclass(frozen=True)
class Verdict:
    """The judgement of one claim: ``status``, the measurement (``None`` if undefined) and a
    one-line ``summary``."""

    claim: str
    status: Status
    measurement: Measurement | None
    summary: str


def judge(claim: Claim, rows: Sequence[Row]) -> Verdict:
    """Judge ``claim`` on the rows of its experiment among ``rows``."""
    own = [r for r in rows if r.get("experiment") == claim.experiment]
    m = claim.statistic(own)
    k = claim.margin_in_std
    if m is None or math.isnan(m.value):
        why = f"no {claim.experiment!r} rows" if not own else "rows missing or undefined"
        return Verdict(claim.name, "undefined", None, f"{claim.name}: undefined ({why})")
    measured = f"{m.value:.4g}" + ("" if m.std is None else f" ± {m.std:.4g}") + f" (n={m.n})"
    if k > 0 and (m.std is None or math.isnan(m.std)):
        text = f"{claim.name}: undefined ({measured}; a margin of {k:g} std needs 2+ seeds)"
        return Verdict(claim.name, "undefined", m, text)
    margin = k * m.std if k > 0 and m.std is not None else 0.0
    if claim.direction == ">=":
        bound, holds = claim.threshold + margin, m.value >= claim.threshold + margin
    else:
        bound, holds = claim.threshold - margin, m.value <= claim.threshold - margin
    target = f"{claim.threshold:g}"
    if k > 0:
        target += f" {'+' if claim.direction == '>=' else '−'} {k:g} std = {bound:.4g}"
    status: Status = "holds" if holds else "fails"
    summary = f"{claim.name}: {status}: {measured} {claim.direction} {target}"
    return Verdict(claim.name, status, m, summary)


def judge_all(claims: Sequence[Claim], rows: Sequence[Row]) -> list[Verdict]:
    """:func:`judge` of each claim, in order."""
    return [judge(claim, rows) for claim in claims]


def verdict_record(claim: Claim, verdict: Verdict) -> dict[str, Any]:
    """One claim and its verdict as plain JSON data (``claims.json``, the report's table)."""
    m = verdict.measurement
    return {
        "name": claim.name,
        "text": claim.text,
        "paper": claim.paper,
        "published": claim.published,
        "status": verdict.status,
        "value": None if m is None else m.value,
        "std": None if m is None else m.std,
        "seeds": None if m is None else m.n,
        "direction": claim.direction,
        "threshold": claim.threshold,
        "detail": None if m is None else m.detail,
        "summary": verdict.summary,
    }


def format_verdicts(records: Sequence[Mapping[str, Any]]) -> str:
    """The verdicts as terminal lines: ``HOLDS``/``FAILS``/``undefined``, then the claim."""
    lines = [f"claims ({len(records)}):"] if records else []
    for record in records:
        mark = {"holds": "HOLDS", "fails": "FAILS"}.get(record["status"], "undefined")
        lines.append(f"  {mark:<9} {record['summary']}")
        lines.append(f"            paper: {record['published']}")
    return "\n".join(lines)


def _selections(node: object) -> list[Mapping[str, Any]]:
    """The ``where`` mappings of every cell a statistic reads."""
    if isinstance(node, (Cell, FractionDefined)):
        return [node.where]
    found: list[Mapping[str, Any]] = []
    for name in ("quantity", "numerator", "denominator", "minuend", "subtrahend"):
        child = getattr(node, name, None)
        if child is not None:
            found += _selections(child)
    return found


def applicable(claim: Claim, rows: Sequence[Row]) -> bool:
    """False when the rows cannot bear on ``claim`` at all: a value one of its cells selects
    by equality (an encoding, a method) appears in no row of its experiment, as when a run
    leaves that encoding out. Such a claim is not tested by these rows, which is not the
    same as undefined (rows present but NaN, or missing for some seeds)."""
    own = [row for row in rows if row.get("experiment") == claim.experiment]
    for where in _selections(claim.statistic):
        for column, value in where.items():
            if isinstance(value, (Above, OneOf)):
                continue
            if not any(row.get(column) == value for row in own):
                return False
    return True

"""Numbers of lab result rows: a value per seed, then its mean ± std over seeds.

The statistics the seed claims (:mod:`posenc.lab.claims`) are judged on, and the aggregation
the tables use. A :class:`Quantity` gives one number per seed (a :class:`Cell` of the result
table, a :class:`Ratio` or :class:`Difference` of two, a :class:`FractionDefined`), with its
standard error within the seed where the rows carry one (a ``<value>_se`` column:
:func:`cell_se`); :class:`MeanOverSeeds` summarizes it as a :class:`Measurement`.

Seeds: every row belongs to the seed in its ``seed`` column (rows without one are seed 0). A
statistic is computed per seed, then summarized over seeds. Two cells combined in a ratio or a
difference are paired by seed; a seed present on one side only is left out (a run not done),
but a seed whose cell is undefined makes the whole statistic undefined (a run that went wrong is
never dropped silently).

Example::

    m = ratio_at("extrapolate", {"encoding": "alibi"}, "ppl", {"multiplier": 4.0},
                 {"multiplier": 1.0})(rows)
    print(m.value, m.std, m.n, m.se, m.spread)
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
    "Difference",
    "FractionDefined",
    "MeanOverSeeds",
    "Measurement",
    "OneOf",
    "Quantity",
    "Ratio",
    "Sample",
    "Statistic",
    "aggregate",
    "cell_se",
    "defined_value",
    "difference_at",
    "format_mean_std",
    "fraction_defined",
    "fraction_undefined",
    "ratio_at",
    "value_at",
]

Row = Mapping[str, Any]
Spread = Literal["seeds", "windows"]


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


def cell_se(row: Row, value: str) -> float | None:
    """The standard error of column ``value`` within its seed: column ``<value>_se`` (e.g.
    ``ppl_se``, the spread over evaluation windows), ``None`` where absent, empty or NaN; a
    negative or non-numeric one raises ``ValueError``."""
    cell = row.get(f"{value}_se")
    if cell is None:
        return None
    if isinstance(cell, bool) or not isinstance(cell, numbers.Real) or cell < 0:
        raise ValueError(f"column {value}_se must hold numbers >= 0, got {cell!r}")
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
    """One seed's value (``None``: undefined), the ``mean_over`` keys it averages and its
    standard error within the seed (``None``: unknown; see :func:`cell_se`)."""

    value: float | None
    over: frozenset[tuple[Any, ...]]
    se: float | None = None


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
    A seed with an undefined row is undefined. A seed's standard error is ``√Σse² / k`` of
    its ``k`` rows' :func:`cell_se`, unknown if one of them is.
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
        cells: dict[int, dict[tuple[Any, ...], tuple[float | None, float | None]]] = {}
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
            cell[key] = (defined_value(row, self.value), cell_se(row, self.value))
        samples = {}
        for seed, cell in sorted(cells.items()):
            defined = [v for v, _ in cell.values() if v is not None]
            errors = [e for _, e in cell.values() if e is not None]
            mean = math.fsum(defined) / len(defined) if len(defined) == len(cell) else None
            se = math.sqrt(math.fsum(e * e for e in errors)) / len(cell)
            samples[seed] = Sample(mean, frozenset(cell), se if len(errors) == len(cell) else None)
        return samples


def _paired(
    left: Quantity,
    right: Quantity,
    rows: Sequence[Row],
    op: Callable[[float, float], float | None],
    op_se: Callable[[float, float, float, float], float],
) -> dict[int, Sample]:
    """``op`` of two quantities per seed present in both; undefined where either is, or where
    they average different ``mean_over`` keys (e.g. different test lengths). Its standard
    error is ``op_se(x, y, se_x, se_y)`` where both sides have one."""
    a, b = left.per_seed(rows), right.per_seed(rows)
    samples = {}
    for seed in sorted(a.keys() & b.keys()):
        (x, _, sx), (y, _, sy) = a[seed], b[seed]
        same_keys = a[seed].over == b[seed].over
        value = op(x, y) if x is not None and y is not None and same_keys else None
        known = value is not None and sx is not None and sy is not None
        se = op_se(x, y, sx, sy) if known else None  # type: ignore[arg-type]
        samples[seed] = Sample(value, a[seed].over, se)
    return samples


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` per seed (undefined where the denominator is 0); standard
    error by the delta method, ``√((se_x / y)² + (x · se_y / y²)²)``."""

    numerator: Quantity
    denominator: Quantity

    @property
    def label(self) -> str:
        return f"({self.numerator.label}) / ({self.denominator.label})"

    def per_seed(self, rows: Sequence[Row]) -> dict[int, Sample]:
        return _paired(
            self.numerator,
            self.denominator,
            rows,
            lambda x, y: x / y if y else None,
            lambda x, y, sx, sy: math.hypot(sx / y, x * sy / (y * y)),
        )


@dataclass(frozen=True)
class Difference:
    """``minuend - subtrahend`` per seed; standard error ``√(se_x² + se_y²)``."""

    minuend: Quantity
    subtrahend: Quantity

    @property
    def label(self) -> str:
        return f"({self.minuend.label}) − ({self.subtrahend.label})"

    def per_seed(self, rows: Sequence[Row]) -> dict[int, Sample]:
        return _paired(
            self.minuend,
            self.subtrahend,
            rows,
            lambda x, y: x - y,
            lambda x, y, sx, sy: math.hypot(sx, sy),
        )


@dataclass(frozen=True)
class FractionDefined:
    """Per seed, the fraction of matching rows whose ``value`` is defined (or, with
    ``undefined=True``, undefined); a seed with no matching row is absent. A count of rows,
    not a score of test text: exact within its seed (standard error 0)."""

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
        return {s: Sample(sum(c) / len(c), _ONE, 0.0) for s, c in sorted(counts.items())}


# --- statistics: a quantity summarized over seeds -------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """A statistic across seeds: ``value`` (mean), ``std`` (ddof = 1, ``None`` for one seed),
    ``n`` (seeds), ``detail`` (what was computed, with the per-seed numbers), and ``se``, the
    standard error of ``value`` the verdict weighs the margin against, with ``spread`` saying
    what it is over (``"seeds"``: ``std / √n``; ``"windows"``: one seed's evaluation windows;
    ``None``: unknown)."""

    value: float
    std: float | None
    n: int
    detail: str
    se: float | None = None
    spread: Spread | None = None

    def __post_init__(self) -> None:
        if (self.se is None) != (self.spread is None):
            raise ValueError(f"se and spread must be given together, got {self.se}, {self.spread}")
        if self.spread == "seeds" and self.n < 2:
            raise ValueError(f"spread 'seeds' needs n >= 2, got n={self.n}")


Statistic = Callable[[Sequence[Row]], Measurement | None]


@dataclass(frozen=True)
class MeanOverSeeds:
    """The statistic of a :class:`Quantity`: its mean ± std over seeds, ``None`` when no seed
    has it or some seed's value is undefined. Its standard error: ``std / √n`` for two or more
    seeds, else the seed's own (over evaluation windows) when known."""

    quantity: Quantity

    def __call__(self, rows: Sequence[Row]) -> Measurement | None:
        samples = self.quantity.per_seed(rows)
        values = [s.value for s in samples.values()]
        if not values or any(v is None or math.isnan(v) for v in values):
            return None
        defined = [v for v in values if v is not None]
        n = len(defined)
        mean, std = _mean_std(defined)
        seeds = ", ".join(f"seed {s} {v:.4g}" for s, v in zip(samples, defined, strict=True))
        spread = "" if std is None else f" ± {std:.4g}"
        detail = f"{self.quantity.label}: {seeds}; mean {mean:.4g}{spread} (n={n})"
        if std is not None:
            return Measurement(mean, std, n, detail, std / math.sqrt(n), "seeds")
        (window_se,) = (s.se for s in samples.values())
        if window_se is None:
            return Measurement(mean, std, n, detail)
        detail += f"; se {window_se:.4g} over evaluation windows"
        return Measurement(mean, std, n, detail, window_se, "windows")


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

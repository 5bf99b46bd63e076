"""Seed claims: published findings stated as checks on lab result rows, judged with their noise.

A :class:`Claim` is a paper's finding in words, the published number it rests on, and a
statistic of the result rows (a :class:`Measurement`: mean ± std across seeds, and the
standard error it is judged against) with a threshold. :func:`judge` gives its
:class:`Verdict`. The **margin** is how far the mean clears the bound, signed so that positive
is the claim's side: ``mean − bound`` for direction ``">="``, ``bound − mean`` for ``"<="``,
where ``bound = threshold ± k·std`` with ``k = margin_in_std`` (0 by default: the threshold
itself; a claim with ``k > 0`` asks for an effect of ``k`` seed stds and needs two seeds). The
**noise** is a one-sided 95 % confidence half-width of the mean, ``q · se``:

- with ``n ≥ 2`` seeds, ``se = std / √n`` over seeds and ``q`` the 95 % quantile of Student's
  t with ``n − 1`` degrees of freedom (6.31 for 2 seeds, 2.92 for 3, 2.13 for 5, 1.83 for 10):
  with few seeds the std is itself a guess, and t widens the bound for that (a normal
  ``q = 1.645`` would let a two-seed claim on its bound hold by chance 17 % of the time, not 5);
- with one seed, the spread over evaluation windows when the rows carry it: a cell's
  standard error is the column ``<value>_se`` of its row (``ppl_se`` beside ``ppl``: the
  standard error of the mean over the test windows), carried through means over rows
  (``√Σse² / k``), differences (``√(se₁² + se₂²)``) and ratios (delta method), treating the
  cells as independent. Cells scored on the same windows are positively correlated, so this
  overstates the noise of a difference or ratio: it errs toward undecided. ``q = 1.645``
  (normal: a cell's windows are many). This says the trained model would give the same
  verdict on more test text, not that another seed would: it is weaker evidence than seeds.
  A fraction of rows defined (:class:`FractionDefined`) is exact within a seed (se 0).

Then the verdict:

- **holds** when ``margin ≥ noise``: the claim's side even at the far end of the interval;
- **fails** when ``margin < −noise``;
- **undecided** when ``−noise ≤ margin < noise``: the data cannot tell, or when there is no
  noise to judge against (one seed and no ``<value>_se`` column: "one seed, no spread");
- **undefined** when the rows cannot decide at all: the statistic returns ``None`` (rows
  missing, a cell undefined in some seed, such as a learned table past ``T`` or a NaN loss),
  or ``k > 0`` with one seed.

With zero noise (identical seeds, exact fractions) the mean alone decides, a mean on the bound
holding. Each wrong decision (holds when the true mean sits on the bound, or fails) has at
most 5 % probability under the usual normal model; the verdict's ``margin``, ``noise`` and
``n`` are reported beside it.

Seeds: every row belongs to the seed in its ``seed`` column (rows without one are seed 0). A
statistic is computed per seed, then summarized over seeds. Two cells combined in a ratio or a
difference are paired by seed; a seed present on one side only is left out (a run not done),
but a seed whose cell is undefined makes the whole statistic undefined (a run that went wrong is
never dropped silently).

Example::

    verdicts = judge_all(SEED_CLAIMS, read_results_csv("runs/extrapolate/results.csv"))
    print("\\n".join(v.summary for v in verdicts))

The catalogue of seed claims is :mod:`posenc.lab.seed_claims`.
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
    "cell_se",
    "count_verdicts",
    "defined_value",
    "difference_at",
    "format_mean_std",
    "format_verdicts",
    "fraction_defined",
    "fraction_undefined",
    "judge",
    "judge_all",
    "noise_quantile",
    "ratio_at",
    "value_at",
    "verdict_record",
]

Row = Mapping[str, Any]
Direction = Literal["<=", ">="]
Status = Literal["holds", "fails", "undecided", "undefined"]
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


# one-sided 95 % quantiles of Student's t, by degrees of freedom 1..30
_T95 = (6.3138, 2.9200, 2.3534, 2.1318, 2.0150, 1.9432, 1.8946, 1.8595, 1.8331, 1.8125,
        1.7959, 1.7823, 1.7709, 1.7613, 1.7531, 1.7459, 1.7396, 1.7341, 1.7291, 1.7247,
        1.7207, 1.7171, 1.7139, 1.7109, 1.7081, 1.7056, 1.7033, 1.7011, 1.6991, 1.6973)  # fmt: skip
_Z95 = 1.6448536269514722


def noise_quantile(df: int | None) -> float:
    """The one-sided 95 % quantile the noise is ``q · se`` with: Student's t with ``df``
    degrees of freedom (a table to 30, then the Cornish-Fisher expansion, within 1e-4 of the
    exact value), or the normal's 1.645 for ``df=None`` (a known standard error)."""
    if df is None:
        return _Z95
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be a positive int or None, got {df!r}")
    if df <= len(_T95):
        return _T95[df - 1]
    z = _Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


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
    """The judgement of one claim: ``status``, the measurement (``None`` if undefined), a
    one-line ``summary``, the ``margin`` (positive: the claim's side of its bound) and the
    ``noise`` it was weighed against (``q · se``; ``None`` when unknown)."""

    claim: str
    status: Status
    measurement: Measurement | None
    summary: str
    margin: float | None = None
    noise: float | None = None


def _noise(m: Measurement) -> tuple[float, str] | None:
    """``q · se`` of the module docstring's rule and how it was formed, ``None`` if unknown."""
    if m.se is None or m.spread is None:
        return None
    q = noise_quantile(m.n - 1 if m.spread == "seeds" else None)
    over = f"{m.n} seeds" if m.spread == "seeds" else "windows"
    return q * m.se, f"{q:.3g} × se {m.se:.3g} over {over}"


def judge(claim: Claim, rows: Sequence[Row]) -> Verdict:
    """Judge ``claim`` on the rows of its experiment among ``rows`` (the rule: module
    docstring). The summary reads ``name: status: mean ± std (n=…) >= bound; margin …``."""
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
    sign = 1.0 if claim.direction == ">=" else -1.0
    bound = claim.threshold + sign * (k * m.std if k > 0 and m.std is not None else 0.0)
    margin = sign * (m.value - bound)
    target = f"{claim.threshold:g}"
    if k > 0:
        target += f" {'+' if sign > 0 else '−'} {k:g} std = {bound:.4g}"
    noise = _noise(m)
    status: Status
    if noise is None:
        status, weighed = "undecided", "noise unknown (one seed, no spread)"
    else:
        if margin >= noise[0]:
            status, within = "holds", "beyond"
        elif margin < -noise[0]:
            status, within = "fails", "beyond"
        else:
            status, within = "undecided", "within"
        weighed = f"{within} noise {noise[0]:.3g} = {noise[1]}"
    summary = (
        f"{claim.name}: {status}: {measured} {claim.direction} {target}; "
        f"margin {margin:+.3g} {weighed}"
    )
    return Verdict(claim.name, status, m, summary, margin, None if noise is None else noise[0])


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
        "se": None if m is None else m.se,
        "spread": None if m is None else m.spread,
        "direction": claim.direction,
        "threshold": claim.threshold,
        "margin": verdict.margin,
        "noise": verdict.noise,
        "detail": None if m is None else m.detail,
        "summary": verdict.summary,
    }


#: the terminal's mark of each status (``undefined`` in lower case: no verdict at all)
_MARKS = {"holds": "HOLDS", "fails": "FAILS", "undecided": "UNDECIDED", "undefined": "undefined"}


def count_verdicts(records: Sequence[Mapping[str, Any]]) -> str:
    """``"4 hold, 1 fails, 2 undecided, 0 undefined"``: the records' statuses counted."""
    counts = {status: sum(r.get("status") == status for r in records) for status in _MARKS}
    return (
        f"{counts['holds']} hold, {counts['fails']} fail, {counts['undecided']} undecided, "
        f"{counts['undefined']} undefined"
    )


def format_verdicts(records: Sequence[Mapping[str, Any]]) -> str:
    """The verdicts as terminal lines: a count, then per claim ``HOLDS``/``FAILS``/
    ``UNDECIDED``/``undefined`` and its summary (mean, n, the margin and the noise it was
    weighed against), then the paper's number."""
    lines = [f"claims ({len(records)}: {count_verdicts(records)}):"] if records else []
    for record in records:
        mark = _MARKS.get(record["status"], "undefined")
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

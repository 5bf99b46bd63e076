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

A verdict about an encoding must be one that could have gone the other way, so two gates come
after the rule above (each verdict carries its ``reason`` in words):

- **the control**: a claim names the baseline its paper compares with, or NoPE
  (:class:`Control`). A claim whose statistic is about one encoding alone ("ALiBi is flat past
  T") gives the control's statistic too; the claim **holds** only if the control, run in the
  same experiment, **fails** the same test (threshold, direction and noise). A control that
  holds too ("NoPE is just as flat") or sits within its noise makes the claim undecided; a
  control not run makes it undecided, the reason naming the control to run. A comparative
  claim ("X degrades less than RoPE", a statistic that already pairs X with its baseline)
  names its control without a statistic: it is decided against it directly.
- **the requirements** (:class:`Learned`: "the model learned its data", its eval loss at the
  training length at most :data:`LEARNED_LOSS_FRACTION` of the context-free unigram loss): a
  requirement that fails, or that the rows cannot tell, makes a verdict that would hold or
  fail undecided, with the reason.

A definitional **fact** (``kind="fact"``: a learned table is undefined past ``T``) is judged
the same way but is not a finding about the data: :func:`count_verdicts` and
:func:`format_verdicts` leave facts out of "N of M hold" and the report shows them in their
own table (:func:`is_fact`).

The numbers judged, per seed and over seeds, come from :mod:`posenc.lab.quantities`
(re-exported here).

Example::

    claims = get_experiment("extrapolate").claims
    verdicts = judge_all(claims, read_results_csv("runs/extrapolate/results.csv"))
    print("\\n".join(v.summary for v in verdicts))

Each experiment carries the claims its rows test (``Experiment.claims``, defined in its own
module); :func:`posenc.lab.experiments.all_claims` lists every registered experiment's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from posenc._validate import check_positive_int
from posenc.lab.quantities import (
    Above,
    Cell,
    Difference,
    FractionDefined,
    MeanOverSeeds,
    Measurement,
    OneOf,
    Quantity,
    Ratio,
    Row,
    Sample,
    Statistic,
    aggregate,
    cell_se,
    defined_value,
    difference_at,
    format_mean_std,
    fraction_defined,
    fraction_undefined,
    ratio_at,
    value_at,
)
from posenc.lab.requirements import LEARNED_LOSS_FRACTION, Check, Learned, Reaches, Requirement

__all__ = [
    "LAYERS_COLUMN",
    "LEARNED_LOSS_FRACTION",
    "Above",
    "Cell",
    "Check",
    "Claim",
    "Control",
    "Difference",
    "FractionDefined",
    "Learned",
    "MeanOverSeeds",
    "Measurement",
    "OneOf",
    "Quantity",
    "Ratio",
    "Reaches",
    "Requirement",
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
    "is_fact",
    "judge",
    "judge_all",
    "noise_quantile",
    "ratio_at",
    "value_at",
    "verdict_record",
]

Direction = Literal["<=", ">="]
Status = Literal["holds", "fails", "undecided", "undefined"]
Kind = Literal["claim", "fact"]

#: The result column naming a row's per-layer options (:meth:`posenc.lab.config.ModelArgs.label`:
#: ``"rnope_swa+w64"``, ``"gate"``); empty for a plain transformer. A claim reads only plain
#: transformers' rows unless it is ``layered``.
LAYERS_COLUMN = "schedule"

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
    df = check_positive_int("df (or None)", df)
    if df <= len(_T95):
        return _T95[df - 1]
    z = _Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


# --- controls and requirements --------------------------------------------------------------


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


@dataclass(frozen=True)
class Verdict:
    """The judgement of one claim: ``status``, the measurement (``None`` if undefined), a
    one-line ``summary``, the ``margin`` (positive: the claim's side of its bound) and the
    ``noise`` it was weighed against (``q · se``; ``None`` when unknown), the ``reason`` in
    words (the control's result, a requirement that failed) and the ``control`` it was decided
    against (``None``: none named)."""

    claim: str
    status: Status
    measurement: Measurement | None
    summary: str
    margin: float | None = None
    noise: float | None = None
    reason: str = ""
    control: str | None = None


def _noise(m: Measurement) -> tuple[float, str] | None:
    """``q · se`` of the module docstring's rule and how it was formed, ``None`` if unknown."""
    if m.se is None or m.spread is None:
        return None
    q = noise_quantile(m.n - 1 if m.spread == "seeds" else None)
    over = f"{m.n} seeds" if m.spread == "seeds" else "windows"
    return q * m.se, f"{q:.3g} × se {m.se:.3g} over {over}"


class _Weighed(NamedTuple):
    """One measurement weighed against a claim's bound: status, margin, noise and the words."""

    status: Status
    margin: float | None
    noise: float | None
    text: str


def _measured(m: Measurement) -> str:
    return f"{m.value:.4g}" + ("" if m.std is None else f" ± {m.std:.4g}") + f" (n={m.n})"


def _weigh(claim: Claim, m: Measurement) -> _Weighed:
    """The module docstring's rule for one measurement against ``claim``'s bound; ``text``
    reads ``0.95 ± 0.01 (n=3) <= 1.1; margin +0.15 beyond noise 0.02 = …``."""
    k = claim.margin_in_std
    measured = _measured(m)
    if k > 0 and (m.std is None or math.isnan(m.std)):
        return _Weighed(
            "undefined", None, None, f"{measured}; a margin of {k:g} std needs 2+ seeds"
        )
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
    text = f"{measured} {claim.direction} {target}; margin {margin:+.3g} {weighed}"
    return _Weighed(status, margin, None if noise is None else noise[0], text)


def _control_gate(claim: Claim, control: Control, rows: Sequence[Row]) -> tuple[bool, str]:
    """Whether the control leaves a holding claim holding, and why in words."""
    if control.statistic is None:
        return True, f"decided against {control.label} directly (the statistic compares with it)"
    m = control.statistic(rows)
    if m is None or math.isnan(m.value):
        return False, (
            f"the control {control.label} was not run (its rows are missing or undefined): "
            f"run {control.label} in the same experiment to decide"
        )
    weighed = _weigh(claim, m)
    if weighed.status == "fails":
        return True, f"the control {control.label} fails the same test ({weighed.text})"
    if weighed.status == "holds":
        return False, (
            f"the control {control.label} passes the same test just as well ({weighed.text}), "
            f"so the claim shows nothing that {control.label} does not show too"
        )
    return False, (
        f"the control {control.label} is not told apart from the claim ({weighed.text}): "
        f"only a control that fails the same test can make the claim hold"
    )


def _readable(claim: Claim, rows: Sequence[Row]) -> list[Row]:
    """The rows ``claim`` reads: all of them when it is ``layered``, else the plain
    transformers' (:data:`LAYERS_COLUMN` empty)."""
    return list(rows) if claim.layered else [r for r in rows if not r.get(LAYERS_COLUMN)]


def judge(claim: Claim, rows: Sequence[Row]) -> Verdict:
    """Judge ``claim`` on the rows of its experiment among ``rows`` (the rule: module
    docstring): the measurement against the threshold, then the requirements and the control.
    The summary reads ``name: status: mean ± std (n=…) >= bound; margin …; reason``."""
    rows = _readable(claim, rows)
    own = [r for r in rows if r.get("experiment") == claim.experiment]
    label = None if claim.control is None else claim.control.label
    m = claim.statistic(own)
    if m is None or math.isnan(m.value):
        why = f"no {claim.experiment!r} rows" if not own else "rows missing or undefined"
        text = f"{claim.name}: undefined ({why})"
        return Verdict(claim.name, "undefined", None, text, reason=why, control=label)
    weighed = _weigh(claim, m)
    if weighed.status == "undefined":
        text = f"{claim.name}: undefined ({weighed.text})"
        return Verdict(claim.name, "undefined", m, text, reason=weighed.text, control=label)
    status = weighed.status
    if status == "holds":
        reason = "the measurement clears its bound by more than the noise"
    elif status == "fails":
        reason = "the measurement misses its bound by more than the noise"
    elif weighed.noise is not None:
        reason = "the margin is within the noise"
    else:
        reason = "one seed and no spread over evaluation windows: no noise to weigh against"
    summary = f"{claim.name}: {status}: {weighed.text}"
    checks = [requirement.check(rows) for requirement in claim.requires]
    failed = "; ".join(check.reason for check in checks if check.passed is False)
    unknown = "; ".join(check.reason for check in checks if check.passed is None)
    passed = True
    if status in ("holds", "fails") and failed:  # a model that did not learn decides nothing
        passed, reason = False, failed
    elif failed:  # undecided already: say what else stands in the way
        reason = f"{reason}; {failed}"
    elif status == "holds" and claim.control is not None:
        # a control not run is named before what its missing rows cannot tell
        passed, reason = _control_gate(claim, claim.control, own)
    if passed and status in ("holds", "fails") and unknown:
        passed, reason = False, unknown
    if not passed:
        status = "undecided"
    if claim.requires or claim.control is not None:
        summary = f"{claim.name}: {status}: {weighed.text}; {reason}"
    return Verdict(claim.name, status, m, summary, weighed.margin, weighed.noise, reason, label)


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
        "kind": claim.kind,
        "reason": verdict.reason,
        "control": verdict.control,
    }


#: the terminal's mark of each status (``undefined`` in lower case: no verdict at all)
_MARKS = {"holds": "HOLDS", "fails": "FAILS", "undecided": "UNDECIDED", "undefined": "undefined"}


def is_fact(claim: Claim | Mapping[str, Any]) -> bool:
    """Whether ``claim`` (a :class:`Claim` or its :func:`verdict_record`) is a definitional
    fact, shown apart and never counted among the claims that hold."""
    if isinstance(claim, Claim):
        return claim.kind == "fact"
    return claim.get("kind") == "fact"


def count_verdicts(records: Sequence[Mapping[str, Any]]) -> str:
    """``"4 hold, 1 fail, 2 undecided, 0 undefined"``: the claims' statuses counted, facts
    (:func:`is_fact`) left out."""
    claims = [r for r in records if not is_fact(r)]
    counts = {status: sum(r.get("status") == status for r in claims) for status in _MARKS}
    return (
        f"{counts['holds']} hold, {counts['fails']} fail, {counts['undecided']} undecided, "
        f"{counts['undefined']} undefined"
    )


def _verdict_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for record in records:
        mark = _MARKS.get(record["status"], "undefined")
        lines.append(f"  {mark:<9} {record['summary']}")
        if record.get("control"):
            lines.append(f"            control: {record['control']}")
        lines.append(f"            paper: {record['published']}")
    return lines


def format_verdicts(records: Sequence[Mapping[str, Any]]) -> str:
    """The verdicts as terminal lines: a count of the claims (facts left out), then per claim
    ``HOLDS``/``FAILS``/``UNDECIDED``/``undefined`` and its summary (mean, n, the margin and
    the noise it was weighed against, the reason), the control and the paper's number; then
    the facts (:func:`is_fact`) under their own heading."""
    claims = [r for r in records if not is_fact(r)]
    facts = [r for r in records if is_fact(r)]
    lines = [f"claims ({len(claims)}: {count_verdicts(claims)}):"] if claims else []
    lines += _verdict_lines(claims)
    if facts:
        lines.append(f"facts ({len(facts)}, true by definition, not counted):")
        lines += _verdict_lines(facts)
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
    own = [row for row in _readable(claim, rows) if row.get("experiment") == claim.experiment]
    for where in _selections(claim.statistic):
        for column, value in where.items():
            if isinstance(value, (Above, OneOf)):
                continue
            if not any(row.get(column) == value for row in own):
                return False
    return True

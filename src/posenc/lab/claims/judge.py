"""The rule that judges a claim on lab rows (see :mod:`posenc.lab.claims`): the measurement
against its bound with a one-sided 95 % noise (:func:`noise_quantile`), then the requirements
and the control (:func:`judge`); :func:`applicable` tells whether rows bear on a claim at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from posenc._validate import check_positive_int
from posenc.lab.claims.claim import LAYERS_COLUMN, Claim, Control
from posenc.lab.claims.verdicts import Status, Verdict
from posenc.lab.quantities import Above, Cell, FractionDefined, Measurement, OneOf, Row

__all__ = ["applicable", "judge", "judge_all", "noise_quantile"]

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


def _noise(m: Measurement) -> tuple[float, str] | None:
    """``q · se`` of the rule (:mod:`posenc.lab.claims`) and how it was formed, ``None`` if
    unknown."""
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
    """The rule (:mod:`posenc.lab.claims`) for one measurement against ``claim``'s bound; ``text``
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
    """Judge ``claim`` on the rows of its experiment among ``rows`` (the rule:
    :mod:`posenc.lab.claims`): the measurement against the threshold, then the requirements and
    the control.
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

"""Verdicts (:class:`Verdict`: a claim's status, margin, noise and reason) and their forms:
plain JSON records (:func:`verdict_record`, ``claims.json`` and the report) and terminal lines
(:func:`format_verdicts`), definitional facts (:func:`is_fact`) kept apart from the count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from posenc.lab.claims.claim import Claim
from posenc.lab.quantities import Measurement

__all__ = [
    "Status",
    "Verdict",
    "count_verdicts",
    "format_verdicts",
    "is_fact",
    "verdict_record",
]

Status = Literal["holds", "fails", "undecided", "undefined"]


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

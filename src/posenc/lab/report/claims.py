"""The report page's claims: each with its verdict and what it weighed, then the facts
(:mod:`posenc.lab.report`)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from posenc.lab.claims import LEARNED_LOSS_FRACTION, is_fact
from posenc.lab.report.markup import MARKS, format_number, linked_text
from posenc.lab.results import Row

__all__ = ["claims_section"]


def _weighed(r: Row) -> str:
    """``margin +0.0007 within noise 0.0843 over seeds``: what the verdict weighed; empty for
    records written before verdicts had a margin."""
    margin, noise = r.get("margin"), r.get("noise")
    if margin is None:
        return ""
    text = f"margin {margin:+.3g}"
    if noise is None:
        return f"{text}, noise unknown (one seed, no spread)"
    side = "within" if -noise <= margin < noise else "beyond"
    over = {"seeds": "over seeds", "windows": "over evaluation windows"}.get(
        str(r.get("spread")), ""
    )
    return f"{text} {side} noise {noise:.3g} {over}".rstrip()


def _claims_rows(records: Sequence[Row]) -> str:
    """The table body: verdict, claim and paper, measured (mean ± std over seeds, n, the margin
    and the noise it was weighed against), threshold, why (the reason and the control),
    published."""
    body = []
    for r in records:
        measured = html.escape(format_number(r.get("value")))
        if r.get("value") is not None and r.get("std") is not None:
            measured += f" ± {html.escape(format_number(r['std'], '.2g'))}"
        if r.get("seeds"):
            measured += f" ({r['seeds']} seed{'s' if r['seeds'] > 1 else ''})"
        if _weighed(r):
            measured += f"<br>{html.escape(_weighed(r))}"
        if r.get("detail"):
            measured += f"<br><small>{linked_text(r['detail'])}</small>"
        why = linked_text(r.get("reason") or "")
        if r.get("control"):
            why += f"<br><small>control: {linked_text(r['control'])}</small>"
        status = str(r.get("status"))
        cells = [
            f"<td class='verdict {html.escape(status)}'>"
            f"{MARKS.get(status, linked_text(status))}</td>",
            f"<td>{linked_text(r.get('text'))}<br><small>{linked_text(r.get('paper'))}</small></td>",
            f"<td>{measured}</td>",
            f"<td class='num'>{html.escape(str(r.get('direction', '')))} "
            f"{html.escape(format_number(r.get('threshold'), 'g'))}</td>",
            f"<td>{why}</td>",
            f"<td>{linked_text(r.get('published'))}</td>",
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(
        f"<th>{name}</th>" for name in ("verdict", "claim", "measured", "needs", "why", "published")
    )
    return f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"


def claims_section(records: Sequence[Row]) -> list[str]:
    """The claims, each with its verdict and why (:func:`_claims_rows`), counted without the
    facts; then the facts (true by definition) in their own small table, never counted."""
    if not records:
        return []
    claims = [r for r in records if not is_fact(r)]
    facts = [r for r in records if is_fact(r)]
    counts = {s: sum(r.get("status") == s for r in claims) for s in MARKS}
    lines = [
        f"<h2 id='claims'>Claims: {counts['holds']} of {len(claims)} hold</h2>",
        f"<p>{counts['fails']} fail, {counts['undecided']} undecided, {counts['undefined']} "
        "undefined. The margin is how far the mean clears the threshold (positive: the claim's "
        "side); the noise is a one-sided 95 % bound on the mean's error, Student's t times "
        "the standard error over seeds, or with one seed 1.645 times that over evaluation "
        "windows. A claim holds when the margin is at least the noise, fails when it is below "
        "minus the noise, and is undecided in between or when one seed gives no spread; "
        "undefined when the rows cannot decide. Then two gates, said in the column why: a "
        "claim holds only if its control (NoPE or the baseline the paper names), run in the "
        "same experiment, fails the same test (a control that passes too, or was not run, "
        "leaves it undecided), and only if the models it reads learned their data (eval loss "
        f"at the training length at most {LEARNED_LOSS_FRACTION:g} of the context-free "
        "unigram loss). The paper's number is on the right.</p>",
    ]
    if claims:
        lines.append(f"<table class='claims'>{_claims_rows(claims)}</table>")
    if facts:
        lines += [
            f"<h3 id='facts'>Facts ({len(facts)}, true by definition, not counted above)</h3>",
            f"<table class='claims facts'>{_claims_rows(facts)}</table>",
        ]
    return lines

"""The findings in words: what result rows and training curves say, as sentences with their
margins over seeds (:func:`findings`, each kind of rows read by its :data:`Reader`), and
whether training converged (:func:`last_quarter_fall`). The conventions (losses in nats per
byte, paired margins, the seeds' noise) are in :mod:`posenc.lab.findings`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from posenc.lab.findings._common import Row, display_name, seed_count

__all__ = [
    "CONVERGED_FALL",
    "Reader",
    "extension_findings",
    "extrapolation_findings",
    "findings",
    "last_quarter_fall",
]

#: A training loss that still falls by more than this fraction over the last quarter of the
#: steps has not converged: the findings say so.
CONVERGED_FALL = 0.01


# --- statistics -----------------------------------------------------------------------------


def _mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def _pm(values: Sequence[float], digits: int = 3, sign: bool = False) -> str:
    """``"0.021 ± 0.004"`` (mean ± sample std over the values), the mean alone for one."""
    mean, std = _mean_std(values)
    text = f"{mean:+.{digits}f}" if sign else f"{mean:.{digits}f}"
    return text if std is None else f"{text} ± {std:.{digits}f}"


def _within_noise(values: Sequence[float]) -> bool:
    """Whether the mean of paired differences is within the seeds' one-sided 95 % noise."""
    from posenc.lab.claims import noise_quantile

    if len(values) < 2:
        return True
    mean, std = _mean_std(values)
    assert std is not None
    return abs(mean) <= noise_quantile(len(values) - 1) * std / math.sqrt(len(values))


def _change(value: float) -> str:
    """``"rises 0.02"``, ``"falls 0.13"``."""
    return f"{'rises' if value >= 0 else 'falls'} {abs(value):.3f}"


def _times(multiple: float) -> str:
    return f"{multiple:g}×T"


# --- findings -------------------------------------------------------------------------------


def _losses(rows: Sequence[Row], key: str) -> dict[str, dict[float, dict[Any, float]]]:
    """name (``key`` column) -> length multiple -> seed -> loss, finite losses only."""
    table: dict[str, dict[float, dict[Any, float]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        loss = row.get("loss")
        if not isinstance(loss, (int, float)) or not math.isfinite(loss):
            continue
        multiple = float(row["eval_len"]) / float(row["train_len"])
        table[str(row[key])][multiple][row.get("seed") or 0] = float(loss)
    return table


def _paired(a: Mapping[Any, float], b: Mapping[Any, float]) -> list[float]:
    """``b - a`` for each seed both hold."""
    return [b[seed] - a[seed] for seed in a if seed in b]


def _ranking(table: Mapping[str, Mapping[float, Mapping[Any, float]]], at: float) -> list[str]:
    held = [name for name in table if table[name].get(at)]
    return sorted(held, key=lambda name: statistics.fmean(table[name][at].values()))


def _margin(values: Sequence[float]) -> str:
    text = f"margin {_pm(values)} over {seed_count(len(values))}, paired by seed"
    return text + (", within the seeds' noise" if _within_noise(values) else "")


def extrapolation_findings(rows: Sequence[Row]) -> list[str]:
    """What train-short-test-long rows say (``encoding, seed, train_len, eval_len, loss`` of
    byte-level models): the best encoding at T and at the longest length with paired margins,
    each encoding's change of loss from T to there, the flattest against the best at T."""
    selected = list(rows)
    table = _losses(selected, "encoding")
    multiples = sorted({m for by_length in table.values() for m in by_length})
    if not multiples:
        return []
    train_len = ", ".join(str(t) for t in dict.fromkeys(r["train_len"] for r in selected))
    sentences = []
    at_t = _ranking(table, 1.0)
    if at_t:
        best = at_t[0]
        losses = list(table[best][1.0].values())
        ppl = math.exp(statistics.fmean(losses))
        text = (
            f"At the training length (T = {train_len} bytes), {display_name(best)} predicts best: "
            f"loss {_pm(losses)} nats per byte (perplexity {ppl:.2f}; a uniform guess over the "
            f"256 byte values has loss {math.log(256):.3f})"
        )
        if len(at_t) > 1:
            second = at_t[1]
            gap = _paired(table[best][1.0], table[second][1.0])
            text += (
                f", {statistics.fmean(gap):.3f} below the next, {display_name(second)} "
                f"({_margin(gap)})"
            )
        if "nope" in table and best != "nope" and table["nope"].get(1.0):
            text += (
                f"; NoPE, the control that sees no positions, scores "
                f"{statistics.fmean(table['nope'][1.0].values()):.3f}"
            )
        sentences.append(text + ".")
    far = multiples[-1]
    ranked = _ranking(table, far)
    if far > 1.0 and ranked:
        best = ranked[0]
        losses = list(table[best][far].values())
        text = (
            f"At {_times(far)}, the longest length evaluated, {display_name(best)} predicts best: "
            f"loss {_pm(losses)} nats per byte"
        )
        if len(ranked) > 1:
            second = ranked[1]
            gap = _paired(table[best][far], table[second][far])
            text += (
                f", {statistics.fmean(gap):.3f} below the next, {display_name(second)} "
                f"({_margin(gap)})"
            )
        sentences.append(text + ".")
        rises = {
            name: {
                seed: table[name][far][seed] - loss
                for seed, loss in table[name][1.0].items()
                if seed in table[name][far]
            }
            for name in table
            if table[name].get(1.0) and table[name].get(far)
        }
        rises = {name: by_seed for name, by_seed in rises.items() if by_seed}
        order = sorted(rises, key=lambda name: statistics.fmean(rises[name].values()))
        if order:
            seeds = max(len(by_seed) for by_seed in rises.values())
            listed = "; ".join(
                f"{display_name(name)} {_pm(list(rises[name].values()), sign=True)}"
                for name in order
            )
            text = (
                f"From T to {_times(far)} the loss changes by (nats per byte, mean ± std over "
                f"{seed_count(seeds)}): {listed}"
            )
            undefined = [name for name in table if table[name].get(1.0) and name not in rises]
            if undefined:
                names = ", ".join(display_name(name) for name in undefined)
                text += f". Undefined past T: {names} (a learned table has T positions)"
            sentences.append(text + ".")
            flattest = order[0]
            if at_t and at_t[0] != flattest and at_t[0] in rises:
                best_at_t = at_t[0]
                gap = _paired(rises[flattest], rises[best_at_t])
                sentences.append(
                    f"Past T, {display_name(flattest)}'s loss "
                    f"{_change(statistics.fmean(rises[flattest].values()))} nats per byte while "
                    f"{display_name(best_at_t)}'s, the best at T, "
                    f"{_change(statistics.fmean(rises[best_at_t].values()))}: {_margin(gap)}."
                )
    return sentences


def extension_findings(rows: Sequence[Row]) -> list[str]:
    """What context-extension rows say (``method, stage, seed, train_len, eval_len, loss``):
    the zero-shot methods (stage ``no_ft`` or ``zero``) against plain RoPE at the longest
    length, with paired margins."""
    selected = [r for r in rows if r.get("stage") in ("no_ft", "zero")]
    table = _losses(selected, "method")
    if "rope" not in table:
        return []
    far = max(table["rope"])
    if far <= 1.0:
        return []
    plain = table["rope"][far]
    others = [name for name in _ranking(table, far) if name != "rope"]
    if not others:
        return []
    gains = {name: _paired(table[name][far], plain) for name in others}
    listed = "; ".join(f"{display_name(name)} {_pm(gains[name], sign=True)}" for name in others)
    best = others[0]
    text = (
        f"Zero-shot context extension of the RoPE models (no fine-tuning): at {_times(far)} "
        f"{display_name(best)} does best, loss {_pm(list(table[best][far].values()))} "
        f"nats per byte "
        f"against plain RoPE's {_pm(list(plain.values()))} ({_margin(gains[best])}). "
        f"Loss below plain RoPE's at {_times(far)}, per method (negative: above it): {listed}"
    )
    return [text + "."]


def last_quarter_fall(curve: Sequence[tuple[float, float]]) -> float | None:
    """The relative fall of a training loss over the last quarter of its steps:
    ``(loss(s) − loss(end)) / loss(s)`` with ``s`` the logged step nearest three quarters of
    the last one (each logged loss a mean over its log window); ``None`` for fewer than two
    points or a start of zero.

    Args:
        curve: ``(step, loss)`` pairs.
    """
    points = sorted(curve)
    if len(points) < 2:
        return None
    end_step, end_loss = points[-1]
    _, start_loss = min(points[:-1], key=lambda p: abs(p[0] - 0.75 * end_step))
    if start_loss == 0:
        return None
    return (start_loss - end_loss) / start_loss


def _convergence(curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    falls: list[float] = []
    steps: set[int] = set()
    for records in curves.values():
        curve = [
            (float(r["step"]), float(r["loss"]))
            for r in records
            if r.get("kind") == "train" and isinstance(r.get("loss"), (int, float))
        ]
        fall = last_quarter_fall(curve)
        if fall is not None:
            falls.append(fall)
            steps.add(int(max(step for step, _ in curve)))
    if not falls:
        return []
    length = " or ".join(str(s) for s in sorted(steps))
    median = statistics.median(falls)
    if len(falls) == 1:
        spread = "1 run"
    else:
        spread = f"median of {len(falls)} runs, {_percent(min(falls))} to {_percent(max(falls))}"
    if max(falls) > CONVERGED_FALL:
        still = sum(fall > CONVERGED_FALL for fall in falls)
        return [
            f"Training had not converged: the training loss still fell {_percent(median)} over "
            f"the last quarter of {length} steps ({spread}; {still} of {len(falls)} "
            f"{'run' if len(falls) == 1 else 'runs'} fell more than {_percent(CONVERGED_FALL)}"
            "), so the ranking is of models early in training."
        ]
    return [
        f"Training had converged: the training loss fell {_percent(median)} over the last "
        f"quarter of {length} steps ({spread}), at most {_percent(CONVERGED_FALL)} in every run."
    ]


def _percent(fraction: float) -> str:
    """``0.0512`` -> ``"5.1 %"``."""
    return f"{100 * fraction:.1f} %"


#: What one kind of rows says, as sentences (:attr:`posenc.lab.report.Section.findings`).
Reader = Callable[[Sequence[Row]], list[str]]


def findings(
    rows: Sequence[Row],
    curves: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    readers: Mapping[str, Reader] | None = None,
) -> list[str]:
    """What the numbers say, as plain sentences with their margins over seeds.

    Args:
        rows: result rows (``results.csv`` of one or several runs).
        curves: run name -> its ``metrics.jsonl`` records (the ``train`` records' ``step``
            and ``loss``): whether training converged (:func:`last_quarter_fall`).
        readers: kind of rows (their ``experiment`` column) -> the sentences of those rows
            (each experiment's :attr:`~posenc.lab.report.Section.findings`, such as
            :func:`extrapolation_findings`); kinds without one say nothing.

    Returns:
        the sentences, in order: convergence first (it qualifies every ranking), then each
        reader's on its kind of rows, in the order of ``readers``; empty when nothing applies.
    """
    if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)):
        raise TypeError(f"rows must be a sequence of dicts, got {type(rows).__name__}")
    if curves is not None and not isinstance(curves, Mapping):
        raise TypeError(f"curves must be a mapping of run name to records, got {curves!r}")
    if readers is not None and not isinstance(readers, Mapping):
        raise TypeError(f"readers must be a mapping of kind to function, got {readers!r}")
    sentences = list(_convergence(curves or {}))
    for kind, read in (readers or {}).items():
        selected = [row for row in rows if row.get("experiment") == kind]
        if selected:
            sentences += read(selected)
    return sentences

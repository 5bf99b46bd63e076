"""What a run's numbers say, in words: the findings that lead the report, the data and model
described, and the cross-signal atlas in brief.

:func:`findings` turns result rows (``results.csv``) and training curves (``metrics.jsonl``)
into plain sentences with their margins over seeds, each kind of rows read by its
experiment's reader (:func:`extrapolation_findings`, :func:`extension_findings`): which
encoding predicts best at the training length ``T`` and at the longest length evaluated, how
much each encoding's loss rises from ``T`` to there, what the zero-shot context-extension
methods gain over plain RoPE, and whether training had converged (the relative fall of the
training loss over the last quarter of the steps, :func:`last_quarter_fall`).
:func:`data_and_model` describes the corpus, the model and its training from a run's
``config.json`` and rows. :data:`ATLAS` is docs/results.md §9's answer to "which encoding for
which signal" in brief (tests/lab/test_findings.py checks each entry's numbers against
docs/results.md).

Losses are in nats per byte (the byte-level models' cross-entropy); a margin is the mean ±
sample std over seeds of a difference taken seed by seed (paired), and is called *within the
seeds' noise* when its mean is below the one-sided 95 % bound of
:func:`posenc.lab.claims.noise_quantile` times its standard error.

Example::

    >>> rows = [
    ...     {"experiment": "extrapolate", "encoding": e, "seed": s, "train_len": 64,
    ...      "eval_len": 64 * m, "loss": base + rise * (m - 1) + 0.01 * s}
    ...     for e, base, rise in (("rope", 1.9, 0.3), ("alibi", 2.0, 0.0))
    ...     for s in (0, 1, 2) for m in (1, 8)
    ... ]
    >>> said = findings(rows, readers={"extrapolate": extrapolation_findings})
    >>> print(said[0])  # doctest: +ELLIPSIS
    At the training length (T = 64 bytes), RoPE predicts best: ...
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATLAS",
    "ATLAS_SECTION",
    "CONVERGED_FALL",
    "AtlasEntry",
    "Reader",
    "data_and_model",
    "extension_findings",
    "extrapolation_findings",
    "findings",
    "last_quarter_fall",
]

Row = dict[str, Any]

#: A training loss that still falls by more than this fraction over the last quarter of the
#: steps has not converged: the findings say so.
CONVERGED_FALL = 0.01

#: Display names of the encodings and methods in sentences.
_NAMES = {
    "nope": "NoPE",
    "sinusoidal": "sinusoidal",
    "learned": "learned",
    "rope": "RoPE",
    "alibi": "ALiBi",
    "t5": "T5",
    "pi": "PI",
    "linear": "PI",
    "ntk": "NTK-aware",
    "dynamic_ntk": "dynamic NTK",
    "yarn": "YaRN",
    "llama3": "Llama-3",
    "rerope": "ReRoPE",
}


def _name(key: Any) -> str:
    return _NAMES.get(str(key), str(key))


# --- the atlas ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AtlasEntry:
    """One signal of the cross-signal atlas: the encoding the measurements favour and why.

    Attributes:
        signal: the kind of data and its dimensions.
        answer: the encoding (or rule) the measurements favour, in words.
        margin: the numbers behind it, as docs/results.md gives them.
        section: where docs/results.md measures it.
    """

    signal: str
    answer: str
    margin: str
    section: str


#: docs/results.md's section that answers "which encoding for which signal".
ATLAS_SECTION = "docs/results.md §9, Which encoding for which signal: the atlas"

#: The atlas in brief (docs/results.md §9.4's table, with text from §1 and graphs from §8):
#: tests/lab/test_findings.py checks each entry's numbers against docs/results.md.
ATLAS: tuple[AtlasEntry, ...] = (
    AtlasEntry(
        "text, 1D, past the training length",
        "ALiBi",
        "perplexity 7.602 at T and 7.469 at 8×T, where RoPE rises from 6.649 to 17.748 "
        "(the demo's 3 seeds)",
        "§1, The demo",
    ),
    AtlasEntry(
        "image, 2D",
        "any encoding: having one matters, which one barely does",
        "eight of nine within 1.6 points; none 21 points lower",
        "§4-5, §9.4",
    ),
    AtlasEntry(
        "audio as frames, 1D",
        "RoPE",
        "0.989 in distribution; keeps 0.965 at 2×",
        "§9.1, §9.4",
    ),
    AtlasEntry(
        "audio as patches, 2D",
        "axial RoPE",
        "best at 4× (0.70); without an encoding a patch loses its band (0.57)",
        "§9.1, §9.4",
    ),
    AtlasEntry(
        "video, 3D",
        "a relative, axis-separated rotary (axial RoPE, M-RoPE, ComRoPE-AP) or 3D sin-cos",
        "unsettled in distribution (unconverged runs); LieRE and VideoRoPE's diagonal fail "
        "beyond the trained size",
        "§9.2, §9.4",
    ),
    AtlasEntry(
        "image + text + actions (VLA)",
        "M-RoPE / axial RoPE: number the image by (row, column)",
        "0.99-1.00 vs flat 0.89",
        "§9.3, §9.4",
    ),
    AtlasEntry(
        "graphs (CSL)",
        "SignNet or random-walk return probabilities",
        "100 %; Laplacian eigenvectors with sign flips 95.1 %; no encoding 10.0 % (chance)",
        "§8",
    ),
)


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


def _seeds(count: int) -> str:
    return f"{count} seed{'s' if count != 1 else ''}"


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
    text = f"margin {_pm(values)} over {_seeds(len(values))}, paired by seed"
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
            f"At the training length (T = {train_len} bytes), {_name(best)} predicts best: "
            f"loss {_pm(losses)} nats per byte (perplexity {ppl:.2f}; a uniform guess over the "
            f"256 byte values has loss {math.log(256):.3f})"
        )
        if len(at_t) > 1:
            second = at_t[1]
            gap = _paired(table[best][1.0], table[second][1.0])
            text += (
                f", {statistics.fmean(gap):.3f} below the next, {_name(second)} ({_margin(gap)})"
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
            f"At {_times(far)}, the longest length evaluated, {_name(best)} predicts best: "
            f"loss {_pm(losses)} nats per byte"
        )
        if len(ranked) > 1:
            second = ranked[1]
            gap = _paired(table[best][far], table[second][far])
            text += (
                f", {statistics.fmean(gap):.3f} below the next, {_name(second)} ({_margin(gap)})"
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
                f"{_name(name)} {_pm(list(rises[name].values()), sign=True)}" for name in order
            )
            text = (
                f"From T to {_times(far)} the loss changes by (nats per byte, mean ± std over "
                f"{_seeds(seeds)}): {listed}"
            )
            undefined = [name for name in table if table[name].get(1.0) and name not in rises]
            if undefined:
                names = ", ".join(_name(name) for name in undefined)
                text += f". Undefined past T: {names} (a learned table has T positions)"
            sentences.append(text + ".")
            flattest = order[0]
            if at_t and at_t[0] != flattest and at_t[0] in rises:
                best_at_t = at_t[0]
                gap = _paired(rises[flattest], rises[best_at_t])
                sentences.append(
                    f"Past T, {_name(flattest)}'s loss "
                    f"{_change(statistics.fmean(rises[flattest].values()))} nats per byte while "
                    f"{_name(best_at_t)}'s, the best at T, "
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
    listed = "; ".join(f"{_name(name)} {_pm(gains[name], sign=True)}" for name in others)
    best = others[0]
    text = (
        f"Zero-shot context extension of the RoPE models (no fine-tuning): at {_times(far)} "
        f"{_name(best)} does best, loss {_pm(list(table[best][far].values()))} nats per byte "
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


# --- data and model -------------------------------------------------------------------------


def _count(n: float) -> str:
    """``132352`` -> ``"0.13 M"``; small counts as they are."""
    return f"{n / 1e6:.2g} M" if n >= 10_000 else f"{n:,.0f}"


def data_and_model(
    config: Mapping[str, Any],
    rows: Sequence[Row] = (),
    corpus: Mapping[str, Any] | None = None,
) -> list[tuple[str, str]]:
    """The data, the model and its training in words, from a run's ``config.json``.

    Args:
        config: the run's ``config.json`` (its ``data``, ``model`` and ``train`` sections; an
            ``evaluated`` list marks a run that only evaluated trained weights).
        rows: its rows (the ``params`` column of the config's ``experiment``'s rows gives the
            parameter counts).
        corpus: what was loaded (``files`` and ``bytes`` per split, ``python``, ``root``),
            as :func:`posenc.lab.demo.corpus_summary` records it; ``None``: from the config.

    Returns:
        ``(what, description)`` pairs; empty when the config has none of those sections.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping (config.json), got {type(config).__name__}")
    lines: list[tuple[str, str]] = []
    data, model, train = config.get("data"), config.get("model"), config.get("train")
    if isinstance(data, Mapping):
        paths = data.get("corpus") or []
        if paths:
            text = "text files under " + ", ".join(str(p) for p in paths)
        else:
            text = "the Python standard library's own source files (*.py, without its tests)"
            if corpus and corpus.get("python"):
                text += f" of the Python {corpus['python']} on this machine"
                if corpus.get("root"):
                    text += f" ({corpus['root']})"
        text += ", split by file into train, validation and test (no file in two splits)"
        if corpus and corpus.get("files") and corpus.get("bytes"):
            files, size = corpus["files"], corpus["bytes"]
            text += "; " + ", ".join(
                f"{split} {files[split]:,} files, {size[split]:,} tokens"
                for split in ("train", "validation", "test")
                if split in files and split in size
            )
        if data.get("corpus_bytes"):
            text += f"; each split cut at {data['corpus_bytes']:,} bytes"
        text += (
            ". Tokens are bytes (vocabulary 256, files joined by a NUL byte); "
            f"the models train on windows of T = {data.get('train_len')} bytes."
        )
        lines.append(("data", text))
    if isinstance(model, Mapping):
        dim, heads, depth = model.get("dim"), model.get("num_heads"), model.get("depth")
        text = (
            f"byte-level decoder: {depth} layer{'' if depth == 1 else 's'}, width {dim}, "
            f"{heads} head{'' if heads == 1 else 's'}"
        )
        if isinstance(dim, int) and isinstance(heads, int):
            text += f" of {dim // heads}"
        params: dict[str, int] = {}
        experiment = config.get("experiment")
        for row in rows:
            if experiment is not None and row.get("experiment") not in (None, experiment):
                continue  # another experiment's model
            if isinstance(row.get("params"), (int, float)) and row.get("encoding"):
                params.setdefault(str(row["encoding"]), int(row["params"]))
        if params:
            low, high = min(params.values()), max(params.values())
            text += (
                f"; {_count(low)} parameters"
                if low == high
                else (
                    f"; {_count(low)} to {_count(high)} parameters ("
                    + ", ".join(f"{_name(n)} {p:,}" for n, p in params.items())
                    + ")"
                )
            )
        lines.append(("model", text + "."))
    if isinstance(train, Mapping):
        seeds = train.get("seeds") or []
        text = (
            f"{train.get('steps')} steps of AdamW, batch {train.get('batch_size')}, "
            f"peak learning rate {train.get('lr')}, {train.get('warmup_steps')} warmup steps, "
            f"cosine decay; seeds {', '.join(str(s) for s in seeds)} "
            f"({_seeds(len(seeds))}: tables show mean ± std over them)"
        )
        if config.get("evaluated"):
            text = (
                "none in this run: evaluation only, of the weights "
                + ", ".join(str(p) for p in config["evaluated"])
                + f" (trained as above: {text})"
            )
        lines.append(("training", text + "."))
    return lines

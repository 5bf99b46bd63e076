"""The report's findings in words, the data and model described, and the atlas in brief."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from posenc.lab.findings import (
    ATLAS,
    CONVERGED_FALL,
    data_and_model,
    extension_findings,
    extrapolation_findings,
    last_quarter_fall,
)
from posenc.lab.findings import findings as findings_of

#: the sections' readers, as the extrapolate and extend experiments register them
READERS = {"extrapolate": extrapolation_findings, "extend": extension_findings}


def findings(rows: Any, curves: Any = None) -> list[str]:
    return findings_of(rows, curves, READERS)


SEEDS = (0, 1, 2)
# loss at 1×T and 8×T per encoding and seed (nats per byte): ALiBi flat, RoPE best at T
LOSS = {
    "rope": {1.0: (1.90, 1.91, 1.89), 8.0: (2.90, 2.80, 3.00)},
    "alibi": {1.0: (2.00, 2.02, 2.01), 8.0: (2.01, 2.04, 2.01)},
    "nope": {1.0: (2.30, 2.31, 2.29), 8.0: (2.50, 2.53, 2.52)},
    "learned": {1.0: (2.10, 2.12, 2.11)},
}


def extrapolate_rows() -> list[dict[str, Any]]:
    return [
        {"experiment": "extrapolate", "encoding": encoding, "seed": seed, "train_len": 64,
         "eval_len": round(64 * multiple), "loss": losses[seed]}
        for encoding, by_length in LOSS.items()
        for multiple, losses in by_length.items()
        for seed in SEEDS
    ] + [
        {"experiment": "extrapolate", "encoding": "learned", "seed": seed, "train_len": 64,
         "eval_len": 512, "loss": None, "defined": False}
        for seed in SEEDS
    ]  # fmt: skip


def pm(values: list[float], digits: int, sign: bool = False) -> str:
    mean = (
        f"{statistics.fmean(values):+.{digits}f}"
        if sign
        else f"{statistics.fmean(values):.{digits}f}"
    )
    return f"{mean} ± {statistics.stdev(values):.{digits}f}"


def diff(a: str, b: str, at: float, b_at: float | None = None) -> list[float]:
    """``LOSS[b][b_at] - LOSS[a][at]`` seed by seed."""
    return [y - x for x, y in zip(LOSS[a][at], LOSS[b][at if b_at is None else b_at], strict=True)]


def test_findings_name_the_best_encoding_at_t_and_past_it_with_paired_margins() -> None:
    said = findings(extrapolate_rows())
    assert len(said) == 4
    at_t, far, changes, past = said
    rope = list(LOSS["rope"][1.0])
    assert at_t.startswith(
        f"At the training length (T = 64 bytes), RoPE predicts best: loss {pm(rope, 3)} nats "
        f"per byte (perplexity {math.exp(statistics.fmean(rope)):.2f}; a uniform guess over "
        "the 256 byte values has loss 5.545), "
        f"{statistics.fmean(diff('rope', 'alibi', 1.0)):.3f} below the next, ALiBi "
        f"(margin {pm(diff('rope', 'alibi', 1.0), 3)} over 3 seeds, paired by seed)"
    )
    assert at_t.endswith("; NoPE, the control that sees no positions, scores 2.300.")
    alibi = list(LOSS["alibi"][8.0])
    assert far == (
        f"At 8×T, the longest length evaluated, ALiBi predicts best: loss {pm(alibi, 3)} nats "
        f"per byte, {statistics.fmean(diff('alibi', 'nope', 8.0)):.3f} below the next, NoPE "
        f"(margin {pm(diff('alibi', 'nope', 8.0), 3)} over 3 seeds, paired by seed)."
    )
    rises = {name: diff(name, name, 1.0, 8.0) for name in ("alibi", "nope", "rope")}
    assert changes == (
        "From T to 8×T the loss changes by (nats per byte, mean ± std over 3 seeds): "
        + "; ".join(
            f"{label} {pm(rises[name], 3, sign=True)}"
            for name, label in (("alibi", "ALiBi"), ("nope", "NoPE"), ("rope", "RoPE"))
        )
        + ". Undefined past T: learned (a learned table has T positions)."
    )
    margin = [r - a for a, r in zip(rises["alibi"], rises["rope"], strict=True)]
    assert past == (
        f"Past T, ALiBi's loss rises {statistics.fmean(rises['alibi']):.3f} nats per byte while "
        f"RoPE's, the best at T, rises {statistics.fmean(rises['rope']):.3f}: "
        f"margin {pm(margin, 3)} over 3 seeds, paired by seed."
    )


def test_a_margin_within_the_seeds_noise_is_said_to_be() -> None:
    rows = [
        {"experiment": "extrapolate", "encoding": encoding, "seed": seed, "train_len": 8,
         "eval_len": 8, "loss": loss}
        for encoding, losses in (("rope", (1.0, 1.5, 1.2)), ("alibi", (1.4, 1.1, 1.3)))
        for seed, loss in zip(SEEDS, losses, strict=True)
    ]  # fmt: skip
    (at_t,) = findings(rows)
    # alibi − rope per seed: 0.4, −0.4, 0.1: mean 0.033, far inside t·se
    assert at_t.startswith("At the training length (T = 8 bytes), RoPE predicts best")
    assert "margin 0.033 ± 0.404 over 3 seeds, paired by seed, within the seeds' noise" in at_t


def test_zero_shot_extension_is_compared_with_plain_rope_at_the_longest_length() -> None:
    gains = {"rope": 0.0, "yarn": 0.6, "pi": 0.2}
    rows = [
        {"experiment": "extend", "method": method, "stage": "no_ft", "seed": seed,
         "train_len": 64, "eval_len": 64 * k, "loss": 2.0 + (k - 1) * 0.3 - gain * (k > 1)
         + 0.01 * seed}
        for method, gain in gains.items()
        for seed in SEEDS
        for k in (1, 8)
    ] + [  # fine-tuned rows are not zero-shot
        {"experiment": "extend", "method": "yarn", "stage": "ft", "seed": 0, "train_len": 64,
         "eval_len": 512, "loss": 0.1}
    ]  # fmt: skip
    (said,) = findings(rows)
    assert said == (
        "Zero-shot context extension of the RoPE models (no fine-tuning): at 8×T YaRN does "
        "best, loss 3.510 ± 0.010 nats per byte against plain RoPE's 4.110 ± 0.010 "
        "(margin 0.600 ± 0.000 over 3 seeds, paired by seed). Loss below plain RoPE's at 8×T, "
        "per method (negative: above it): YaRN +0.600 ± 0.000; PI +0.200 ± 0.000."
    )


def curve(falls_to: float, steps: int = 600, every: int = 50) -> list[dict[str, Any]]:
    """Train records whose loss falls linearly from 3.0 at step 0 to ``falls_to`` at the end."""
    return [
        {"kind": "train", "step": step, "loss": 3.0 + (falls_to - 3.0) * step / steps}
        for step in range(every, steps + 1, every)
    ] + [{"kind": "eval", "step": steps, "metrics": {"val_loss": 9.0}}]


def test_last_quarter_fall_compares_three_quarters_with_the_end() -> None:
    points = [(float(r["step"]), r["loss"]) for r in curve(2.0)[:-1]]
    at_450, at_600 = 3.0 - 450 / 600, 2.0
    assert last_quarter_fall(points) == pytest.approx((at_450 - at_600) / at_450, rel=1e-12)
    assert last_quarter_fall(list(reversed(points))) == last_quarter_fall(points)
    assert last_quarter_fall([(10.0, 2.0)]) is None
    assert last_quarter_fall([(1.0, 0.0), (2.0, 0.0)]) is None
    assert last_quarter_fall([(1.0, 2.0), (2.0, 2.0)]) == 0.0


def test_findings_say_whether_training_converged() -> None:
    still = {f"rope/seed{s}": curve(2.0 + 0.1 * s) for s in SEEDS}
    (said,) = findings([], still)
    falls = sorted(
        last_quarter_fall([(float(r["step"]), r["loss"]) for r in records[:-1]]) or 0.0
        for records in still.values()
    )
    assert min(falls) > CONVERGED_FALL
    assert said == (
        f"Training had not converged: the training loss still fell {100 * falls[1]:.1f} % over "
        f"the last quarter of 600 steps (median of 3 runs, {100 * falls[0]:.1f} % to "
        f"{100 * falls[2]:.1f} %; 3 of 3 runs fell more than 1.0 %), so the ranking is of "
        "models early in training."
    )
    flat = {"rope/seed0": [{"kind": "train", "step": s, "loss": 2.0} for s in (100, 200, 300)]}
    (said,) = findings([], flat)
    assert said == (
        "Training had converged: the training loss fell 0.0 % over the last quarter of 300 "
        "steps (1 run), at most 1.0 % in every run."
    )
    # convergence comes first: it qualifies every ranking after it
    assert findings(extrapolate_rows(), still)[0].startswith("Training had not converged")


def test_findings_of_rows_they_do_not_read_are_empty_and_bad_input_is_refused() -> None:
    assert findings([]) == []
    assert findings([{"experiment": "vit", "encoding": "rope_2d", "accuracy": 0.9}]) == []
    with pytest.raises(TypeError, match="rows must be a sequence"):
        findings("rows")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="curves must be a mapping"):
        findings([], [1, 2])  # type: ignore[arg-type]


CONFIG = {
    "experiment": "extrapolate",
    "data": {"corpus": [], "corpus_bytes": 2_000_000, "split_seed": 0, "train_len": 64},
    "model": {"dim": 64, "depth": 2, "num_heads": 4},
    "train": {"seeds": [0, 1, 2], "steps": 600, "batch_size": 32, "lr": 0.003,
              "warmup_steps": 30},
}  # fmt: skip
CORPUS = {
    "python": "3.12.3",
    "root": "/usr/lib/python3.12",
    "files": {"train": 120, "validation": 40, "test": 38},
    "bytes": {"train": 2_000_000, "validation": 1_100_000, "test": 1_000_000},
}


def test_data_and_model_describe_the_corpus_the_model_and_its_training() -> None:
    rows = [{"encoding": "nope", "params": 132352}, {"encoding": "learned", "params": 136448}]
    described = dict(data_and_model(CONFIG, rows, CORPUS))
    assert list(described) == ["data", "model", "training"]
    assert described["data"] == (
        "the Python standard library's own source files (*.py, without its tests) of the "
        "Python 3.12.3 on this machine (/usr/lib/python3.12), split by file into train, "
        "validation and test (no file in two splits); train 120 files, 2,000,000 tokens, "
        "validation 40 files, 1,100,000 tokens, test 38 files, 1,000,000 tokens; each split "
        "cut at 2,000,000 bytes. Tokens are bytes (vocabulary 256, files joined by a NUL "
        "byte); the models train on windows of T = 64 bytes."
    )
    assert described["model"] == (
        "byte-level decoder: 2 layers, width 64, 4 heads of 16; 0.13 M to 0.14 M parameters "
        "(NoPE 132,352, learned 136,448)."
    )
    assert described["training"] == (
        "600 steps of AdamW, batch 32, peak learning rate 0.003, 30 warmup steps, cosine "
        "decay; seeds 0, 1, 2 (3 seeds: tables show mean ± std over them)."
    )
    same = [{"encoding": "rope", "params": 132352}]
    same += [{"experiment": "vit", "encoding": "rope_2d", "params": 20000}]  # not this model
    assert dict(data_and_model(CONFIG, same))["model"].endswith("; 0.13 M parameters.")


def test_an_evaluation_only_run_says_so_and_a_corpus_of_files_is_named() -> None:
    config = {
        **CONFIG,
        "data": {**CONFIG["data"], "corpus": ["texts/"]},
        "evaluated": ["../runs/rope/seed0/final.pt"],
    }
    described = dict(data_and_model(config))
    assert described["data"].startswith("text files under texts/, split by file")
    assert described["training"].startswith(
        "none in this run: evaluation only, of the weights ../runs/rope/seed0/final.pt "
        "(trained as above: 600 steps"
    )
    assert data_and_model({"experiment": "mine"}) == []
    with pytest.raises(TypeError, match="config must be a mapping"):
        data_and_model([("data", {})])  # type: ignore[arg-type]


RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results.md"


def test_the_atlas_matches_docs_results_md() -> None:
    text = RESULTS.read_text(encoding="utf-8")
    start = text.index("### 9.4 Which encoding for which signal")
    table = [line for line in text[start:].split("\n## ")[0].splitlines() if line.startswith("| ")][
        1:
    ]  # without the header
    signals = [line.split("|")[1].strip() for line in table]
    assert len(signals) == 5
    # every signal of the docs' table has its entry, whose numbers are in that row
    for signal, line in zip(signals, table, strict=True):
        name = re.sub(r"\s*\(§.*?\)", "", signal)
        (entry,) = [e for e in ATLAS if e.signal.startswith(name)]
        for number in re.findall(r"\d+(?:\.\d+)?", entry.margin):
            assert number in line, (signal, number)
    # the entries beyond the table (text: the demo's table; graphs: §8) quote docs numbers
    for entry in ATLAS:
        for number in re.findall(r"\d+\.\d+", entry.margin):
            assert number in text, (entry.signal, number)
    demo = text[text.index("## The demo") :]
    (text_entry,) = [e for e in ATLAS if e.signal.startswith("text")]
    assert text_entry.answer == "ALiBi"
    for number in ("7.602", "7.469", "6.649", "17.748"):
        assert number in text_entry.margin and number in demo
    assert {e.signal.split(",")[0].split(" ")[0] for e in ATLAS} >= {
        "text", "image", "audio", "video", "graphs"
    }  # fmt: skip


def test_only_the_kinds_with_a_reader_are_read() -> None:
    rows = extrapolate_rows()
    assert findings_of(rows) == []  # no reader: nothing in words
    said = findings_of(rows, None, {"extrapolate": extrapolation_findings})
    assert said == extrapolation_findings(rows) and said
    # a reader gets only its kind of rows
    seen: list[Any] = []
    findings_of([*rows, {"experiment": "vit"}], None, {"vit": lambda r: seen.extend(r) or []})
    assert seen == [{"experiment": "vit"}]
    with pytest.raises(TypeError, match="readers must be a mapping"):
        findings_of(rows, None, [extrapolation_findings])  # type: ignore[arg-type]

"""The gates after a claim's own test (posenc.lab.claims): its control, its requirements, facts.

Each rule is shown by synthetic rows where the verdict flips: the same encoding rows hold with a
control that fails the test and turn undecided with a control that passes it, with no control
run, or with a model that did not learn its data; facts are never counted.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.lab.claims import (
    LEARNED_LOSS_FRACTION,
    Claim,
    Control,
    Learned,
    count_verdicts,
    format_verdicts,
    is_fact,
    judge,
    judge_all,
    verdict_record,
)
from posenc.lab.data.corpus import context_free_loss
from posenc.lab.experiments import all_claims
from tests.lab.claim_rows import replicate_seeds

Row = dict[str, Any]

CLAIMS = {claim.name: claim for claim in all_claims()}
ALIBI_FLAT = CLAIMS["alibi_flat_4x"]  # ppl(4T) / ppl(T) <= 1.10, against NoPE


def lm(
    encoding: str, growth: float, *, loss: float = 1.0, context_free: float = 2.0, seed: int = 0
) -> list[Row]:
    """extrapolate rows of ``encoding`` at T and 4×T with ppl(4T) / ppl(T) = ``growth``; its
    loss at T and the context-free loss the rows carry."""
    at_t = {"ppl": math.exp(loss), "loss": loss, "context_free_loss": context_free}
    return [
        {"experiment": "extrapolate", "encoding": encoding, "seed": seed, "multiplier": m, **cells}
        for m, cells in (
            (1.0, at_t),
            (4.0, {"ppl": growth * math.exp(loss), "context_free_loss": context_free}),
        )
    ]


def seeds(*rows: list[Row]) -> list[Row]:
    """The rows in two seeds with a small spread, replicated: enough seeds to decide."""
    base = [r for part in rows for r in part]
    jittered = [
        {**r, "seed": 1, "ppl": r["ppl"] * (1.001 if r["multiplier"] > 1 else 1.0)} for r in base
    ]
    return replicate_seeds(base + jittered)


def test_control_fails_and_encoding_passes_holds() -> None:
    verdict = judge(ALIBI_FLAT, seeds(lm("alibi", 0.96), lm("nope", 2.5)))
    assert verdict.status == "holds", verdict.summary
    assert verdict.control == "nope"
    assert verdict.reason.startswith("the control nope fails the same test (2.501 ± 0.00")
    assert verdict.summary.startswith("alibi_flat_4x: holds: 0.96")


def test_control_passes_too_is_undecided() -> None:
    # NoPE just as flat: flatness here says nothing about ALiBi
    verdict = judge(ALIBI_FLAT, seeds(lm("alibi", 0.96), lm("nope", 0.99)))
    assert verdict.status == "undecided", verdict.summary
    assert verdict.reason.startswith("the control nope passes the same test just as well (0.99")
    assert "so the claim shows nothing that nope does not show too" in verdict.reason
    assert verdict.margin is not None and verdict.margin > 0  # ALiBi itself is flat


def test_control_within_its_noise_is_undecided() -> None:
    rows = seeds(lm("alibi", 0.96))
    rows += [  # NoPE's ratio straddles the bound: seeds 1.0 and 1.2 (mean 1.1)
        {**r, "seed": s, "ppl": r["ppl"] * g if r["multiplier"] == 4.0 else r["ppl"]}
        for s, g in ((0, 1.0), (1, 1.2))
        for r in lm("nope", 1.0, seed=s)
    ]
    verdict = judge(ALIBI_FLAT, rows)
    assert verdict.status == "undecided", verdict.summary
    assert verdict.reason.startswith("the control nope is not told apart from the claim")


def test_control_not_run_is_undecided_naming_it() -> None:
    verdict = judge(ALIBI_FLAT, seeds(lm("alibi", 0.96)))
    assert verdict.status == "undecided", verdict.summary
    assert "the control nope was not run" in verdict.reason
    assert "run nope in the same experiment to decide" in verdict.reason


def test_control_not_run_leaves_a_failing_claim_failing() -> None:
    # the control can only take away a "holds": a failure is the encoding's own
    verdict = judge(ALIBI_FLAT, seeds(lm("alibi", 3.0), lm("nope", 3.0, loss=1.0)))
    assert verdict.status == "fails", verdict.summary


def test_model_not_learned_is_undecided_in_words() -> None:
    # ALiBi's loss at T is 0.98 of the context-free loss: it has not learned its data
    rows = seeds(lm("alibi", 0.96, loss=2.83, context_free=2.89), lm("nope", 2.5))
    verdict = judge(ALIBI_FLAT, rows)
    assert verdict.status == "undecided", verdict.summary
    assert verdict.reason == (
        "the alibi model has not learned its data (loss 2.83 = 0.98 of the context-free 2.89; "
        "it must be at most 0.9)"
    )
    # the same rows with a loss well below the context-free loss: the claim holds
    rows = seeds(lm("alibi", 0.96, loss=1.5, context_free=2.89), lm("nope", 2.5))
    assert judge(ALIBI_FLAT, rows).status == "holds"


def test_control_not_learned_is_undecided() -> None:
    rows = seeds(lm("alibi", 0.96), lm("nope", 2.5, loss=2.0, context_free=2.0))
    verdict = judge(ALIBI_FLAT, rows)
    assert verdict.status == "undecided"
    assert verdict.reason.startswith("the nope model has not learned its data (loss 2 = 1.00")


def test_a_failing_claim_of_an_unlearned_model_is_undecided() -> None:
    rows = seeds(lm("alibi", 3.0, loss=2.8, context_free=2.9), lm("nope", 2.5))
    verdict = judge(ALIBI_FLAT, rows)
    assert verdict.status == "undecided"
    assert "the alibi model has not learned its data" in verdict.reason


def test_rows_without_the_context_free_loss_cannot_tell() -> None:
    rows = [
        {k: v for k, v in r.items() if k != "context_free_loss"}
        for r in seeds(lm("alibi", 0.96), lm("nope", 2.5))
    ]
    verdict = judge(ALIBI_FLAT, rows)
    assert verdict.status == "undecided"
    assert verdict.reason.startswith(
        "cannot tell whether the alibi model learned its data: the context-free loss"
    )


@pytest.mark.parametrize(
    ("loss", "passed"),
    [(0.9 * 2.0, True), (0.9 * 2.0 + 1e-9, False), (1.0, True), (2.5, False)],
)
def test_learned_threshold_is_the_named_fraction(loss: float, passed: bool) -> None:
    assert LEARNED_LOSS_FRACTION == 0.9
    requirement = Learned("extrapolate", {"encoding": "alibi", "multiplier": 1.0}, "alibi")
    assert requirement.check(lm("alibi", 1.0, loss=loss, context_free=2.0)).passed is passed
    assert requirement.label == "the alibi model learned its data"


def test_comparative_claim_is_decided_against_its_control_directly() -> None:
    claim = CLAIMS["rope_degrades_more_than_alibi_4x"]
    verdict = judge(claim, seeds(lm("rope", 2.3), lm("alibi", 0.96)))
    assert verdict.status == "holds", verdict.summary
    assert verdict.control == "alibi"
    assert verdict.reason == "decided against alibi directly (the statistic compares with it)"
    # ... and still needs both models to have learned
    unlearned = seeds(lm("rope", 2.3), lm("alibi", 0.96, loss=1.95, context_free=2.0))
    assert judge(claim, unlearned).status == "undecided"


def test_rope_passkey_claim_needs_rope_to_retrieve_at_t() -> None:
    claim = CLAIMS["rope_passkey_fails_at_4x"]

    def key(multiplier: float, accuracy: float) -> list[Row]:
        return [
            {"experiment": "passkey", "method": "rope", "stage": "zero", "seed": 0,
             "multiplier": multiplier, "depth": d, "accuracy": accuracy}
            for d in (0.0, 0.5, 1.0)
        ]  # fmt: skip

    base = [
        {"experiment": "extend", "method": "rope", "stage": "zero", "seed": 0,
         "multiplier": 1.0, "ppl": 3.0, "loss": 1.1, "context_free_loss": 2.0}
    ]  # fmt: skip
    retrieves = replicate_seeds(key(4.0, 0.0) + key(1.0, 1.0) + base)
    never = replicate_seeds(key(4.0, 0.0) + key(1.0, 0.0) + base)
    assert judge(claim, retrieves).status == "holds"
    verdict = judge(claim, never)  # a model that never retrieves says nothing about length
    assert verdict.status == "undecided"
    assert verdict.control == "rope at T"
    assert verdict.reason.startswith("the control rope at T passes the same test just as well")


def _fact() -> Claim:
    return CLAIMS["learned_undefined_past_t"]


def test_facts_are_never_counted() -> None:
    fact = _fact()
    assert fact.kind == "fact" and is_fact(fact) and not is_fact(ALIBI_FLAT)
    rows = seeds(lm("alibi", 0.96), lm("nope", 2.5)) + [
        {"experiment": "extrapolate", "encoding": "learned", "seed": 0, "multiplier": m,
         "ppl": None, "defined": False}
        for m in (2.0, 4.0)
    ]  # fmt: skip
    claims = [ALIBI_FLAT, fact]
    records = [verdict_record(c, v) for c, v in zip(claims, judge_all(claims, rows), strict=True)]
    assert [r["status"] for r in records] == ["holds", "holds"]
    assert [is_fact(r) for r in records] == [False, True]
    assert count_verdicts(records) == "1 hold, 0 fail, 0 undecided, 0 undefined"
    text = format_verdicts(records)
    assert text.startswith("claims (1: 1 hold, 0 fail, 0 undecided, 0 undefined):")
    assert "facts (1, true by definition, not counted):" in text
    assert text.index("learned_undefined_past_t") > text.index("facts (1")


def test_every_experiment_claim_names_a_control_unless_a_fact() -> None:
    for claim in CLAIMS.values():
        assert (claim.control is None) == (claim.kind == "fact"), claim.name
        if claim.control is not None:
            assert claim.control.label, claim.name
    assert [c.name for c in CLAIMS.values() if c.kind == "fact"] == ["learned_undefined_past_t"]


def test_every_text_claim_requires_its_models_learned() -> None:
    for claim in CLAIMS.values():
        if claim.experiment in ("extrapolate", "extend", "passkey", "bases") and not is_fact(claim):
            assert claim.requires, claim.name
            assert any(isinstance(r, Learned) for r in claim.requires), claim.name


def test_records_carry_reason_control_and_kind() -> None:
    verdict = judge(ALIBI_FLAT, seeds(lm("alibi", 0.96)))
    record = verdict_record(ALIBI_FLAT, verdict)
    assert (record["kind"], record["control"], record["status"]) == ("claim", "nope", "undecided")
    assert record["reason"] == verdict.reason and "run nope" in record["reason"]


def test_undefined_verdict_says_why() -> None:
    verdict = judge(ALIBI_FLAT, [])
    assert (verdict.status, verdict.reason, verdict.control) == (
        "undefined",
        "no 'extrapolate' rows",
        "nope",
    )


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("kind", "finding", ValueError),
        ("control", "nope", TypeError),
        ("requires", [], TypeError),
    ],
)
def test_claim_validates_its_gates(field: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=field):
        dataclasses.replace(ALIBI_FLAT, **{field: value})


def test_control_needs_a_label() -> None:
    with pytest.raises(ValueError, match="label"):
        Control("")


# --- the context-free loss --------------------------------------------------------------------


def test_context_free_loss_is_the_add_one_unigram() -> None:
    train = torch.tensor([1, 1, 2, 0], dtype=torch.uint8)
    targets = torch.tensor([[1, 2], [3, 1]])
    # counts + 1 over vocab 4: token 0: 2, 1: 3, 2: 2, 3: 1 (of 8)
    p = torch.tensor([2.0, 3.0, 2.0, 1.0], dtype=torch.float64) / 8.0
    expected = -(p[1].log() + p[2].log() + p[3].log() + p[1].log()) / 4
    got = torch.tensor(context_free_loss(train, targets, vocab_size=4), dtype=torch.float64)
    torch.testing.assert_close(got, expected)


def test_context_free_loss_of_uniform_text_is_log_vocab() -> None:
    train = torch.arange(256).repeat(4)
    got = torch.tensor(context_free_loss(train, torch.arange(256)), dtype=torch.float64)
    torch.testing.assert_close(got, torch.tensor(math.log(256), dtype=torch.float64))


@pytest.mark.parametrize(
    ("train", "targets", "vocab_size", "match"),
    [
        (torch.tensor([], dtype=torch.long), torch.tensor([1]), 4, "train must hold at least"),
        (torch.tensor([1]), torch.tensor([], dtype=torch.long), 4, "targets must hold at least"),
        (torch.tensor([1.0]), torch.tensor([1]), 4, "train must be an integer tensor"),
        (torch.tensor([1]), torch.tensor([4]), 4, r"targets must hold tokens in \[0, vocab_size"),
        (torch.tensor([-1]), torch.tensor([1]), 4, r"train must hold tokens in \[0"),
        (torch.tensor([1]), torch.tensor([1]), 0, "vocab_size must be a positive integer"),
    ],
)
def test_context_free_loss_refuses_bad_input(
    train: torch.Tensor, targets: torch.Tensor, vocab_size: int, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        context_free_loss(train, targets, vocab_size=vocab_size)


# --- the report's claims table ------------------------------------------------------------------


def test_report_shows_why_and_control_and_keeps_facts_apart(tmp_path: Path) -> None:
    import html
    import json
    import re

    from posenc.lab.experiments import EXPERIMENTS
    from posenc.lab.report import write_report
    from posenc.lab.results import write_results_csv

    rows = seeds(lm("alibi", 0.96), lm("nope", 0.99)) + [
        {"experiment": "extrapolate", "encoding": "learned", "seed": 0, "multiplier": m,
         "ppl": None, "defined": False}
        for m in (2.0, 4.0)
    ]  # fmt: skip
    rows = [{**r, "train_len": 64, "eval_len": int(64 * r["multiplier"])} for r in rows]
    claims = [ALIBI_FLAT, _fact()]
    records = [verdict_record(c, v) for c, v in zip(claims, judge_all(claims, rows), strict=True)]
    write_results_csv(rows, tmp_path / "results.csv")
    (tmp_path / "claims.json").write_text(json.dumps(records))
    page = write_report(tmp_path, experiments=tuple(EXPERIMENTS.values())).read_text()
    tables = re.findall(r"<table class='claims[^']*'>.*?</table>", page)
    assert len(tables) == 2
    claims_table, facts_table = (html.unescape(re.sub(r"<[^>]+>", " ", t)) for t in tables)
    assert "<th>why</th>" in tables[0]
    assert "the control nope passes the same test just as well (0.99" in claims_table
    assert "control: nope" in claims_table
    assert "learned_undefined_past_t" not in claims_table
    assert "A learned table is undefined past T" in facts_table
    # the fact holds but is not counted: the one claim is undecided
    assert "Claims: 0 of 1 hold" in page and "0 fail, 1 undecided, 0 undefined" in page
    assert "Facts (1, true by definition, not counted above)" in page


def test_the_demo_count_leaves_facts_out() -> None:
    from posenc.lab.demo import claim_counts

    records = [
        {"status": "holds", "kind": "claim"},
        {"status": "undecided", "kind": "claim"},
        {"status": "holds", "kind": "fact"},
    ]
    assert claim_counts(records) == "1 of 2 claims hold, 0 fails, 1 undecided, 0 undefined"


def test_extrapolate_rows_carry_the_context_free_loss_of_their_targets(tmp_path: Path) -> None:
    from dataclasses import replace

    from posenc.lab.data.corpus import eval_windows
    from posenc.lab.experiments.extrapolate import run_extrapolate
    from tests.lab.experiments.extrapolate.test_extrapolate import TINY

    config = replace(TINY, encodings=("learned",))
    rows = run_extrapolate(config, tmp_path, echo=lambda _: None)
    corpus = config.data.load()
    for row in rows:  # learned rows past T too: the baseline is defined at every length
        targets = eval_windows(corpus.test[: config.eval_tokens + 1], row["eval_len"])[:, 1:]
        expected = torch.tensor(context_free_loss(corpus.train, targets), dtype=torch.float64)
        got = torch.tensor(row["context_free_loss"], dtype=torch.float64)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert 0 < row["context_free_loss"] < math.log(256)


def test_an_undecided_claim_also_names_the_model_that_did_not_learn() -> None:
    rows = [  # ALiBi's ratio straddles the bound (1.0 and 1.2) and its loss is near uniform
        {**r, "seed": s, "ppl": r["ppl"] * g if r["multiplier"] == 4.0 else r["ppl"]}
        for s, g in ((0, 1.0), (1, 1.2))
        for r in lm("alibi", 1.0, loss=2.0, context_free=2.0, seed=s)
    ] + seeds(lm("nope", 2.5))
    verdict = judge(ALIBI_FLAT, rows)
    assert verdict.status == "undecided"
    assert verdict.reason.startswith("the margin is within the noise; the alibi model has not")

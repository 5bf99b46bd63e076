"""posenc.lab.requirements (Reaches, beside Learned) and the claims' reading of per-layer rows
(Claim.layered): which rows a claim reads, and how a requirement turns a verdict undecided."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.lab.claims import LAYERS_COLUMN, Claim, Control, Reaches, judge, ratio_at
from posenc.lab.experiments.extrapolate.claims import growth
from posenc.lab.quantities import MeanOverSeeds
from tests.lab.claim_rows import replicate_seeds

Row = dict[str, Any]


def _acc(encoding: str, value: float, seed: int = 0) -> Row:
    return {"experiment": "x", "encoding": encoding, "seed": seed, "acc": value}


def _reaches(need: str = "all") -> Reaches:
    wheres = ({"encoding": "a"}, {"encoding": "b"})
    return Reaches("x", wheres, "acc", 0.5, "the models solve it", need=need)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "need", "passed"),
    [
        (0.9, 0.6, "all", True),
        (0.9, 0.4, "all", False),
        (0.9, 0.4, "any", True),
        (0.1, 0.4, "any", False),
        (0.9, None, "all", None),  # b missing: cannot tell
        (0.1, None, "all", False),  # a fails already
        (0.9, None, "any", True),
        (0.1, None, "any", None),
    ],
)
def test_reaches_needs_all_or_any(
    a: float, b: float | None, need: str, passed: bool | None
) -> None:
    rows = [_acc("a", a)] + ([] if b is None else [_acc("b", b)])
    check = _reaches(need).check(rows)
    assert check.passed is passed
    assert check.reason.startswith(
        {True: "the models solve it", False: "not so", None: "cannot tell"}[passed]
    )
    assert "acc 0.9" in check.reason or "acc 0.1" in check.reason


def test_reaches_reads_the_mean_over_seeds_and_the_direction() -> None:
    rows = [_acc("a", 0.45, 0), _acc("a", 0.56, 1)]  # mean 0.505
    assert Reaches("x", ({"encoding": "a"},), "acc", 0.5, "w").check(rows).passed is True
    below = Reaches("x", ({"encoding": "a"},), "acc", 0.5, "w", direction="<=")
    assert below.check(rows).passed is False


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("wheres", (), "wheres"), ("direction", "<", "direction"), ("need", "some", "need")],
)
def test_reaches_refuses_bad_fields(field: str, value: Any, match: str) -> None:
    fields = {"wheres": ({"encoding": "a"},), "direction": ">=", "need": "all", field: value}
    with pytest.raises(ValueError, match=match):
        Reaches("x", fields["wheres"], "acc", 0.5, "w", fields["direction"], fields["need"])


def _lm(schedule: str | None, growth_8x: float, seed: int = 0) -> list[Row]:
    base = {"experiment": "extrapolate", "encoding": "rope", "seed": seed, LAYERS_COLUMN: schedule}
    return [
        {**base, "multiplier": 1.0, "ppl": 3.0, "loss": 1.0, "context_free_loss": 3.0},
        {**base, "multiplier": 8.0, "ppl": 3.0 * growth_8x},
    ]


_FLAT = Claim(
    name="rope_flat",
    text="t",
    paper="p",
    published="p",
    experiment="extrapolate",
    statistic=MeanOverSeeds(growth("rope", 8.0)),
    threshold=1.1,
    direction="<=",
    control=Control("rope"),
)


def test_a_claim_about_an_encoding_reads_only_plain_transformers() -> None:
    plain = _lm(None, 1.0) + _lm(None, 1.02, seed=1)
    windowed = _lm("rnope_swa+w64", 9.0) + _lm("rnope_swa+w64", 9.5, seed=1)
    alone = judge(_FLAT, replicate_seeds(plain))
    mixed = judge(_FLAT, replicate_seeds(plain + windowed))  # no "several rows" error
    assert alone.measurement == mixed.measurement
    assert mixed.measurement is not None and mixed.measurement.value == pytest.approx(1.01)
    # the same claim, layered, must select the column itself: it reads the windowed rows
    layered = Claim(
        **{
            **_FLAT.__dict__,
            "statistic": MeanOverSeeds(growth("rope", 8.0, schedule="rnope_swa+w64")),
            "layered": True,
        }
    )
    windowed_verdict = judge(layered, replicate_seeds(plain + windowed))
    assert windowed_verdict.measurement is not None
    assert windowed_verdict.measurement.value == pytest.approx(9.25)
    assert windowed_verdict.status == "fails"


def test_a_ratio_of_layered_rows_pairs_them_by_seed() -> None:
    rows = [
        {"experiment": "e", "encoding": "rope", "seed": s, "multiplier": 1.0,
         LAYERS_COLUMN: layers, "first_token_mass": mass}
        for s, (gated, plain) in enumerate(((0.02, 0.40), (0.03, 0.50)))
        for layers, mass in (("gate", gated), (None, plain))
    ]  # fmt: skip
    statistic = ratio_at(
        "e", {"encoding": "rope"}, "first_token_mass", {LAYERS_COLUMN: "gate"},
        {LAYERS_COLUMN: None},
    )  # fmt: skip
    m = statistic(rows)
    assert m is not None and m.value == pytest.approx((0.02 / 0.40 + 0.03 / 0.50) / 2)

"""Hand-made rows for the suite's claims (posenc.lab.experiments.suite.claims;
tests/lab/test_claims.py reads SUITE_CASES), their gates (a task solved at L, a task learnable
at the budget), and DroPE's rows from a tiny run."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from posenc.lab.claims import applicable, judge
from posenc.lab.experiments.suite import TINY, run_suite
from posenc.lab.experiments.suite.claims import CLAIMS as SUITE_CLAIMS
from posenc.lab.experiments.suite.drope import DROPE
from tests.lab.claim_rows import replicate_seeds

Row = dict[str, Any]
CLAIMS = {claim.name: claim for claim in SUITE_CLAIMS}


def _task(
    task: str, encoding: str, by_multiple: dict[float, list[float]], **extra: Any
) -> list[Row]:
    """suite rows of a trained model: per multiple of L, exact match per seed (0, 1, ...)."""
    return [
        {"experiment": "suite", "task": task, "encoding": encoding, "randomized": False,
         "test_set": "train", "multiple": m, "length": round(8 * m),
         "split": "train" if m == 1.0 else "test", "seed": seed, "seq_acc": acc, **extra}
        for m, per_seed in by_multiple.items()
        for seed, acc in enumerate(per_seed)
    ]  # fmt: skip


def _flip_flop(path_long: list[float], rope_long: list[float], at_l: float = 1.0) -> list[Row]:
    """PaTH and RoPE at 2, 4, 8 × L: the same exact match per seed at every test size."""
    rows = []
    for encoding, long in (("path", path_long), ("rope", rope_long)):
        rows += _task(
            "flip_flop", encoding, {1.0: [at_l, at_l], **{m: long for m in (2.0, 4.0, 8.0)}}
        )
    return rows + _task("flip_flop", "rope", {2.0: [0.9, 0.9]}, test_set="sparse")  # ignored


_S3 = json.dumps({"group": "s3"})
_PARITY = json.dumps({"group": "parity"})


def _state(path: list[float], rope: list[float], params: str = _S3) -> list[Row]:
    return _task("state_tracking", "path", {1.0: path}, task_params=params) + _task(
        "state_tracking", "rope", {1.0: rope}, task_params=params
    )


def _needle(drope: list[float], other: list[float], method: str, at_l: float = 1.0) -> list[Row]:
    """niah_single rows of the rope runs: rope itself at L, DroPE and ``method`` at 8 × L."""
    return (
        _task("niah_single", "rope", {1.0: [at_l, at_l], 8.0: [0.0, 0.0]}, method="rope")
        + _task("niah_single", "rope", {1.0: [0.9, 0.9], 8.0: drope}, method=DROPE)
        + _task("niah_single", "rope", {8.0: other}, method=method)
    )


def _drope_cases(method: str) -> dict[str, Any]:
    return {
        # drope − method at 8L: 0.6 − 0.1, 0.5 − 0.2 (0.4) >= 0.1; 0.1 − 0.1, 0.2 − 0.3 (-0.05)
        "holds": (_needle([0.6, 0.5], [0.1, 0.2], method), 0.4),
        "fails": (_needle([0.1, 0.2], [0.1, 0.3], method), -0.05),
        "undefined": _needle([0.6, math.nan], [0.1, 0.2], method),
    }


SUITE_CASES: dict[str, dict[str, Any]] = {
    "path_beats_rope_flip_flop": {
        # path − rope over 2-8 L: 1 − 0.2, 0.9 − 0.3 (0.7) >= 0.1; 0.5 − 0.5, 0.4 − 0.5 (-0.05)
        "holds": (_flip_flop([1.0, 0.9], [0.2, 0.3]), 0.7),
        "fails": (_flip_flop([0.5, 0.4], [0.5, 0.5]), -0.05),
        "undefined": _flip_flop([1.0, math.nan], [0.2, 0.3]),
    },
    "path_beats_rope_state_tracking_s5": {
        "holds": (_state([0.9, 0.8], [0.1, 0.2], "{}"), 0.7),
        "fails": (_state([0.5, 0.6], [0.6, 0.6], "{}"), -0.05),
        "undefined": _state([0.9, math.nan], [0.1, 0.2], "{}"),
    },
    "path_beats_rope_state_tracking_s3": {
        "holds": (_state([0.9, 0.8], [0.1, 0.2]), 0.7),
        "fails": (_state([0.5, 0.6], [0.6, 0.6]), -0.05),
        "undefined": _state([0.9, math.nan], [0.1, 0.2]),
    },
    "path_beats_rope_state_tracking_parity": {
        "holds": (_state([0.9, 0.8], [0.1, 0.2], _PARITY), 0.7),
        "fails": (_state([0.5, 0.6], [0.6, 0.6], _PARITY), -0.05),
        "undefined": _state([0.9, math.nan], [0.1, 0.2], _PARITY),
    },
    "drope_beats_yarn_8x": _drope_cases("yarn"),
    "drope_beats_ntk_8x": _drope_cases("ntk"),
}


def test_every_suite_claim_has_cases() -> None:
    assert set(CLAIMS) == set(SUITE_CASES)


def test_flip_flop_extrapolation_needs_both_models_to_solve_it_at_l() -> None:
    claim = CLAIMS["path_beats_rope_flip_flop"]
    verdict = judge(claim, replicate_seeds(_flip_flop([1.0, 0.9], [0.2, 0.3], at_l=0.5)))
    assert verdict.status == "undecided"
    assert "not so at this scale that both models read the last write at L" in verdict.reason
    assert judge(claim, replicate_seeds(_flip_flop([1.0, 0.9], [0.2, 0.3]))).status == "holds"


def test_state_tracking_unlearned_by_both_is_undecided_not_failed() -> None:
    claim = CLAIMS["path_beats_rope_state_tracking_s3"]
    neither = judge(claim, replicate_seeds(_state([0.0, 0.01], [0.0, 0.0])))
    assert neither.status == "undecided"
    assert "the S3 word problem is learnable at this budget" in neither.reason
    # RoPE learns it and PaTH does not: that fails the claim
    assert judge(claim, replicate_seeds(_state([0.1, 0.0], [0.9, 0.8]))).status == "fails"


def test_state_tracking_claims_read_their_own_group() -> None:
    s5, s3 = (
        CLAIMS["path_beats_rope_state_tracking_s5"],
        CLAIMS["path_beats_rope_state_tracking_s3"],
    )
    rows = _state([0.9, 0.8], [0.1, 0.2])  # an S3 run
    assert applicable(s3, rows) and not applicable(s5, rows)


def test_drope_needs_rope_to_retrieve_at_l() -> None:
    claim = CLAIMS["drope_beats_yarn_8x"]
    verdict = judge(claim, replicate_seeds(_needle([0.6, 0.5], [0.1, 0.2], "yarn", at_l=0.3)))
    assert verdict.status == "undecided"
    assert "the rope model retrieves the needle at L" in verdict.reason
    assert "HELMET" in claim.text


def test_drope_rows_recalibrate_ropes_weights(tmp_path: Path) -> None:
    config = dataclasses.replace(
        TINY,
        tasks=("niah_single",),
        encodings=("rope",),
        train_length={"niah_single": 24},
        task_params={},
        drope_steps=3,
    )
    rows = run_suite(config, tmp_path / "drope", echo=None)
    assert [(r["method"], r["multiple"]) for r in rows] == [
        ("rope", 1.0), ("rope", 2.0), (DROPE, 1.0), (DROPE, 2.0)
    ]  # fmt: skip
    drope = [r for r in rows if r["method"] == DROPE]
    assert all(r["recalibrate_steps"] == 3 and math.isfinite(r["recalibrate_loss"]) for r in drope)
    # the recalibration trained a NoPE model from rope's weights: its run folder holds it
    (folder,) = [p for p in (tmp_path / "drope").rglob(DROPE) if p.is_dir()]
    config_json = json.loads((folder / "config.json").read_text())
    assert config_json["model"]["pos"] == "nope"
    assert config_json["train"]["steps"] == 3


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"drope_steps": -1}, "drope_steps"),
        ({"drope_steps": 5, "encodings": ("nope",)}, "drope_steps"),
    ],
)
def test_bad_drope_steps_raise_naming_it(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **changes)

"""Hand-made rows for the per-layer options' claims (posenc.lab.experiments.extrapolate.hybrids;
tests/lab/test_claims.py reads HYBRID_CASES), and their gates: the plain RoPE control of
RNoPE-SWA, the sink the gate claim needs."""

from __future__ import annotations

import math
from typing import Any

from posenc.lab.claims import judge
from posenc.lab.experiments.extrapolate.hybrids import HYBRID_CLAIMS, RNOPE_SWA
from tests.lab.claim_rows import replicate_seeds

Row = dict[str, Any]
CLAIMS = {claim.name: claim for claim in HYBRID_CLAIMS}


def _lm(schedule: str | None, ppl_t: float, ppl_8t: list[float], mass: list[float]) -> list[Row]:
    """rope rows of one ``schedule`` label (None: the plain transformer): per seed, ppl at T
    and 8T and the first-token mass at T; loss at T a third of the context-free loss."""
    out = []
    for seed, (at_8t, at_t_mass) in enumerate(zip(ppl_8t, mass, strict=True)):
        base = {"experiment": "extrapolate", "encoding": "rope", "seed": seed}
        if schedule is not None:
            base["schedule"] = schedule
        out += [
            {**base, "multiplier": 1.0, "ppl": ppl_t, "loss": math.log(ppl_t),
             "context_free_loss": 3 * math.log(ppl_t), "first_token_mass": at_t_mass},
            {**base, "multiplier": 8.0, "ppl": at_8t, "first_token_mass": at_t_mass / 4},
        ]  # fmt: skip
    return out


_PLAIN = _lm(None, 3.0, [30.0, 33.0], [0.40, 0.50])  # RoPE: 10-11-fold, a sink


def _rnope(at_8t: list[float]) -> list[Row]:
    return _lm(RNOPE_SWA, 3.0, at_8t, [0.01, 0.01]) + _PLAIN


def _gate(mass: list[float]) -> list[Row]:
    return _lm("gate", 3.0, [30.0, 30.0], mass) + _PLAIN


HYBRID_CASES: dict[str, dict[str, Any]] = {
    "rnope_swa_flat_8x": {
        # 8T / T: 2.8/3, 3.0/3 (0.967) <= 1.1; 6/3, 6.6/3 (2.1)
        "holds": (_rnope([2.8, 3.0]), (2.8 + 3.0) / 6),
        "fails": (_rnope([6.0, 6.6]), (6.0 + 6.6) / 6),
        "undefined": _lm(RNOPE_SWA, 3.0, [2.8, math.nan], [0.01, 0.01]) + _PLAIN,
    },
    "gate_reduces_first_token_mass": {
        # gated / plain mass: 0.02/0.4, 0.05/0.5 (0.075) <= 0.5; 0.3/0.4, 0.45/0.5 (0.825)
        "holds": (_gate([0.02, 0.05]), (0.05 + 0.1) / 2),
        "fails": (_gate([0.3, 0.45]), (0.75 + 0.9) / 2),
        "undefined": _lm("gate", 3.0, [30.0, 30.0], [0.02, math.nan]) + _PLAIN,
    },
}


def test_every_hybrid_claim_has_cases() -> None:
    assert set(CLAIMS) == set(HYBRID_CASES)


def test_rnope_swa_holds_only_where_plain_rope_is_not_flat() -> None:
    claim = CLAIMS["rnope_swa_flat_8x"]
    rows, _ = HYBRID_CASES["rnope_swa_flat_8x"]["holds"]
    assert judge(claim, replicate_seeds(rows)).status == "holds"
    flat_rope = _lm(RNOPE_SWA, 3.0, [2.8, 3.0], [0.01, 0.01]) + _lm(
        None, 3.0, [3.0, 3.1], [0.4, 0.5]
    )
    verdict = judge(claim, replicate_seeds(flat_rope))
    assert verdict.status == "undecided"
    assert "the control rope passes the same test" in verdict.reason


def test_the_gate_claim_needs_a_sink_to_reduce() -> None:
    claim = CLAIMS["gate_reduces_first_token_mass"]
    rows, _ = HYBRID_CASES["gate_reduces_first_token_mass"]["holds"]
    assert judge(claim, replicate_seeds(rows)).status == "holds"
    no_sink = _lm("gate", 3.0, [30.0, 30.0], [0.002, 0.005]) + _lm(
        None, 3.0, [30.0, 33.0], [0.02, 0.05]
    )  # the same ratios, but the ungated mass is 2-5 %
    verdict = judge(claim, replicate_seeds(no_sink))
    assert verdict.status == "undecided"
    assert "not so at this scale that the ungated RoPE model forms an attention sink" in (
        verdict.reason
    )

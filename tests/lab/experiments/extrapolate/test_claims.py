"""Hand-made rows for the newest methods' claims (tests/lab/test_claims.py reads METHOD_CASES
and judges each claim on them: holds, fails, undefined), and the claims' wiring."""

from __future__ import annotations

import json
import math
from typing import Any

from posenc.lab.claims import applicable, judge
from posenc.lab.experiments import get_experiment
from posenc.lab.experiments.extrapolate.claims import CAPE_TEXT_RECIPE, METHOD_CLAIMS
from posenc.lab.experiments.extrapolate.hybrids import HYBRID_CLAIMS
from tests.lab.claim_rows import replicate_seeds

Row = dict[str, Any]

_RECIPE = json.dumps(CAPE_TEXT_RECIPE, sort_keys=True)  # as extrapolate writes the column


def _lm(encoding: str, by_multiplier: dict[float, list[float | None]], **extra: Any) -> list[Row]:
    """extrapolate rows of ``encoding``: per multiplier, one ppl per seed (0, 1, ...)."""
    return [
        {
            "experiment": "extrapolate",
            "encoding": encoding,
            "multiplier": multiplier,
            "ppl": ppl,
            "defined": ppl is not None,
            "seed": seed,
            **extra,
        }
        for multiplier, per_seed in by_multiplier.items()
        for seed, ppl in enumerate(per_seed)
    ]


def _flat_cases(encoding: str, at_t: float, holds: tuple[float, float], fails: tuple[float, float]):
    """ppl(8T) / ppl(T) per seed: ``holds`` and ``fails`` give seed 0's and 1's ppl at 8T."""

    def rows(at_8t: tuple[float | None, ...]) -> list[Row]:
        return _lm(encoding, {1.0: [at_t, at_t], 8.0: list(at_8t)}) + _lm(
            "rope",
            {1.0: [1.0, 1.0], 8.0: [9.0, 9.0]},  # another encoding: ignored
        )

    mean = lambda pair: (pair[0] / at_t + pair[1] / at_t) / 2  # noqa: E731
    return {
        "holds": (rows(holds), mean(holds)),
        "fails": (rows(fails), mean(fails)),
        "undefined": rows((at_t, math.nan)),  # seed 1's 8T evaluation diverged
    }


def _degrades_less_cases(encoding: str, than: str, multiplier: float, **where: Any):
    """``than``'s growth minus ``encoding``'s: holds 3 − 1 and 2 − 1.1 (mean 1.45); fails
    1 − 2 and 1.1 − 1.5 (mean −0.7). ``where`` marks ``encoding``'s rows (CAPE's recipe);
    rows of the same encoding without it say the opposite and must be ignored."""

    def rows(than_at: list[float | None], at: list[float | None]) -> list[Row]:
        decoy = _lm(encoding, {1.0: [1.0, 1.0], multiplier: [9.0, 0.1]}, pos_kwargs="{}")
        own = _lm(encoding, {1.0: [2.0, 2.0], multiplier: at}, **where)
        return _lm(than, {1.0: [2.0, 2.0], multiplier: than_at}) + own + (decoy if where else [])

    return {
        "holds": (rows([6.0, 4.0], [2.0, 2.2]), 1.45),
        "fails": (rows([2.0, 2.2], [4.0, 3.0]), -0.7),
        "undefined": rows([6.0, 4.0], [2.0, None]),
    }


def _lower_cases(better: str, worse: str, multiplier: float) -> dict[str, Any]:
    """ppl(worse) / ppl(better) at ``multiplier``·T: 6/3, 5/5 (mean 1.5 ≥ 1); 3/6, 4/5
    (0.65). Rows at the other lengths say the opposite and must be ignored."""
    other = 8.0 if multiplier != 8.0 else 2.0
    decoy = _lm(worse, {other: [1.0, 1.0]}) + _lm(better, {other: [9.0, 9.0]})

    def rows(worse_at: list[float | None], better_at: list[float | None]) -> list[Row]:
        return _lm(worse, {multiplier: worse_at}) + _lm(better, {multiplier: better_at}) + decoy

    return {
        "holds": (rows([6.0, 5.0], [3.0, 5.0]), 1.5),
        "fails": (rows([3.0, 4.0], [6.0, 5.0]), 0.65),
        "undefined": rows([6.0, 5.0], [3.0, None]),
    }


def _linear_rows(nope: list[float | None], rope: list[float | None]) -> list[Row]:
    """Linear-attention rows at T, and softmax rows (no backend column) saying the opposite."""
    linear = _lm("nope", {1.0: nope}, backend="linear") + _lm("rope", {1.0: rope}, backend="linear")
    return linear + _lm("nope", {1.0: [1.0, 1.0]}) + _lm("rope", {1.0: [9.0, 9.0]})


METHOD_CASES: dict[str, dict[str, Any]] = {
    # 2.0 and 2.1 over 2.0: 1.0, 1.05 (mean 1.025 ≤ 1.1); 2.6, 2.8: 1.3, 1.4 (1.35)
    "fox_flat_8x": _flat_cases("fox", 2.0, holds=(2.0, 2.1), fails=(2.6, 2.8)),
    # over 3.0: 0.9, 0.95 (0.925 ≤ 1.0); 1.1, 1.2 (1.15)
    "stick_breaking_flat_8x": _flat_cases("stick_breaking", 3.0, (2.7, 2.85), (3.3, 3.6)),
    "fox_degrades_less_than_rope_8x": _degrades_less_cases("fox", "rope", 8.0),
    "stick_breaking_degrades_less_than_rope_8x": _degrades_less_cases(
        "stick_breaking", "rope", 8.0
    ),
    "pope_degrades_less_than_rope_8x": _degrades_less_cases("pope", "rope", 8.0),
    "cape_degrades_less_than_sinusoidal_2x": _degrades_less_cases(
        "cape", "sinusoidal", 2.0, pos_kwargs=_RECIPE
    ),
    "hope_lower_than_rope_2x": _lower_cases("hope", "rope", 2.0),
    "hope_lower_than_rope_8x": _lower_cases("hope", "rope", 8.0),
    "rope_helps_linear_attention": {
        # ppl(nope) / ppl(rope) at T, linear backend: 4/2, 5/5 (1.5); 2/4, 3/5 (0.55)
        "holds": (_linear_rows([4.0, 5.0], [2.0, 5.0]), 1.5),
        "fails": (_linear_rows([2.0, 3.0], [4.0, 5.0]), 0.55),
        "undefined": _linear_rows([4.0, 5.0], [2.0, math.nan]),
    },
}

CLAIMS = {claim.name: claim for claim in METHOD_CLAIMS}


def test_every_method_claim_has_cases() -> None:
    assert set(CLAIMS) == set(METHOD_CASES)


def test_the_extrapolate_experiment_carries_them() -> None:
    names = [c.name for c in get_experiment("extrapolate").claims]
    hybrids = len(HYBRID_CLAIMS)  # the per-layer options' claims come last
    assert names[-len(METHOD_CLAIMS) - hybrids : -hybrids] == [c.name for c in METHOD_CLAIMS]
    assert names[-hybrids:] == [c.name for c in HYBRID_CLAIMS]


def test_rope_in_linear_attention_reads_only_linear_rows() -> None:
    claim = CLAIMS["rope_helps_linear_attention"]
    softmax_only = [r for r in METHOD_CASES[claim.name]["holds"][0] if "backend" not in r]
    # a softmax sweep does not test it (no row has backend "linear"): not applicable
    assert not applicable(claim, softmax_only)
    # both models learned their data (loss well below the context-free loss)
    learned = [
        {**r, "loss": 1.0, "context_free_loss": 2.0} for r in METHOD_CASES[claim.name]["holds"][0]
    ]
    verdict = judge(claim, replicate_seeds(learned))
    assert verdict.status == "holds" and verdict.measurement is not None
    assert verdict.measurement.value == 1.5  # the softmax rows (9.0 / 1.0) left out
    assert verdict.control == "nope"


def test_cape_claim_reads_only_the_text_recipes_rows() -> None:
    claim = CLAIMS["cape_degrades_less_than_sinusoidal_2x"]
    rows = METHOD_CASES[claim.name]["holds"][0]
    default = [r for r in rows if r.get("pos_kwargs") != _RECIPE]  # CAPE without augmentation
    assert judge(claim, default).status == "undefined"
    assert (
        _RECIPE == '{"max_global_scaling": 1.03, "max_global_shift": 5.0, "max_local_shift": 0.5}'
    )


def test_learned_sinks_and_softcap_make_no_claim() -> None:
    # measured only: gpt-oss and Gemma 2 publish no length claim testable here
    names = " ".join(CLAIMS)
    assert "sinks" not in names and "softcap" not in names

"""Hand-made rows for the signal atlas claims (tests/lab/test_claims.py reads SIGNAL_CASES
and judges each claim on them: holds, fails, undefined), and the claims' wiring."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.lab.experiments import get_experiment, video, vit, vla

Row = dict[str, Any]

#: The signal experiments' claims, each in its experiment's module.
SIGNAL_CLAIMS = (*vit.CLAIMS, *video.CLAIMS, *vla.CLAIMS)


def _rows(
    experiment: str, condition: int, values: dict[tuple[str, ...], list[float | None]]
) -> list[Row]:
    """Atlas rows: per (encoding,) or (layout, encoding) key, one accuracy per seed."""
    rows = []
    for key, per_seed in values.items():
        labels = {"encoding": key[-1], **({"layout": key[0]} if len(key) == 2 else {})}
        for seed, value in enumerate(per_seed):
            rows.append(
                {
                    "experiment": experiment,
                    **labels,
                    "seed": seed,
                    "condition": condition,
                    "condition_label": str(condition),
                    "in_distribution": condition == 0,
                    "accuracy": value,
                }
            )
    return rows


def _vit(values: dict[str, list[float | None]]) -> list[Row]:
    return [
        {"experiment": "vit", "encoding": name, "seed": seed, "accuracy": value}
        for name, per_seed in values.items()
        for seed, value in enumerate(per_seed)
    ]


def _gap_cases(
    experiment: str, condition: int, better: tuple[str, ...], worse: tuple[str, ...]
) -> dict[str, Any]:
    """holds: gaps 0.1 and 0.2 (mean 0.15); fails: −0.1 and −0.3 (mean −0.2); undefined:
    the worse encoding's cell missing. Rows at another condition must be ignored."""
    decoy = _rows(experiment, condition + 1, {better: [0.0, 0.0], worse: [1.0, 1.0]})
    holds = _rows(experiment, condition, {better: [0.6, 0.7], worse: [0.5, 0.5]})
    fails = _rows(experiment, condition, {better: [0.4, 0.2], worse: [0.5, 0.5]})
    return {
        "holds": (holds + decoy, 0.15),
        "fails": (fails + decoy, -0.2),
        "undefined": _rows(experiment, condition, {better: [0.6], worse: [None]}),
    }


SIGNAL_CASES: dict[str, dict[str, Any]] = {
    "vit_position_encoding_helps": {
        "holds": (_vit({"learned_1d": [0.9, 0.95], "none": [0.8, 0.75]}), 0.15),
        "fails": (_vit({"learned_1d": [0.7, 0.6], "none": [0.8, 0.9]}), -0.2),
        "undefined": _vit({"learned_1d": [0.9], "none": [None]}),
    },
    "comrope_beats_axial_rope_video": _gap_cases("video", 0, ("comrope_ap",), ("rope_axial",)),
    "comrope_beats_axial_rope_larger_canvas": _gap_cases(
        "video", 3, ("comrope_ap",), ("rope_axial",)
    ),
    "liere_beats_absolute_video": _gap_cases("video", 0, ("liere",), ("sinusoidal_grid",)),
    "videorope_beats_mrope_longer_video": _gap_cases("video", 2, ("videorope",), ("mrope",)),
    "mrope_numbering_beats_flat_larger_grid": _gap_cases(
        "vla", 1, ("qwen2_vl", "mrope"), ("flat", "rope")
    ),
}


def test_every_signal_claim_has_cases() -> None:
    assert {claim.name for claim in SIGNAL_CLAIMS} == set(SIGNAL_CASES)


@pytest.mark.parametrize("experiment", ["vit", "video", "vla"])
def test_each_experiment_carries_its_claims(experiment: str) -> None:
    mine = [c.name for c in SIGNAL_CLAIMS if c.experiment == experiment]
    assert mine
    assert [c.name for c in get_experiment(experiment).claims] == mine

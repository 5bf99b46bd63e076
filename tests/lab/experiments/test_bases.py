"""The RoPE base sweep at toy size: rows, the tuned model's base, regimes, claims, config."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs, replace_fields
from posenc.lab.experiments.bases import (
    EXPERIMENT,
    PRETRAIN_BASE,
    BasesConfig,
    predicted_regime,
    run_bases,
)
from posenc.rotary.scaling.laws import extrapolation_bound

TINY = BasesConfig(
    passkey_steps=0,
    bases=(2.0, PRETRAIN_BASE, 1_000_000.0),
    ft_steps=3,
    ft_warmup_steps=1,
    multipliers=(1.0, 4.0),
    eval_tokens=128,
    model=ModelArgs(dim=32, depth=1, num_heads=2),
    train=TrainArgs(steps=10, batch_size=4, warmup_steps=1),
    data=DataArgs(train_len=16, corpus_bytes=20_000),
    runner=RunnerArgs(progress=False),
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("bases")
    return out, run_bases(TINY, out, echo=None)


def test_one_row_per_base_stage_and_length(finished):
    _, rows = finished
    keys = {(r["base"], r["stage"], r["multiplier"]) for r in rows}
    want = {(PRETRAIN_BASE, "pretrained", m) for m in TINY.multipliers}
    want |= {(b, "ft", m) for b in TINY.bases for m in TINY.multipliers}
    assert keys == want and len(rows) == len(want)
    assert all(r["ppl"] == pytest.approx(math.exp(r["loss"])) for r in rows)


def test_fine_tunes_start_from_the_base_and_train_at_their_own_base(finished):
    out, rows = finished
    base = torch.load(out / "runs/base/seed0/final.pt", weights_only=False)["model"]
    tuned = torch.load(out / "runs/ft_base2/seed0/final.pt", weights_only=False)["model"]
    assert base.keys() == tuned.keys()
    assert any(not torch.equal(base[k], tuned[k]) for k in base)  # it trained
    config = (out / "runs/ft_base2/seed0/config.json").read_text()
    assert '"pos_kwargs": {"base": 2.0}' in config
    # the control fine-tune continues at the pre-training base; at T the tuned rows differ
    at_t = {(r["base"], r["stage"]): r["ppl"] for r in rows if r["multiplier"] == 1.0}
    assert at_t[(2.0, "ft")] != at_t[(PRETRAIN_BASE, "ft")]


def test_rows_carry_the_scaling_laws_regime(finished):
    _, rows = finished
    head_dim = TINY.model.dim // TINY.model.num_heads
    by_base = {r["base"]: (r["regime"], r["predicted_bound"]) for r in rows}
    assert by_base[2.0] == ("small", None)
    big = extrapolation_bound(head_dim, 1e6, TINY.data.train_len, pretrain_base=PRETRAIN_BASE)
    assert by_base[1_000_000.0] == ("larger", big)
    assert by_base[PRETRAIN_BASE][0] == "larger"


def test_regimes():
    # head_dim 32, T = 128: full-period base 24.9, so 10 is small and 500 is between.
    assert predicted_regime(32, 10.0, 128) == ("small", None)
    assert predicted_regime(32, 500.0, 128) == ("between", None)
    regime, bound = predicted_regime(32, 1e6, 128)
    assert regime == "larger" and bound == pytest.approx(2 * math.pi * 1e6 ** (12 / 32))


def test_the_claims_read_these_rows():
    names = {c.name for c in EXPERIMENT.claims}
    assert names == {
        "small_base_flat_16x",
        "large_base_holds_within_bound",
        "large_base_fails_beyond_bound",
    }


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("bases", (), "bases must hold"),
        ("bases", (10.0, 10.0), "bases must be distinct"),
        ("bases", (0.0,), r"bases\[0\]"),
        ("ft_steps", 0, "ft_steps"),
        ("dim", 30, "dim must be num_heads"),
    ],
)
def test_bad_config_names_the_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        replace_fields(TINY, **{field: value})

"""The extend experiment end to end at toy size (every usable scaling type of posenc's
conversion), its config and scalings (passkey scoring: tests/lab/data/test_passkey.py)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from posenc.lab.config import (
    DataArgs,
    ModelArgs,
    RunnerArgs,
    TrainArgs,
    from_record,
    replace_fields,
)
from posenc.lab.data.passkey import (
    PasskeyMix,
)
from posenc.lab.experiments import extend
from posenc.lab.experiments.extend import (
    ALIASES,
    DEFAULT_METHODS,
    METHODS,
    ExtendConfig,
    run_extend,
    scaling_for,
    scaling_types,
)
from posenc.lab.results import read_results_csv
from posenc.lab.run import torch_threads
from posenc.lab.runner import Run
from posenc.rotary.scaling import (
    DynamicNTK,
    Linear,
    Llama3,
    NTKAware,
    YaRN,
    scaling_from_dict,
)

TINY = ExtendConfig(
    passkey_steps=0,  # T = 16 cannot hold a passkey row
    methods=METHODS,  # rope, the aliases and every scaling type the experiment can fill
    multipliers=(1.0, 2.0),
    ft_len_multiplier=7.0,  # passkey fine-tuning rows need >= passkey_min_context() tokens
    ft_steps=5,
    ft_warmup_steps=1,
    passkey_ft_steps=2,
    passkey_lengths=(7.0, 8.0),
    passkey_depths=(0.0, 1.0),
    passkey_trials=2,
    eval_tokens=256,
    model=ModelArgs(dim=32, depth=2, num_heads=2),
    train=TrainArgs(steps=20, batch_size=8, warmup_steps=2),
    data=DataArgs(train_len=16, corpus_bytes=20_000),
    runner=RunnerArgs(progress=False),
)


@pytest.fixture(scope="module")
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def finished(tmp_path_factory, one_thread) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("extend")
    return out, run_extend(TINY, out, echo=None)


def _extend_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["experiment"] == "extend"]


def test_one_row_per_method_stage_and_length(finished):
    _, rows = finished
    keys = [(r["method"], r["stage"], r["eval_len"]) for r in _extend_rows(rows)]
    expected = [(m, "no_ft", n) for m in TINY.methods for n in (16, 32)]
    expected += [(m, "ft", n) for m in TINY.ft_methods for n in (16, 32)]
    assert sorted(keys) == sorted(expected)


def test_losses_finite_positive_and_ppl_is_exp_loss(finished):
    _, rows = finished
    for row in _extend_rows(rows):
        assert math.isfinite(row["loss"]) and row["loss"] > 0
        assert row["ppl"] == pytest.approx(math.exp(row["loss"]), rel=1e-12)
        assert row["train_len"] == 16


def test_every_scaling_with_factor_one_is_plain_rope_at_train_len(finished):
    _, rows = finished
    at_t = {
        r["method"]: r["loss"]
        for r in _extend_rows(rows)
        if (r["stage"], r["eval_len"]) == ("no_ft", 16)
    }
    assert set(at_t) == set(METHODS) >= {"linear", "ntk", "dynamic", "yarn", "llama3"}
    torch.testing.assert_close(
        torch.tensor([at_t[m] for m in METHODS], dtype=torch.float64),
        torch.full((len(METHODS),), at_t["rope"], dtype=torch.float64),
        rtol=0,
        atol=0,
    )


def test_scalings_change_the_model_beyond_train_len(finished):
    _, rows = finished
    at_2t = {
        r["method"]: r for r in _extend_rows(rows) if (r["stage"], r["eval_len"]) == ("no_ft", 32)
    }
    for method in [m for m in METHODS if m != "rope"]:
        assert at_2t[method]["factor"] == 2.0
        assert at_2t[method]["loss"] != at_2t["rope"]["loss"], method
    assert at_2t["rope"]["factor"] is None


def test_fine_tuned_rows_use_the_fine_tuning_factor(finished):
    _, rows = finished
    for row in _extend_rows(rows):
        if row["stage"] == "ft":
            assert row["ft_len"] == 112
            assert row["factor"] == (None if row["method"] == "rope" else 7.0)


def test_passkey_rows_per_method_stage_context_depth(finished):
    _, rows = finished
    passkey = [r for r in rows if r["experiment"] == "passkey"]
    keys = [(r["method"], r["stage"], r["context_len"], r["depth"]) for r in passkey]
    grid = [(n, d) for n in (112, 128) for d in (0.0, 1.0)]
    expected = [(m, "no_ft", *g) for m in TINY.methods for g in grid]
    expected += [(m, "ft", *g) for m in TINY.ft_methods for g in grid]
    assert sorted(keys) == sorted(expected)
    for row in passkey:
        assert row["accuracy"] in (0.0, 0.5, 1.0)  # 2 trials
        assert 0.0 <= row["token_accuracy"] <= 1.0


def test_files_written(finished):
    out, rows = finished
    config = json.loads((out / "config.json").read_text())
    assert config["experiment"] == "extend" and config["data"]["train_len"] == 16
    assert len(read_results_csv(out / "results.csv")) == len(rows)
    assert "RoPE context extension" in (out / "report.html").read_text()
    assert (out / "runs" / "base" / "seed0" / "final.pt").is_file()
    for method in TINY.ft_methods:
        assert (out / "runs" / f"ft_{method}" / "seed0" / "done.json").is_file()
        assert (out / "runs" / f"ft_{method}" / "seed0" / "eval.json").is_file()


def test_resume_returns_the_same_rows_without_work(finished, monkeypatch):
    out, rows = finished

    def refuse(*args, **kwargs):
        raise AssertionError("a finished experiment must not train or evaluate again")

    for name in ("train", "evaluate_lm", "passkey_accuracy"):
        monkeypatch.setattr(extend, name, refuse)
    metrics = (out / "runs" / "base" / "seed0" / "metrics.jsonl").read_text()
    again = run_extend(replace_fields(TINY, threads=None, progress=True), out, echo=None)
    assert again == rows
    assert (out / "runs" / "base" / "seed0" / "metrics.jsonl").read_text() == metrics


@pytest.mark.parametrize(("field", "value"), [("seeds", (1,)), ("ft_methods", ("pi",))])
def test_config_mismatch_names_the_field(finished, field, value):
    out, _ = finished
    with pytest.raises(ValueError, match=field):
        run_extend(replace_fields(TINY, **{field: value}), out, echo=None)


def test_base_trains_on_the_passkey_mix_at_t(tmp_path, monkeypatch):
    config = replace_fields(
        TINY, train_len=112, passkey_steps=5, passkey_lengths=(1.0,), ft_len_multiplier=1.0
    )
    seen = {}

    class Stop(Exception):
        pass

    def capture(model, source, train_config, folder):
        seen.update(source=source, steps=train_config.steps)
        raise Stop

    monkeypatch.setattr(extend, "train", capture)
    with pytest.raises(Stop):
        extend.EXPERIMENT.execute(config, Run("base/seed3", {"seed": 3}), tmp_path)
    source = seen["source"]
    assert isinstance(source, PasskeyMix)
    assert (source.length, source.steps, source.passkey_steps, source.seed) == (112, 20, 5, 3)
    assert sum(source.is_passkey(step) for step in range(seen["steps"])) == 5


def test_config_round_trips_through_json():
    restored = from_record(ExtendConfig, json.loads(json.dumps(asdict(TINY))))
    assert restored == TINY


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("train_len", 0),
        ("dim", 30),
        ("steps", 0),
        ("methods", ("rope", "alibi")),
        ("methods", ("rope", "longrope")),  # needs factor lists the lab cannot supply
        ("methods", ("rope", "default")),
        ("methods", ()),
        ("ft_methods", ("bogus",)),
        ("multipliers", (1.0, 0.0)),
        ("ft_len_multiplier", 0.5),
        ("passkey_ft_steps", 6),
        ("passkey_steps", 21),
        ("passkey_steps", 1),  # T = 16 cannot hold a passkey row
        ("passkey_lengths", (1.0,)),
        ("passkey_depths", (0.0, 1.5)),
        ("passkey_trials", 0),
        ("eval_tokens", 16),
        ("lr", 0.0),
        ("ft_lr", -1.0),
        ("corpus_bytes", 0),
        ("threads", 0),
        ("workers", 0),
    ],
)
def test_bad_config_raises_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        replace_fields(TINY, **{field: value})


@pytest.mark.parametrize(
    ("method", "cls"),
    [
        ("pi", Linear),
        ("linear", Linear),
        ("ntk", NTKAware),
        ("dynamic_ntk", DynamicNTK),
        ("dynamic", DynamicNTK),
        ("yarn", YaRN),
        ("llama3", Llama3),
    ],
)
def test_scaling_for_builds_the_method_at_the_factor(method, cls):
    scaling = scaling_from_dict(scaling_for(method, 4.0, 128))
    assert isinstance(scaling, cls) and scaling.factor == 4.0
    if cls is DynamicNTK:
        assert scaling.mode == "hf" and scaling.max_position_embeddings == 128


def test_scaling_for_rope_is_none_and_unknown_raises():
    assert scaling_for("rope", 8.0, 128) is None
    with pytest.raises(ValueError, match="method"):
        scaling_for("alibi", 2.0, 128)
    with pytest.raises(ValueError, match="name it 'rope'"):
        scaling_for("default", 2.0, 128)


def test_the_default_methods_build_the_scalings_of_the_first_results():
    """The dicts the methods spelled out before the conversion was read: same rows."""
    assert DEFAULT_METHODS == ("rope", "pi", "ntk", "dynamic_ntk", "yarn", "llama3")
    assert ExtendConfig().methods == DEFAULT_METHODS
    s, t = 4.0, 128
    assert scaling_for("pi", s, t) == {"type": "linear", "factor": s}
    assert scaling_for("ntk", s, t) == {"type": "ntk", "factor": s}
    assert scaling_for("dynamic_ntk", s, t) == {
        "type": "dynamic",
        "factor": s,
        "max_position_embeddings": t,
    }
    assert scaling_for("yarn", s, t) == {
        "type": "yarn",
        "factor": s,
        "original_max_position_embeddings": t,
    }
    assert scaling_for("llama3", s, t) == {
        "type": "llama3",
        "factor": s,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": t,
    }


def test_aliases_are_the_papers_names_of_conversion_types():
    assert ALIASES == {"pi": "linear", "dynamic_ntk": "dynamic"}
    for alias, kind in ALIASES.items():
        assert scaling_for(alias, 3.0, 64) == scaling_for(kind, 3.0, 64)


#: Scaling types the experiment refuses, with the fields it cannot derive from s and T:
#: LongRoPE's per-frequency factors are searched for one model, Gemma's proportional RoPE
#: rotates a fraction of the pairs (an architecture choice, not an extension).
REFUSED = {"longrope": ("short_factor", "long_factor"), "proportional": ("partial_rotary_factor",)}


@pytest.mark.parametrize("kind", list(scaling_types()))
def test_every_type_of_the_conversion_is_a_method_or_refused_naming_its_fields(kind):
    if kind not in METHODS:
        assert kind in REFUSED, f"{kind}: a new scaling type the lab cannot fill; say why"
        with pytest.raises(ValueError, match=", ".join(REFUSED[kind])):
            scaling_for(kind, 2.0, 16)
        with pytest.raises(ValueError, match="methods"):
            replace_fields(TINY, methods=("rope", kind))
        return
    assert kind not in REFUSED
    scaling = scaling_from_dict(scaling_for(kind, 2.0, 16))
    assert isinstance(scaling, scaling_types()[kind])
    assert getattr(scaling, "factor", None) == 2.0
    assert kind in TINY.methods  # so the end-to-end run above evaluates it

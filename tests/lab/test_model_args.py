"""ModelArgs' per-layer options: the flags, what reaches each experiment's layers, the run's
identity (rows, config.json, report labels), the refusals and the first-token mass column."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import tyro

from posenc.attention import Attention
from posenc.lab.command import experiment_main
from posenc.lab.config import (
    DataArgs,
    ModelArgs,
    RunnerArgs,
    TrainArgs,
    expand_flat_options,
    replace_fields,
)
from posenc.lab.experiments import EXPERIMENTS, bases, extend, extrapolate, generalize, lm, longctx
from posenc.lab.gather import labelled_rows
from posenc.lab.probes import first_token_mass_fields
from posenc.lab.results import check_out_dir
from posenc.models import DecoderLM, LayerAttention, ModelConfig, first_token_attention_mass
from posenc.softmax.query_scale import QueryScale

SMALL: dict[str, Any] = {"dim": 16, "depth": 4, "num_heads": 2}


def parse(cls: type, options: list[str]) -> Any:
    return tyro.cli(cls, args=expand_flat_options(cls, options))


def test_flags_parse_into_the_model_section() -> None:
    config = parse(
        extrapolate.ExtrapolateConfig,
        ["--encodings", "rope", "--model.window", "8", "--model.nope-layers", "1", "3",
         "--model.output-gate", "--model.mixers", "linear", "softmax", "softmax", "softmax",
         "--query-scale", "llama4"],
    )  # fmt: skip
    assert config.model == ModelArgs(
        window=8,
        nope_layers=(1, 3),
        output_gate=True,
        mixers=("linear", "softmax", "softmax", "softmax"),
        query_scale="llama4",
    )
    named = parse(lm.LmConfig, ["--model.schedule", "rnope_swa", "--window", "16", "--depth", "8"])
    assert (named.model.schedule, named.model.window, named.model.depth) == ("rnope_swa", 16, 8)
    assert parse(lm.LmConfig, []).model.layered is False


def _layers(config: ModelConfig) -> list[LayerAttention]:
    return [config.layer_attention(i) for i in range(config.depth)]


#: Each decoder experiment's model of ``model`` (its ModelConfig construction line).
DECODERS: dict[str, Callable[[ModelArgs], ModelConfig]] = {
    "extrapolate": lambda m: extrapolate.ExtrapolateConfig(
        encodings=("rope",), model=m
    ).model_config("rope"),
    "lm": lambda m: lm.LmConfig(encodings=("rope",), model=m).model_config("rope"),
    "bases": lambda m: bases.BasesConfig(model=m).model_config(500.0),
    "extend": lambda m: extend.ExtendConfig(model=m).model_config("yarn", 2.0),
    "longctx": lambda m: longctx.LongCtxConfig(model=m).model_config("rope", 256),
    "generalize": lambda m: generalize.TasksConfig(
        tasks=("copy",), encodings=("rope",), model=m
    ).model_config("copy", "rope", False),
}


@pytest.mark.parametrize("name", DECODERS)
def test_options_reach_every_decoder_experiments_layers(name: str) -> None:
    swa = DECODERS[name](ModelArgs(**SMALL, schedule="rnope_swa", window=8, output_gate=True))
    assert _layers(swa) == [LayerAttention(window=8)] * 3 + [LayerAttention(encoded=False)]
    assert swa.output_gate
    model = DecoderLM(swa)
    attentions = [m for m in model.modules() if isinstance(m, Attention)]
    gates = [attn.gate is not None for attn in attentions]
    assert gates == [True] * 4
    hybrid = DECODERS[name](ModelArgs(**SMALL, schedule="hybrid_delta", interval=2))
    assert [a.mixer for a in _layers(hybrid)] == ["delta", "softmax", "delta", "softmax"]
    plain = DECODERS[name](ModelArgs(**SMALL))
    assert _layers(plain) == [LayerAttention()] * 4 and not plain.output_gate


def test_named_schedules_resolve_through_the_presets() -> None:
    def kwargs(**options: Any) -> dict[str, Any]:
        return ModelArgs(**SMALL, **options).config_kwargs(train_len=64)

    assert kwargs(schedule="nope_every", interval=2)["nope_layers"] == (1, 3)
    swan = kwargs(schedule="swan", window=8)
    assert (swan["nope_layers"], swan["window"]) == ((3,), 8)
    assert swan["query_scale"] == QueryScale.logn(64)
    assert kwargs(schedule="hybrid_linear")["mixers"] == ("linear",) * 3 + ("softmax",)
    assert kwargs(query_scale="llama4")["query_scale"] == QueryScale.llama4()
    assert kwargs(chunk_size=4)["chunk_size"] == 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"schedule": "rnope_swa"}, "window is required with schedule 'rnope_swa'"),
        ({"schedule": "nope_every", "nope_layers": (1,)}, "nope_layers [1]: schedule"),
        ({"schedule": "hybrid_delta", "mixers": ("softmax",) * 4}, "mixers: schedule"),
        ({"schedule": "swan", "window": 4, "query_scale": "logn"}, "query_scale 'logn'"),
        ({"schedule": "ring"}, "schedule must be one of"),
        ({"query_scale": "yarn"}, "query_scale must be one of"),
        ({"interval": 0}, "interval"),
        ({"nope_layers": (4,)}, "nope_layers must be an integer in [0, 3]"),
        ({"mixers": ("delta",)}, "mixers must name one mixer per layer"),
        ({"window": 4, "chunk_size": 4}, "window (4) and chunk_size (4)"),
    ],
)
def test_bad_options_are_refused_naming_the_field(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelArgs(**SMALL, **options)


def test_encoders_refuse_what_they_cannot_take() -> None:
    with pytest.raises(ValueError, match=r"mixers: 'delta' layers .* are causal"):
        ModelArgs(**SMALL, mixers=("delta",) * 4).config_kwargs(train_len=8, causal=False)
    for name in ("vit", "csl", "audio", "video", "vla", "triangles", "resolution"):
        cls = EXPERIMENTS[name].config
        for field, value in (("window", 4), ("output_gate", True), ("schedule", "hybrid_delta")):
            model = dataclasses.replace(cls().model, **{field: value})
            with pytest.raises(ValueError, match=re.escape(f"model.{field}: the ")):
                dataclasses.replace(cls(), model=model)


def test_labels_tell_schedules_apart() -> None:
    labels = {
        ModelArgs(**SMALL, **options).label()
        for options in (
            {},
            {"window": 8},
            {"output_gate": True},
            {"schedule": "rnope_swa", "window": 8},
            {"schedule": "rnope_swa", "window": 8, "output_gate": True},
            {"schedule": "rnope_swa", "window": 8, "interval": 2},
            {"nope_layers": (1,)},
            {"mixers": ("softmax", "linear", "softmax", "softmax")},
        )
    }
    assert len(labels) == 8 and "" in labels
    assert ModelArgs(**SMALL).row_fields() == {}
    assert ModelArgs(**SMALL, output_gate=True).row_fields() == {"schedule": "gate"}
    rows = [{"encoding": "rope", "schedule": "rnope_swa+w8"}, {"method": "pi", "schedule": ""}]
    assert labelled_rows(rows) == [
        {"encoding": "rope [rnope_swa+w8]", "schedule": "rnope_swa+w8"},
        {"method": "pi", "schedule": ""},
    ]


TINY = extrapolate.ExtrapolateConfig(
    encodings=("rope",),
    multipliers=(1.0, 2.0),
    eval_tokens=64,
    model=ModelArgs(dim=16, depth=2, num_heads=2, output_gate=True),
    train=TrainArgs(steps=2, batch_size=2),
    data=DataArgs(train_len=16, corpus_bytes=20_000),
    runner=RunnerArgs(isolate=False, progress=False),
)


def test_a_gated_run_is_its_own_identity_and_records_the_first_token_mass(
    tmp_path: Path,
) -> None:
    rows = extrapolate.run_extrapolate(TINY, tmp_path, echo=None)
    assert [row["schedule"] for row in rows] == ["gate", "gate"]
    for row in rows:
        assert 0.0 <= row["first_token_mass"] <= row["first_token_mass_max"] <= 1.0
    assert json.loads((tmp_path / "config.json").read_text())["model"]["output_gate"] is True
    plain = replace_fields(TINY, output_gate=False)
    with pytest.raises(ValueError, match=re.escape("different 'model.output_gate'")):
        check_out_dir(tmp_path, "extrapolate", plain)
    report = (tmp_path / "report.html").read_text()
    assert "rope [gate]" in report


def test_a_folder_written_before_the_options_resumes(tmp_path: Path) -> None:
    config = replace_fields(TINY, output_gate=False)
    first = extrapolate.run_extrapolate(config, tmp_path, echo=None)
    assert "schedule" not in first[0]
    saved = tmp_path / "config.json"
    record = json.loads(saved.read_text())
    for name in ("schedule", "interval", "window", "nope_layers", "mixers", "output_gate"):
        del record["model"][name]
    del record["model"]["chunk_size"], record["model"]["query_scale"]
    saved.write_text(json.dumps(record))  # as written before the fields existed
    assert extrapolate.run_extrapolate(config, tmp_path, echo=None) == first
    with pytest.raises(ValueError, match=re.escape("different 'model.window'")):
        check_out_dir(tmp_path, "extrapolate", replace_fields(config, window=4))


def test_the_command_line_refuses_a_bad_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bad"
    with pytest.raises(SystemExit) as exit_info:  # tyro reports the config's ValueError
        experiment_main(extrapolate.EXPERIMENT, ["--out", str(out), "--schedule", "rnope_swa"])
    assert exit_info.value.code == 2
    assert "window is required" in capsys.readouterr().err
    assert not out.exists()


def test_first_token_mass_fields_read_the_probe() -> None:
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(vocab_size=16, dim=16, depth=2, num_heads=2, output_gate=True))
    tokens = torch.randint(0, 16, (2, 12))
    mass = first_token_attention_mass(model, tokens)
    assert first_token_mass_fields(model, tokens) == {
        "first_token_mass": float(mass.mean()),
        "first_token_mass_max": float(mass.mean(dim=1).max()),
    }
    linear = DecoderLM(ModelConfig(vocab_size=16, dim=16, depth=2, num_heads=2, backend="linear"))
    assert first_token_mass_fields(linear, tokens) == {
        "first_token_mass": None,
        "first_token_mass_max": None,
    }

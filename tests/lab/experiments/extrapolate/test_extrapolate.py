from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.attention.backends import NAMES as BACKENDS
from posenc.lab.command import experiment_main
from posenc.lab.config import DataArgs, ModelArgs, RunnerArgs, TrainArgs, replace_fields
from posenc.lab.data.corpus import load_corpus
from posenc.lab.experiments.extrapolate import (
    EXPERIMENT,
    ExtrapolateConfig,
    evaluate_lm,
    evaluate_lm_windows,
    format_ppl_table,
    run_extrapolate,
)
from posenc.models import DecoderLM, ModelConfig

TINY = ExtrapolateConfig(
    encodings=("learned", "alibi", "rope"),
    multipliers=(1.0, 1.5, 4.0),
    eval_tokens=128,
    model=ModelArgs(dim=16, depth=1, num_heads=2),
    train=TrainArgs(steps=6, batch_size=4),
    data=DataArgs(train_len=16, corpus_bytes=20_000),
    runner=RunnerArgs(isolate=False, progress=False),
)


def quiet(_: str) -> None:
    pass


#: measured of the machine, not computed by the model: they differ between runs
MACHINE = ("tokens_per_s", "peak_memory_mb", "eval_peak_memory_mb")


def computed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in MACHINE} for row in rows]


def test_rows_cover_every_encoding_and_length(tmp_path: Path) -> None:
    rows = run_extrapolate(TINY, tmp_path, echo=quiet)
    assert [(r["encoding"], r["eval_len"]) for r in rows] == [
        (name, n) for name in TINY.encodings for n in (16, 24, 64)
    ]
    for row in rows:
        if row["encoding"] == "learned" and row["eval_len"] > 16:
            assert row["defined"] is False and row["loss"] is None
            assert row["loss_se"] is None and row["ppl_se"] is None
            assert "learned table" in row["note"]
        else:
            assert row["defined"] is True and 0 < row["loss"] < 10
            assert math.isclose(row["ppl"], math.exp(row["loss"]))
            # the spread over the 128 // eval_len windows, ppl's by the delta method
            assert row["loss_se"] > 0
            assert math.isclose(row["ppl_se"], row["ppl"] * row["loss_se"])
        assert row["tokens_per_s"] > 0 and row["peak_memory_mb"] > 0
    for name in ("config.json", "results.csv", "report.html"):
        assert (tmp_path / name).is_file()
    table = format_ppl_table(rows)
    assert "learned" in table and "–" in table
    assert "tok/s" not in table and "mem MB" not in table


def test_rows_record_each_encodings_constructor_arguments(tmp_path: Path) -> None:
    # DAPE around ALiBi and around KERPLE are both encoding "dape": the claims tell them apart
    # by this column
    config = replace_fields(
        TINY,
        encodings=("alibi", "rope"),
        multipliers=(1.0,),
        pos_kwargs={"alibi": {"num_biased_heads": 1}},
    )
    rows = run_extrapolate(config, tmp_path, echo=quiet)
    assert [(r["encoding"], r["pos_kwargs"]) for r in rows] == [
        ("alibi", '{"num_biased_heads": 1}'),
        ("rope", "{}"),
    ]


def test_same_command_resumes_without_training(tmp_path: Path) -> None:
    first = run_extrapolate(TINY, tmp_path, echo=quiet)
    metrics = (tmp_path / "runs" / "alibi" / "seed0" / "metrics.jsonl").read_text()
    (tmp_path / "runs" / "rope" / "seed0" / "eval.json").unlink()  # as if killed before rope's eval
    again = run_extrapolate(replace_fields(TINY, progress=True), tmp_path, echo=quiet)
    assert again[:6] == first[:6]  # alibi and learned: read back as they were
    assert computed(again) == computed(first)  # rope: evaluated again, the same numbers
    assert (tmp_path / "runs" / "alibi" / "seed0" / "metrics.jsonl").read_text() == metrics


def test_a_different_config_in_the_same_folder_raises(tmp_path: Path) -> None:
    run_extrapolate(replace_fields(TINY, encodings=("alibi",)), tmp_path, echo=quiet)
    with pytest.raises(ValueError, match=r"'train\.steps'"):
        run_extrapolate(replace_fields(TINY, encodings=("alibi",), steps=7), tmp_path, echo=quiet)


def test_isolated_training_in_a_fresh_process(tmp_path: Path) -> None:
    config = replace_fields(TINY, encodings=("alibi",), isolate=True)
    rows = run_extrapolate(config, tmp_path, echo=quiet)
    in_process = run_extrapolate(replace_fields(config, isolate=False), tmp_path / "b", echo=quiet)
    # Same seed, same batches, same model: the fresh process trains the same weights.
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in in_process], rel=1e-5)


def test_evaluate_lm_is_the_mean_cross_entropy_of_the_windows() -> None:
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(dim=16, depth=1, num_heads=2, pos="alibi")).eval()
    stream = torch.randint(0, 256, (200,), dtype=torch.uint8)
    got = evaluate_lm(model, stream, 10, eval_tokens=50, max_tokens_per_batch=20)
    windows = torch.stack([stream[i * 10 : i * 10 + 11] for i in range(5)]).long()
    with torch.no_grad():
        logits = model(windows[:, :-1])
    want = F.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1))
    assert_close(torch.tensor(got, dtype=torch.float64), want.double(), rtol=1e-6, atol=1e-6)


def test_evaluate_lm_windows_gives_the_standard_error_over_windows() -> None:
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(dim=16, depth=1, num_heads=2, pos="alibi")).eval()
    stream = torch.randint(0, 256, (200,), dtype=torch.uint8)
    got = evaluate_lm_windows(model, stream, 10, eval_tokens=50, max_tokens_per_batch=20)
    windows = torch.stack([stream[i * 10 : i * 10 + 11] for i in range(5)]).long()
    with torch.no_grad():
        logits = model(windows[:, :-1]).double()
    per_window = F.cross_entropy(
        logits.reshape(-1, 256), windows[:, 1:].reshape(-1), reduction="none"
    ).reshape(5, 10)
    means = per_window.mean(dim=1)  # each window's mean loss
    assert got.windows == 5
    assert got.loss == pytest.approx(float(means.mean()), rel=1e-6)
    assert got.se == pytest.approx(float(means.std()) / math.sqrt(5), rel=1e-5)
    assert got.loss == evaluate_lm(model, stream, 10, eval_tokens=50, max_tokens_per_batch=20)
    # one window: no spread to estimate
    one = evaluate_lm_windows(model, stream, 50, eval_tokens=50)
    assert one.windows == 1 and one.se is None


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"encodings": ("alibi", "rotary")}, "unknown encoding 'rotary'"),
        ({"encodings": ()}, "encodings"),
        ({"multipliers": (1.0, -2.0)}, "multipliers"),
        ({"eval_tokens": 32}, "eval_tokens"),
        ({"steps": 0}, "steps"),
        ({"workers": 0}, "workers"),
        ({"backend": "flash"}, "backend must be None or one of 'auto'"),
    ],
)
def test_config_errors_name_the_field(change: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        replace_fields(TINY, **change)


def test_corpus_split_used_for_evaluation_is_the_test_split(tmp_path: Path) -> None:
    corpus = load_corpus(seed=0, max_bytes=TINY.data.corpus_bytes)
    assert corpus.test.numel() >= TINY.eval_tokens + 1
    assert not set(corpus.files["test"]) & set(corpus.files["train"])
    json.dumps(corpus.files)  # plain strings, recorded in reports


def test_seeds_are_independent_runs_and_the_table_gives_mean_and_std(tmp_path: Path) -> None:
    config = replace_fields(TINY, encodings=("alibi",), multipliers=(1.0, 2.0), seeds=(0, 3))
    rows = run_extrapolate(config, tmp_path / "both", echo=quiet)
    assert [(r["seed"], r["eval_len"]) for r in rows] == [(0, 16), (0, 32), (3, 16), (3, 32)]
    assert rows[0]["loss"] != rows[2]["loss"]  # another init and batch order
    # seed 3 alone gives the same rows as seed 3 among others
    alone = run_extrapolate(replace_fields(config, seeds=(3,)), tmp_path / "alone", echo=quiet)
    assert computed(alone) == computed(rows[2:])
    table = format_ppl_table(rows)
    mean = (rows[0]["ppl"] + rows[2]["ppl"]) / 2
    std = abs(rows[0]["ppl"] - rows[2]["ppl"]) / math.sqrt(2)  # sample std of two values
    assert f"{mean:.3f} ± {std:.3f}" in table and "2 seeds" in table


@pytest.mark.parametrize("seeds", [(), (1, 1), (-1,)])
def test_bad_seeds_name_the_field(seeds: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="seeds"):
        replace_fields(TINY, seeds=seeds)


@pytest.mark.parametrize("encoding", ["nope", "sinusoidal", "rope", "alibi", "t5"])
def test_evaluation_at_16k_tokens_builds_no_length_squared_tensor(encoding: str) -> None:
    # 128 × T at T = 128: the attention backends (sdpa's flash kernel without a bias, the
    # chunked backend with one) keep every tensor far below L² elements.
    from tests.attention.test_memory import LargestStorage

    length = 16384
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=256, dim=16, depth=1, num_heads=2, pos=encoding)
    model = DecoderLM(replace(config, max_seq_len=length))
    stream = torch.randint(0, 256, (length + 1,), dtype=torch.uint8)
    with LargestStorage() as tracker:
        loss = evaluate_lm(model, stream, length, eval_tokens=length)
    assert math.isfinite(loss)
    # the largest are the logits (L × 256 vocab); an L × L tensor would be 16× more
    assert tracker.largest < length * length // 16, (tracker.op, tracker.largest)


# ---- the attention backend (RoPE with linear attention) ----------------------------------


def test_backend_reaches_every_model_and_its_rows(tmp_path: Path) -> None:
    config = replace_fields(TINY, encodings=("alibi",), multipliers=(1.0,), backend="chunked")
    assert config.model_config("alibi").backend == "chunked"
    rows = run_extrapolate(config, tmp_path, echo=quiet)
    assert [r["backend"] for r in rows] == ["chunked"]
    assert json.loads((tmp_path / "config.json").read_text())["backend"] == "chunked"
    assert "with the chunked backend" in format_ppl_table(rows)
    # the default is "auto" and leaves the rows as they were before the field existed
    assert TINY.backend is None and TINY.model_config("alibi").backend == "auto"
    plain = run_extrapolate(replace_fields(config, backend=None), tmp_path / "auto", echo=quiet)
    assert "backend" not in plain[0] and "backend" not in format_ppl_table(plain)


def test_a_folder_of_another_backend_is_refused_naming_it(tmp_path: Path) -> None:
    config = replace_fields(TINY, encodings=("alibi",), multipliers=(1.0,))
    run_extrapolate(replace_fields(config, backend="chunked"), tmp_path, echo=quiet)
    for other in (None, "sdpa"):
        with pytest.raises(ValueError, match="different 'backend'"):
            run_extrapolate(replace_fields(config, backend=other), tmp_path, echo=quiet)


def test_a_folder_written_before_the_backend_field_resumes(tmp_path: Path) -> None:
    config = replace_fields(TINY, encodings=("alibi",), multipliers=(1.0,))
    first = run_extrapolate(config, tmp_path, echo=quiet)
    saved = tmp_path / "config.json"
    record = json.loads(saved.read_text())
    assert record.pop("backend") is None
    saved.write_text(json.dumps(record))  # as written before the field existed
    assert run_extrapolate(config, tmp_path, echo=quiet) == first


def test_backend_option_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = [
        "--encodings", "alibi", "--train-len", "16", "--multipliers", "1", "--dim", "16",
        "--depth", "1", "--num-heads", "2", "--batch-size", "2", "--steps", "2",
        "--eval-tokens", "32", "--corpus-bytes", "20000", "--no-isolate", "--no-progress",
    ]  # fmt: skip
    out = tmp_path / "chunked"
    assert experiment_main(EXPERIMENT, ["--out", str(out), "--backend", "chunked", *options]) == 0
    assert json.loads((out / "config.json").read_text())["backend"] == "chunked"
    bad = tmp_path / "bad"
    with pytest.raises(SystemExit) as exit_info:  # tyro reports the config's ValueError
        experiment_main(EXPERIMENT, ["--out", str(bad), "--backend", "flash", *options])
    assert exit_info.value.code == 2
    assert "backend must be None or one of" in capsys.readouterr().err
    assert not bad.exists()  # refused before the folder was written


@pytest.mark.skipif("linear" not in BACKENDS, reason="no linear-attention backend")
def test_linear_attention_run_with_and_without_rope(tmp_path: Path) -> None:
    config = replace_fields(
        TINY, encodings=("nope", "rope"), multipliers=(1.0, 2.0), backend="linear"
    )
    rows = run_extrapolate(config, tmp_path, echo=quiet)
    assert [(r["encoding"], r["backend"]) for r in rows] == [
        ("nope", "linear"), ("nope", "linear"), ("rope", "linear"), ("rope", "linear")
    ]  # fmt: skip
    assert all(math.isfinite(r["loss"]) for r in rows)
    # another model than softmax attention with the same weights and batches
    softmax = run_extrapolate(
        replace_fields(config, backend=None), tmp_path / "softmax", echo=quiet
    )
    assert [r["loss"] for r in rows] != pytest.approx([r["loss"] for r in softmax])

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from posenc.lab.data.corpus import load_corpus
from posenc.lab.experiments.extrapolate import (
    ExtrapolateConfig,
    evaluate_lm,
    evaluate_lm_windows,
    format_ppl_table,
    run_extrapolate,
)
from posenc.model import DecoderLM, ModelConfig

TINY = ExtrapolateConfig(
    encodings=("learned", "alibi", "rope"),
    train_len=16,
    multipliers=(1.0, 1.5, 4.0),
    dim=16,
    depth=1,
    num_heads=2,
    steps=6,
    batch_size=4,
    eval_tokens=128,
    corpus_bytes=20_000,
    isolate=False,
    progress=False,
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


def test_rows_record_each_encodings_constructor_arguments(tmp_path: Path) -> None:
    # DAPE around ALiBi and around KERPLE are both encoding "dape": the claims tell them apart
    # by this column
    config = replace(
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
    again = run_extrapolate(replace(TINY, progress=True), tmp_path, echo=quiet)
    assert again[:6] == first[:6]  # alibi and learned: read back as they were
    assert computed(again) == computed(first)  # rope: evaluated again, the same numbers
    assert (tmp_path / "runs" / "alibi" / "seed0" / "metrics.jsonl").read_text() == metrics


def test_a_different_config_in_the_same_folder_raises(tmp_path: Path) -> None:
    run_extrapolate(replace(TINY, encodings=("alibi",)), tmp_path, echo=quiet)
    with pytest.raises(ValueError, match="'steps'"):
        run_extrapolate(replace(TINY, encodings=("alibi",), steps=7), tmp_path, echo=quiet)


def test_isolated_training_in_a_fresh_process(tmp_path: Path) -> None:
    config = replace(TINY, encodings=("alibi",), isolate=True)
    rows = run_extrapolate(config, tmp_path, echo=quiet)
    in_process = run_extrapolate(replace(config, isolate=False), tmp_path / "b", echo=quiet)
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
    ],
)
def test_config_errors_name_the_field(change: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        replace(TINY, **change)


def test_corpus_split_used_for_evaluation_is_the_test_split(tmp_path: Path) -> None:
    corpus = load_corpus(seed=0, max_bytes=TINY.corpus_bytes)
    assert corpus.test.numel() >= TINY.eval_tokens + 1
    assert not set(corpus.files["test"]) & set(corpus.files["train"])
    json.dumps(corpus.files)  # plain strings, recorded in reports


def test_seeds_are_independent_runs_and_the_table_gives_mean_and_std(tmp_path: Path) -> None:
    config = replace(TINY, encodings=("alibi",), multipliers=(1.0, 2.0), seeds=(0, 3))
    rows = run_extrapolate(config, tmp_path / "both", echo=quiet)
    assert [(r["seed"], r["eval_len"]) for r in rows] == [(0, 16), (0, 32), (3, 16), (3, 32)]
    assert rows[0]["loss"] != rows[2]["loss"]  # another init and batch order
    # seed 3 alone gives the same rows as seed 3 among others
    alone = run_extrapolate(replace(config, seeds=(3,)), tmp_path / "alone", echo=quiet)
    assert computed(alone) == computed(rows[2:])
    table = format_ppl_table(rows)
    mean = (rows[0]["ppl"] + rows[2]["ppl"]) / 2
    std = abs(rows[0]["ppl"] - rows[2]["ppl"]) / math.sqrt(2)  # sample std of two values
    assert f"{mean:.3f} ± {std:.3f}" in table and "2 seeds" in table


@pytest.mark.parametrize("seeds", [(), (1, 1), (-1,)])
def test_bad_seeds_name_the_field(seeds: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="seeds"):
        replace(TINY, seeds=seeds)


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

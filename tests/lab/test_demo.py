"""``posenc demo``: checks, train short / test long, zero-shot extension, one report."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from posenc.lab.config import replace_fields
from posenc.lab.demo import (
    DEMO_CONFIG,
    DEMO_TITLE,
    EXTENSION_METHODS,
    SEGMENT_METHOD,
    claim_counts,
    run_demo,
)
from posenc.lab.results import read_results_csv


def test_demo_writes_checks_results_and_one_report(tmp_path: Path) -> None:
    tiny = replace_fields(
        DEMO_CONFIG,
        steps=4,
        warmup_steps=1,
        dim=16,
        depth=1,
        num_heads=2,
        train_len=16,
        eval_tokens=256,
        corpus_bytes=20_000,
        seeds=(0, 1),
        workers=1,
        isolate=False,
        encodings=("nope", "learned", "rope", "alibi"),
    )
    printed: list[str] = []
    summary = run_demo(tmp_path, config=tiny, echo=printed.append)
    assert not summary["failed"]
    checks = json.loads((tmp_path / "checks" / "checks.json").read_text())
    for name in checks["figures"]:
        assert (tmp_path / "checks" / name).read_bytes()[:4] == b"\x89PNG"
    assert checks["equivariance_gaps"]["nope"] < 1e-10
    assert min(v for k, v in checks["equivariance_gaps"].items() if k != "nope") > 1e-3
    bound = checks["rope_decay_bound"]
    assert bound["0"] == 1.0 and bound["1024"] < bound["16"] < bound["0"]
    with open(tmp_path / "results.csv") as handle:
        header = handle.readline().strip().split(",")
    assert {"encoding", "train_len", "eval_len", "loss", "ppl"} <= set(header)
    lengths, seeds = len(tiny.multipliers), len(tiny.train.seeds)
    methods = [*EXTENSION_METHODS, SEGMENT_METHOD]
    assert len(summary["rows"]) == (4 + len(methods)) * lengths * seeds
    # step 3: the extension methods on each seed's RoPE model, zero-shot
    extension = read_results_csv(tmp_path / "extension" / "results.csv")
    assert [(r["seed"], r["method"]) for r in extension[::lengths]] == [
        (seed, method) for seed in tiny.train.seeds for method in methods
    ]
    for seed in tiny.train.seeds:
        plain = [r["loss"] for r in extension if r["method"] == "rope" and r["seed"] == seed]
        rope = [
            r["loss"]
            for r in summary["rows"]
            if r.get("encoding") == "rope" and r.get("seed") == seed
        ]
        assert plain == rope  # the same model and bytes
    # step 3's config.json records what ran: the weights it evaluated and how they were trained
    config = json.loads((tmp_path / "extension" / "config.json").read_text())
    train = config["train"]
    assert (train["steps"], train["warmup_steps"]) == (tiny.train.steps, tiny.train.warmup_steps)
    assert config["segment_method"]["train"]["steps"] == tiny.train.steps
    assert train["seeds"] == list(tiny.train.seeds) and config["ft_methods"] == []
    assert config["trained_by"] == {"config": "../config.json", "workers": tiny.runner.workers}
    for path in config["evaluated"]:
        assert (tmp_path / "extension" / path).resolve().is_file()
    # one report with every claim of steps 2 and 3, and where each claim's numbers are
    verdicts = json.loads((tmp_path / "extension" / "claims.json").read_text())
    assert {v["name"] for v in verdicts} == {
        *(f"{m}_beats_pi_zero_shot" for m in EXTENSION_METHODS[2:]),
        f"{SEGMENT_METHOD}_flat_8x",
    }
    records = json.loads((tmp_path / "claims.json").read_text()) + verdicts
    assert summary["claims"] == records and summary["report"] == tmp_path / "report.html"
    assert not (tmp_path / "extension" / "report.html").exists()
    page = html.unescape((tmp_path / "report.html").read_text())
    assert all(record["text"] in page for record in records)
    # facts (learned_undefined_past_t) are shown apart and not counted among the claims
    counted = [r for r in records if r.get("kind") != "fact"]
    assert len(counted) == len(records) - 1
    assert f"of {len(counted)} hold" in page and "Property checks" in page
    # the page says its question, leads with findings, describes the data and model, links
    # the atlas
    assert DEMO_TITLE == "posenc demo: which positional encoding for text past its training length"
    assert f"<h1>{DEMO_TITLE}</h1>" in page
    heads = ("findings", "data", "atlas", "claims", "tables")
    order = [page.index(f"<h2 id='{name}'>") for name in heads]
    assert order == sorted(order)
    assert "At the training length (T = 16 bytes), " in page and "Training had " in page
    corpus = json.loads((tmp_path / "data.json").read_text())
    assert corpus["bytes"]["train"] == tiny.data.corpus_bytes and corpus["files"]["train"] > 0
    assert corpus["corpus"] == [] and corpus["python"]
    files = corpus["files"]
    assert (
        f"train {files['train']:,} files, {tiny.data.corpus_bytes:,} tokens" in page
        and "the Python standard library's own source files" in page
    )
    assert "1 layer, width 16, 2 heads of 8" in page and "4 steps of AdamW" in page
    assert "evaluation only, of the weights ../runs/rope/seed0/final.pt" in page
    assert "docs/results.md §9" in page
    for figure in ("loss_vs_length", "extension", "training_curves"):
        assert (tmp_path / "figures" / f"{figure}.png").is_file()
    text = "\n".join(printed)
    assert all(f"{v['name']}: {v['status']}" in text for v in verdicts)
    assert "alibi_flat_4x" in text  # step 2's claims too
    closing = printed[-5:]
    assert closing[0].startswith(f"report: {tmp_path / 'report.html'}")
    assert closing[1].startswith(f"claims: {claim_counts(records)}")
    assert f"in {tmp_path}/claims.json, their numbers in {tmp_path}/results.csv" in closing[2]
    assert f"{tmp_path}/extension/results.csv" in closing[3]


def test_claim_counts_names_every_verdict() -> None:
    statuses = ["holds", "holds", "fails", "undecided", "undefined", "undecided"]
    records = [{"status": status} for status in statuses]
    text = "2 of 6 claims hold, 1 fails, 2 undecided, 1 undefined"
    assert claim_counts(records) == text
    assert claim_counts([{"status": "odd"}]).endswith("0 undefined, 1 odd")

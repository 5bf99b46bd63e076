from __future__ import annotations

import base64
import html
import json
import math
import re
import statistics
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from posenc.lab.claims import format_mean_std
from posenc.lab.experiments import EXPERIMENTS
from posenc.lab.report import write_report
from posenc.lab.results import merge_rows, read_results_csv, write_results_csv

# The page shows the sections of the experiments it is given: those of the registry.
REGISTRY = tuple(EXPERIMENTS.values())

ROWS = [
    {
        "experiment": "extrapolate",
        "encoding": "alibi",
        "train_len": 8,
        "eval_len": 8,
        "loss": 2.0,
        "ppl": math.exp(2.0),
        "defined": True,
        "note": "",
    },
    {
        "experiment": "extrapolate",
        "encoding": "learned",
        "train_len": 8,
        "eval_len": 16,
        "loss": None,
        "ppl": None,
        "defined": False,
        "note": "undefined",
    },
    {
        "experiment": "extend",
        "method": "yarn",
        "stage": "no_ft",
        "train_len": 8,
        "eval_len": 16,
        "loss": 2.5,
        "ppl": math.exp(2.5),
    },
    {
        "experiment": "passkey",
        "method": "yarn",
        "stage": "no_ft",
        "context_len": 16,
        "depth": 0.5,
        "accuracy": 0.25,
    },
    {
        "experiment": "tasks",
        "task": "copy",
        "encoding": "nope",
        "randomized": True,
        "length": 12,
        "token_acc": 0.5,
        "seq_acc": 0.125,
    },
    {"experiment": "vit", "encoding": "rope_2d", "accuracy": 0.9},
]

SEEDS = (0, 1, 2)
ENCODINGS = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5")
METHODS = ("pi", "dynamic_ntk", "yarn", "llama3")


def _loss(*parts: Any) -> float:
    """A made-up but deterministic number in [1, 3) for one cell and seed."""
    return 1.0 + (zlib.crc32(repr(parts).encode()) % 2000) / 1000


def result_rows() -> list[dict[str, Any]]:
    """Hand-written rows of all five experiments, three seeds each, as the runner writes them."""
    rows: list[dict[str, Any]] = []
    for encoding in ENCODINGS:
        for seed in SEEDS:
            for multiplier in (1.0, 1.25, 2.0, 4.0, 8.0):
                defined = encoding != "learned" or multiplier == 1.0
                loss = _loss(encoding, seed, multiplier) if defined else None
                rows.append(
                    {
                        "experiment": "extrapolate",
                        "encoding": encoding,
                        "seed": seed,
                        "train_len": 64,
                        "eval_len": int(64 * multiplier),
                        "multiplier": multiplier,
                        "loss": loss,
                        "ppl": None if loss is None else math.exp(loss),
                        "bits_per_byte": None if loss is None else loss / math.log(2),
                        "defined": defined,
                        "note": "" if defined else "past the learned table (max_seq_len=64)",
                        "train_loss": 1.5,
                        "tokens_per_s": 31000.0 + seed,
                        "peak_memory_mb": 364.0,
                        "params": 132352,
                    }
                )
    for method in METHODS:
        for stage in ("no_ft", "ft"):
            for seed in SEEDS:
                for eval_len in (64, 128, 256, 512, 1024, 2048):
                    loss = _loss(method, stage, seed, eval_len)
                    rows.append(
                        {
                            "experiment": "extend",
                            "method": method,
                            "stage": stage,
                            "seed": seed,
                            "train_len": 64,
                            "eval_len": eval_len,
                            "multiplier": eval_len / 64,
                            "loss": loss,
                            "ppl": math.exp(loss),
                        }
                    )
                for context_len in (64, 128, 256, 512):
                    for depth in (0.0, 0.5, 1.0):
                        rows.append(
                            {
                                "experiment": "passkey",
                                "method": method,
                                "stage": stage,
                                "seed": seed,
                                "context_len": context_len,
                                "depth": depth,
                                "accuracy": (_loss(method, context_len, depth, seed) - 1) / 2,
                            }
                        )
    for task in ("copy", "reverse"):
        for encoding in ("nope", "rope", "alibi"):
            for randomized in (False, True):
                for seed in SEEDS:
                    for length in (8, 16, 24, 32, 48, 64):
                        score = (_loss(task, encoding, randomized, seed, length) - 1) / 2
                        rows.append(
                            {
                                "experiment": "tasks",
                                "task": task,
                                "encoding": encoding,
                                "randomized": randomized,
                                "seed": seed,
                                "length": length,
                                "split": "train" if length <= 16 else "test",
                                "token_acc": math.sqrt(score),
                                "seq_acc": score,
                            }
                        )
    for encoding in ("none", "learned_1d", "sinusoidal_2d", "rope_2d"):
        for seed in SEEDS:
            rows.append(
                {
                    "experiment": "vit",
                    "encoding": encoding,
                    "seed": seed,
                    "accuracy": 0.8 + (_loss(encoding, seed) - 1) / 20,
                    "train_accuracy": 0.99,
                    "final_loss": 0.1,
                    "params": 20000,
                    "steps": 300,
                    "train_seconds": 12.5,
                }
            )
    return rows


CLAIMS = [
    {
        "name": "alibi_extrapolates",
        "text": "ALiBi's perplexity at 8×T stays within 1.1× of its perplexity at T, paired "
        "by seed.",
        "paper": "Press et al. 2022, Train Short, Test Long (ALiBi), "
        "https://arxiv.org/abs/2108.12409",
        "published": "Table 2: 1024 → 16k tokens, ppl 19.73 → 19.88 (WikiText-103)",
        "status": "holds",
        "value": 1.02,
        "std": 0.01,
        "seeds": 3,
        "direction": "<=",
        "threshold": 1.1,
        "detail": "ppl ratio per seed: 1.01, 1.02, 1.03; mean 1.02 ± 0.01 (n=3)",
        "summary": "holds: ALiBi extrapolates",
    },
    {
        "name": "yarn_beats_pi_zero_shot",
        "text": "Without fine-tuning, YaRN has lower perplexity than PI at 2×T.",
        "paper": "Peng et al. 2023, YaRN, https://arxiv.org/abs/2309.00071",
        "published": "Table 1",
        "status": "fails",
        "value": 0.97,
        "std": 0.02,
        "seeds": 3,
        "direction": ">=",
        "threshold": 1.0,
        "detail": "ratio per seed: 0.95, 0.97, 0.99",
        "summary": "fails: yarn beats pi",
    },
    {
        "name": "learned_undefined",
        "text": "A learned table has no positions past T.",
        "paper": "Vaswani et al. 2017, https://arxiv.org/abs/1706.03762",
        "published": "section 3.5",
        "status": "undefined",
        "value": None,
        "std": None,
        "seeds": None,
        "direction": ">=",
        "threshold": 0.5,
        "detail": None,
        "summary": "undefined",
    },
]

CONFIG = {
    "experiment": "extrapolate",
    "encodings": list(ENCODINGS),
    "seeds": list(SEEDS),
    "train_len": 64,
    "multipliers": [1.0, 1.25, 2.0, 4.0, 8.0],
    "pos_kwargs": {"rope": {"base": 500.0}, "alibi": {"slopes": "geometric"}},
    "corpus": ["/usr/lib/python3.11/some/quite/long/path/to/a/folder/of/text/files/" * 3],
}


def tiny_png(width: int = 3, height: int = 2) -> bytes:
    """A valid grey PNG, written by hand (no plotting library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    pixels = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(pixels))
        + chunk(b"IEND", b"")
    )


def _metrics(offset: float) -> str:
    lines = []
    for step in range(50, 301, 50):
        loss = 3.0 / (1 + step / 100) + offset
        lines.append({"kind": "train", "step": step, "loss": loss})
        if step % 100 == 0:
            lines.append({"kind": "eval", "step": step, "metrics": {"val_loss": loss + 0.2}})
    # A torn last line, as a kill mid-write leaves it: read_metrics skips it.
    return "".join(json.dumps(line) + "\n" for line in lines) + '{"kind": "tra'


def make_run_folder(folder: Path, *, checks: bool = True) -> Path:
    """A run folder as the runner and ``posenc demo`` leave it, from hand-written data."""
    folder.mkdir(parents=True, exist_ok=True)
    write_results_csv(result_rows(), folder / "results.csv")
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2))
    (folder / "claims.json").write_text(json.dumps(CLAIMS, indent=2))
    for name, seed, offset in (("rope", 0, 0.0), ("rope", 1, 0.1), ("alibi", 0, 0.3)):
        run = folder / "runs" / name / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text(_metrics(offset))
    if checks:
        (folder / "checks").mkdir()
        (folder / "checks" / "rope_decay.png").write_bytes(tiny_png(60, 30))
        (folder / "checks" / "alibi.png").write_bytes(tiny_png(40, 40))
        result = {"name": "rope: score(m+s, n+s) = score(m, n)", "value": 6e-11, "bound": 1e-9}
        result |= {"direction": "<=", "detail": "256 pairs, float64", "passed": True}
        (folder / "checks" / "checks.json").write_text(json.dumps({"checks": [result]}))
    return folder


class Outline(HTMLParser):
    """What the tests look at: images, and each table with its class and enclosing tags."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.images: list[str] = []
        self.tables: list[tuple[str, list[str]]] = []  # (class, enclosing tag names)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes.get("src") or "")
            return
        if tag == "table":
            self.tables.append((attributes.get("class") or "", [t for t, _ in self.stack]))
        self.stack.append((tag, attributes))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


def outline(page: str) -> Outline:
    parser = Outline()
    parser.feed(page)
    return parser


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def pivot_tables(page: str) -> list[str]:
    return re.findall(r"<table class='pivot'>.*?</table>", page)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = make_run_folder(tmp_path_factory.mktemp("run"))
    path = write_report(folder, title="a <test> run", experiments=REGISTRY)
    return folder, path.read_text(encoding="utf-8")


def test_results_csv_round_trips_numbers_booleans_and_empty_cells(tmp_path: Path) -> None:
    path = write_results_csv(ROWS, tmp_path / "results.csv")
    back = read_results_csv(path)
    for row, got in zip(ROWS, back, strict=True):
        for key, value in row.items():
            assert got[key] == value or (value == "" and got[key] is None)
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left nothing behind


def test_merge_rows_replaces_matching_keys() -> None:
    old = [{"a": 1, "b": 2}, {"a": 2, "b": 3}]
    new = [{"a": 2, "b": 9}, {"a": 3, "b": 4}]
    assert merge_rows(old, new, ["a"]) == [{"a": 1, "b": 2}, {"a": 2, "b": 9}, {"a": 3, "b": 4}]


def test_report_reads_claims_then_tables_then_figures_then_configuration(
    report: tuple[Path, str],
) -> None:
    _, page = report
    marks = [
        "<h2 id='claims'>Claims: 1 of 3 hold</h2>",
        "<table class='claims'>",
        "<h2 id='tables'>",
        "<table class='pivot'>",
        "<h2 id='figures'>",
        "<img ",
        "<h2 id='configuration'>",
        "<h2 id='environment'>",
        "<h2 id='raw'>",
        "<table class='raw'>",
    ]
    positions = [page.find(mark) for mark in marks]
    assert -1 not in positions, [m for m, p in zip(marks, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    assert "<title>a &lt;test&gt; run</title>" in page


def test_claims_show_verdicts_next_to_the_published_numbers(report: tuple[Path, str]) -> None:
    _, page = report
    found = re.search(r"<table class='claims'>.*?</table>", page)
    assert found is not None
    claims = text_of(found.group(0))
    for mark in ("✔ holds", "✘ fails", "– undefined"):
        assert mark in claims
    assert "1.02 ± 0.01 (3 seeds)" in claims
    assert "Table 2: 1024 → 16k tokens, ppl 19.73 → 19.88" in claims
    assert '<a href="https://arxiv.org/abs/2108.12409">' in page


def test_pivot_tables_hold_mean_and_std_over_seeds(report: tuple[Path, str]) -> None:
    _, page = report
    tables = [text_of(table) for table in pivot_tables(page)]
    # extrapolate, extend, passkey, tasks (2 tasks × seq_acc and token_acc), vit
    assert len(tables) == 8
    extrapolate = next(t for t in tables if t.startswith("Perplexity (bytes) by evaluation"))
    ppl = [math.exp(_loss("rope", seed, 2.0)) for seed in SEEDS]
    expected = format_mean_std(statistics.fmean(ppl), statistics.stdev(ppl), 3)
    assert " ± " in expected and expected in extrapolate
    assert "L=64" in extrapolate and "L=512" in extrapolate
    # throughput and process memory compare no encoding with another: not in the table
    assert "tok/s" not in extrapolate and "mem MB" not in extrapolate
    assert "31000" not in extrapolate and "364" not in extrapolate
    assert "3 seeds, mean ± std" in extrapolate
    # passkey: per seed the mean over depths, then mean ± std over seeds
    passkey = next(t for t in tables if t.startswith("Passkey accuracy"))
    per_seed = [
        statistics.fmean((_loss("yarn", 256, d, seed) - 1) / 2 for d in (0.0, 0.5, 1.0))
        for seed in SEEDS
    ]
    assert format_mean_std(statistics.fmean(per_seed), statistics.stdev(per_seed), 2) in passkey
    tasks = [t for t in tables if t.startswith(("copy:", "reverse:"))]
    assert len(tasks) == 4 and all("16*" in t and "rope+rand" in t for t in tasks)
    assert any("token_acc" in t for t in tasks) and any("seq_acc" in t for t in tasks)
    vit = next(t for t in tables if t.startswith("Test accuracy"))
    accuracy = [0.8 + (_loss("rope_2d", seed) - 1) / 20 for seed in SEEDS]
    assert format_mean_std(statistics.fmean(accuracy), statistics.stdev(accuracy), 4) in vit


def test_every_image_is_embedded_and_the_figures_are_also_files(
    report: tuple[Path, str],
) -> None:
    folder, page = report
    images = outline(page).images
    # five result figures, the training curves, two property-check figures
    assert len(images) == 8
    for source in images:
        prefix, _, data = source.partition(",")
        assert prefix == "data:image/png;base64"
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("loss_vs_length", "extension", "passkey", "tasks", "vit", "training_curves"):
        assert (folder / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    for check in ("alibi.png", "rope_decay.png"):
        encoded = base64.b64encode((folder / "checks" / check).read_bytes()).decode()
        assert f"data:image/png;base64,{encoded}'" in page
    assert "1 of 1 property checks pass" in page
    assert "3 runs from runs/**/metrics.jsonl" in page


def test_raw_rows_are_collapsed_and_only_they_scroll(report: tuple[Path, str]) -> None:
    _, page = report
    tables = outline(page).tables
    raw = [enclosing for css, enclosing in tables if css == "raw"]
    assert len(raw) == 5  # one per experiment
    assert all("details" in enclosing for enclosing in raw)
    assert not any("details" in enclosing for css, enclosing in tables if css != "raw")
    assert "<details open" not in page
    assert page.count("class='scroll'") == 5
    assert "past the learned table" in page


def test_configuration_and_environment(report: tuple[Path, str]) -> None:
    from importlib.metadata import PackageNotFoundError, version

    import torch

    _, page = report
    configuration = text_of(page[page.find("id='configuration'") : page.find("id='raw'")])
    assert '{"rope": {"base": 500.0}, "alibi": {"slopes": "geometric"}}' in configuration
    packed = configuration.replace(" ", "")
    assert f"torch{torch.__version__}" in packed
    try:
        numba = f"numba{version('numba')}"
    except PackageNotFoundError:  # numba is optional: then the page does not name it
        numba = "numba"
        assert numba not in packed
    else:
        assert numba in packed


def test_a_minimal_folder_without_claims_config_runs_or_checks(tmp_path: Path) -> None:
    write_results_csv([*ROWS, {"experiment": "mine", "score": 1.0}], tmp_path / "results.csv")
    page = write_report(tmp_path, experiments=REGISTRY).read_text()
    assert page.count("data:image/png;base64,") == 5
    assert "id='claims'" not in page and "href='#claims'" not in page
    assert "Property checks" not in page and "Training curves" not in page
    assert "undefined" in page
    assert "<h3>mine</h3><p>No summary table" in page
    assert page.count("<table class='raw'>") == 6


def test_lm_rows_get_a_table_per_encoding(tmp_path: Path) -> None:
    rows = [
        {"experiment": "lm", "encoding": encoding, "seed": seed, "val_loss": loss}
        | {"val_ppl": math.exp(loss), "train_loss": 1.5, "tokens_per_s": 1000.0 + seed}
        for encoding, seed, loss in [("rope", 0, 2.0), ("rope", 1, 2.2), ("alibi", 0, 2.1)]
    ]
    write_results_csv(rows, tmp_path / "results.csv")
    (table,) = pivot_tables(write_report(tmp_path, experiments=REGISTRY).read_text())
    text = text_of(table)
    assert "Validation loss per positional encoding; 2 seeds, mean ± std." in text
    assert format_mean_std(2.1, statistics.stdev([2.0, 2.2]), 4) in text
    assert "2.0000–2.2000" in text
    assert "tok/s" not in text and "1000 ± 1" not in text
    page = (tmp_path / "report.html").read_text()
    # no text-extrapolation rows: nothing for the findings to say, no atlas
    assert "id='findings'" not in page and "id='atlas'" not in page


def test_the_page_leads_with_findings_then_data_and_model_and_the_atlas(tmp_path: Path) -> None:
    from posenc.lab.findings import ATLAS, findings
    from posenc.lab.run import read_metrics

    folder = make_run_folder(tmp_path / "run", checks=False)
    config = {
        "experiment": "extrapolate",
        "data": {"corpus": [], "corpus_bytes": 2_000_000, "split_seed": 0, "train_len": 64},
        "model": {"dim": 64, "depth": 2, "num_heads": 4},
        "train": {"seeds": [0, 1, 2], "steps": 300, "batch_size": 32, "lr": 0.003,
                  "warmup_steps": 30},
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    corpus = {"python": "3.12.3", "root": "/usr/lib/python3.12"}
    corpus |= {"files": {"train": 120, "validation": 40, "test": 38}}
    corpus |= {"bytes": {"train": 2_000_000, "validation": 1_100_000, "test": 1_000_000}}
    (folder / "data.json").write_text(json.dumps(corpus))
    page = write_report(folder, title="t", experiments=REGISTRY).read_text(encoding="utf-8")
    heads = ("findings", "data", "atlas", "claims", "tables", "figures", "configuration")
    order = [page.index(f"<h2 id='{name}'>") for name in heads]
    assert order == sorted(order)
    nav = re.search(r"<nav>(.*?)</nav>", page)
    assert nav is not None and nav.group(1).startswith(
        "<a href='#findings'>findings</a><a href='#data'>data and model</a>"
        "<a href='#atlas'>atlas</a><a href='#claims'>"
    )
    # the findings: the sentences of posenc.lab.findings, from these rows and training curves
    curves = {
        f"{name}/seed{seed}": read_metrics(folder / "runs" / name / f"seed{seed}")
        for name, seed in (("alibi", 0), ("rope", 0), ("rope", 1))
    }
    readers = {
        kind: section.findings
        for experiment in REGISTRY
        for kind, section in experiment.section_rows().items()
        if section.findings
    }
    expected = findings(read_results_csv(folder / "results.csv"), curves, readers)
    found = re.search(r"<ul class='findings'>(.*?)</ul>", page)
    assert found is not None
    items = [text_of(item) for item in re.findall(r"<li>(.*?)</li>", found.group(1))]
    assert items == expected and len(items) >= 3
    assert items[0].startswith("Training had not converged: the training loss still fell")
    assert "At 8×T, the longest length evaluated" in items[2]
    # the data and the model, in words
    data = re.search(r"<h2 id='data'>.*?</table>", page)
    assert data is not None
    described = text_of(data.group(0))
    assert "the Python standard library's own source files" in described
    assert "train 120 files, 2,000,000 tokens" in described and "vocabulary 256" in described
    assert "2 layers, width 64, 4 heads of 16; 0.13 M parameters" in described
    assert "300 steps of AdamW" in described and "seeds 0, 1, 2 (3 seeds" in described
    # the atlas: every signal, and a link that reaches docs/results.md from the page's folder
    atlas = re.search(r"<h2 id='atlas'>.*?</table>", page)
    assert atlas is not None
    assert all(html.escape(entry.signal) in atlas.group(0) for entry in ATLAS)
    link = re.search(r"<a href='([^']+)'>docs/results.md §9", atlas.group(0))
    assert link is not None and link.group(1).endswith(
        "results.md#9-which-encoding-for-which-signal-the-atlas-audio-video-vla-images-in-4-5"
    )
    results = Path(__file__).resolve().parents[2] / "docs" / "results.md"
    assert (folder / link.group(1).split("#")[0]).resolve() == results


def test_report_without_results_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"results\.csv"):
        write_report(tmp_path, experiments=REGISTRY)


def test_a_run_folder_in_use_by_another_process_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    from posenc.lab.config import DataArgs
    from posenc.lab.experiments.extrapolate import ExtrapolateConfig
    from posenc.lab.results import prepare_out_dir

    config = ExtrapolateConfig(encodings=("alibi",), eval_tokens=128, data=DataArgs(train_len=8))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from posenc.lab.results import prepare_out_dir; "
            "from posenc.lab.experiments.extrapolate import ExtrapolateConfig as C; "
            "from posenc.lab.config import DataArgs; "
            f"prepare_out_dir({str(tmp_path)!r}, 'extrapolate', "
            "C(encodings=('alibi',), eval_tokens=128, data=DataArgs(train_len=8))); "
            "print('locked', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(ValueError, match="in use"):
            prepare_out_dir(tmp_path, "extrapolate", config)
    finally:
        holder.kill()
        holder.wait()
    prepare_out_dir(tmp_path, "extrapolate", config)  # the dead holder's lock is gone


def test_claims_show_undecided_with_n_margin_and_noise(tmp_path: Path) -> None:
    from posenc.lab.claims import Claim, judge, value_at, verdict_record

    claim = Claim(
        name="tiny_margin",
        text="rope degrades more than alibi",
        paper="p",
        published="q",
        experiment="toy",
        statistic=value_at("toy", {"encoding": "rope"}, "ppl"),
        threshold=0.0,
        direction=">=",
    )
    rows = [  # mean 0.0007, std 0.05 over 3 seeds: the margin is within the noise 0.0843
        {"experiment": "toy", "encoding": "rope", "ppl": v, "seed": s}
        for s, v in enumerate((0.0507, -0.0493, 0.0007))
    ]
    write_results_csv(rows, tmp_path / "results.csv")
    record = verdict_record(claim, judge(claim, rows))
    (tmp_path / "claims.json").write_text(json.dumps([record]))
    page = write_report(tmp_path, experiments=REGISTRY).read_text()
    found = re.search(r"<table class='claims'>.*?</table>", page)
    assert found is not None
    assert "<td class='verdict undecided'>? undecided</td>" in found.group(0)
    claims = text_of(found.group(0))
    assert "0.0007 ± 0.05 (3 seeds)" in claims
    assert "margin +0.0007 within noise 0.0843 over seeds" in claims
    assert "Claims: 0 of 1 hold" in page and "0 fail, 1 undecided, 0 undefined" in page
    assert "td.undecided {" in page

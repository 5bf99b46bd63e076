from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest

pytest.importorskip("matplotlib")

from posenc.checks import run_checks
from posenc.cli import main
from posenc.demo import DEMO_CONFIG, EXTENSION_METHODS, SEGMENT_METHOD, run_demo
from posenc.graph.catalogue import list_graph_methods
from posenc.lab.results import read_results_csv
from posenc.registry import Family, list_encodings


def test_list_names_every_method_with_family_and_paper(capsys) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    sequence, graph = [s.name for s in list_encodings()], [m.name for m in list_graph_methods()]
    assert [r["name"] for r in rows] == sequence + graph
    for row in rows:
        assert row["family"] in (*get_args(Family), "graph")
        assert (row["family"] == "graph") == (row["name"] in graph)
        assert "arxiv.org" in row["paper"] or "github.com" in row["paper"]  # ReRoPE: a repo
    rope = next(r for r in rows if r["name"] == "rope")
    assert rope["parameters"]["layout"] == "half" and rope["required"] == []
    signnet = next(r for r in rows if r["name"] == "signnet")
    assert signnet["required"] == ["k", "dim"] and signnet["parameters"]["phi_layers"] == 2
    assert "arxiv.org/abs/2202.13013" in signnet["paper"]


def test_list_table_shows_the_graph_family_with_required_arguments(capsys) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("laplacian_rw "))
    assert lines[at].split()[1] == "graph"
    assert "paper: Dwivedi et al. 2020" in lines[at + 1]
    assert lines[at + 2].split("parameters: ")[1] == "k, pad=True"
    families = {line.split()[1] for line in lines if not line.startswith(" ")}
    assert {"graph", "rotary", "bias"} <= families


@pytest.mark.parametrize("method", ["sinusoidal", "learned", "rope", "alibi", "t5", "shaw", "xl"])
def test_plot_writes_a_png(method: str, tmp_path: Path) -> None:
    out = tmp_path / f"{method}.png"
    assert main(["plot", method, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_passes_settings_and_reports_bad_ones(tmp_path: Path, capsys) -> None:
    out = tmp_path / "alibi.png"
    assert main(["plot", "alibi", "--out", str(out), "--set", 'mode="symmetric"']) == 0
    assert main(["plot", "alibi", "--out", str(out), "--set", "slope=3"]) == 2
    assert "slope" in capsys.readouterr().err
    assert main(["plot", "nope", "--out", str(out)]) == 2


def test_every_property_check_passes_with_its_measured_number() -> None:
    results = run_checks()
    failed = [(r.name, r.value, r.bound) for r in results if not r.passed]
    assert not failed
    names = {r.name for r in results}
    assert {
        f"kv cache: {s.name} decode = full forward" for s in list_encodings() if not s.needs_grid
    } <= names


def test_check_command_prints_table(capsys) -> None:
    assert main(["check", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(row["passed"] for row in rows)


def test_demo_writes_checks_results_and_report(tmp_path: Path) -> None:
    tiny = replace(
        DEMO_CONFIG,
        steps=4,
        dim=16,
        depth=1,
        num_heads=2,
        train_len=16,
        eval_tokens=256,
        corpus_bytes=20_000,
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
    assert "<table" in (tmp_path / "report.html").read_text()
    lengths = len(tiny.multipliers)
    assert len(summary["rows"]) == 4 * lengths + (len(EXTENSION_METHODS) + 1) * lengths
    # step 3: the extension methods on the RoPE model, zero-shot, with their claims' verdicts
    extension = read_results_csv(tmp_path / "extension" / "results.csv")
    assert [r["method"] for r in extension[::lengths]] == [*EXTENSION_METHODS, SEGMENT_METHOD]
    plain = [r for r in extension if r["method"] == "rope"]
    rope = [r for r in summary["rows"] if r.get("encoding") == "rope"]
    assert [r["loss"] for r in plain] == [r["loss"] for r in rope]  # the same model and bytes
    verdicts = json.loads((tmp_path / "extension" / "claims.json").read_text())
    assert {v["name"] for v in verdicts} == {
        *(f"{m}_beats_pi_zero_shot" for m in EXTENSION_METHODS[2:]),
        f"{SEGMENT_METHOD}_flat_8x",
    }
    text = "\n".join(printed)
    assert all(f"{v['name']}: {v['status']}" in text for v in verdicts)
    assert "alibi_flat_4x" in text  # step 2's claims too
    assert "Claims:" in (tmp_path / "extension" / "report.html").read_text()


def test_lab_command_takes_config_fields_as_options(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    options = "--steps 2 --dim 16 --depth 1 --num-heads 2 --train-len 8 --eval-tokens 64"
    options += " --corpus-bytes 5000 --encodings alibi --multipliers 1 2 --no-isolate"
    options += " --no-progress"
    assert main(["lab", "extrapolate", "--out", str(out), *options.split()]) == 0
    assert (out / "results.csv").is_file() and (out / "report.html").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["encodings"] == ["alibi"] and config["multipliers"] == [1.0, 2.0]
    assert config["steps"] == 2 and config["isolate"] is False
    with pytest.raises(SystemExit) as exit_info:
        main(["lab", "extrapolate", "--out", str(out), "--stepz", "3"])
    assert exit_info.value.code == 2
    assert "stepz" in capsys.readouterr().err
    assert main(["report", str(out)]) == 0
    assert main(["report", str(tmp_path / "empty")]) == 2
    # a field's bad value is the config's own error, naming the field
    with pytest.raises(SystemExit) as exit_info:
        main(["lab", "extrapolate", "--out", str(tmp_path / "x"), "--steps", "0"])
    assert exit_info.value.code == 2
    assert "steps must be a positive integer" in " ".join(capsys.readouterr().err.split())


def test_lab_help_lists_every_config_field(capsys) -> None:
    import dataclasses

    from posenc.lab.experiments import EXPERIMENTS

    for name, experiment in EXPERIMENTS.items():
        with pytest.raises(SystemExit) as exit_info:
            main(["lab", name, "--help"])
        assert exit_info.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for field in dataclasses.fields(experiment.config):
            flag = "--" + field.name.replace("_", "-")
            found = re.search(re.escape(flag) + "[ ,]", text)
            assert found, (name, flag)
            # its doc: the words between the flag (and its metavar) and "(default"
            entry = text[found.start() :].split("(default")[0]
            words = [
                w
                for w in entry.split()[1:]
                if not re.fullmatch(r"[A-Z{}\[\].|,-]+|--no-\S+|JSON", w)
            ]
            assert words, (name, flag, entry)

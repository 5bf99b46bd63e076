from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from posenc.checks import run_checks
from posenc.cli import main
from posenc.registry import list_encodings


def test_list_names_every_method_with_family_and_paper(capsys) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == [s.name for s in list_encodings()]
    for row in rows:
        assert row["family"] in ("none", "additive", "rotary", "bias", "contextual")
        assert "arxiv.org" in row["paper"]
    rope = next(r for r in rows if r["name"] == "rope")
    assert rope["parameters"]["layout"] == "half"


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
    assert {f"kv cache: {s.name} decode = full forward" for s in list_encodings()} <= names


def test_check_command_prints_table(capsys) -> None:
    assert main(["check", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(row["passed"] for row in rows)


def test_demo_writes_figures_and_results(tmp_path: Path) -> None:
    assert main(["demo", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "results.json").read_text())
    for name in summary["figures"]:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert summary["equivariance_gaps"]["nope"] < 1e-10
    assert min(v for k, v in summary["equivariance_gaps"].items() if k != "nope") > 1e-3
    bound = summary["rope_decay_bound"]
    assert bound["0"] == 1.0 and bound["1024"] < bound["16"] < bound["0"]

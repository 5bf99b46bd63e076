"""Adding an experiment is one file plus one registry line: tests/lab/toy_experiment.py,
registered here, runs end to end through ``posenc lab`` and its report shows its section,
its figure and its claim's verdict; docs/lab.md shows that same file."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from posenc.cli import lab_overview, main
from posenc.lab.experiments import EXPERIMENTS, register_experiment
from posenc.lab.runner import Experiment
from tests.lab import toy_experiment

pytest.importorskip("matplotlib")


@pytest.fixture
def registered() -> Iterator[Experiment[toy_experiment.GrowthConfig]]:
    register_experiment(toy_experiment.EXPERIMENT)  # the one registry line
    try:
        yield toy_experiment.EXPERIMENT
    finally:
        EXPERIMENTS.pop(toy_experiment.EXPERIMENT.name)


def test_the_toy_runs_end_to_end_with_its_section_figure_and_claim(
    registered: Experiment[toy_experiment.GrowthConfig], tmp_path: Path, capsys
) -> None:
    assert "toy_growth" in lab_overview()  # posenc lab --help lists it
    out = tmp_path / "run"
    assert main(["lab", "toy_growth", "--out", str(out), "--seeds", "0", "1"]) == 0
    printed = capsys.readouterr().out
    assert "ppl(2T) / ppl(T)" in printed  # its table
    assert "toy_sinusoidal_grows_more_than_alibi" in printed  # its claim's verdict
    config = json.loads((out / "config.json").read_text())
    assert config["experiment"] == "toy_growth" and config["train"]["seeds"] == [0, 1]
    (claim,) = json.loads((out / "claims.json").read_text())
    assert claim["name"] == "toy_sinusoidal_grows_more_than_alibi" and claim["seeds"] == 2
    page = html.unescape((out / "report.html").read_text())
    assert "<h3>Perplexity growth (toy)</h3>" in page  # its section
    assert "Perplexity growth from T to 2T; 2 seeds, mean ± std." in page  # its table
    assert (out / "figures" / "toy_growth.png").read_bytes()[:4] == b"\x89PNG"  # its figure
    assert "Perplexity growth (toy) (figures/toy_growth.png)" in page
    # its claim's verdict leads the page: status, then the claim's text
    verdict = re.search(r"<td class='verdict (\w+)'>[^<]*</td><td>([^<]*)<", page)
    assert verdict is not None and verdict.groups() == (claim["status"], claim["text"])
    assert page.index("id='claims'") < page.index("<h3>Perplexity growth (toy)</h3>")


def test_docs_show_this_file() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "lab.md").read_text()
    section = docs[docs.index("## Adding an experiment") :]
    block = section[section.index("```python\n") + len("```python\n") :]
    code = block[: block.index("```")]
    source = Path(toy_experiment.__file__).read_text()
    assert code == source[source.index("from __future__") :]

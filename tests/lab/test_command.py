"""``python -m posenc.lab.experiments NAME`` takes what ``posenc lab NAME`` takes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.lab.command import experiment_main
from posenc.lab.experiments import lm
from posenc.lab.experiments.__main__ import main

TINY_LM = (
    "--seq-len 16 --batch-size 4 --steps 2 --dim 16 --depth 1 --num-heads 2 --max-bytes 20000"
    " --encodings alibi --eval-windows 2 --no-progress --threads 1"
)


def test_package_entry_runs_like_the_lab_command(tmp_path: Path) -> None:
    # ``python -m posenc.lab.experiments lm`` (what torchrun starts): no process group here.
    out = tmp_path / "lm"
    assert main(["lm", "--out", str(out), *TINY_LM.split()]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["encodings"] == ["alibi"] and config["steps"] == 2
    assert (out / "results.csv").is_file()


@pytest.mark.parametrize("argv", [[], ["lmm", "--steps", "2"]])
def test_package_entry_names_the_experiments_when_none_is_given(argv, capsys) -> None:
    assert main(argv) == 2
    assert "extrapolate" in capsys.readouterr().err


def test_experiment_main_reports_option_errors(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        experiment_main(lm.EXPERIMENT, ["--out", str(tmp_path / "x"), "--stepz", "3"])
    assert exit_info.value.code == 2
    assert "stepz" in capsys.readouterr().err

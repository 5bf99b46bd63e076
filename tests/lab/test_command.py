"""``python -m posenc.lab.experiments NAME`` takes what ``posenc lab NAME`` takes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.lab.command import experiment_main
from posenc.lab.experiments import lm
from posenc.lab.experiments.__main__ import main

TINY_LM = (
    "--train-len 16 --batch-size 4 --steps 2 --dim 16 --depth 1 --num-heads 2"
    " --corpus-bytes 20000"
    " --encodings alibi --eval-windows 2 --no-progress --threads 1"
)


def test_package_entry_runs_like_the_lab_command(tmp_path: Path) -> None:
    # ``python -m posenc.lab.experiments lm`` (what torchrun starts): no process group here.
    out = tmp_path / "lm"
    assert main(["lm", "--out", str(out), *TINY_LM.split()]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["encodings"] == ["alibi"] and config["train"]["steps"] == 2
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


# ---- options validated before any work starts --------------------------------------------

TINY_EXTRAPOLATE = [
    "--encodings", "nope", "rope", "--train-len", "16", "--multipliers", "1", "2",
    "--dim", "16", "--depth", "1", "--num-heads", "2", "--batch-size", "2",
    "--eval-tokens", "64", "--corpus-bytes", "20000", "--no-isolate", "--no-progress",
]  # fmt: skip


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    """stderr without tyro's box: one space between words."""
    return " ".join(capsys.readouterr().err.replace("│", " ").split())


def test_a_pos_kwargs_typo_fails_before_any_work_and_the_folder_stays_usable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's command: a typo in RoPE's keyword arguments used to train three other
    encodings first and then lock the folder to the typo. Now the config is refused while
    it is parsed, naming the field and the keyword: no corpus is read, nothing is trained,
    no folder is written, and the corrected command then runs in the same folder."""
    from posenc.lab import command
    from posenc.lab.experiments import extrapolate

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run or the corpus was reached with an invalid config")

    out = tmp_path / "z"
    typo = ["--out", str(out), "--pos-kwargs", '{"rope": {"bas": 5}}', "--steps", "1"]
    with monkeypatch.context() as patch:
        for module, name in ((command, "run_experiment"), (extrapolate, "_load")):
            patch.setattr(module, name, forbidden)
        with pytest.raises(SystemExit) as exit_info:
            experiment_main(extrapolate.EXPERIMENT, [*typo, *TINY_EXTRAPOLATE])
    assert exit_info.value.code == 2
    said = _said(capsys)
    assert "pos_kwargs['rope']" in said and "unknown argument(s) bas" in said
    assert "allowed: base," in said  # the keywords the user may have meant
    assert not out.exists()

    fixed = ["--out", str(out), "--pos-kwargs", '{"rope": {"base": 5}}', "--steps", "1"]
    assert experiment_main(extrapolate.EXPERIMENT, [*fixed, *TINY_EXTRAPOLATE]) == 0
    assert json.loads((out / "config.json").read_text())["pos_kwargs"] == {"rope": {"base": 5}}
    assert (out / "results.csv").is_file()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (
            ["--pos-kwargs", '{"rope": {"base": -1}}'],
            "pos_kwargs['rope']: 'rope' cannot be built: base",
        ),
        (["--pos-kwargs", '{"ropee": {"base": 5}}'], "pos_kwargs names 'ropee', which are not in"),
        (["--pos-kwargs", '{"rope": 5}'], "pos_kwargs must map encoding names to objects"),
        (
            ["--pos-kwargs", '{"rope": {"scaling": {"type": "yarnn"}}}'],
            "pos_kwargs['rope']: 'rope' cannot be built: unknown scaling type 'yarnn'",
        ),
    ],
)
def test_bad_pos_kwargs_are_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], named: str
) -> None:
    from posenc.lab.experiments import extrapolate

    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exit_info:
        experiment_main(extrapolate.EXPERIMENT, ["--out", str(out), *options, *TINY_EXTRAPOLATE])
    assert exit_info.value.code == 2
    assert named in _said(capsys)
    assert not out.exists()


def test_an_unusable_device_is_refused_before_the_folder_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trainer writes its run folder before it moves the model: a device found missing
    there would bind the out folder to it. No machine has 99 GPUs."""
    out = tmp_path / "lm"
    argv = ["--out", str(out), *TINY_LM.split(), "--device", "cuda:99"]
    assert experiment_main(lm.EXPERIMENT, argv) == 2
    assert "device 'cuda:99' is not usable on this machine" in capsys.readouterr().err
    assert not out.exists()


def test_lab_help_lists_exactly_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    """``posenc lab --help`` names every registered experiment and nothing else, each with
    its summary (an experiment added by register_experiment too)."""
    from posenc.cli import main as posenc
    from posenc.lab.experiments import EXPERIMENTS

    assert posenc(["lab", "--help"]) == 0
    listed = capsys.readouterr().out.split("experiments:\n", 1)[1].splitlines()
    names = [line.split()[0] for line in listed if line.strip()]
    assert names == sorted(EXPERIMENTS)
    for line, name in zip(listed, names, strict=True):
        assert " ".join(EXPERIMENTS[name].summary.split()[:3]) in line


def _has_model_section(name: str) -> bool:
    from posenc.lab.config import ModelArgs, sections
    from posenc.lab.experiments import EXPERIMENTS

    return sections(EXPERIMENTS[name].config).get("model") is ModelArgs


def _experiment_names() -> list[str]:
    from posenc.lab.experiments import EXPERIMENTS

    return sorted(EXPERIMENTS)


@pytest.mark.parametrize("name", _experiment_names())
def test_heads_that_do_not_divide_the_width_are_refused_before_the_folder_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Every experiment with a transformer (a ``model`` section) refuses ``--dim 10
    --num-heads 4`` while its options are parsed, not after its run folder and config.json
    are written (as csl did, when the model was first built in its first run)."""
    from posenc.cli import main as posenc

    if not _has_model_section(name):
        pytest.skip(f"{name} has no model section")
    out = tmp_path / name
    with pytest.raises(SystemExit) as exit_info:
        posenc(["lab", name, "--out", str(out), "--dim", "10", "--num-heads", "4"])
    assert exit_info.value.code == 2
    said = _said(capsys)
    assert "dim must be a multiple of num_heads" in said and "got dim 10 and num_heads 4" in said
    assert not out.exists()


def test_package_entry_refuses_an_out_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "notes"
    afile.write_text("x")
    assert experiment_main(lm.EXPERIMENT, ["--out", str(afile / "lm"), *TINY_LM.split()]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"posenc: error: --out: {afile} is a file, not a folder, so {afile / 'lm'} cannot be "
        "a folder; give a folder\n"
    )

"""posenc.lab.runner: a new experiment is one file plus one registry line, and the runner
gives it the folder guard, resume, stages, worker processes, results.csv, report and CLI."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from posenc.cli import main
from posenc.lab import experiments
from posenc.lab.results import read_results_csv

TOY = '''
"""A toy experiment: no training, rows from arithmetic; a log file counts executions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from posenc.lab.config import RunnerArgs
from posenc.lab.runner import Experiment, Run


@dataclass(frozen=True)
class ToyConfig:
    """The toy's settings.

    Args:
        values: one run per value.
        scale: multiplies every value.
        log: file that each execution appends its run name to.
        runner: how the runs execute (workers: processes running at once).
    """

    values: tuple[int, ...] = (1, 2, 3)
    scale: float = 1.0
    log: str = ""
    runner: RunnerArgs = field(default_factory=RunnerArgs)


def plan(config: ToyConfig) -> list[Run]:
    runs = [Run(f"v{value}", {"value": value}) for value in config.values]
    return runs + [Run("total", stage=1)]


def execute(config: ToyConfig, run: Run, folder: Path) -> list[dict]:
    with open(config.log, "a") as log:
        log.write(run.name + "\\n")
    if run.name == "total":  # the later stage reads the earlier runs' folders
        parts = [json.loads((folder.parent / f"v{v}" / "eval.json").read_text())[0]
                 for v in config.values]
        # an exact sum: no evaluation noise (result_se 0), so one seed decides its claim
        return [{"experiment": "toy", "value": -1, "result": sum(p["result"] for p in parts),
                 "result_se": 0.0}]
    return [{"experiment": "toy", "value": run.params["value"],
             "result": run.params["value"] * config.scale}]


def table(rows) -> str:
    return "toy table: " + ", ".join(f"{r['value']}->{r['result']}" for r in rows)


import json  # noqa: E402

from posenc.lab.claims import Claim, value_at  # noqa: E402

TOTAL = Claim(
    name="total_at_least_10",
    text="the total is at least 10",
    paper="Toy et al. 2026",
    published="10 (Table 1)",
    experiment="toy",
    statistic=value_at("toy", {"value": -1}, "result"),
    threshold=10.0,
    direction=">=",
)

EXPERIMENT = Experiment(
    name="toy",
    summary="a toy experiment for the runner's tests",
    title="toy",
    config=ToyConfig,
    plan=plan,
    execute=execute,
    table=table,
    claims=(TOTAL,),
)
'''


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[Path]:
    """The toy module written to a folder on sys.path (workers inherit it) and registered:
    the one file and the one registry line."""
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / "posenc_toy_experiment.py").write_text(textwrap.dedent(TOY))
    sys.path.insert(0, str(folder))
    try:
        import posenc_toy_experiment

        experiments.register_experiment(posenc_toy_experiment.EXPERIMENT)
        yield tmp_path
    finally:
        experiments.EXPERIMENTS.pop("toy", None)
        sys.modules.pop("posenc_toy_experiment", None)
        sys.path.remove(str(folder))


def _executions(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


@pytest.mark.parametrize("workers", [1, 2])
def test_toy_experiment_runs_end_to_end_through_the_cli(toy: Path, workers: int, capsys) -> None:
    out, log = toy / "out", toy / "log.txt"
    args = ["lab", "toy", "--out", str(out), "--values", "2", "5", "--scale", "1.5"]
    args += ["--workers", str(workers), "--log", str(log)]
    assert main(args) == 0
    rows = read_results_csv(out / "results.csv")
    assert [(r["value"], r["result"]) for r in rows] == [(2, 3.0), (5, 7.5), (-1, 10.5)]
    printed = capsys.readouterr().out
    assert "toy table: 2->3.0, 5->7.5, -1->10.5" in printed
    assert "HOLDS     total_at_least_10: holds: 10.5 (n=1) >= 10" in printed
    (claim,) = json.loads((out / "claims.json").read_text())
    assert (claim["status"], claim["value"], claim["published"]) == ("holds", 10.5, "10 (Table 1)")
    report = (out / "report.html").read_text()
    assert "Claims: 1 of 1 hold" in report and "<table" in report
    assert report.index("Claims: 1 of 1 hold") < report.index("<table")
    assert json.loads((out / "config.json").read_text())["experiment"] == "toy"
    # stage 1 ran after both stage-0 runs
    assert sorted(_executions(log)[:2]) == ["v2", "v5"] and _executions(log)[2] == "total"

    # the same command again: nothing executes, the same rows come back
    assert main(args) == 0
    assert len(_executions(log)) == 3
    assert read_results_csv(out / "results.csv") == rows

    # a lost eval.json is recomputed, and only that run
    (out / "runs" / "v5" / "eval.json").unlink()
    assert main(args) == 0
    assert _executions(log)[3:] == ["v5"]


def test_another_config_in_the_folder_is_refused(toy: Path) -> None:
    out, log = toy / "out", toy / "log.txt"
    assert main(["lab", "toy", "--out", str(out), "--log", str(log)]) == 0
    # an execution-only field (workers) is not a mismatch; a computing one is, by name
    assert main(["lab", "toy", "--out", str(out), "--log", str(log), "--workers", "2"]) == 0
    assert main(["lab", "toy", "--out", str(out), "--log", str(log), "--scale", "2"]) == 2


def test_help_shows_the_new_experiment(toy: Path, capsys) -> None:
    assert main(["lab", "toy", "--help"]) == 0  # help printed (plain_help), not an exit
    text = " ".join(capsys.readouterr().out.split())
    assert "--scale FLOAT multiplies every value. (default: 1.0)" in text


def test_two_runs_in_one_folder_are_refused(tmp_path: Path) -> None:
    from posenc.lab.runner import Experiment, Run, run_experiment

    clash = Experiment(
        name="clash",
        summary="",
        title="",
        config=dict,
        plan=lambda config: [Run("a"), Run("a")],
        execute=lambda config, run, folder: [],
        table=str,
    )
    with pytest.raises(ValueError, match="two runs one folder"):
        run_experiment(clash, {}, tmp_path / "clash", echo=None)
    assert not (tmp_path / "clash").exists()


def test_a_failing_claim_is_reported_as_failing(toy: Path, capsys) -> None:
    out, log = toy / "out", toy / "log.txt"
    assert main(["lab", "toy", "--out", str(out), "--log", str(log), "--values", "1"]) == 0
    assert "FAILS     total_at_least_10: fails: 1 (n=1) >= 10" in capsys.readouterr().out
    assert "Claims: 0 of 1 hold" in (out / "report.html").read_text()


KILL_ARGS = [
    "lab", "extrapolate", "--encodings", "alibi", "rope", "--train-len", "16",
    "--multipliers", "1", "2", "--dim", "16", "--depth", "1", "--num-heads", "2",
    "--steps", "40", "--batch-size", "4", "--eval-tokens", "128", "--corpus-bytes", "20000",
    "--no-isolate", "--no-progress",
]  # fmt: skip
MEASURED = ("encoding", "seed", "eval_len", "loss", "ppl", "train_loss")


def _measured(out: Path) -> list[tuple]:
    return [tuple(r[k] for k in MEASURED) for r in read_results_csv(out / "results.csv")]


@pytest.mark.slow  # about a minute: six processes, four of them killed
def test_sigkill_at_any_point_then_the_same_command_reproduces_the_results(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "posenc.cli"]
    subprocess.run([*command, *KILL_ARGS, "--out", str(tmp_path / "whole")], env=env, check=True)
    killed = tmp_path / "killed"
    for delay in (1.5, 3.0, 4.5, 6.0):  # import, training, checkpointing, evaluation, writing
        child = subprocess.Popen([*command, *KILL_ARGS, "--out", str(killed)], env=env)
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
    subprocess.run([*command, *KILL_ARGS, "--out", str(killed)], env=env, check=True)
    assert _measured(killed) == _measured(tmp_path / "whole")


# ---- a failed start leaves the folder as it was ------------------------------------------


def _failing_prepare(config: object) -> None:
    raise ValueError("corpus: no such folder")


def test_a_failed_prepare_writes_no_config_and_the_folder_stays_usable(toy: Path) -> None:
    from dataclasses import replace

    import posenc_toy_experiment as module

    from posenc.lab.runner import run_experiment

    out, log = toy / "out", str(toy / "log.txt")
    failing = replace(module.EXPERIMENT, prepare=_failing_prepare)
    with pytest.raises(ValueError, match="corpus"):
        run_experiment(failing, module.ToyConfig(scale=2.0, log=log), out, echo=None)
    assert not (out / "config.json").exists() and not (out / "runs").exists()
    assert _executions(toy / "log.txt") == []
    # the corrected command (another configuration) runs in the same folder
    run_experiment(module.EXPERIMENT, module.ToyConfig(scale=3.0, log=log), out, echo=None)
    assert json.loads((out / "config.json").read_text())["scale"] == 3.0


def test_a_config_without_run_output_does_not_lock_the_folder(
    toy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``config.json`` whose runs wrote nothing (a start that failed before the first run,
    e.g. under an older posenc that wrote it first) computed nothing: another configuration
    takes the folder over. Once a run has written a file, the folder is bound to it."""
    out, log = toy / "out", str(toy / "log.txt")
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"experiment": "toy", "scale": 9.0}))
    (out / "runs" / "v1").mkdir(parents=True)  # a run folder created, nothing written in it
    assert main(["lab", "toy", "--out", str(out), "--log", log, "--values", "1"]) == 0
    assert json.loads((out / "config.json").read_text())["scale"] == 1.0
    again = ["lab", "toy", "--out", str(out), "--log", log, "--values", "1", "--scale", "2"]
    assert main(again) == 2
    assert "different 'scale' (1.0 != 2.0)" in capsys.readouterr().err


# ---- every encoding's keyword arguments checked when the config is built --------------------


def _configs() -> list[tuple[str, Callable[[dict], object]]]:
    from posenc.lab.experiments.extrapolate import ExtrapolateConfig
    from posenc.lab.experiments.generalize import TasksConfig
    from posenc.lab.experiments.vit import VitConfig

    return [
        ("extrapolate", lambda kw: ExtrapolateConfig(encodings=("nope", "rope"), pos_kwargs=kw)),
        ("tasks", lambda kw: TasksConfig(tasks=("copy",), encodings=("rope",), pos_kwargs=kw)),
        ("vit", lambda kw: VitConfig(encodings=("none", "rope"), pos_kwargs=kw)),
    ]


@pytest.mark.parametrize(("name", "make"), _configs(), ids=[name for name, _ in _configs()])
def test_each_encodings_keyword_arguments_are_judged_when_the_config_is_built(
    name: str, make: Callable[[dict], object]
) -> None:
    make({"rope": {"base": 500.0}})  # a valid one is accepted
    with pytest.raises(ValueError, match=r"^pos_kwargs\['rope'\]: .*unknown argument\(s\) bas"):
        make({"rope": {"bas": 5}})
    with pytest.raises(ValueError, match=r"^pos_kwargs\['rope'\]: .*base must be"):
        make({"rope": {"base": -1.0}})
    with pytest.raises(ValueError, match=r"pos_kwargs"):
        make({"ropee": {"base": 5}})  # a misspelt encoding name is not ignored


def test_check_pos_kwargs_builds_on_the_meta_device_and_keeps_the_random_state() -> None:
    import torch

    from posenc.lab.runner import check_pos_kwargs
    from posenc.models import DecoderLM, ModelConfig

    built: list[torch.nn.Module] = []

    def build(encoding: str) -> None:
        model = DecoderLM(ModelConfig(vocab_size=256, dim=16, depth=1, num_heads=2, pos=encoding))
        built.append(model)
        torch.randn(3)  # a draw inside the trial build does not move the caller's generator

    state = torch.random.get_rng_state()
    check_pos_kwargs({}, ("rope", "t5"), build)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(p.is_meta for model in built for p in model.parameters())
    with pytest.raises(
        ValueError, match=r"^encodings: 'fourier' cannot be built: dim must be even"
    ):
        check_pos_kwargs(
            {}, ("fourier",), lambda e: DecoderLM(ModelConfig(dim=9, num_heads=3, pos=e))
        )


def test_an_encoding_that_cannot_be_built_on_meta_is_judged_on_the_cpu() -> None:
    """A constructor mixing a CPU constant into a tensor of the default (meta) device fails
    for the device, not its arguments: trial_build builds it again on the CPU."""
    import torch

    from posenc.lab.runner import trial_build

    def mixes_devices() -> None:
        torch.zeros(2) + torch.zeros(2, device="cpu")  # meta + cpu: RuntimeError on meta

    trial_build(mixes_devices)  # judged on the CPU, where it builds

    def bad_arguments() -> None:
        mixes_devices()
        raise ValueError("factor must be ≥ 1")

    with pytest.raises(ValueError, match="factor"):
        trial_build(bad_arguments)
    # YaRN itself builds on the meta device now; its arguments decide there
    from posenc.lab.experiments.extrapolate import ExtrapolateConfig

    yarn = {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}
    ExtrapolateConfig(encodings=("rope",), pos_kwargs={"rope": {"scaling": yarn}})
    with pytest.raises(ValueError, match=r"^pos_kwargs\['rope'\]: .*factor must be"):
        ExtrapolateConfig(
            encodings=("rope",), pos_kwargs={"rope": {"scaling": {**yarn, "factor": 0.5}}}
        )


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Set the process's umask for the test; the previous one is restored after it."""
    import os

    before = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(before)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_every_file_of_a_run_folder_gets_the_users_umask(
    toy: Path, umask: Callable[[int], None], mask: int, mode: int
) -> None:
    import os
    import stat

    from posenc.lab.run import atomic_torch_save, atomic_write_text

    umask(mask)
    out, log = toy / "out", toy / "log.txt"
    assert main(["lab", "toy", "--out", str(out), "--log", str(log)]) == 0
    written = {
        path.relative_to(out).as_posix(): stat.S_IMODE(path.stat().st_mode)
        for path in out.rglob("*")
        if path.is_file() and path.name != ".lock"
    }
    assert {"config.json", "results.csv", "claims.json", "report.html"} <= set(written)
    assert "runs/v1/eval.json" in written
    assert written == dict.fromkeys(written, mode)
    # the figures' way (a plain open) and the atomic writers agree
    text, tensor, plain = toy / "a.txt", toy / "a.pt", toy / "plain.txt"
    atomic_write_text(text, "x")
    atomic_torch_save({"x": 1}, tensor)
    plain.write_text("x")
    modes = [stat.S_IMODE(os.stat(p).st_mode) for p in (text, tensor, plain)]
    assert modes == [mode, mode, mode]


# ---- tampered run folders are refused naming the file --------------------------------------


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[]", r"eval\.json holds no rows, but run 'v1' yields rows"),
        ('[{"experiment": "toy", "val', r"eval\.json is not valid JSON \(Unterminated string"),
        ('"done"', r"eval\.json must hold a list of row objects, got 'done'"),
        ("[1, 2]", r"eval\.json must hold a list of row objects"),
    ],
)
def test_a_tampered_eval_json_is_refused_naming_it(
    toy: Path, capsys: pytest.CaptureFixture[str], text: str, match: str
) -> None:
    import re

    out, log = toy / "out", str(toy / "log.txt")
    args = ["lab", "toy", "--out", str(out), "--log", log]
    assert main(args) == 0
    finished = out / "runs" / "v1" / "eval.json"
    finished.write_text(text)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and str(finished) in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "delete it" in err
    finished.unlink()  # as the message says: deleted, the run is computed again
    assert main(args) == 0
    assert _executions(toy / "log.txt").count("v1") == 2


def test_a_run_without_rows_is_finished_only_when_it_yields_none(tmp_path: Path) -> None:
    from posenc.lab.runner import Run, finished_rows

    path = tmp_path / "eval.json"
    path.write_text("[]")
    assert finished_rows(Run("base", rows=False), path) == []
    with pytest.raises(ValueError, match=r"eval\.json holds no rows, but run 'base'"):
        finished_rows(Run("base"), path)
    path.write_text('{"experiment": "toy", "value": 1}')  # a one-row run's object
    assert finished_rows(Run("one"), path) == [{"experiment": "toy", "value": 1}]


@dataclasses.dataclass(frozen=True)
class NoFields:
    """A config without fields."""


def test_a_run_returning_no_rows_is_an_error_unless_planned_without(tmp_path: Path) -> None:
    from posenc.lab.runner import Experiment, Run, run_experiment

    def experiment(rows: bool) -> Experiment[NoFields]:
        return Experiment(
            name="empty",
            summary="",
            title="",
            config=NoFields,
            plan=lambda config: [Run("a", rows=rows), Run("b", stage=1)],
            execute=lambda config, run, folder: [] if run.name == "a" else [{"experiment": "e"}],
            table=str,
        )

    with pytest.raises(ValueError, match=r"empty: what run 'a' returned holds no rows"):
        run_experiment(experiment(True), NoFields(), tmp_path / "strict", echo=None)
    assert not (tmp_path / "strict" / "runs" / "a" / "eval.json").exists()
    rows = run_experiment(experiment(False), NoFields(), tmp_path / "fine", echo=None)
    assert rows == [{"experiment": "e"}]
    assert json.loads((tmp_path / "fine" / "runs" / "a" / "eval.json").read_text()) == []


def test_a_truncated_config_json_is_refused_naming_it(
    toy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, log = toy / "out", str(toy / "log.txt")
    args = ["lab", "toy", "--out", str(out), "--log", log]
    assert main(args) == 0
    saved = out / "config.json"
    saved.write_text(saved.read_text()[:20])
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{saved} is not valid JSON" in err and "Traceback" not in err

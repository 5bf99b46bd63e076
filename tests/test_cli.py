from __future__ import annotations

import json
import re
from pathlib import Path
from typing import get_args

import pytest

pytest.importorskip("matplotlib")

from posenc.checks import run_checks
from posenc.cli import BENCH_SUITES, FIGURE_NAMES, main, plain_help
from posenc.graph.catalogue import list_graph_methods
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


def test_lab_command_takes_config_fields_as_options(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    options = "--steps 2 --dim 16 --depth 1 --num-heads 2 --train-len 8 --eval-tokens 64"
    options += " --corpus-bytes 5000 --encodings alibi --multipliers 1 2 --no-isolate"
    options += " --no-progress"
    assert main(["lab", "extrapolate", "--out", str(out), *options.split()]) == 0
    assert (out / "results.csv").is_file() and (out / "report.html").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["encodings"] == ["alibi"] and config["multipliers"] == [1.0, 2.0]
    assert config["train"]["steps"] == 2 and config["runner"]["isolate"] is False
    with pytest.raises(SystemExit) as exit_info:
        main(["lab", "extrapolate", "--out", str(out), "--stepz", "3"])
    assert exit_info.value.code == 2
    assert "stepz" in capsys.readouterr().err
    assert main(["report", str(out)]) == 0
    assert main(["report", str(tmp_path / "empty")]) == 2
    # one page gathering run folders kept elsewhere
    assert main(["report", str(tmp_path / "page"), "--runs", str(out)]) == 0
    assert "alibi" in (tmp_path / "page" / "report.html").read_text()
    assert main(["report", str(tmp_path / "page"), "--runs", str(tmp_path / "empty")]) == 2
    assert "runs:" in capsys.readouterr().err
    # a field's bad value is the config's own error, naming the field
    with pytest.raises(SystemExit) as exit_info:
        main(["lab", "extrapolate", "--out", str(tmp_path / "x"), "--steps", "0"])
    assert exit_info.value.code == 2
    assert "steps must be a positive integer" in " ".join(capsys.readouterr().err.split())


def test_lab_help_lists_every_config_field(capsys) -> None:
    import dataclasses

    from posenc.lab.config import sections
    from posenc.lab.experiments import EXPERIMENTS

    for name, experiment in EXPERIMENTS.items():
        assert main(["lab", name, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        # the field docs come from docstrings; their Sphinx markup is gone
        assert "``" not in text and not re.search(r":[a-z]+:`", text), name
        parts = sections(experiment.config)  # a section's fields are --section.field
        paths = [
            f"{field.name}.{leaf.name}" if field.name in parts else field.name
            for field in dataclasses.fields(experiment.config)
            for leaf in (dataclasses.fields(parts[field.name]) if field.name in parts else [field])
        ]
        for path in paths:
            flag = "--" + path.replace("_", "-")
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


def test_lab_help_lists_the_experiments_and_a_missing_one_is_an_error(capsys) -> None:
    from posenc.lab.experiments import EXPERIMENTS

    assert main(["lab", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: posenc lab EXPERIMENT")
    for name in EXPERIMENTS:
        assert re.search(rf"^  {name} +\S", out, re.M), name
    assert main(["lab"]) == 2
    err = capsys.readouterr().err
    assert "EXPERIMENT is required" in err and "extrapolate" in err
    assert main(["lab", "nonesuch"]) == 2
    assert "unknown experiment 'nonesuch'" in capsys.readouterr().err


def test_top_level_help_names_every_subcommand(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("list", "plot", "check", "demo", "lab", "report", "bench", "verify"):
        assert command in out.split("\n\n")[1], command  # the description names it
    assert "``" not in out and "`posenc" not in out


def test_plot_unknown_name_lists_figures_and_encodings(tmp_path: Path, capsys) -> None:
    assert main(["plot", "nonesuch", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "METHOD: unknown name 'nonesuch'" in err
    for name in (*FIGURE_NAMES, "rope", "mrope", "alibi", "laplacian_rw"):
        assert name in err, name
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    "name", [*FIGURE_NAMES, *(s.name for s in list_encodings()), "laplacian_rw"]
)
def test_plot_refuses_an_unknown_setting_by_name(name: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "x.png"
    assert main(["plot", name, "--out", str(out), "--set", "bogus_key=500000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posenc: error:") and "bogus_key" in err and "Traceback" not in err
    assert not out.exists()


def test_plot_rope_base_is_an_error_naming_the_allowed_settings(tmp_path: Path, capsys) -> None:
    # the case: plot rope draws plot_rope_decay, which takes bases, not base
    assert main(["plot", "rope", "--out", str(tmp_path / "r.png"), "--set", "base=500000"]) == 2
    assert "allowed: bases" in capsys.readouterr().err
    assert main(["plot", "rope", "--out", str(tmp_path / "r.png"), "--set", "base"]) == 2
    assert "--set takes KEY=VALUE" in capsys.readouterr().err


def test_figure_names_and_bench_suites_match_their_modules() -> None:
    from posenc.bench import attention, rope
    from posenc.viz import FIGURES

    assert tuple(FIGURES) == FIGURE_NAMES
    assert {"attention": tuple(attention.SUITES), "rope": tuple(rope.SUITES)} == BENCH_SUITES


def test_bench_refuses_an_unknown_suite(capsys) -> None:
    assert main(["bench", "rope", "--only", "sideways"]) == 2
    assert "--only: unknown suite(s) sideways for rope" in capsys.readouterr().err


def test_plain_help_strips_sphinx_roles_and_keeps_box_width() -> None:
    text = "see ``posenc list``, :data:`posenc.X`, :class:`~posenc.rotary.YaRN` and :func:`f`"
    assert plain_help(text) == "see posenc list, posenc.X, YaRN and f"
    boxed = "│ a ``b`` c │"
    assert plain_help(boxed) == "│ a b c     │"
    assert plain_help("no markup\n") == "no markup\n"


def test_check_reports_each_result_as_it_is_measured(monkeypatch) -> None:
    import posenc.checks.encodings as checks

    measured: list[str] = []
    monkeypatch.setattr(checks, "_kv_cache", lambda name: measured.append(name))

    class Stop(Exception):
        pass

    def progress(line: str) -> None:
        raise Stop(line)

    with pytest.raises(Stop, match="rope"):
        run_checks(progress=progress)
    assert measured == []  # the first row came out before the later checks ran


def test_help_imports_neither_the_lab_nor_the_benchmarks_nor_matplotlib() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from posenc.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(run.stdout.split())
    heavy = {"posenc.lab", "posenc.bench", "posenc.viz", "matplotlib", "tyro", "transformers"}
    assert not heavy & loaded, heavy & loaded


def test_startup_benchmark_runs_each_command_and_takes_medians() -> None:
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / "cli_startup.py"
    spec = importlib.util.spec_from_file_location("cli_startup", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    medians = bench.measure(2, {"python": ["-c", "pass"], "help": bench.COMMANDS["posenc --help"]})
    assert set(medians) == {"python", "help"} and 0 < medians["python"] < medians["help"]
    assert "posenc --help" in bench.format_result({"posenc --help": 0.5}, 2)
    with pytest.raises(ValueError, match="rounds"):
        bench.measure(0)


# ---- --out and --threads: the path written is the one printed; bad ones are one-line errors


def test_plot_prints_the_file_it_writes(tmp_path: Path, capsys) -> None:
    """No suffix: matplotlib writes OUT.png, and the message names that file."""
    assert main(["plot", "rope", "--out", str(tmp_path / "foo")]) == 0
    written = tmp_path / "foo.png"
    assert capsys.readouterr().out == f"wrote {written}\n"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foo.png"]


@pytest.mark.parametrize("trailing", ["", "/"])
def test_plot_into_a_folder_writes_method_png_inside_it(
    tmp_path: Path, capsys, trailing: str
) -> None:
    folder = tmp_path / "figures"
    if not trailing:
        folder.mkdir()  # an existing folder; with a trailing slash, a new one
    assert main(["plot", "alibi", "--out", str(folder) + trailing]) == 0
    written = folder / "alibi.png"
    assert capsys.readouterr().out == f"wrote {written}\n"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures"]  # no figures.png beside


def _one_line_error(capsys, *named: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("posenc: error: ") and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for text in named:
        assert text in err, (text, err)
    return err


def test_plot_refuses_an_out_it_cannot_write(tmp_path: Path, capsys) -> None:
    afile = tmp_path / "notes"
    afile.write_text("x")
    assert main(["plot", "rope", "--out", str(afile / "rope.png")]) == 2
    _one_line_error(capsys, "--out:", f"{afile} is a file, not a folder")
    assert main(["plot", "rope", "--out", str(tmp_path / "rope.xyz")]) == 2
    _one_line_error(capsys, "--out:", "suffix '.xyz'", "png", "svg")
    # /proc/self refuses new files even to root, where a chmod-ed folder would not
    assert main(["plot", "rope", "--out", "/proc/self/rope.png"]) == 2
    _one_line_error(capsys, "--out: cannot write in /proc/self (permission denied)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_plot_reports_a_failed_write_naming_out(tmp_path: Path, capsys, monkeypatch) -> None:
    """What no check foresees (a full disk, a folder removed meanwhile) is still one line."""
    from matplotlib.figure import Figure

    def full_disk(self: Figure, *args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    assert main(["plot", "rope", "--out", str(tmp_path / "r.png")]) == 2
    _one_line_error(capsys, f"--out: cannot write {tmp_path / 'r.png'}: No space left on device")


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--out", "{file}"],
        ["demo", "--out", "{file}/demo"],
        ["lab", "csl", "--out", "{file}"],
        ["lab", "extrapolate", "--out", "{file}/run"],
        ["report", "{file}"],
        ["report", "{file}", "--runs", "{file}"],
    ],
)
def test_every_output_folder_that_is_a_file_is_a_one_line_error(
    tmp_path: Path, capsys, argv: list[str]
) -> None:
    afile = tmp_path / "notes"
    afile.write_text("x")
    args = [arg.format(file=afile) for arg in argv]
    assert main(args) == 2
    option = "RUN_DIR" if argv[0] == "report" else "--out"
    _one_line_error(capsys, f"{option}: {afile} is a file, not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_an_unwritable_output_folder_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    for argv in (["demo", "--out", "/proc/self/demo"], ["lab", "csl", "--out", "/proc/self/r"]):
        assert main(argv) == 2
        _one_line_error(capsys, "--out: cannot write in /proc/self (permission denied)")


@pytest.mark.parametrize("threads", ["0", "-1", "two"])
def test_bench_threads_must_be_positive(capsys, threads: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "attention", "--threads", threads])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --threads: must be a positive integer (>= 1)" in err
    assert "Traceback" not in err


def test_bench_suites_refuse_threads_below_one() -> None:
    from posenc.bench import run_suites

    for threads in (0, -2, True, 1.5):
        with pytest.raises(ValueError, match=r"threads must be a positive integer \(>= 1\)"):
            run_suites({}, None, threads=threads)  # type: ignore[arg-type]


@pytest.mark.parametrize("option", ["--threads", "--workers"])
def test_lab_threads_and_workers_must_be_positive(tmp_path: Path, capsys, option: str) -> None:
    out = tmp_path / "csl"
    with pytest.raises(SystemExit) as exit_info:
        main(["lab", "csl", "--out", str(out), option, "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    said = " ".join(err.replace("│", " ").split())  # tyro's box around the config's message
    assert f"{option[2:]} must be a positive integer (>= 1), got 0" in said
    assert "Traceback" not in err and not out.exists()


def _verify_files(tmp_path: Path, bug: str | None) -> tuple[str, str]:
    import torch

    from posenc.verify import bug_class, reference_arrays, save_arrays

    config = {
        "model_type": "llama",
        "head_dim": 64,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    positions = torch.arange(0, 4096, 16)
    if bug is None:
        arrays = reference_arrays(config, positions)
    else:
        arrays = bug_class(bug).build(config, positions)
    tables = {"cos": arrays["cos"].float(), "sin": arrays["sin"].float(), "pos": positions}
    return str(config_path), str(save_arrays(tables, tmp_path / "port.npz"))


def test_verify_exits_0_when_equal_and_1_naming_cause_and_sources(tmp_path: Path, capsys) -> None:
    config, arrays = _verify_files(tmp_path, None)
    assert main(["verify", config, "--arrays", arrays, "--positions-from", "pos"]) == 0
    assert "OK: equal" in capsys.readouterr().out
    config, arrays = _verify_files(tmp_path, "scaling_missing")
    assert main(["verify", config, "--arrays", arrays, "--positions-from", "pos"]) == 1
    out = capsys.readouterr().out
    assert "likely cause: scaling_missing" in out and "jundot/omlx#3347" in out
    assert main(["verify", config, "--arrays", arrays, "--positions-from", "pos", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["cause"] == "scaling_missing"
    assert data["arrays"][0]["first_position"] == [16.0]  # position 0 agrees; 16 does not


def test_verify_writes_the_reference_that_then_verifies(tmp_path: Path, capsys) -> None:
    config, _ = _verify_files(tmp_path, None)
    out = tmp_path / "ref.npz"
    assert main(["verify", config, "--positions", "0:512:4", "--write-reference", str(out)]) == 0
    assert main(["verify", config, "--arrays", str(out)]) == 0  # float64, positions inside
    capsys.readouterr()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give --arrays FILE"),
        (["--arrays", "ARRAYS", "--positions", "5:2"], "--positions must be START:STOP"),
        (["--arrays", "ARRAYS", "--positions-from", "nope"], "--positions-from 'nope'"),
        (["--arrays", "ARRAYS", "--positions-from", "pos", "--layer-type", "full"], "layer_type"),
        (["--arrays", "ARRAYS"], "unknown key(s) ['pos']"),
        (["--arrays", "missing.npz"], "is not a file"),
    ],
)
def test_verify_bad_input_exits_2_naming_the_argument(
    tmp_path: Path, capsys, extra: list[str], message: str
) -> None:
    config, arrays = _verify_files(tmp_path, None)
    extra = [arrays if e == "ARRAYS" else e for e in extra]
    assert main(["verify", config, *extra]) == 2
    assert message in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "nope.json"), "--arrays", arrays]) == 2
    assert "no such file" in capsys.readouterr().err

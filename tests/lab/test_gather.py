"""Reports over several run folders: which runs are found, and one page holding them all."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from posenc.lab.gather import find_runs, gather
from posenc.lab.report import write_report
from posenc.lab.results import write_results_csv
from tests.lab.test_report import CLAIMS, REGISTRY, make_run_folder, text_of

EXTENSION_ROWS = [
    {
        "experiment": "extend",
        "method": method,
        "stage": "no_ft",
        "seed": 0,
        "train_len": 64,
        "eval_len": eval_len,
        "loss": loss,
        "ppl": 2.0**loss,
    }
    for method, loss in (("rope", 3.0), ("yarn", 2.0))
    for eval_len in (64, 128)
]
EXTENSION_CLAIM = {
    "name": "rerope_flat_8x",
    "text": "ReRoPE's perplexity stays flat to 8×T.",
    "paper": "Su 2023, ReRoPE",
    "published": "README",
    "status": "undecided",
    "value": 1.01,
    "std": 0.05,
    "seeds": 2,
    "direction": "<=",
    "threshold": 1.1,
    "detail": None,
    "summary": "undecided",
}


def make_extension(folder: Path) -> Path:
    """A sub-run as ``posenc demo`` leaves ``OUT/extension``: rows, claims, config, no runs/."""
    folder.mkdir(parents=True)
    write_results_csv(EXTENSION_ROWS, folder / "results.csv")
    (folder / "claims.json").write_text(json.dumps([EXTENSION_CLAIM]))
    (folder / "config.json").write_text(json.dumps({"experiment": "extend", "steps": 600}))
    (folder / "runs" / "yarn" / "seed0").mkdir(parents=True)
    (folder / "runs" / "yarn" / "seed0" / "metrics.jsonl").write_text(
        '{"kind": "train", "step": 1, "loss": 2.0}\n{"kind": "train", "step": 2, "loss": 1.0}\n'
    )
    return folder


def test_find_runs_takes_the_folder_then_each_sub_folder_holding_results(tmp_path: Path) -> None:
    make_run_folder(tmp_path)
    make_extension(tmp_path / "extension")
    (tmp_path / "notes").mkdir()  # no results.csv: not a run
    assert find_runs(tmp_path) == [tmp_path, tmp_path / "extension"]
    assert find_runs(tmp_path / "runs") == []  # runs/ holds training folders, not runs
    runs = gather(tmp_path)
    assert [run.label for run in runs] == [".", "extension"]
    assert [run.experiments for run in runs] == [
        ["extrapolate", "extend", "passkey", "tasks", "vit"],
        ["extend"],
    ]
    assert runs[0].claims == CLAIMS and runs[1].claims == [EXTENSION_CLAIM]
    assert runs[1].config == {"experiment": "extend", "steps": 600}


def test_gather_takes_run_folders_from_anywhere(tmp_path: Path) -> None:
    first = make_extension(tmp_path / "a")
    second = make_extension(tmp_path / "elsewhere" / "b")
    runs = gather(tmp_path / "report", [first, second])
    assert [run.label for run in runs] == [str(first), str(second)]
    assert [len(run.rows) for run in runs] == [4, 4]


@pytest.mark.parametrize(
    ("runs", "match"),
    [
        ([], "runs must name at least one"),
        (["missing"], "runs: .*missing hold no results.csv"),
        (["a", "a"], "runs names one folder twice"),
    ],
)
def test_gather_refuses_bad_runs_naming_them(tmp_path: Path, runs: list[str], match: str) -> None:
    make_extension(tmp_path / "a")
    with pytest.raises(ValueError, match=match):
        gather(tmp_path, [tmp_path / run for run in runs])


def test_one_report_gathers_claims_tables_curves_and_configs_of_every_run(tmp_path: Path) -> None:
    make_run_folder(tmp_path)
    make_extension(tmp_path / "extension")
    page = write_report(tmp_path, title="demo", experiments=REGISTRY).read_text()
    # every claim of both runs, counted together
    claims = text_of(re.search(r"<table class='claims'>.*?</table>", page).group(0))
    for record in [*CLAIMS, EXTENSION_CLAIM]:
        assert record["text"] in claims
    assert "of 4 hold" in page
    # the runs table says which folder holds which claims and numbers
    runs = text_of(page[page.find("<h2 id='runs'>") : page.find("<h2 id='tables'>")])
    assert "This page gathers 2 runs" in runs
    row = "<td>extension/</td><td>extend</td><td>4</td><td>1 (rerope_flat_8x: undecided)</td>"
    assert row in page
    assert "extension/results.csv" in runs and "./claims.json" in runs
    # the extension rows joined the extend table: its methods sit beside the first run's
    extend_table = next(
        text_of(t)
        for t in re.findall(r"<table class='pivot'>.*?</table>", page)
        if t.find("per scaling and stage") > 0
    )
    assert "rope" in extend_table and "pi" in extend_table
    # curves of both runs, the sub-run's under its folder's name
    assert "4 runs from runs/**/metrics.jsonl" in page
    # each run's config under its own name
    configuration = text_of(page[page.find("id='configuration'") : page.find("id='environment'")])
    assert "config.json" in configuration and "extension/config.json" in configuration
    assert "results.csv, extension/results.csv" in text_of(page[page.find("id='raw'") :])


def test_a_report_of_given_runs_is_written_where_asked(tmp_path: Path) -> None:
    first = make_extension(tmp_path / "seed0")
    second = make_extension(tmp_path / "seed1")
    page = write_report(tmp_path / "both", runs=[first, second], experiments=REGISTRY).read_text()
    assert text_of(page).count(EXTENSION_CLAIM["text"]) == 2
    assert (tmp_path / "both" / "figures" / "extension.png").is_file()
    with pytest.raises(ValueError, match=r"run_dir .* has no results\.csv"):
        write_report(tmp_path / "empty", experiments=REGISTRY)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("method,loss\nrope,3.0\n", r"results\.csv is not a results file of the lab: missing "
         r"column\(s\) experiment \(its columns: method, loss\)"),
        ("", r"missing column\(s\) experiment \(its columns: none\)"),
        ("experiment,method,loss\n", r"results\.csv holds no rows \(only a header\)"),
        ("experiment,loss\nextend,3.0,4.0\n", r"results\.csv, row 1: more cells than the "
         r"header's 2 columns"),
        ("experiment,loss\n,3.0\n", r"results\.csv, row 1: no experiment"),
    ],
)  # fmt: skip
def test_a_report_refuses_a_results_file_that_holds_no_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, match: str
) -> None:
    from posenc.cli import main

    run = make_extension(tmp_path / "run")
    (run / "results.csv").write_text(text)
    with pytest.raises(ValueError, match=match):
        gather(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and str(run / "results.csv") in err, err
    assert not (run / "report.html").exists()


@pytest.mark.parametrize("name", ["claims.json", "config.json"])
def test_a_truncated_json_file_of_a_run_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    run = make_extension(tmp_path / "run")
    path = run / name
    path.write_text(path.read_text()[:-5])
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} is not valid JSON \(.*line 1"):
        gather(run)


@pytest.mark.parametrize("column", ["method", "eval_len"])
def test_a_report_names_the_results_file_lacking_a_column_its_tables_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str
) -> None:
    from posenc.cli import main

    good = make_extension(tmp_path / "good")
    bad = make_extension(tmp_path / "bad")
    rows = [{k: v for k, v in row.items() if k != column} for row in EXTENSION_ROWS]
    write_results_csv(rows, bad / "results.csv")
    assert main(["report", str(tmp_path / "page"), "--runs", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"posenc: error: {bad / 'results.csv'}: missing column {column!r}, which the report's "
        "tables and figures of these rows need (a results file edited, or written by something "
        "else)\n"
    )
    assert not (tmp_path / "page" / "report.html").exists()


def test_missing_column_blames_no_file_that_has_the_column(tmp_path: Path) -> None:
    from posenc.lab.gather import missing_column

    runs = gather(tmp_path, [make_extension(tmp_path / "a")])
    assert missing_column(runs, "method") is None  # a KeyError of the report's own making
    assert missing_column(runs, 3) is None
    error = missing_column(runs, "passkey_depth")
    assert error is not None and str(error).startswith(f"{tmp_path / 'a' / 'results.csv'}: ")

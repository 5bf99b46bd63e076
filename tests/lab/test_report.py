from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from posenc.lab.report import write_report
from posenc.lab.results import merge_rows, read_results_csv, write_results_csv

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


def test_report_embeds_a_figure_and_table_per_experiment(tmp_path: Path) -> None:
    write_results_csv(ROWS, tmp_path / "results.csv")
    page = write_report(tmp_path).read_text()
    assert page.count("data:image/png;base64,") == 5
    assert page.count("<table>") == 5
    for name in ("loss_vs_length", "extension", "passkey", "tasks", "vit"):
        assert (tmp_path / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert "undefined" in page


def test_report_without_results_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"results\.csv"):
        write_report(tmp_path)


def test_a_run_folder_in_use_by_another_process_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    from posenc.lab.extrapolate import ExtrapolateConfig
    from posenc.lab.results import prepare_out_dir

    config = ExtrapolateConfig(encodings=("alibi",), train_len=8, eval_tokens=128)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from posenc.lab.results import prepare_out_dir; "
            "from posenc.lab.extrapolate import ExtrapolateConfig as C; "
            f"prepare_out_dir({str(tmp_path)!r}, 'extrapolate', "
            "C(encodings=('alibi',), train_len=8, eval_tokens=128)); "
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

"""posenc.bench.rope_gpu: the Triton kernel's bandwidth rows, their target, and no rows without
CUDA. The timings here are synthetic: the suite itself times only on a GPU."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from posenc.bench import rope, rope_gpu
from posenc.bench.rope_gpu import bandwidth_rows, device_peak
from posenc.bench.targets import TARGETS, annotate, evaluate

GB = 1_000_000_000


def _rows(dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """Three rounds of a floor at 2 ms and the kernel at 2.5 ms moving 6 GB (f32-sized)."""
    times = {
        "copy_ floor": [2e-3, 1e-3, 2e-3],
        "triton q+k inplace": [2.5e-3, 2e-3, 2.5e-3],
        "triton out=": [4e-3, 3e-3, 2e-3],
    }
    moved = {"copy_ floor": 6 * GB, "triton q+k inplace": 6 * GB, "triton out=": 6 * GB}
    extra = {"device": "test GPU", "dtype": dtype}
    return bandwidth_rows(times, moved, peak=3e12, peak_source="spec", extra=extra)


def test_bandwidth_rows_divide_bytes_by_the_median_time() -> None:
    floor, kernel, out = _rows()
    assert floor["seconds"] == 2e-3 and floor["ratio"] == 1.0
    assert kernel == {
        "device": "test GPU",
        "dtype": "bfloat16",
        "name": "triton q+k inplace",
        "seconds": 2.5e-3,
        "ratio": 1.25,  # rounds 1.25, 2.0, 1.25
        "gb_per_s": 2400.0,
        "percent_of_peak": 80.0,
        "peak_gb_per_s": 3000.0,
        "peak_source": "spec",
        "bytes": 6 * GB,
        "rounds": 3,
    }
    assert out["seconds"] == 3e-3 and out["ratio"] == 2.0  # rounds 2, 3, 1: per-round ratios
    assert out["percent_of_peak"] == pytest.approx(200.0 / 3)


def test_without_a_peak_the_copy_floor_stands_for_it() -> None:
    times = {"copy_ floor": [1e-3, 2e-3, 2e-3], "triton q+k inplace": [4e-3, 4e-3, 2.5e-3]}
    moved = {"copy_ floor": 4 * GB, "triton q+k inplace": 4 * GB}
    floor, kernel = bandwidth_rows(times, moved, peak=None, peak_source="spec", extra={})
    assert floor["peak_source"] == kernel["peak_source"] == "copy_ floor (measured)"
    assert floor["percent_of_peak"] == 100.0
    assert kernel["peak_gb_per_s"] == 2000.0 and kernel["percent_of_peak"] == 50.0


def test_bandwidth_rows_need_the_baseline() -> None:
    with pytest.raises(ValueError, match="baseline 'copy_ floor' is not among"):
        bandwidth_rows(
            {"triton out=": [1.0]}, {"triton out=": 1}, peak=1.0, peak_source="", extra={}
        )


def test_device_peak_from_memory_clock_and_bus_width(monkeypatch: pytest.MonkeyPatch) -> None:
    # H100 SXM5's figures: 2619 MHz HBM3 on a 5120-bit bus, 3.35 TB/s.
    h100 = SimpleNamespace(memory_clock_rate=2_619_000, memory_bus_width=5120)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h100)
    assert device_peak(torch.device("cuda", 0)) == 2 * 2_619_000_000 * 640
    older = SimpleNamespace(name="a torch without the fields")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: older)
    assert device_peak(torch.device("cuda", 0)) is None


def test_the_q_and_k_in_place_row_is_annotated_against_the_target() -> None:
    rows = _rows("float32") + _rows("bfloat16")
    rows[4]["percent_of_peak"] = 65.0  # bfloat16's kernel row misses
    cells = annotate(rows, "rope", "gpu", TARGETS)
    assert cells == [
        "",
        "80.00 % of peak bandwidth  (goal ≥ 70 %: met)",
        "",
        "",
        "65.00 % of peak bandwidth  (goal ≥ 70 %: missed)",
        "",
    ]
    assert [entry["figure"] for entry in evaluate({"gpu": rows}, "rope", TARGETS)] == [80.0, 65.0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures on CUDA")
def test_the_suite_has_no_rows_without_cuda() -> None:
    assert rope_gpu.gpu() == []
    assert rope.run(["gpu"])["gpu"] == []


def test_cli_prints_the_bandwidth_beside_the_goal(monkeypatch, capsys) -> None:
    from posenc.cli import main

    rows = _rows()
    monkeypatch.setitem(rope.SUITES, "gpu", lambda: rows)  # no timing
    assert main(["bench", "rope", "--only", "gpu"]) == 0
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert lines[2] == "## gpu"
    assert lines[3].split()[:3] == ["device", "dtype", "path"]
    (kernel,) = [line for line in lines if "triton q+k inplace" in line]
    assert kernel.startswith("test GPU  bfloat16  triton q+k inplace  0.002500  1.25")
    assert kernel.endswith("80.00 % of peak bandwidth  (goal ≥ 70 %: met)")
    assert main(["bench", "rope", "--only", "gpu", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["targets"] == [
        {
            "target": "rope-triton-bandwidth",
            "goal": "≥ 70 %",
            "figure": 80.0,
            "met": True,
            "row": {"name": "triton q+k inplace", "dtype": "bfloat16"},
        }
    ]


def test_cli_without_rows_names_the_target_unmeasured(monkeypatch, capsys) -> None:
    from posenc.cli import main

    monkeypatch.setitem(rope.SUITES, "gpu", lambda: [])  # what a machine without CUDA gets
    assert main(["bench", "rope", "--only", "gpu"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == (
        "rope-triton-bandwidth (goal ≥ 70 %): not measured, no row with name='triton q+k inplace'"
    )

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc.verify import load_arrays, save_arrays


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_named_arrays_round_trip_exactly(tmp_path: Path, suffix: str) -> None:
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    arrays = {
        "cos": torch.randn(5, 8, dtype=torch.float64),
        "sin": torch.randn(5, 8).to(torch.bfloat16),
        "positions": torch.arange(5),
    }
    loaded = load_arrays(save_arrays(arrays, tmp_path / f"a{suffix}"))
    assert sorted(loaded) == sorted(arrays)
    for key, value in arrays.items():
        # numpy has no bfloat16: stored as float32, which holds it exactly
        expected = value.float() if suffix == ".npz" and value.dtype == torch.bfloat16 else value
        torch.testing.assert_close(loaded[key], expected, rtol=0, atol=0)


def test_a_npy_file_is_one_array_named_after_its_stem(tmp_path: Path) -> None:
    table = torch.randn(3, 4)
    loaded = load_arrays(save_arrays({"anything": table}, tmp_path / "cos.npy"))
    assert list(loaded) == ["cos"]
    torch.testing.assert_close(loaded["cos"], table, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"\.npy file holds one array"):
        save_arrays({"cos": table, "sin": table}, tmp_path / "both.npy")


def test_bad_paths_are_errors_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"path must end in one of"):
        load_arrays(tmp_path / "tables.pt")
    with pytest.raises(ValueError, match=r"is not a file"):
        load_arrays(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_text("not a zip")
    with pytest.raises(ValueError, match=r"cannot read it as \.npz"):
        load_arrays(bad)

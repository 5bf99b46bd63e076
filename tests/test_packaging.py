"""The distribution's metadata: an SPDX licence with its file, and a build backend whose range
reads it (setuptools warns about a ``license`` table, refused after 2027-02-18)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_licence_is_an_spdx_string_with_its_file() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")


def test_the_build_backend_range_reads_spdx_licences_and_has_an_upper_bound() -> None:
    requires = _pyproject()["build-system"]["requires"]
    setuptools = [r for r in requires if r.startswith("setuptools")]
    assert len(setuptools) == 1
    low = re.search(r">=(\d+)", setuptools[0])
    high = re.search(r"<(\d+)", setuptools[0])
    assert low is not None and int(low.group(1)) >= 77  # SPDX `license` and `license-files`
    assert high is not None and int(high.group(1)) > int(low.group(1))

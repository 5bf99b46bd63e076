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


def test_no_install_hint_names_a_distribution_that_pypi_does_not_have() -> None:
    """posenc is installed from a clone (README); ``pip install posenc`` / ``'posenc[lab]'``
    finds nothing."""
    hint = re.compile(r"pip install\s+['\"]?posenc\b")
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    found = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in files
        for line in path.read_text().splitlines()
        if hint.search(line) and "no such distribution" not in line
    ]
    assert found == []
    readme = (ROOT / "README.md").read_text()
    assert "pip install -e ." in readme and "pip install -e '.[lab]'" in readme


def test_the_plotting_import_error_says_how_to_install_the_extra(monkeypatch) -> None:
    import sys

    from posenc.viz.base import new_figure

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[plot]' in a clone")):
        new_figure()

"""README.md's method table is the one tools/readme_methods.py generates from the registry:
every method and family that ``posenc list`` shows, no more."""

from __future__ import annotations

import re

import pytest

from posenc.graph.catalogue import list_graph_methods
from posenc.registry import list_encodings
from tools import readme_methods


def test_the_readme_table_is_the_generated_one() -> None:
    text = readme_methods.README.read_text()
    assert readme_methods.replace_table(text, readme_methods.render()) == text, (
        "README.md's method table is stale: run python -m tools.readme_methods"
    )
    assert readme_methods.main(["--check"]) == 0


def test_the_table_names_every_listed_method_and_family_once() -> None:
    table = readme_methods.render()
    names = re.findall(r"`([a-z0-9_]+)`\]\(", table)
    listed = [spec.name for spec in list_encodings()] + [m.name for m in list_graph_methods()]
    assert sorted(names) == sorted(listed)
    families = re.findall(r"^\| ([a-z_]+) \| (?!-)", table, flags=re.MULTILINE)[1:]
    expected = {spec.family for spec in list_encodings()} | {"graph"}
    assert sorted(families) == sorted(expected)
    assert f"{len(listed)} methods by name in {len(expected)} families" in table


def test_a_family_without_a_description_and_bad_markers_are_errors(monkeypatch) -> None:
    monkeypatch.delitem(readme_methods.WHERE, "softmax")
    with pytest.raises(ValueError, match="softmax"):
        readme_methods.render()
    with pytest.raises(ValueError, match="markers"):
        readme_methods.replace_table("no markers here", "")
    with pytest.raises(ValueError, match="markers"):
        readme_methods.replace_table(readme_methods.END + readme_methods.BEGIN, "")

"""One taxonomy everywhere: the README's family table, the registry's families and the
package's folders name the same families (docs/architecture.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from posenc.registry import Family, list_encodings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "posenc"


def readme_families() -> list[str]:
    text = (ROOT / "README.md").read_text()
    table = text.split("| family | where it acts |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| ([a-z_]+) \|", table, re.M)


def test_the_readme_lists_every_family_and_only_those() -> None:
    # graph: positions from structure, built by their constructors rather than by name
    assert sorted(readme_families()) == sorted([*get_args(Family), "graph"])


def test_each_family_but_none_is_a_folder_and_each_registered_method_has_one() -> None:
    for family in [*get_args(Family), "graph"]:
        if family != "none":
            assert (PACKAGE / family / "__init__.py").is_file(), family
    assert {spec.family for spec in list_encodings()} == set(get_args(Family))


def test_each_registered_method_lives_in_its_familys_folder() -> None:
    from posenc.registry import ModelDims, build_encoding

    for spec in list_encodings():
        dims = ModelDims(
            dim=32, num_heads=4, vocab_size=50, grid=(4, 4) if spec.needs_grid else None
        )
        module = type(build_encoding(spec.name, dims)).__module__
        home = "posenc.encoding" if spec.family == "none" else f"posenc.{spec.family}"
        assert module.startswith(home + "."), (spec.name, module)

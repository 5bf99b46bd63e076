"""No module of ``posenc`` imports one that imports it back; the package loads its names on
first use. (The layers themselves are import-linter contracts in pyproject.toml, checked by
``make imports``.)

The graph is read from the source with :mod:`ast`, not by importing: an edge ``a → b`` is any
``import posenc.b`` or ``from posenc.b import name`` in ``a`` (or ``from posenc.b import c``
naming the submodule ``posenc.b.c``), wherever it stands:

* **function-level (deferred) imports count.** Deferring an import does not remove the
  dependency; it only moves the failure of a cycle from import time to the first call (or to
  another import order), and it is how cycles hide.
* **``if TYPE_CHECKING:`` imports count.** The types are part of the interface: a module
  whose signatures name another module's class depends on it (mypy, readers and
  documentation follow the edge), and such an edge is one refactor away from a run-time one.

What does not count: the implicit import of a parent package (importing ``posenc.a.b`` runs
``posenc/a/__init__.py`` first; a package's ``__init__`` re-exporting its submodules is the
normal layout, not a cycle), and imports built from strings (``importlib``), which the
package does not use for its own modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "posenc"


def package_modules(source: Path = SOURCE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for path in sorted((source / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """``(target, name)`` for each module an import statement names; ``name`` is a submodule
    candidate of ``target`` or ``""``."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, ""
    elif isinstance(node, ast.ImportFrom):
        target = node.module or ""
        if node.level:  # relative: from the module's package, one level up per extra dot
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = package[: len(package) - node.level + 1]
            target = ".".join([*base, target] if target else base)
        for alias in node.names:
            yield target, alias.name


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """``module -> the package modules it imports`` (deferred and TYPE_CHECKING ones too)."""

    def owner(name: str) -> str | None:  # the module a dotted name lies in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(tree):
            for target, name in _imported(node, module, is_package):
                if target != PACKAGE and not target.startswith(PACKAGE + "."):
                    continue
                submodule = f"{target}.{name}"
                found = submodule if submodule in modules else owner(target)
                if found is not None:
                    targets.add(found)
        targets.discard(module)
        graph[module] = targets
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module
    (Tarjan's algorithm), as ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(sorted(c)[0], c, graph) for c in components]


def _cycle_in(start: str, component: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest path from ``start`` back to itself inside ``component`` (breadth first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]  # back from node to start
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is in no cycle")  # pragma: no cover


GRAPH = import_graph(package_modules())


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "import posenc.b\n",
        "b.py": "def f():\n    from posenc.sub import c\n",
        "sub/__init__.py": "from posenc.sub.c import X\n",
        "sub/c.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from posenc.a import Y\n"
            "from . import d\nfrom .d import Z\nimport torch\n"
        ),
        "sub/d.py": "from ..b import f\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = import_graph(package_modules(tmp_path))
    assert graph == {
        "posenc": set(),
        "posenc.a": {"posenc.b"},
        "posenc.b": {"posenc.sub.c"},
        "posenc.sub": {"posenc.sub.c"},
        "posenc.sub.c": {"posenc.a", "posenc.sub.d"},
        "posenc.sub.d": {"posenc.b"},
    }
    found = cycles(graph)
    assert found == [["posenc.a", "posenc.b", "posenc.sub.c", "posenc.a"]]


def test_the_graph_covers_the_package() -> None:
    assert len(GRAPH) > 50
    assert "posenc.attention.cache" in GRAPH["posenc.attention.context"]
    assert "posenc.encoding.resolve" in GRAPH["posenc.segments.base"]  # a deferred import


def test_no_module_imports_one_that_imports_it_back() -> None:
    found = cycles(GRAPH)
    assert not found, "import cycles (one per set of modules that import each other):\n" + (
        "\n".join(" → ".join(c) for c in found)
    )


def test_the_package_loads_its_names_on_first_use() -> None:
    """``import posenc`` (what the ``posenc`` command runs first) imports no torch; every
    public name still resolves, to the object its module defines."""
    import importlib
    import subprocess
    import sys

    import posenc

    assert set(posenc.__all__) == set(posenc._EXPORTS)
    for name, module in posenc._EXPORTS.items():
        assert getattr(posenc, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        posenc.Nope  # noqa: B018
    probe = (
        "import sys, posenc, posenc.cli; posenc.cli.build_parser(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

"""The lab's layout rules: no module imports another module's private name, and nothing in
the machinery is keyed by an experiment's name (an experiment is its own file plus one
registry line)."""

from __future__ import annotations

import ast
from pathlib import Path

import posenc.lab
from posenc.lab.experiments import EXPERIMENTS

LAB = Path(posenc.lab.__file__).parent


def _modules() -> list[Path]:
    return sorted(LAB.rglob("*.py"))


def test_no_lab_module_imports_a_private_name_of_another() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("posenc"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                found += [f"{path.relative_to(LAB)}: {node.module}.{name}" for name in private]
    assert found == []


def test_the_machinery_names_no_experiment() -> None:
    """In the machinery (outside ``experiments/``, the data sources of ``data/`` and the
    demo, a composition of named experiments like the command line), no string literal
    (docstrings aside) is an experiment's name: sections, figures and claims come from the
    registry."""
    found = []
    for path in _modules():
        if {"experiments", "data"} & set(path.relative_to(LAB).parts) or path.name == "demo.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and node.value in EXPERIMENTS
                and id(node) not in docstrings
            ):
                found.append(f"{path.relative_to(LAB)}:{node.lineno}: {node.value!r}")
    assert found == []

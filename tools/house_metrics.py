"""Measures of the package's floor plan (the before/after table of the restructuring).

Run from the repository root: ``python tools/house_metrics.py [--json]``. It reads the source
as text and syntax trees; it imports nothing from the package.

* loose top-level modules: ``src/posenc/*.py`` other than ``__init__.py``;
* private cross-module imports: ``from posenc.x import _name`` (a private name of another
  module), or a private module ``posenc.pkg._mod`` imported from outside ``posenc.pkg`` (a
  package's private modules, such as its ``_common.py``, serve the package and its
  subpackages);
* probes in attention: ``getattr``, ``hasattr``, ``callable(getattr(...))`` /
  ``callable(obj.member)`` and ``inspect.`` calls under ``src/posenc/attention/``;
* files over 500 lines, and the largest functions.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "posenc"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def inside(package: str, parent: str) -> bool:
    """True when ``package`` is ``parent`` or one of its subpackages (a package's private
    modules, its ``_common.py``, serve the package and everything below it)."""
    return package == parent or package.startswith(parent + ".")


def private_imports(path: Path, tree: ast.AST) -> list[str]:
    found = []
    here = package_of(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if not module.startswith("posenc"):
                continue
            names = [a.name for a in node.names if private(a.name)]
            # ``from posenc.pkg import _common`` inside posenc.pkg is the package's own helper
            found += [f"{module}.{n}" for n in names if not inside(here, module)]
            parts = module.split(".")
            for i, part in enumerate(parts):
                if private(part) and not inside(here, ".".join(parts[:i])):
                    found.append(module)
                    break
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "posenc":
                    continue
                for i, part in enumerate(parts):
                    if private(part) and not inside(here, ".".join(parts[:i])):
                        found.append(alias.name)
                        break
    return found


def probes(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr"):
                count += 1
            elif isinstance(func, ast.Name) and func.id == "callable":
                # callable(getattr(obj, "name", None)): a probe for a member; callable(x) of
                # a user's argument (a mask_mod) is a type check of input, not a probe
                argument = node.args[0] if node.args else None
                if isinstance(argument, ast.Call | ast.Attribute):
                    count += 1
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "inspect"
            ):
                count += 1
    return count


def functions(path: Path, tree: ast.AST) -> list[tuple[int, str]]:
    rows = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            rows.append((length, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return rows


def measure() -> dict[str, object]:
    files = sorted(PACKAGE.rglob("*.py"))
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    imports: list[str] = []
    attention_probes = 0
    long_files = []
    funcs: list[tuple[int, str]] = []
    for path in files:
        text = path.read_text()
        tree = ast.parse(text)
        imports += [f"{path.relative_to(ROOT)}: {m}" for m in private_imports(path, tree)]
        if "attention" in path.relative_to(PACKAGE).parts[:1]:
            attention_probes += probes(tree)
        lines = text.count("\n")
        if lines > 500:
            long_files.append(f"{path.relative_to(ROOT)} ({lines})")
        funcs += functions(path, tree)
    funcs.sort(reverse=True)
    return {
        "source files": len(files),
        "source lines": sum(p.read_text().count("\n") for p in files),
        "loose top-level modules": len(loose),
        "private cross-module imports": len(imports),
        "probes in attention": attention_probes,
        "files over 500 lines": len(long_files),
        "largest functions": [f"{n} lines {where}" for n, where in funcs[:5]],
        "_loose": loose,
        "_imports": imports,
        "_long": long_files,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--details", action="store_true", help="list every finding")
    args = parser.parse_args()
    result = measure()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        if key.startswith("_") and not args.details:
            continue
        if isinstance(value, list):
            print(f"{key}:")
            for item in value:
                print(f"  {item}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()

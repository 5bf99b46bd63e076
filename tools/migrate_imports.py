"""Rewrite a code base's posenc imports and dotted names to the paths of this release.

Usage: ``python tools/migrate_imports.py PATH [PATH ...]`` (files or folders; ``.py``,
``.md``, ``.rst``, ``.toml``, ``.txt``, ``Makefile``). It reads the tables of moved modules
and names in :mod:`posenc._moved` and rewrites, in place:

* a moved module's dotted path wherever it stands (``posenc.model`` ->
  ``posenc.models``, ``posenc.bias.shaw`` -> ``posenc.contextual.shaw``);
* ``from OLD_PACKAGE import a, b`` whose names moved to other packages, split into one import
  per package (``from posenc.bias import AlibiBias, ShawRelative`` -> two imports);
* ``OLD_PACKAGE.Name`` for a moved name (``posenc.bias.ShawRelative``).

Run ``ruff check --select I --fix`` afterwards to sort the imports it split. Files it changes
are printed; ``--check`` prints them without writing (exit 1 when any would change).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

#: a file holding this text is left as it is (the tables themselves, the changelog, the
#: tests of the old paths)
SKIP_MARKER = "posenc-migrate: skip"
SUFFIXES = {".py", ".md", ".rst", ".toml", ".txt", ".cfg", ".ini"}


def _tables() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from posenc._moved import MOVED_MODULES, MOVED_NAMES

    return MOVED_MODULES, MOVED_NAMES


def _module_pattern(old: str) -> re.Pattern[str]:
    # the dotted path as a whole word: not preceded by a name character or dot, not
    # followed by a name character (a following ".attr" is kept and carried over)
    return re.compile(rf"(?<![\w.]){re.escape(old)}(?!\w)")


_FROM = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<package>[\w.]+) import "
    r"(?:\((?P<group>[^)]*)\)|(?P<line>[^\n(]+?))[ \t]*$",
    re.MULTILINE,
)


def _split_from_imports(text: str, names: dict[str, dict[str, str]]) -> str:
    def replace(match: re.Match[str]) -> str:
        package = match["package"]
        moved = names.get(package)
        if not moved:
            return match[0]
        body = match["group"] if match["group"] is not None else match["line"]
        items = [item.strip() for item in body.replace("\n", ",").split(",")]
        items = [item.split("#")[0].strip() for item in items]
        items = [item for item in items if item]
        groups: dict[str, list[str]] = {}
        for item in items:
            name = item.split(" as ")[0].strip()
            groups.setdefault(moved.get(name, package), []).append(item)
        if list(groups) == [package]:
            return match[0]
        indent = match["indent"]
        return "\n".join(
            f"{indent}from {target} import {', '.join(group)}" for target, group in groups.items()
        )

    return _FROM.sub(replace, text)


def migrate(text: str, modules: dict[str, str], names: dict[str, dict[str, str]]) -> str:
    """``text`` with every old path of the tables rewritten (idempotent)."""
    text = _split_from_imports(text, names)
    for package, moved in names.items():
        for name, target in moved.items():
            text = _module_pattern(f"{package}.{name}").sub(f"{target}.{name}", text)
    for old in sorted(modules, key=len, reverse=True):
        text = _module_pattern(old).sub(modules[old], text)
    return text


def files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file()
                and (p.suffix in SUFFIXES or p.name == "Makefile")
                and not any(part.startswith(".") for part in p.parts)
            ]
        else:
            found.append(path)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="files or folders to rewrite")
    parser.add_argument("--check", action="store_true", help="report only; exit 1 on changes")
    args = parser.parse_args()
    modules, names = _tables()
    changed = []
    for path in files(args.paths):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if SKIP_MARKER in text:
            continue
        new = migrate(text, modules, names)
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new)
    for path in changed:
        print(path)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Old import paths keep working, with a DeprecationWarning (posenc._moved, CHANGELOG.md).

posenc-migrate: skip (these tests name the old paths on purpose)
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from posenc._moved import MOVED_MODULES, MOVED_NAMES


def test_each_old_module_path_warns_once_at_its_first_import() -> None:
    # a fresh interpreter: each old path warns at its first import
    code = (
        "import importlib, warnings\n"
        "from posenc._moved import MOVED_MODULES\n"
        "for old, new in sorted(MOVED_MODULES.items()):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        importlib.import_module(old)\n"
        "    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "    print(old, '|', ' / '.join(messages))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = dict(line.split(" | ", 1) for line in out.stdout.splitlines())
    assert set(lines) == set(MOVED_MODULES)
    for old, new in MOVED_MODULES.items():
        assert lines[old].startswith(f"{old} moved to {new}; import from {new}"), lines[old]


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_old_module_path_gives_the_new_modules_names(old: str) -> None:
    new = importlib.import_module(MOVED_MODULES[old])
    public = getattr(new, "__all__", None) or [n for n in vars(new) if not n.startswith("_")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(old)
    assert public
    for name in public:
        assert getattr(module, name) is getattr(new, name), name


@pytest.mark.parametrize(
    ("package", "name"), [(p, n) for p, names in MOVED_NAMES.items() for n in sorted(names)]
)
def test_a_moved_name_resolves_from_its_old_package_with_a_warning(package: str, name: str) -> None:
    old = importlib.import_module(package)
    new = importlib.import_module(MOVED_NAMES[package][name])
    with pytest.warns(DeprecationWarning, match=rf"{package}\.{name} moved to"):
        value = getattr(old, name)
    assert value is getattr(new, name)


def test_an_unknown_name_of_an_old_package_is_an_attribute_error() -> None:
    import posenc.bias

    with pytest.raises(AttributeError, match="no attribute 'NoSuchBias'"):
        posenc.bias.NoSuchBias  # noqa: B018


def test_the_finder_serves_old_paths_only() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("posenc.no_such_module")

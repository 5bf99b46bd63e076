"""Every ```python block of README.md and docs/*.md runs as written.

A block that is not meant to run (a fragment of a larger program, a download) is preceded by
a visible HTML comment ``<!-- not run: REASON -->``; the test keeps the list of those short
and checks each gives its reason. Each document runs in one fresh process (torch imports
once), each of its blocks in a fresh namespace, in a temporary working folder; nothing
downloads: the Hugging Face blocks build tiny configs locally.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.S)

# one process per document: each block in a fresh namespace, a failure named by its line
_RUNNER = """
import sys, traceback
blocks = eval(sys.stdin.read())
for line, code in blocks:
    try:
        exec(compile(code, f"{sys.argv[1]}:{line}", "exec"), {"__name__": "__main__"})
    except BaseException:
        traceback.print_exc()
        print(f"FAILED block at {sys.argv[1]}:{line}", file=sys.stderr)
        sys.exit(1)
"""


def python_blocks(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, code, reason)`` of every ```python block; ``reason`` of a not-run block."""
    text = path.read_text()
    return [
        (text.count("\n", 0, m.start("code")), m.group("code"), m.group("reason"))
        for m in _BLOCK.finditer(text)
    ]


def test_the_snippets_are_found_and_few_are_left_out() -> None:
    blocks = [block for path in DOCUMENTS for block in python_blocks(path)]
    fenced = sum(path.read_text().count("```python\n") for path in DOCUMENTS)
    assert len(blocks) == fenced >= 30
    skipped = [(line, reason) for line, _, reason in blocks if reason is not None]
    assert all(reason.strip() for _, reason in skipped)
    assert len(skipped) <= len(blocks) // 4, skipped


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: path.name)
def test_every_snippet_runs(path: Path, tmp_path: Path) -> None:
    blocks = [(line, code) for line, code, reason in python_blocks(path) if reason is None]
    if not blocks:
        pytest.skip(f"{path.name} has no runnable python block")
    pytest.importorskip("matplotlib")
    run = subprocess.run(
        [sys.executable, "-c", _RUNNER, path.relative_to(ROOT).as_posix()],
        input=repr(blocks),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]

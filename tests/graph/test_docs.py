"""docs/graph.md's examples are all run by tests/test_docs_snippets.py: none is left out."""

from __future__ import annotations

from tests.test_docs_snippets import ROOT, python_blocks


def test_every_graph_doc_block_is_run() -> None:
    blocks = python_blocks(ROOT / "docs" / "graph.md")
    assert len(blocks) >= 4
    assert [(line, reason) for line, _, reason in blocks if reason is not None] == []

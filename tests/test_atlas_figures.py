"""tools/atlas_figures.py: docs/img's atlas figures are drawn from docs/results.md §9's tables,
mean ± std as written there, with the section's chance or "always stay" reference."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("matplotlib")

from tools import atlas_figures

DOC = """# Results

### 9.9 Toy

Trained at 4, 3 seeds; chance 0.25; the "always stay" baseline is 0.5 (n4), 0.25 (n8).

| layout | encoding | n4 (trained) | n8 |
|---|---|---|---|
| flat | rope | **0.900 ± 0.010** | 0.500 ± 0.200 |
| flat | learned (interpolated) | 0.800 ± 0.000 | 0.300 ± 0.100 |

| other | table | x (trained) |
|---|---|---|
| a | b | 0.1 ± 0.1 |

### 9.10 Next
"""


def test_the_first_table_of_a_section_becomes_the_summary() -> None:
    text = atlas_figures.section_text(DOC, "### 9.9 Toy")
    assert "9.10" not in text and "other" in text
    header, body = atlas_figures.first_table(text)
    summary = atlas_figures.summary_from_table(header, body, atlas_figures.seeds_of(text))
    assert summary.conditions == {0: "n4 (trained)", 1: "n8"}
    assert [(s.encoding, s.label, s.group) for s in summary.series] == [
        ("rope", "flat · rope", "flat"),
        ("learned", "flat · learned (interpolated)", "flat"),
    ]
    got = torch.tensor([[s.points[c] for c in (0, 1)] for s in summary.series])
    want = torch.tensor([[[0.9, 0.01, 3], [0.5, 0.2, 3]], [[0.8, 0.0, 3], [0.3, 0.1, 3]]])
    assert_close(got, want.to(got.dtype))
    conditions = dict(summary.conditions)
    assert atlas_figures.references(text, "chance", conditions) == {0: 0.25, 1: 0.25}
    assert atlas_figures.references(text, "always stay", conditions) == {0: 0.5, 1: 0.25}


def test_malformed_sections_are_refused_naming_what_is_missing() -> None:
    with pytest.raises(ValueError, match="one heading"):
        atlas_figures.section_text(DOC, "### 9.8 Missing")
    with pytest.raises(ValueError, match="no Markdown table"):
        atlas_figures.first_table("no table")
    with pytest.raises(ValueError, match="'mean ± std'"):
        atlas_figures.summary_from_table(["encoding", "a (trained)"], [["rope", "0.9"]], 3)
    with pytest.raises(ValueError, match="trained"):
        atlas_figures.summary_from_table(["encoding", "a"], [["rope", "0.9 ± 0.1"]], 3)
    with pytest.raises(ValueError, match="seed count"):
        atlas_figures.seeds_of("3 seeds here, 2 seeds there")
    with pytest.raises(ValueError, match="always stay"):
        atlas_figures.references("chance 0.1", "always stay", {0: "a (trained)"})


def test_the_documented_tables_give_the_figures_of_docs_img() -> None:
    document = atlas_figures.RESULTS.read_text()
    shapes = []
    for section in atlas_figures.SECTIONS:
        assert (atlas_figures.ROOT / "docs" / "img" / section.filename).is_file()
        assert f"img/{section.filename}" in document
        fig = atlas_figures.draw(document, section)
        panels = [ax for ax in fig.axes if ax.containers]
        shapes.append((len(panels), len(panels[0].containers)))
    assert shapes == [(3, 11), (4, 10), (4, 6)]  # audio, video, VLA: conditions × rows

"""The atlas figure on synthetic rows: a panel per test condition, a row per encoding, a dot at
the mean and a bar of ± one sample std over seeds, nothing joining the conditions, and a
caption that says what the dot, the bar and the dashed line are."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("matplotlib")

from posenc.lab.atlas import (
    AtlasSeries,
    AtlasSummary,
    atlas_figure,
    atlas_summary,
    draw_atlas,
)
from posenc.viz.base import encoding_color

ACCURACY = {  # (layout, encoding) -> per seed, per condition
    ("frames", "rope"): [(0.9, 0.5, 0.4), (0.8, 0.7, 0.2), (0.7, 0.6, 0.3)],
    ("frames", "none"): [(0.6, 0.6, 0.5), (0.4, 0.6, 0.5), (0.5, 0.6, 0.5)],
    ("patches", "rope_axial"): [(1.0, 0.9, 0.1), (0.9, 0.8, 0.3), (0.8, 0.7, 0.2)],
}
LABELS = ("1 s", "2 s", "4 s")


def _rows(layouts: bool = True) -> list[dict[str, Any]]:
    rows = []
    for (layout, encoding), seeds in ACCURACY.items():
        for seed, values in enumerate(seeds):
            for condition, value in enumerate(values):
                row = {
                    "experiment": "audio",
                    "encoding": encoding,
                    "seed": seed,
                    "condition": condition,
                    "condition_label": LABELS[condition],
                    "in_distribution": condition == 0,
                    "accuracy": value,
                }
                rows.append({**row, "layout": layout} if layouts else row)
    return rows


def _cells(ax: Any) -> list[tuple[str, float, float, float]]:
    """(label, mean, y, half bar width) of each error bar drawn on ``ax``."""
    cells = []
    for container in ax.containers:
        line, _, (bar,) = container.lines
        x, y = line.get_xdata()[0], line.get_ydata()[0]
        (segment,) = bar.get_segments()
        cells.append((container.get_label(), float(x), float(y), float(segment[1][0] - x)))
    return cells


def _caption(fig: Any) -> str:
    # Figure.get_supxlabel is matplotlib 3.8's; the plot extra allows 3.7
    return fig._supxlabel.get_text()


def test_the_summary_gives_mean_and_sample_std_per_condition() -> None:
    summary = atlas_summary([*_rows(), {"experiment": "video"}], "audio")
    assert summary.conditions == {0: "1 s (trained)", 1: "2 s", 2: "4 s"}
    assert [s.label for s in summary.series] == [
        "frames · rope",
        "frames · none",
        "patches · rope_axial",
    ]
    assert [s.group for s in summary.series] == ["frames", "frames", "patches"]
    rope = summary.series[0]
    got = torch.tensor([rope.points[c][:2] for c in range(3)], dtype=torch.float64)
    values = torch.tensor(ACCURACY[("frames", "rope")], dtype=torch.float64)  # (seeds, conditions)
    want = torch.stack([values.mean(0), values.std(0)], dim=1)  # std with n − 1, as the table
    assert_close(got, want)
    assert {rope.points[c][2] for c in range(3)} == {3}
    with pytest.raises(ValueError, match="'vla'"):
        atlas_summary(_rows(), "vla")


def test_each_condition_is_a_panel_of_dots_with_std_bars_and_no_joining_lines() -> None:
    fig = atlas_figure(_rows(), "audio", "keyword spotting")
    axes = [ax for ax in fig.axes if ax.containers]
    assert [ax.get_title() for ax in axes] == ["1 s (trained)", "2 s", "4 s"]
    summary = atlas_summary(_rows(), "audio")
    for condition, ax in enumerate(axes):
        cells = _cells(ax)
        assert [label for label, *_ in cells] == [s.label for s in summary.series]
        got = torch.tensor([[mean, y, half] for _, mean, y, half in cells], dtype=torch.float64)
        want = torch.tensor(
            [[s.points[condition][0], row, s.points[condition][1]] for row, s in
             enumerate(summary.series)],
            dtype=torch.float64,
        )  # fmt: skip
        assert_close(got, want)
        for container, series in zip(ax.containers, summary.series, strict=True):
            line = container.lines[0]
            assert line.get_linestyle() == "None"  # a marker, no line between conditions
            assert line.get_color() == encoding_color(series.encoding)
        # no drawn line has more than one point (the layout separator spans the panel)
        data_lines = [line for line in ax.get_lines() if line.get_linestyle() != "None"]
        assert [list(line.get_ydata()) for line in data_lines] == [[1.5, 1.5]]
    assert len({ax.get_xlim() for ax in axes}) == 1  # one accuracy axis
    assert [t.get_text() for t in axes[0].get_yticklabels()] == [s.label for s in summary.series]
    assert fig.get_suptitle() == "keyword spotting"
    caption = _caption(fig)
    assert caption == "dot: mean over 3 seeds; bar: ± 1 sample std over the seeds"


def test_baselines_draw_a_dashed_line_per_panel_named_in_the_caption() -> None:
    summary = atlas_summary(_rows(layouts=False), "audio")
    fig = draw_atlas(summary, "t", baselines={0: 0.7, 1: 0.6, 2: 0.5}, baseline_label="stay")
    dashed = [
        [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
        for ax in fig.axes
        if ax.containers
    ]
    assert dashed == [[0.7], [0.6], [0.5]]
    assert _caption(fig).endswith("; dashed line: stay")
    fig = draw_atlas(
        summary, "t", baselines=dict.fromkeys(range(3), 0.125), baseline_label="chance"
    )
    assert _caption(fig).endswith("; dashed line: chance (0.125)")
    low, _ = fig.axes[0].get_xlim()
    assert low < 0.125  # the reference is inside the axis
    with pytest.raises(ValueError, match=r"conditions \[5\]"):
        draw_atlas(summary, "t", baselines={5: 0.1})
    with pytest.raises(ValueError, match="no series"):
        draw_atlas(AtlasSummary({0: "a"}, ()), "t")


def test_the_caption_counts_unequal_seeds_and_says_one_seed_has_no_bar() -> None:
    points = {0: (0.5, 0.0, 1), 1: (0.4, 0.1, 3)}
    summary = AtlasSummary({0: "a", 1: "b"}, (AtlasSeries("rope", "rope", points),))
    caption = _caption(draw_atlas(summary, "t"))
    assert (
        caption
        == "dot: mean over 1–3 seeds; bar: ± 1 sample std over the seeds (none for one seed)"
    )

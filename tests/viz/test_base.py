"""What every figure shares: one colour per encoding, log ticks with plain labels, labels at
the ends of lines that never overlap; and the helpers other figure tests read figures with."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from posenc.lab.experiments import extend, longctx, temporal_links, vit
from posenc.lab.graph_models import GRAPH_ENCODINGS
from posenc.registry import list_encodings
from posenc.viz.base import (
    ENCODING_COLORS,
    encoding_color,
    label_line_ends,
    linear_ticks,
    log_ticks,
    new_figure,
    set_log_ticks,
)

# ------------------------------------------------------------ helpers for figure tests


def overlaps(texts: list[Any], gap: float = 3.0) -> list[tuple[str, str]]:
    """Pairs of the visible, non-empty texts whose drawn boxes come closer than ``gap``
    pixels (after a draw): labels that touch read as one ("1000015000")."""
    shown = [t for t in texts if t.get_visible() and t.get_text()]
    if not shown:
        return []
    figure = shown[0].get_figure()
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer).padded(gap / 2)) for t in shown]
    return [(a, b) for (a, box_a), (b, box_b) in combinations(boxes, 2) if box_a.overlaps(box_b)]


def tick_label_overlaps(figure: Any) -> list[tuple[str, str]]:
    """Overlapping tick labels of any axis of ``figure`` (x and y apart, per axes)."""
    found = []
    for ax in figure.axes:
        found += overlaps(ax.get_xticklabels())
        found += overlaps(ax.get_yticklabels())
    return found


def colorbars(figure: Any) -> list[Any]:
    """The colour bars of ``figure`` (each bar's axes holds its ``Colorbar``)."""
    found = (getattr(ax, "_colorbar", None) for ax in figure.axes)
    return [bar for bar in found if bar is not None]


def colorbar_labels(figure: Any) -> list[str]:
    """The label of each colour bar of ``figure`` (vertical bars: the y label)."""
    labels = []
    for bar in colorbars(figure):
        vertical = bar.orientation == "vertical"
        labels.append(bar.ax.get_ylabel() if vertical else bar.ax.get_xlabel())
    return labels


def line_colors(ax: Any) -> dict[str, str]:
    """Labelled line -> its colour as a hex string."""
    from matplotlib.colors import to_hex

    return {
        line.get_label(): to_hex(line.get_color())
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


# ------------------------------------------------------------ colours


def test_every_registered_encoding_has_its_own_colour() -> None:
    specs = list_encodings()
    assert {spec.name for spec in specs} <= set(ENCODING_COLORS)
    for grid in (False, True):  # grid encodings are drawn apart from the 1D ones
        names = [spec.name for spec in specs if spec.needs_grid is grid]
        colours = [encoding_color(name) for name in names]
        assert len(set(colours)) == len(colours), dict(zip(names, colours, strict=True))


@pytest.mark.parametrize(
    "names",
    [
        ("nope", "sinusoidal", "learned", "rope", "alibi", "t5"),  # extrapolate, generalize
        extend.DEFAULT_METHODS,
        longctx.DEFAULT_METHODS,
        ("rope", "pi", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope", "proportional"),
        vit.DEFAULT_ENCODINGS,
        GRAPH_ENCODINGS,
        temporal_links.ENCODINGS,
    ],
    ids=["extrapolate", "extend", "longctx", "scalings", "vit", "graph", "temporal"],
)
def test_names_drawn_together_have_different_colours(names: tuple[str, ...]) -> None:
    colours = [encoding_color(name) for name in names]
    assert len(set(colours)) == len(names), dict(zip(names, colours, strict=True))


def test_an_alias_shares_its_methods_colour_and_unknown_names_are_stable() -> None:
    assert encoding_color("pi") == encoding_color("linear")
    assert encoding_color("learned_1d") == encoding_color("learned_1d")  # a hash, not hash()
    assert encoding_color("learned_1d").startswith("#")
    with pytest.raises(ValueError, match="name"):
        encoding_color(3)  # type: ignore[arg-type]


# ------------------------------------------------------------ log ticks


def test_log_ticks_are_round_values_inside_the_range_and_thinned() -> None:
    assert log_ticks(6.5, 29.0) == [7.0, 8.0, 9.0, 10.0, 20.0]
    assert log_ticks(1.0, 8.0) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert log_ticks(2.0, 200.0) == [2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 200.0]
    assert log_ticks(2.0, 500.0) == [2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]
    assert log_ticks(1.0, 1000.0) == [1.0, 10.0, 100.0, 1000.0]
    wide = log_ticks(1e-3, 1e9)
    assert len(wide) <= 9 and wide[0] >= 1e-3 and wide[-1] <= 1e9
    with pytest.raises(ValueError, match="low and high"):
        log_ticks(0.0, 1.0)
    with pytest.raises(ValueError, match="most"):
        log_ticks(1.0, 2.0, most=1)


def test_set_log_ticks_puts_plain_labels_at_the_given_values() -> None:
    fig = new_figure(figsize=(5, 3))
    ax = fig.add_subplot()
    ax.plot([64, 128, 512], [3.0, 7.0, 25.0])
    set_log_ticks(ax, "x", [64, 128, 512])
    set_log_ticks(ax, "y")
    set_log_ticks(ax, "x", [64, 128, 512], ["a", "b", "c"])
    fig.canvas.draw()
    assert list(ax.get_xticks()) == [64, 128, 512]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "3",
        "4",
        "5",
        "6",
        "7",
        "8",
        "9",
        "10",
        "20",
    ]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    set_log_ticks(ax, "y", [0.5, 1e6])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0.5", "1000000"]
    assert not any(t.get_text() for t in ax.get_yticklabels(minor=True))
    with pytest.raises(ValueError, match="axis"):
        set_log_ticks(ax, "z")
    with pytest.raises(ValueError, match="labels"):
        set_log_ticks(ax, "x", [1, 2], ["one"])


def test_a_log_axis_narrower_than_a_decade_gets_several_linear_ticks() -> None:
    # the README example's perplexities: a 0.3 % range had only its two ends labelled
    assert log_ticks(17.01, 17.06) == [17.01, 17.02, 17.03, 17.04, 17.05, 17.06]
    assert log_ticks(16.93, 17.2) == [16.95, 17.0, 17.05, 17.1, 17.15, 17.2]
    assert log_ticks(8.0, 12.0) == [8.0, 9.0, 10.0, 11.0, 12.0]  # not 8, 9, 10 of 8..12
    assert log_ticks(0.9, 1.1) == [0.9, 0.95, 1.0, 1.05, 1.1]
    assert log_ticks(6.5, 29.0) == [7.0, 8.0, 9.0, 10.0, 20.0]  # four log ticks: kept
    assert log_ticks(5.0, 5.0) == [5.0]
    assert linear_ticks(100.0, 150.0) == [100.0, 110.0, 120.0, 130.0, 140.0, 150.0]
    assert linear_ticks(17.0501, 17.0503) == [17.0501, 17.05015, 17.0502, 17.05025, 17.0503]
    assert linear_ticks(0.0, 1.0, most=4) == [0.0, 0.5, 1.0]  # five quarters would be too many
    with pytest.raises(ValueError, match="low and high"):
        linear_ticks(1.0, 1.0)
    with pytest.raises(ValueError, match="most"):
        linear_ticks(1.0, 2.0, most=3)


def test_the_readme_examples_perplexity_plot_labels_several_distinct_ticks() -> None:
    from posenc.lab.experiments.extrapolate import loss_vs_length

    ppl = {"nope": [17.06, 17.04, 17.01], "rope": [17.03, 17.2, 17.4], "alibi": [16.98, 17.0, 17.0]}
    rows = [
        {"experiment": "extrapolate", "encoding": name, "train_len": 64, "eval_len": 64 * m,
         "ppl": value}
        for name, values in ppl.items()
        for m, value in zip((1, 2, 4), values, strict=True)
    ]  # fmt: skip
    fig = loss_vs_length(rows)
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["17", "17.1", "17.2", "17.3", "17.4"]
    assert [float(text) for text in labels] == list(ax.get_yticks())
    assert ax.get_yscale() == "log"


# ------------------------------------------------------------ labels at line ends


def test_end_labels_name_each_line_in_its_colour_without_overlapping() -> None:
    fig = new_figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    for index, name in enumerate(["rope", "alibi", "t5", "nope"]):  # three end close together
        ax.plot([1, 2, 4], [1.0, 1.5, 7.0 + 0.01 * index if index < 3 else 2.0], label=name,
                color=encoding_color(name))  # fmt: skip
    ax.plot([1], [5.0], label="learned", color=encoding_color("learned"))  # ends early
    texts = label_line_ends(ax)
    assert sorted(t.get_text() for t in texts) == ["alibi", "nope", "rope", "t5"]
    for text in texts:
        assert text.get_color() == encoding_color(text.get_text())
    assert overlaps(texts) == []
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["learned"]

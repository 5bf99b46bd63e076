"""The lab's figures read like a paper's: each encoding one colour on every figure of a page,
ticks at the evaluated lengths with plain labels, labelled colour bars, no overlapping labels.

The properties are read from the figure objects (line colours, tick texts, colour bars, the
drawn boxes of texts), from small hand-made rows.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("matplotlib")

from posenc.lab import figures
from posenc.lab.experiments import extend, extrapolate, generalize, temporal_links, vit
from posenc.viz.base import encoding_color
from tests.viz.test_base import colorbar_labels, line_colors, overlaps, tick_label_overlaps

ENCODINGS = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5")
MULTIPLIERS = (1.0, 1.25, 2.0, 4.0, 8.0)
# perplexity at each multiplier: ALiBi, RoPE and T5 close together near 7, learned at 1x only
PPL = {
    "nope": (10.1, 10.3, 10.9, 11.9, 12.7),
    "sinusoidal": (7.9, 9.7, 15.6, 24.0, 29.0),
    "learned": (8.7,),
    "rope": (6.7, 6.7, 7.2, 13.3, 19.0),
    "alibi": (7.7, 7.7, 7.6, 7.6, 7.6),
    "t5": (6.9, 6.95, 7.5, 11.5, 7.65),
}


def extrapolate_rows(seeds: int = 2) -> list[dict[str, Any]]:
    rows = []
    for encoding, values in PPL.items():
        for seed in range(seeds):
            for multiplier, ppl in zip(MULTIPLIERS, values, strict=False):
                rows.append({
                    "experiment": "extrapolate", "encoding": encoding, "seed": seed,
                    "train_len": 64, "eval_len": round(64 * multiplier), "ppl": ppl + 0.1 * seed,
                })  # fmt: skip
    return rows


def curves() -> dict[str, list[dict[str, Any]]]:
    return {
        f"{encoding}/seed{seed}": [
            {"kind": "train", "step": step, "loss": 3.0 - 0.001 * step - 0.01 * index}
            for step in (50, 100, 200)
        ]
        + [{"kind": "eval", "step": 200, "metrics": {"val_loss": 2.0 + 0.01 * index}}]
        for index, encoding in enumerate(ENCODINGS)
        for seed in (0, 1)
    }


def test_each_encoding_has_one_colour_on_both_figures_of_the_page() -> None:
    loss = extrapolate.loss_vs_length(extrapolate_rows())
    training = figures.training_curves(curves())
    on_loss = line_colors(loss.axes[0])
    assert set(on_loss) == set(ENCODINGS)
    for ax in training.axes:
        for label, colour in line_colors(ax).items():
            assert colour == on_loss[label] == encoding_color(label), label
    legend = training.legends[0]
    shown = {t.get_text(): t for t in legend.get_texts()}
    assert set(shown) == set(ENCODINGS)  # one entry per encoding, not per seed


def test_loss_vs_length_ticks_at_the_evaluated_multipliers_with_plain_labels() -> None:
    fig = extrapolate.loss_vs_length(extrapolate_rows())
    (ax,) = fig.axes
    fig.canvas.draw()
    assert list(ax.get_xticks()) == list(MULTIPLIERS)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1×", "1.25×", "2×", "4×", "8×"]
    ys = [t.get_text() for t in ax.get_yticklabels()]
    assert ys == ["7", "8", "9", "10", "20"]  # labels where ALiBi, RoPE and T5 sit
    assert not any(t.get_text() for t in ax.get_xticklabels(minor=True))
    assert not any(t.get_text() for t in ax.get_yticklabels(minor=True))
    assert tick_label_overlaps(fig) == []


def test_loss_vs_length_names_each_line_at_its_end_without_overlaps() -> None:
    fig = extrapolate.loss_vs_length(extrapolate_rows())
    (ax,) = fig.axes
    ends = [t for t in ax.texts if t.get_text() in ENCODINGS]
    assert sorted(t.get_text() for t in ends) == sorted(set(ENCODINGS) - {"learned"})
    assert all(t.get_color() == encoding_color(t.get_text()) for t in ends)
    assert overlaps(ends) == []  # t5, alibi and the others end within 0.1 of each other
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["learned"]  # ends at 1x


def test_extension_curves_tick_at_the_evaluated_lengths_in_the_methods_colours() -> None:
    lengths = (64, 128, 256, 512, 1024, 2048)
    rows = [
        {"experiment": "extend", "method": method, "stage": stage, "eval_len": n,
         "ppl": 5.0 + index + n / 512}
        for index, method in enumerate(("rope", "pi", "yarn", "self_extend"))
        for stage in ("no_ft", "ft")
        for n in lengths
    ]  # fmt: skip
    fig = extend.extension_curves(rows)
    fig.canvas.draw()
    for ax in fig.axes:
        assert list(ax.get_xticks()) == list(lengths)
        assert [t.get_text() for t in ax.get_xticklabels()] == [str(n) for n in lengths]
        for label, colour in line_colors(ax).items():
            assert colour == encoding_color(label)
    assert tick_label_overlaps(fig) == []


def test_passkey_heatmaps_label_their_colour_bars() -> None:
    rows = [
        {"experiment": "passkey", "method": "rope", "stage": "ft", "depth": d,
         "context_len": n, "accuracy": 0.5}
        for d in (0.0, 0.5, 1.0)
        for n in (64, 128, 256)
    ]  # fmt: skip
    fig = extend.passkey_heatmaps(rows)
    assert colorbar_labels(fig) == ["passkey accuracy"]
    assert tick_label_overlaps(fig) == []


def test_task_and_separation_lines_take_their_encodings_colours() -> None:
    rows = [
        {"experiment": "tasks", "task": "copy", "encoding": encoding, "randomized": randomized,
         "length": n, "seq_acc": 0.5}
        for encoding in ("rope", "alibi")
        for randomized in (False, True)
        for n in (8, 16)
    ]  # fmt: skip
    (ax,) = generalize.accuracy_vs_length(rows).axes
    assert line_colors(ax) == {
        "rope": encoding_color("rope"), "rope (rand)": encoding_color("rope"),
        "alibi": encoding_color("alibi"), "alibi (rand)": encoding_color("alibi"),
    }  # fmt: skip
    traces = {
        f"{name}/seed0": [{"split": "test", "time": t, "separation": 0.1} for t in (1.0, 2.0)]
        for name in ("lstep", "none")
    }
    (ax,) = temporal_links.separation_over_time(traces).axes
    assert line_colors(ax) == {name: encoding_color(name) for name in ("lstep", "none")}


def test_bars_per_encoding_take_the_encodings_colours_and_labels_fit() -> None:
    from matplotlib.colors import to_hex

    names = ("none", "learned_1d", "sinusoidal_2d", "rope_2d")
    rows = [
        {"experiment": "vit", "encoding": name, "seed": seed, "accuracy": 0.9 + 0.01 * seed}
        for name in names
        for seed in (0, 1)
    ]
    fig = vit.vit_accuracy(rows)
    (ax,) = fig.axes
    assert [to_hex(bar.get_facecolor()[:3]) for bar in ax.patches] == [
        encoding_color(name) for name in names
    ]
    assert tick_label_overlaps(fig) == []

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


def test_extension_curves_tick_at_the_evaluated_multiples_in_the_methods_colours() -> None:
    lengths = (64, 128, 256, 512, 1024, 2048)
    rows = [
        {"experiment": "extend", "method": method, "stage": stage, "train_len": 64,
         "eval_len": n, "ppl": 5.0 + index + n / 512}
        for index, method in enumerate(("rope", "pi", "yarn", "self_extend"))
        for stage in ("no_ft", "ft")
        for n in lengths
    ]  # fmt: skip
    fig = extend.extension_curves(rows)
    fig.canvas.draw()
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert list(ax.get_xticks()) == [n / 64 for n in lengths]
        assert [t.get_text() for t in ax.get_xticklabels()] == [
            "1×",
            "2×",
            "4×",
            "8×",
            "16×",
            "32×",
        ]
        assert ax.get_xlabel() == figures.LENGTH_MULTIPLE_LABEL
        assert ax.get_title() in ("no fine-tuning", "after fine-tuning")
        for label, colour in line_colors(ax).items():
            assert colour == encoding_color(label)
        assert {t.get_text() for t in ax.get_legend().get_texts()} == {
            "rope", "pi", "yarn", "self_extend"
        }  # fmt: skip
    assert fig.axes[0].get_ylabel().startswith("perplexity")
    assert "T = 64" in fig.get_suptitle()
    assert tick_label_overlaps(fig) == []


# the demo's step 3: the extension methods and ReRoPE on the RoPE models of step 2
DEMO_METHODS = ("rope", "pi", "ntk", "dynamic_ntk", "yarn", "rerope")


def demo_extension_rows() -> list[dict[str, Any]]:
    return [
        {"experiment": "extend", "method": method, "stage": "zero", "seed": seed,
         "train_len": 64, "eval_len": round(64 * m), "ppl": 6.0 + index + m + 0.1 * seed}
        for index, method in enumerate(DEMO_METHODS)
        for seed in (0, 1)
        for m in MULTIPLIERS
    ]  # fmt: skip


def test_the_demos_two_length_figures_share_the_x_axis_and_no_colour_means_two_things() -> None:
    from posenc.lab.demo import EXTENSION_METHODS, SEGMENT_METHOD

    assert (*EXTENSION_METHODS, SEGMENT_METHOD) == DEMO_METHODS
    loss = extrapolate.loss_vs_length(extrapolate_rows())
    extension = extend.extension_curves(demo_extension_rows())
    (loss_ax,) = loss.axes
    (ext_ax,) = extension.axes
    for fig in (loss, extension):
        fig.canvas.draw()
    # the same x unit: multiples of T, the same ticks and label
    for ax in (loss_ax, ext_ax):
        assert list(ax.get_xticks()) == list(MULTIPLIERS)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1×", "1.25×", "2×", "4×", "8×"]
        assert ax.get_xlabel() == figures.LENGTH_MULTIPLE_LABEL
        assert ax.get_ylabel().startswith("perplexity (bytes")
    # a colour means one name across both figures (and the training curves)
    meaning: dict[str, str] = {}
    training = figures.training_curves(curves())
    drawn = [line_colors(loss_ax), line_colors(ext_ax)]
    drawn += [line_colors(ax) for ax in training.axes]
    for colours in drawn:
        for label, colour in colours.items():
            assert meaning.setdefault(colour, label) == label, (colour, label, meaning[colour])
    assert set(line_colors(ext_ax)) == set(DEMO_METHODS)
    assert len(meaning) == len(set(ENCODINGS) | set(DEMO_METHODS))
    # each readable on its own: a title, and a name for every line
    assert (
        loss_ax.get_title().startswith("Train short, test long") and "T = 64" in loss_ax.get_title()
    )
    assert "T = 64" in extension.get_suptitle() and ext_ax.get_title() == "no fine-tuning"
    assert {t.get_text() for t in ext_ax.get_legend().get_texts()} == set(DEMO_METHODS)
    named = {t.get_text() for t in loss_ax.texts} | {
        t.get_text() for t in loss_ax.get_legend().get_texts()
    }
    assert named == set(ENCODINGS)


def test_extension_methods_have_colours_no_sequence_encoding_has() -> None:
    from posenc.registry import list_encodings

    encodings = {spec.name for spec in list_encodings() if not spec.needs_grid}
    taken = {encoding_color(name): name for name in encodings - {"rope", "rerope"}}
    methods = ("pi", "linear", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope", "proportional")
    for method in (*methods, "rerope"):
        assert encoding_color(method) not in taken, (method, taken.get(encoding_color(method)))
    assert len({encoding_color(m) for m in methods}) == len(methods) - 1  # pi is linear


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


def test_training_curves_name_their_unit_and_what_a_line_is() -> None:
    training = figures.training_curves(curves())
    assert training.axes[0].get_ylabel() == "training loss (cross-entropy, nats)"
    assert training.get_suptitle() == (
        "one line per run; the seeds of one configuration share its colour"
    )

"""Figures: the plotted data equal the quantities they claim to show (not just "it runs")."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("matplotlib")

from posenc import viz
from posenc.cli import main
from posenc.registry import ModelDims, build_encoding
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import Linear, YaRN
from posenc.rotary.xpos import XPos
from posenc.viz.base import encoding_color
from tests.viz.test_base import colorbar_labels, overlaps, tick_label_overlaps

SMALL = {"head_dim": 32, "original_length": 64, "factor": 4.0}  # fast: distances up to 256


def lines_by_label(ax) -> dict[str, torch.Tensor]:
    return {
        line.get_label(): torch.as_tensor(line.get_ydata(), dtype=torch.float64)
        for line in ax.get_lines()
    }


# ---------------------------------------------------------------- wavelengths


def test_wavelength_figure_plots_plain_every_scaling_and_the_context_lines() -> None:
    fig = viz.plot_wavelengths(head_dim=128, original_length=4096, factor=8.0)
    (ax,) = fig.axes
    lines = lines_by_label(ax)
    names = list(viz.default_scalings(128, 4096, 8.0))
    assert list(lines) == ["plain RoPE", *names, "L0 = 4096", "s·L0 = 32768"]
    assert_close(lines["L0 = 4096"], torch.full((2,), 4096.0, dtype=torch.float64))
    plain = lines["plain RoPE"]
    assert_close(plain, 2 * math.pi * 10000.0 ** (torch.arange(64, dtype=torch.float64) / 64))
    # PI divides every frequency by s: every wavelength is s times longer.
    assert_close(lines["linear (PI)"], 8.0 * plain, rtol=1e-12, atol=0)
    # YaRN keeps the fast pairs (i <= low) and interpolates the slow ones (i >= high); the
    # anchor for d=128, b=1e4, L0=4096 is (low, high) = (20, 46), with a ramp between.
    low, high = YaRN(8.0, 4096).correction_range(128, 10000.0)
    assert (low, high) == (20, 46)
    yarn = lines["YaRN"]
    assert_close(yarn[: low + 1], plain[: low + 1], rtol=1e-12, atol=0)
    assert_close(yarn[high:], 8.0 * plain[high:], rtol=1e-12, atol=0)
    ramp = yarn[low + 1 : high] / plain[low + 1 : high]
    assert ((ramp > 1) & (ramp < 8)).all() and (ramp.diff() > 0).all()


def test_log_axes_of_the_rope_figures_read_plainly() -> None:
    (ax,) = viz.plot_wavelengths().axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "10", "100", "1000", "10000", "100000", "1000000",
    ]  # fmt: skip
    bound_ax = viz.plot_rope_decay().axes[1]
    assert [t.get_text() for t in bound_ax.get_xticklabels()] == ["1", "10", "100", "1000"]


def test_wavelength_data_follow_each_scalings_frequencies() -> None:
    waves = viz.rope_wavelengths(**SMALL)
    for label, scaling in viz.default_scalings(32, 64, 4.0).items():
        inv_freq = scaling.inv_freq(32, 10000.0, seq_len=256)
        assert_close(waves[label], 2 * math.pi / inv_freq)
    # Proportional: a quarter of the pairs rotate (at s times the plain wavelength), the rest
    # have θ = 0, i.e. an infinite wavelength.
    proportional = waves["proportional (p = 0.25, rest θ = 0)"]
    assert_close(proportional[:4], 4.0 * waves["plain RoPE"][:4])
    assert torch.isinf(proportional[4:]).all()


def test_wavelengths_take_user_scalings_as_values_or_dicts() -> None:
    waves = viz.rope_wavelengths(
        scalings={"pi": Linear(2.0), "pi as dict": {"type": "linear", "factor": 2.0}}, **SMALL
    )
    assert list(waves) == ["plain RoPE", "pi", "pi as dict"]
    assert_close(waves["pi"], 2.0 * waves["plain RoPE"])
    assert_close(waves["pi as dict"], waves["pi"])
    with pytest.raises(ValueError, match="scalings"):
        viz.rope_wavelengths(scalings={"bad": 3.0}, **SMALL)
    with pytest.raises(ValueError, match="factr"):
        viz.rope_wavelengths(scalings={"bad": {"type": "linear", "factr": 2}}, **SMALL)


# ---------------------------------------------------------------- scores against distance


def test_decay_curves_with_factor_one_scaling_equal_plain() -> None:
    plain = viz.rope_decay_curves(32, 10000.0, 300)
    scaled = viz.rope_decay_curves(32, 10000.0, 300, scaling=Linear(1.0))
    for key in ("distance", "score", "bound"):
        assert_close(scaled[key], plain[key])


def test_linear_score_at_distance_s_r_is_plain_score_at_r() -> None:
    plain = viz.rope_decay_curves(32, 10000.0, 64)
    linear = viz.rope_decay_curves(32, 10000.0, 256, scaling=Linear(4.0))
    assert_close(linear["score"][::4], plain["score"])
    assert_close(linear["bound"][::4], plain["bound"])


def test_scaling_score_panels_show_plain_and_scaled_with_attention_factor() -> None:
    fig = viz.plot_rope_scaling_scores(**SMALL)
    scalings = viz.default_scalings(32, 64, 4.0)
    panels = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in panels] == list(scalings)
    plain = viz.rope_decay_curves(32, 10000.0, 256)
    for ax, (label, scaling) in zip(panels, scalings.items(), strict=True):
        lines = lines_by_label(ax)
        assert list(lines)[:2] == ["plain RoPE", label]
        assert_close(lines["plain RoPE"], plain["score"])
        want = viz.rope_decay_curves(32, 10000.0, 256, scaling=scaling)["score"]
        assert_close(lines[label], want)
        # At distance 0 every pair contributes cos 0 = 1: the score is A².
        assert lines[label][0].item() == pytest.approx(scaling.attention_factor**2)
    # YaRN's factor is 0.1 ln s + 1 (HF default), so its logits grow by its square.
    yarn = lines_by_label(panels[list(scalings).index("YaRN")])["YaRN"]
    assert yarn[0].item() == pytest.approx((0.1 * math.log(4.0) + 1) ** 2)


def test_scaled_score_equals_rope_module_score() -> None:
    """The plotted score is the q·k/d of RotaryEmbedding with q = k = ones (plain RoPE)."""
    curves = viz.rope_decay_curves(16, 10000.0, 40)
    ones = torch.ones(1, 1, 41, 16, dtype=torch.float64)
    q, k = RotaryEmbedding(16)(ones, ones, torch.arange(41), torch.arange(41))
    scores = (q[0, 0, -1] * k[0, 0]).sum(-1).flip(0) / 16  # distances 0 … 40
    assert_close(curves["score"], scores)


def test_rope_decay_keeps_its_plain_form_and_adds_scalings() -> None:
    fig = viz.plot_rope_decay(head_dim=32, bases=(10000.0, 500000.0), max_distance=100)
    score_ax, bound_ax = fig.axes
    want = viz.rope_decay_curves(32, 500000.0, 100)
    assert_close(lines_by_label(score_ax)["base 500000"], want["score"])
    assert_close(lines_by_label(bound_ax)["base 500000"], want["bound"])
    assert len(score_ax.get_lines()) == len(bound_ax.get_lines()) == 2

    fig = viz.plot_rope_decay(32, (10000.0,), 100, scalings={"PI x4": Linear(4.0)})
    score_ax, bound_ax = fig.axes[:2]
    bound = lines_by_label(bound_ax)
    assert list(bound) == ["base 10000", "PI x4"]
    scaled = viz.rope_decay_curves(32, 10000.0, 100, scaling=Linear(4.0))
    assert_close(bound["PI x4"], scaled["bound"])


def test_rope_decay_figure_under_default_scalings_reaches_the_target_length() -> None:
    fig = viz.plot_rope_decay_scalings(**SMALL)
    bound = lines_by_label(fig.axes[1])
    assert list(bound) == ["base 10000", *viz.default_scalings(32, 64, 4.0)]
    assert all(len(values) == 257 for values in bound.values())  # distances 0 … s·L0


def test_xpos_figure_matches_the_module_scores() -> None:
    fig = viz.plot_xpos(head_dim=16, scale_base=8.0, max_distance=40)
    lines = lines_by_label(fig.axes[0])
    assert list(lines) == ["RoPE", "xPos", "xPos envelope"]
    ones = torch.ones(1, 1, 41, 16, dtype=torch.float64)
    q, k = XPos(16, scale_base=8.0)(ones, ones, torch.arange(41), torch.arange(41))
    scores = (q[0, 0, -1] * k[0, 0]).sum(-1).flip(0) / 16  # key 40, 39, … behind the query
    assert_close(lines["xPos"], scores)
    assert (lines["xPos envelope"].diff() < 0).all()
    assert (lines["xPos"].abs() <= lines["xPos envelope"] + 1e-12).all()


# ---------------------------------------------------------------- by name and on the CLI


def test_plot_figure_rejects_unknown_names_and_arguments() -> None:
    with pytest.raises(ValueError, match="wavelengthz"):
        viz.plot_figure("wavelengthz")
    with pytest.raises(ValueError, match="bases"):
        viz.plot_figure("wavelengths", bases=[1.0])


@pytest.mark.parametrize("name", ["wavelengths", "rope-decay", "rope-scaling"])
def test_cli_writes_each_figure(name: str, tmp_path: Path) -> None:
    out = tmp_path / f"{name}.png"
    settings = ["--set", "head_dim=32", "--set", "original_length=64", "--set", "factor=4"]
    assert main(["plot", name, "--out", str(out), *settings]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_plots_xpos_and_reports_bad_figure_settings(tmp_path: Path, capsys) -> None:
    out = tmp_path / "xpos.png"
    assert main(["plot", "xpos", "--out", str(out), "--set", "max_distance=64"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert main(["plot", "wavelengths", "--out", str(out), "--set", "facter=2"]) == 2
    assert "facter" in capsys.readouterr().err
    scalings = '{"yarn": {"type": "yarn", "factor": 4, "beta_fast": -1}}'
    args = ["plot", "wavelengths", "--out", str(out), "--set", f"scalings={scalings}"]
    assert main(args) == 2
    assert "original_max_position_embeddings" in capsys.readouterr().err


# ---------------------------------------------------------------- bias heatmaps, bars


def test_causal_bias_is_blank_above_the_diagonal_and_every_head_is_shown() -> None:
    alibi = build_encoding("alibi", ModelDims(dim=64, num_heads=8))
    fig = viz.plot_bias(alibi, length=16)
    heads = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heads] == [f"head {h}" for h in range(8)]
    assert "all 8 heads" in fig.get_suptitle() and "causal" in fig.get_suptitle()
    expected = alibi.bias(torch.arange(16), torch.arange(16)).float()
    above = torch.ones(16, 16, dtype=torch.bool).triu(1)
    for head, ax in enumerate(heads):
        shown = ax.images[0].get_array()
        blank = torch.as_tensor(shown.mask) | torch.isnan(torch.as_tensor(shown.filled(math.nan)))
        assert torch.equal(blank, above)  # every cell above the diagonal, and only those
        values = torch.as_tensor(shown.filled(0.0))
        assert_close(values[~above], expected[head][~above])
        assert float(values[~above].max()) <= 0.0  # no positive bias is drawn
    assert colorbar_labels(fig) == ["bias"] * 8


def test_a_subset_of_heads_and_a_symmetric_bias_say_so() -> None:
    alibi = build_encoding("alibi", ModelDims(dim=64, num_heads=8))
    fig = viz.plot_bias(alibi, length=8, heads=3, causal=False)
    assert "heads 0–2 of 8" in fig.get_suptitle() and "causal" not in fig.get_suptitle()
    shown = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    assert len(shown) == 3 and not any(bool(a.mask.any()) for a in shown)
    kerple = build_encoding("kerple", ModelDims(dim=64, num_heads=4))
    assert "causal" not in viz.plot_bias(kerple, length=8).get_suptitle()
    with pytest.raises(ValueError, match="heads"):
        viz.plot_bias(alibi, heads=0)


def test_equivariance_bars_take_each_encodings_colour_and_labels_never_overlap() -> None:
    names = ["nope", "sinusoidal", "scaled_sinusoidal", "learned", "complex_order", "rope",
             "alibi", "t5", "kerple", "sandwich", "learnable_fourier"]  # fmt: skip
    fig = viz.plot_equivariance({name: 0.1 * index for index, name in enumerate(names)})
    (ax,) = fig.axes
    from matplotlib.colors import to_hex

    assert [to_hex(bar.get_facecolor()) for bar in ax.patches] == [encoding_color(n) for n in names]
    assert [t.get_text() for t in ax.get_yticklabels()] == names
    assert tick_label_overlaps(fig) == []
    fig.canvas.draw()
    assert overlaps([ax.title]) == [] and ax.title.get_window_extent().x0 >= 0  # title fits


def test_rope_scaling_panels_tick_at_the_original_and_target_lengths_without_collisions() -> None:
    fig = viz.plot_rope_scaling_scores()  # the CLI's defaults: d=128, L0=4096, s=8
    panels = [ax for ax in fig.axes if ax.lines]
    fig.canvas.draw()
    labelled = [ax for ax in panels if ax.xaxis.get_tick_params()["labelbottom"]]
    assert len(labelled) == 3  # the bottom panel of each column (shared x)
    for ax in panels:
        assert list(ax.get_xticks()) == [4096, 16384, 32768]
    for ax in labelled:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4096", "16384", "32768"]
    assert tick_label_overlaps(fig) == []

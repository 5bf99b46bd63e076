"""Graph figures: the plotted arrays are the encodings they claim to show, and every graph
figure and graph method draws through ``posenc plot``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("matplotlib")

import inspect

from matplotlib.collections import LineCollection, PathCollection

from posenc import viz
from posenc.cli import main
from posenc.graph import hop_distances, laplacian_pe
from posenc.viz.graph import (
    METHOD_FIGURES,
    circle_layout,
    csl_graph,
    graph_method_figure,
    lstep_trajectories,
    plot_graph_laplacian,
    plot_graph_spd_bias,
    plot_lstep,
    spd_example,
)


def panels(fig) -> list:
    """The figure's axes that are not colour bars."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_csl_graph_and_circle_layout() -> None:
    graph = csl_graph(5)
    assert graph.num_nodes == 41 and graph.edge_index.shape[1] == 82
    ins, outs = graph.degrees()
    assert ins.eq(4).all() and outs.eq(4).all()
    for skip in (1, 21, 3.0, True):
        with pytest.raises(ValueError, match="skip"):
            csl_graph(skip)  # type: ignore[arg-type]
    xy = circle_layout(8)
    assert_close(xy.norm(dim=-1), torch.ones(8, dtype=torch.float64))
    assert_close(xy[0], torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert xy[2, 0] > 0.99  # clockwise: a quarter turn puts node 2 on the right


def test_laplacian_figure_colours_each_node_by_its_eigenvector_entry() -> None:
    fig = plot_graph_laplacian(skip=3, k=3, normalization="combinatorial")
    axes = panels(fig)
    assert len(axes) == 3 and len(fig.axes) == 4  # one colour bar
    pe = laplacian_pe(csl_graph(3), 3, "combinatorial")
    for j, ax in enumerate(axes):
        (nodes,) = [c for c in ax.collections if isinstance(c, PathCollection)]
        assert_close(torch.as_tensor(nodes.get_array()), pe.vectors[:, j])
        (edges,) = [c for c in ax.collections if isinstance(c, LineCollection)]
        assert len(edges.get_segments()) == 82
        assert f"{float(pe.values[0, j]):.4f}" in ax.get_title()
    # a circulant graph's eigenvalues come in pairs: panels 1 and 2 share theirs
    assert axes[0].get_title().split("λ")[1] == axes[1].get_title().split("λ")[1]
    assert "(combinatorial)" in fig.get_suptitle() and "C_41(1, 3)" in fig.get_suptitle()


def test_spd_bias_figure_shows_the_distances_and_a_bias_per_distance() -> None:
    fig = plot_graph_spd_bias(num_heads=3, seed=2)
    graph_ax, distance_ax, *heads = panels(fig)
    assert len(heads) == 3
    assert [ax.get_title() for ax in heads] == ["bias, head 0", "bias, head 1", "bias, head 2"]
    graph, layout = spd_example()
    distance = hop_distances(graph)[0]
    shown = torch.as_tensor(distance_ax.get_images()[0].get_array().filled(float("nan")))
    assert_close(shown, distance.double().masked_fill(distance < 0, float("nan")), equal_nan=True)
    assert int(distance.max()) == 5 and bool((distance[8, :8] < 0).all())
    for ax in heads:
        table = torch.as_tensor(ax.get_images()[0].get_array())  # (n + 1, n + 1), token first
        assert table.shape == (11, 11)
        nodes = table[1:, 1:]
        for d in range(-1, 6):  # one value per distance (and one for unreachable pairs)
            values = nodes[distance == d]
            assert_close(values, values[:1].expand_as(values))
        assert len(set(nodes[distance == 1].tolist() + nodes[distance == 2].tolist())) == 2
        token = torch.cat([table[0], table[:, 0]])
        assert_close(token, token[:1].expand_as(token))
    labels = {text.get_text(): text.get_position() for text in graph_ax.texts}
    assert labels == {str(i): tuple(xy) for i, xy in enumerate(layout.tolist())}


def test_lstep_trajectories_change_a_node_only_at_its_events() -> None:
    run = lstep_trajectories(steps=30, dim=4, history_len=3, seed=1)
    assert run.encodings.shape == run.read.shape == (30, 24, 4)
    assert run.drift_steps == [20]
    still = ~run.involved[1:]  # (29, 24): no event at step t ≥ 1
    same = (run.encodings[1:] == run.encodings[:-1]).all(-1)
    assert bool(same[still].all())
    assert bool((~same[run.involved[1:]]).float().mean() > 0.9)  # events move the encoding
    assert run.involved.sum(1).ge(2).all()  # every step has events, two endpoints at least
    again = lstep_trajectories(steps=30, dim=4, history_len=3, seed=1)
    assert torch.equal(again.encodings, run.encodings)  # seeded


def test_lstep_figure_draws_each_nodes_encodings_across_steps() -> None:
    fig = plot_lstep(steps=25, dim=4, history_len=3, nodes=2, seed=1)
    axes = panels(fig)
    assert len(axes) == 2
    run = lstep_trajectories(steps=25, dim=4, history_len=3, seed=1)
    for node, ax in enumerate(axes):
        image = torch.as_tensor(ax.get_images()[0].get_array())
        assert_close(image, run.encodings[:, node].T)
        dots = ax.get_lines()[0].get_xdata()
        assert list(dots) == run.involved[:, node].nonzero().flatten().tolist()
        assert ax.get_ylabel() == "channel" and f"node {node}" in ax.get_title()
    assert axes[-1].get_xlabel().startswith("step t")


def test_graph_methods_draw_their_figure_with_their_preset() -> None:
    fig = viz.plot_encoding("laplacian_rw", k=2)
    assert "(rw)" in fig.get_suptitle() and len(panels(fig)) == 2
    assert graph_method_figure("rope") is None  # a sequence encoding: viz's own figure
    with pytest.raises(ValueError, match=r"no figure of 'signnet'.*graph-laplacian"):
        viz.plot_encoding("signnet")
    for name, (figure, preset) in METHOD_FIGURES.items():
        assert figure in viz.FIGURES, name
        assert set(preset) <= set(inspect.signature(viz.FIGURES[figure]).parameters)


@pytest.mark.parametrize(
    "args",
    [
        ["graph-laplacian", "--set", "k=2", "--set", "skip=9"],
        ["graph-spd-bias", "--set", "num_heads=2"],
        ["lstep", "--set", "steps=21", "--set", "nodes=2"],
        ["laplacian_sym", "--set", "k=2"],
        ["graphormer_spatial"],
    ],
)
def test_posenc_plot_writes_the_graph_figures(args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "figure.png"
    assert main(["plot", *args, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_posenc_plot_reports_bad_graph_settings(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "figure.png")
    assert main(["plot", "graph-laplacian", "--out", out, "--set", "skip=30"]) == 2
    assert main(["plot", "graph-spd-bias", "--out", out, "--set", "heads=2"]) == 2
    assert main(["plot", "rwse", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "skip must be" in err and "heads" in err and "no figure of 'rwse'" in err

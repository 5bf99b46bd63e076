"""Figures of the graph encodings: eigenvectors on a layout, shortest-path bias, L-STEP in time.

* :func:`plot_graph_laplacian` (``posenc plot graph-laplacian``): the first non-trivial
  Laplacian eigenvectors of a CSL graph (a 41-cycle with skip links) as node colours on a
  circle, one panel per eigenvector;
* :func:`plot_graph_spd_bias` (``posenc plot graph-spd-bias``): a small graph, its
  shortest-path distances and Graphormer's bias per head as heatmaps;
* :func:`plot_lstep` (``posenc plot lstep``): L-STEP's encodings of a few nodes, channel by
  step, along a synthetic stream of drifting communities.

The numbers come from plain functions (:func:`csl_graph`, :func:`spd_example`,
:func:`lstep_trajectories`) and the package's own encodings, so tests check the plotted
arrays, not pixels. No networkx: the layouts are computed here. :data:`METHOD_FIGURES` says
which figure ``posenc plot NAME`` draws for a graph method of ``posenc list``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from posenc._validate import check_int, check_non_negative_int, check_positive_int
from posenc.graph import Graph, GraphormerBias, Normalization, hop_distances, laplacian_pe
from posenc.graph.lstep import LSTEPEncoding, initial_history, push_history
from posenc.viz.base import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "METHOD_FIGURES",
    "LSTEPTrajectory",
    "circle_layout",
    "csl_graph",
    "graph_method_figure",
    "lstep_trajectories",
    "plot_graph_laplacian",
    "plot_graph_spd_bias",
    "plot_lstep",
    "spd_example",
]


def circle_layout(num_nodes: int) -> Tensor:
    """Node ``i`` at angle ``π/2 − 2πi/n`` on the unit circle (node 0 on top, clockwise):
    ``(num_nodes, 2)`` float64 ``(x, y)``."""
    angle = math.pi / 2 - 2 * math.pi * torch.arange(num_nodes, dtype=torch.float64) / num_nodes
    return torch.stack([angle.cos(), angle.sin()], dim=-1)


def csl_graph(skip: int = 5) -> Graph:
    """The CSL graph ``C_41(1, skip)``: a 41-cycle plus the chords ``i — i + skip mod 41``
    (the lab's CSL dataset, :mod:`posenc.lab.data.graphs`, uses skips 2–16)."""
    from posenc.lab.data.graphs import CSL_NODES, circulant_edges

    skip = check_int("skip", skip, low=2, high=CSL_NODES // 2)
    return Graph(circulant_edges(CSL_NODES, (1, skip)), CSL_NODES)


def _draw_graph(
    ax: Axes, graph: Graph, layout: Tensor, colors: Any = "white", **kwargs: Any
) -> Any:
    """Edges as grey segments, nodes as circles coloured by ``colors``; returns the nodes'
    ``PathCollection`` (its array holds the colour values). Axes off, equal aspect."""
    from matplotlib.collections import LineCollection

    src, dst = graph.edge_index
    segments = torch.stack([layout[src], layout[dst]], dim=1).tolist()  # (E, 2, 2)
    ax.add_collection(LineCollection(segments, colors="0.75", linewidths=0.8, zorder=1))
    xy = layout.numpy()
    nodes = ax.scatter(xy[:, 0], xy[:, 1], c=colors, edgecolors="black", zorder=2, **kwargs)
    ax.set_aspect("equal")
    ax.margins(0.12)  # room for the nodes' circles at the edge of the layout
    ax.axis("off")
    return nodes


def plot_graph_laplacian(skip: int = 5, k: int = 4, normalization: Normalization = "sym") -> Figure:
    """The ``k`` first non-trivial Laplacian eigenvectors of :func:`csl_graph` ``(skip)``
    as node colours on a circle (node 0 on top, clockwise), one panel per eigenvector, on
    one symmetric colour scale.

    A circulant graph's eigenvalues come in equal pairs: the two vectors of a pair span a
    plane in which every rotation is as valid (their basis, like every sign, is the
    solver's choice); the panel titles give each ``λ``.
    """
    k = check_positive_int("k", k)
    graph = csl_graph(skip)
    pe = laplacian_pe(graph, k, normalization, pad=False)
    layout = circle_layout(graph.num_nodes)
    scale = float(pe.vectors.abs().max())
    fig = new_figure(figsize=(3.0 * k + 1.0, 3.6), layout="constrained")
    axes = fig.subplots(1, k, squeeze=False)[0]
    for j, ax in enumerate(axes):
        nodes = _draw_graph(
            ax,
            graph,
            layout,
            pe.vectors[:, j].numpy(),
            cmap="RdBu_r",
            vmin=-scale,
            vmax=scale,
            s=40,
        )
        ax.set_title(f"eigenvector {j + 1}, λ = {float(pe.values[0, j]):.4f}", fontsize=10)
    fig.colorbar(nodes, ax=list(axes), shrink=0.8, label="entry of node i, v_j[i]")
    fig.suptitle(
        f"Laplacian eigenvectors ({normalization}) of the CSL graph C_41(1, {skip}): "
        "node colour = entry (signs and bases within a repeated λ are arbitrary)",
        fontsize=11,
    )
    return fig


def spd_example() -> tuple[Graph, Tensor]:
    """A small graph with every kind of pair, and a layout: a hexagon (nodes 0–5), a tail
    5 — 6 — 7, and a separate edge 8 — 9 (unreachable from the rest). Returns the graph
    and ``(10, 2)`` node positions."""
    edges = [(i, (i + 1) % 6) for i in range(6)] + [(5, 6), (6, 7), (8, 9)]
    graph = Graph(torch.tensor(edges).T, 10)
    rest = [[-1.75, 1.0], [-2.6, 1.5], [1.8, 0.6], [1.8, -0.6]]  # the tail off node 5; 8 — 9
    return graph, torch.cat([circle_layout(6), torch.tensor(rest, dtype=torch.float64)])


def plot_graph_spd_bias(num_heads: int = 4, seed: int = 0) -> Figure:
    """:func:`spd_example`'s graph, its hop distances ``φ(i, j)`` and a
    :class:`~posenc.graph.GraphormerBias`'s bias ``b_h(φ(i, j))`` for each head, with the
    graph token (T) first, as Graphormer lays it out.

    The bias table is the module's initialization, ``N(0, 0.02²)`` per (distance, head),
    drawn from ``seed``: untrained, it shows the structure (one value per distance, a row
    for unreachable pairs and one for the token), not what training learns.
    """
    num_heads = check_positive_int("num_heads", num_heads)
    seed = check_non_negative_int("seed", seed)
    graph, layout = spd_example()
    distance = hop_distances(graph)  # (1, n, n)
    bias = GraphormerBias(num_heads, max_distance=int(distance.max()), dtype=torch.float64)
    with torch.no_grad():
        bias.weight.normal_(std=0.02, generator=torch.Generator().manual_seed(seed))
        positions, _ = bias.set_distances(
            distance, torch.ones(1, graph.num_nodes, dtype=torch.bool)
        )
        table = bias.bias(positions, positions)[0]  # (heads, n + 1, n + 1)
    n = graph.num_nodes
    columns = max(2, math.ceil(num_heads / 2))
    fig = new_figure(figsize=(3.3 * (columns + 1), 6.6), layout="constrained")
    grid = fig.add_gridspec(2, columns + 1)
    ax = fig.add_subplot(grid[0, 0])
    _draw_graph(ax, graph, layout, s=260)
    for i, (x, y) in enumerate(layout.tolist()):
        ax.annotate(str(i), (x, y), ha="center", va="center", fontsize=8, zorder=3)
    ax.set_title("graph (no path between 0–7 and 8–9)", fontsize=10)
    ax = fig.add_subplot(grid[1, 0])
    shown = distance[0].double().masked_fill(distance[0] < 0, float("nan"))
    image = ax.imshow(shown.numpy(), cmap="viridis")
    for i in range(n):
        for j in range(n):
            value = int(distance[0, i, j])
            ax.text(
                j,
                i,
                "∞" if value < 0 else str(value),
                ha="center",
                va="center",
                fontsize=6,
                color="black" if value < 0 or value > 2 else "white",
            )
    ax.set(
        title="shortest-path distance φ(i, j)",
        xlabel="node j",
        ylabel="node i",
        xticks=range(n),
        yticks=range(n),
    )
    fig.colorbar(image, ax=ax, shrink=0.8, label="hops (∞: no path)")
    labels = ["T", *map(str, range(n))]
    scale = float(table.abs().max())
    heads = []
    for head in range(num_heads):
        ax = fig.add_subplot(grid[head // columns, 1 + head % columns])
        heads.append(ax)
        image = ax.imshow(table[head].numpy(), cmap="RdBu_r", vmin=-scale, vmax=scale)
        ax.set_xticks(range(n + 1), labels, fontsize=7)
        ax.set_yticks(range(n + 1), labels, fontsize=7)
        ax.set(title=f"bias, head {head}", xlabel="key node", ylabel="query node")
    fig.colorbar(image, ax=heads, shrink=0.6, label="b_h(φ(i, j)) (untrained)")
    fig.suptitle(
        "Graphormer's spatial bias: one learned value per head and distance (T: the graph token)"
    )
    return fig


class LSTEPTrajectory(NamedTuple):
    """L-STEP's encodings along a stream (:func:`lstep_trajectories`).

    Attributes:
        encodings: ``(steps, num_nodes, dim)``: ``p_u^t``, each node's newest stored
            encoding after step ``t`` (its update if it had an event, else unchanged).
        read: ``(steps, num_nodes, dim)``: ``ep_u^t``, what Eqs. 1–2 read from the history
            at step ``t``, before its events.
        involved: ``(steps, num_nodes)`` bool: the node has an event at that step.
        drift_steps: the steps at which the stream's communities change.
    """

    encodings: Tensor
    read: Tensor
    involved: Tensor
    drift_steps: list[int]


def lstep_trajectories(
    steps: int = 60, dim: int = 8, history_len: int = 8, seed: int = 0
) -> LSTEPTrajectory:
    """Run an (untrained) :class:`~posenc.graph.lstep.LSTEPEncoding` along
    :func:`~posenc.lab.data.temporal.drifting_communities` (24 nodes, 3 communities, 6
    events per step, 30 % of the nodes move every 20 steps), one step per batch.

    At each step every node's ``ep`` is read from its history (Eqs. 1–2), the step's events
    update their endpoints, and the history grows by one entry for every node (the
    reference's ``every_batch``: the update for an endpoint, the last entry again for the
    others), as :class:`~posenc.graph.link_prediction.LSTEPLinkPredictor` does. Initial
    encodings ``N(0, 1/dim)`` (rows of norm about 1); everything drawn from ``seed``.
    """
    from posenc.lab.data.temporal import drifting_communities

    steps = check_positive_int("steps", steps)
    period = 20
    stream = drifting_communities(
        num_nodes=24,
        communities=3,
        steps=steps,
        events_per_step=6,
        period=period,
        drift=0.3,
        seed=seed,
    )
    generator = torch.Generator().manual_seed(seed)
    encoding = LSTEPEncoding(dim, history_len, time_dim=8, generator=generator)
    initial = torch.randn(stream.num_nodes, dim, generator=generator) / math.sqrt(dim)
    history = initial_history(initial, history_len)
    stored, read = [], []
    involved = torch.zeros(steps, stream.num_nodes, dtype=torch.bool)
    with torch.no_grad():
        for step in range(steps):
            ep = encoding(history)  # (N, dim)
            at = stream.time == step
            src, dst, times = stream.src[at], stream.dst[at], stream.time[at]
            nodes, updated = encoding.update(ep, src, dst, times, now=float(step))
            involved[step, nodes] = True
            history = push_history(history, history[:, -1].index_put((nodes,), updated))
            stored.append(history[:, -1])
            read.append(ep)
    drift = list(range(period, steps, period))
    return LSTEPTrajectory(torch.stack(stored), torch.stack(read), involved, drift)


def plot_lstep(
    steps: int = 60, dim: int = 8, history_len: int = 8, nodes: int = 3, seed: int = 0
) -> Figure:
    """L-STEP's stored encodings ``p_u^t`` of the first ``nodes`` nodes of
    :func:`lstep_trajectories`: one heatmap per node, channels down, steps across, on one
    colour scale; dots mark the steps the node has an event (the only steps its encoding
    changes), dashed lines the communities' drifts."""
    nodes = check_positive_int("nodes", nodes)
    run = lstep_trajectories(steps, dim, history_len, seed)
    nodes = min(nodes, run.encodings.shape[1])
    scale = float(run.encodings[:, :nodes].abs().max())
    fig = new_figure(figsize=(9.0, 1.0 + 1.9 * nodes), layout="constrained")
    axes = fig.subplots(nodes, 1, squeeze=False, sharex=True)[:, 0]
    for node, ax in enumerate(axes):
        values = run.encodings[:, node].T.numpy()  # (dim, steps)
        image = ax.imshow(
            values, aspect="auto", cmap="RdBu_r", vmin=-scale, vmax=scale, interpolation="nearest"
        )
        events = run.involved[:, node].nonzero().flatten().tolist()
        ax.plot(events, [-0.9] * len(events), "k.", markersize=4, clip_on=False)
        for step in run.drift_steps:
            ax.axvline(step - 0.5, color="black", linestyle="--", linewidth=0.8)
        ax.set(ylabel="channel", title=f"node {node}: p_u^t after step t (dots: its events)")
        ax.set_ylim(dim - 0.5, -1.3)
    axes[-1].set_xlabel("step t (dashed: communities drift)")
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="encoding value")
    fig.suptitle(
        f"L-STEP (untrained, d_P={dim}, L={history_len}) on a stream of drifting communities",
        fontsize=11,
    )
    return fig


#: What ``posenc plot NAME`` draws for a graph method of ``posenc list``: a figure of
#: :data:`posenc.viz.FIGURES` and the settings the name fixes.
METHOD_FIGURES: dict[str, tuple[str, dict[str, Any]]] = {
    "laplacian_combinatorial": ("graph-laplacian", {"normalization": "combinatorial"}),
    "laplacian_sym": ("graph-laplacian", {"normalization": "sym"}),
    "laplacian_rw": ("graph-laplacian", {"normalization": "rw"}),
    "shortest_paths": ("graph-spd-bias", {}),
    "graphormer_spatial": ("graph-spd-bias", {}),
    "lstep": ("lstep", {}),
}


def graph_method_figure(name: str) -> tuple[str, dict[str, Any]] | None:
    """The figure and settings :data:`METHOD_FIGURES` gives graph method ``name``; None when
    ``name`` is no graph method (an encoding of the registry, or unknown).

    Raises:
        ValueError: for a graph method without a figure of its own.
    """
    from posenc.graph.catalogue import list_graph_methods

    if name in METHOD_FIGURES:
        return METHOD_FIGURES[name]
    if name in {method.name for method in list_graph_methods()}:
        figures = sorted({figure for figure, _ in METHOD_FIGURES.values()})
        raise ValueError(
            f"there is no figure of {name!r} (a graph method); graph figures: {', '.join(figures)}"
        )
    return None

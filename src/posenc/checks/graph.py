"""What the graph property checks of ``posenc check`` measure: how far an encoding of a graph
is from permuting with its nodes, or from ignoring eigenvector signs.

A graph has no node order, so an encoding computed from its structure must not depend on
the numbering: relabelling the nodes (:func:`relabel`) must permute a node encoding's rows
(:func:`node_permutation_gap`) and a pair encoding's rows and columns
(:func:`pair_permutation_gap`). Eigenvectors hold the one exception, their sign, which
``up_to_sign`` forgives column by column; :func:`sign_flip_gap` measures how much an encoder
of eigenvectors changes when their signs are flipped. Each returns a max-abs difference, so
an encoding that reads the node ids (or signs) gives a large number and one that does not
gives 0 or rounding. :func:`check_graph` is the graph they are measured on.

Example::

    >>> from posenc.graph import random_walk_pe
    >>> graph, perm = check_graph(), torch.randperm(24, generator=torch.Generator().manual_seed(0))
    >>> node_permutation_gap(lambda g: random_walk_pe(g, 8), graph, perm) < 1e-12
    True
    >>> node_permutation_gap(lambda g: torch.arange(g.num_nodes)[:, None], graph, perm) > 1
    True
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.graph import Graph, GraphormerBias, LaplacianPE, random_sign_flip, shortest_paths

__all__ = [
    "check_graph",
    "check_tree",
    "graphormer_pairs",
    "node_permutation_gap",
    "pair_permutation_gap",
    "relabel",
    "sign_flip_gap",
]


def check_graph(num_nodes: int = 24, chords: int = 12, seed: int = 0) -> Graph:
    """A connected undirected graph without symmetries: a ``num_nodes``-cycle plus
    ``chords`` random chords drawn from ``seed`` (its Laplacians' eigenvalues are simple,
    so every eigenvector is defined up to its sign only)."""
    num_nodes = check_positive_int("num_nodes", num_nodes)
    generator = torch.Generator().manual_seed(seed)
    nodes = torch.arange(num_nodes)
    ring = torch.stack([nodes, (nodes + 1) % num_nodes])
    ends = torch.randint(0, num_nodes, (2, chords), generator=generator)
    ends = ends[:, ends[0] != ends[1]]  # no self-loops
    return Graph(torch.cat([ring, ends], dim=1), num_nodes)


def check_tree(num_nodes: int = 16, seed: int = 0) -> Graph:
    """A random tree (node ``i`` joined to a random earlier node): one shortest path per
    pair, so even Graphormer's edge encoding, which follows one path, has no choice."""
    num_nodes = check_positive_int("num_nodes", num_nodes)
    generator = torch.Generator().manual_seed(seed)
    child = torch.arange(1, num_nodes)
    parent = (torch.rand(num_nodes - 1, generator=generator) * child).long()  # in [0, i)
    return Graph(torch.stack([parent, child]), num_nodes)


def relabel(graph: Graph, perm: Tensor) -> Graph:
    """The same graph with its nodes renumbered: node ``a`` of the result is node
    ``perm[a]`` of ``graph`` (one graph, no batch)."""
    if graph.batch is not None:
        raise ValueError("graph must be one graph (batch=None) to be relabelled")
    if sorted(perm.tolist()) != list(range(graph.num_nodes)):
        raise ValueError(f"perm must be a permutation of 0 .. {graph.num_nodes - 1}")
    inverse = torch.argsort(perm)
    return Graph(inverse[graph.edge_index], graph.num_nodes, graph.edge_weight, graph.directed)


def node_permutation_gap(
    encode: Callable[[Graph], Tensor], graph: Graph, perm: Tensor, *, up_to_sign: bool = False
) -> float:
    """``max |encode(P·G) − P·encode(G)|`` for a node encoding ``(num_nodes, ...)``.

    With ``up_to_sign`` each column ``j`` (the last axis) is compared as the better of
    ``±P·encode(G)[:, j]``: the sign of an eigenvector is the solver's choice.
    """
    moved = encode(relabel(graph, perm)).double()
    expected = encode(graph).double()[perm.to(torch.long)]
    if not up_to_sign:
        return float((moved - expected).abs().max())
    same = (moved - expected).abs().flatten(0, -2).amax(0)  # per column
    flipped = (moved + expected).abs().flatten(0, -2).amax(0)
    return float(torch.minimum(same, flipped).max())


def pair_permutation_gap(encode: Callable[[Graph], Tensor], graph: Graph, perm: Tensor) -> float:
    """``max |encode(P·G) − P·encode(G)·Pᵀ|`` for a pair encoding ``(num_nodes, num_nodes,
    ...)`` (distances, walk probabilities, a bias with its heads last)."""
    perm = perm.to(torch.long)
    moved = encode(relabel(graph, perm)).double()
    expected = encode(graph).double()[perm][:, perm]
    return float((moved - expected).abs().max())


def sign_flip_gap(
    encode: Callable[[Tensor], Tensor],
    pe: LaplacianPE,
    *,
    draws: int = 8,
    generator: torch.Generator | None = None,
) -> float:
    """``max |encode(flipped) − encode(positions)|`` over ``draws`` random sign flips of the
    eigenvectors (:func:`~posenc.graph.random_sign_flip`, one sign per column), where
    ``positions`` is ``pe.positions()`` and ``flipped`` the same with flipped vectors."""
    draws = check_positive_int("draws", draws)
    positions = pe.positions()
    reference = encode(positions)
    gap = 0.0
    for _ in range(draws):
        flipped = positions.clone()
        flipped[..., 0] = random_sign_flip(positions[..., 0], generator=generator)
        gap = max(gap, float((encode(flipped) - reference).abs().max()))
    return gap


def graphormer_pairs(
    edge_features: Tensor | None = None, *, num_heads: int = 4, seed: int = 1
) -> Callable[[Graph], Tensor]:
    """A :class:`~posenc.graph.GraphormerBias` as a pair encoding ``graph -> (n, n,
    num_heads)`` (float64, no graph token, every table ``N(0, 1)`` from ``seed`` so the
    numbers are readable). With ``edge_features`` ``(E, edge_dim)``, one row per edge of the graphs
    it is given (:func:`relabel` keeps the edge order), the edge encoding is added."""
    edge_dim = None if edge_features is None else edge_features.shape[-1]
    bias = GraphormerBias(
        num_heads, max_distance=64, virtual_node=False, edge_dim=edge_dim, dtype=torch.float64
    )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for table in bias.parameters():
            table.normal_(generator=generator)

    def encode(graph: Graph) -> Tensor:
        with torch.no_grad():
            positions, _ = bias.set_graphs(shortest_paths(graph), edge_features)
            return bias.bias(positions, positions)[0].permute(1, 2, 0)  # (n, n, heads)

    return encode

"""What every shortest-path function shares: the result type, the dense edge tables, the
conventions and the size checks.

Conventions (every function of :mod:`posenc.graph.shortest_path`):

- ``distance[b, i, j]`` is the length of a shortest path **from** node ``i`` **to** node
  ``j`` of graph ``b`` (local ids), along edge directions for a directed graph; an
  undirected edge is walked both ways; self-loops and ``i == j`` give 0;
- pairs with no path, and pairs involving a padding node (``i`` or ``j`` at or beyond the
  graph's size), read :data:`UNREACHABLE` (``-1``): ``distance >= 0`` is "reachable";
- weighted distances take each edge's weight, the lightest of parallel edges (a path takes
  the cheapest, as networkx's do; the adjacency's sum of parallel edges would lengthen it);
  an edge listed with weight 0 exists and costs 0; weights must be non-negative
  (``ValueError`` naming ``edge_weight`` otherwise);
- ``max_distance`` clamps reachable distances to at most ``max_distance`` (the last entry of
  a finite table then serves every farther pair, the role of Graphormer's
  ``spatial_pos_max``); unreachable pairs stay :data:`UNREACHABLE`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int
from posenc.graph.structure import Graph, check_graph

__all__ = [
    "MAX_RESULT_BYTES",
    "PAIRS_PER_BLOCK",
    "UNREACHABLE",
    "ShortestPaths",
    "check_result_size",
    "clamp",
    "components",
    "csr",
    "dense_edges",
    "out_edges",
]

#: Distance (and hop count) of a pair with no path, or with a padding node.
UNREACHABLE = -1


#: Largest distance table (bytes) :func:`~posenc.graph.shortest_path.hop_distances` and
#: :func:`~posenc.graph.shortest_path.shortest_paths` allocate unless their ``max_bytes`` says
#: otherwise: 4 GiB, an ``(N, N)`` int64 table of N ≈ 23,000. :func:`check_result_size` reads
#: this name: a patch must target it here, not the package's re-export.
MAX_RESULT_BYTES = 4 * 2**30

#: (source, node) pairs one breadth-first step expands at most: bounds the working memory
#: (a few int64 arrays of this length) by running the sources in blocks.
PAIRS_PER_BLOCK = 2**24


@dataclass(frozen=True, eq=False)
class ShortestPaths:
    """Shortest paths of a batch of graphs padded to ``N`` nodes (conventions: this module's
    docstring).

    Attributes:
        distance: ``(B, N, N)``: int64 hop counts, or float64 weighted lengths
            (``weighted``); :data:`UNREACHABLE` where there is no path; clamped to
            ``max_distance`` when it was given.
        hops: ``(B, N, N)`` int64 number of edges on the path in ``path``
            (:data:`UNREACHABLE` where none: no path, or past the ``cutoff``); equals
            ``distance`` for hop counts unclamped.
        path: ``(B, N, N, L + 1)`` int64 node ids (local) along one shortest path from
            ``i`` to ``j``, then ``-1``; ``L`` is the longest path's hop count. ``path[b,
            i, i] = [i, -1, …]``; unreachable pairs (and those past the ``cutoff``) are all
            ``-1``.
        node_mask: ``(B, N)`` bool, True for a real node (False: padding).
        graph: the :class:`~posenc.graph.Graph` they were computed from (edge features
            are looked up through it).
        weighted: True when ``distance`` sums edge weights.
    """

    distance: Tensor
    hops: Tensor
    path: Tensor
    node_mask: Tensor
    graph: Graph
    weighted: bool

    @property
    def reachable(self) -> Tensor:
        """``(B, N, N)`` bool: a path exists from ``i`` to ``j`` (both real nodes)."""
        return self.distance >= 0


def dense_edges(graph: Graph) -> tuple[Tensor, Tensor, Tensor]:
    """Which pairs are joined by an edge, and its weight, per graph padded to ``N`` nodes.

    Returns:
        ``(edge, weight, node_mask)``: ``edge (B, N, N)`` bool, True where an edge goes
        from ``i`` to ``j`` (both ways for an undirected graph, self-loops included);
        ``weight (B, N, N)`` float64, the lightest of the edges listed from ``i`` to ``j``
        (either way for an undirected graph; 0 where there is no edge): what a path pays;
        ``node_mask (B, N)`` bool.

    Raises:
        MemoryError: naming ``N`` and the bytes (9 per pair) past :data:`MAX_RESULT_BYTES`,
            before allocating.
    """
    sizes = check_graph(graph).sizes
    size = max(sizes)
    batch = len(sizes)
    check_result_size(batch, size, 9, None, "dense edge tables")
    edge = torch.zeros(batch, size, size, dtype=torch.bool)
    weight = torch.zeros(batch, size, size, dtype=torch.float64)
    for index, sub in enumerate(graph.graphs()):
        n = sub.num_nodes
        src, dst = sub.edge_index.cpu()
        edge[index, src, dst] = True
        if not graph.directed:
            edge[index, dst, src] = True
        cost = (
            torch.ones(src.shape[0], dtype=torch.float64)
            if sub.edge_weight is None
            else sub.edge_weight.detach().to(torch.float64).cpu()
        )
        pairs, costs = (src * n + dst, cost)
        if not graph.directed:
            pairs, costs = torch.cat([pairs, dst * n + src]), torch.cat([cost, cost])
        lightest = torch.full((n * n,), math.inf, dtype=torch.float64)
        lightest.scatter_reduce_(0, pairs, costs, reduce="amin")
        weight[index, :n, :n] = lightest.view(n, n).masked_fill(~edge[index, :n, :n], 0.0)
    node_mask = torch.arange(size) < torch.tensor(sizes)[:, None]
    return edge, weight, node_mask


def clamp(distance: Tensor, max_distance: float | None) -> Tensor:
    """``distance`` with the entries past ``max_distance`` lowered to it (None: unchanged)."""
    if max_distance is None:
        return distance
    far = distance > max_distance
    return distance.masked_fill(far, max_distance)


def check_result_size(
    batch: int, size: int, bytes_per_pair: int, max_bytes: object, what: str = "distance table"
) -> None:
    """``MemoryError`` naming ``N`` and the bytes before a ``(B, N, N)`` table is allocated."""
    limit = (
        MAX_RESULT_BYTES if max_bytes is None else check_non_negative_int("max_bytes", max_bytes)
    )
    need = batch * size * size * bytes_per_pair
    if need > limit:
        raise MemoryError(
            f"the {what} of {batch} graph(s) padded to N={size} nodes needs {need:,} "
            f"bytes ({need / 2**30:.2f} GiB, {bytes_per_pair} per pair), above max_bytes="
            f"{limit:,} (default posenc.graph.shortest_path.MAX_RESULT_BYTES); pass a larger "
            "max_bytes to allocate it anyway"
        )


def components(src: Tensor, dst: Tensor, n: int) -> Tensor:
    """Connected component of each node of an undirected graph (edges listed both ways): the
    smallest node id of its component, by min-label propagation with pointer jumping."""
    label = torch.arange(n)
    while True:
        new = label.scatter_reduce(0, dst, label[src], reduce="amin")
        new = new[new]  # pointer jumping: label[v] <= v lies in v's component
        if torch.equal(new, label):
            return label
        label = new


def csr(src: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """A CSR adjacency of the edges ``src → ·`` of an ``n``-node graph: the edges' order by
    source (stable; index the targets and weights with it), each node's out-degree and the
    position of its first edge in that order."""
    order = torch.argsort(src, stable=True)
    degree = torch.bincount(src, minlength=n)
    return order, degree, torch.cumsum(degree, 0) - degree


def out_edges(nodes: Tensor, degree: Tensor, row_start: Tensor) -> tuple[Tensor, Tensor] | None:
    """Every out-edge of each of ``nodes`` (repeats allowed), from :func:`csr`'s ``degree``
    and ``row_start``: ``(which, edge)``, the index into ``nodes`` of each entry and the
    position of its edge in the CSR order; ``None`` when the nodes have no edge."""
    count = degree[nodes]
    total = int(count.sum())
    if total == 0:
        return None
    which = torch.repeat_interleave(torch.arange(count.numel()), count, output_size=total)
    # entry t of node u's run reads edge row_start[u] + t - (first entry of the run)
    shift = row_start[nodes] - (torch.cumsum(count, 0) - count)
    return which, torch.arange(total) + shift[which]

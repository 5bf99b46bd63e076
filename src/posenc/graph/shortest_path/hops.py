"""Hop counts between all pairs of nodes of a batch of graphs, by breadth-first search over
the sparse edge list (what Graphormer's spatial encoding reads), O(N·E), the route for large
graphs. Conventions: :mod:`posenc.graph.shortest_path`."""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int
from posenc.graph.shortest_path._common import (
    PAIRS_PER_BLOCK,
    UNREACHABLE,
    check_result_size,
    clamp,
    components,
    csr,
    out_edges,
)
from posenc.graph.structure import Graph, check_graph

__all__ = ["hop_distances"]


def _bfs_hops(src: Tensor, dst: Tensor, n: int, out: Tensor, cutoff: int | None) -> None:
    """Hop counts from every source of one graph into ``out`` (``(n, n)`` int64, all
    :data:`UNREACHABLE` on entry), by breadth-first search over a CSR adjacency.

    Every source advances one hop per step: the frontier is a list of (source, node) pairs,
    each expanded to its node's neighbours; pairs already reached are dropped, repeats merged.
    Each source reads each edge once per node it reaches: O(N·E) in all. With ``cutoff`` the
    search stops after ``cutoff`` hops (edges listed both ways: undirected).
    """
    flat_out = out.view(-1)
    order, degree, row_start = csr(src, n)
    neighbour = dst[order]
    block = max(1, PAIRS_PER_BLOCK // max(n, 1))
    for first in range(0, n, block):
        sources = torch.arange(first, min(first + block, n))
        flat_out[sources * (n + 1)] = 0
        frontier_source, frontier_node = sources, sources
        hop = 0
        while frontier_node.numel() and (cutoff is None or hop < cutoff):
            hop += 1
            expanded = out_edges(frontier_node, degree, row_start)
            if expanded is None:
                break
            which, edge = expanded
            reached = (frontier_source * n)[which] + neighbour[edge]
            reached = reached[flat_out[reached] < 0]
            # Merge repeats without sorting: each pair's entry briefly holds a ticket (< -1),
            # one write per pair wins, the entry holding the winning ticket is kept.
            ticket = -2 - torch.arange(reached.numel())
            flat_out[reached] = ticket
            reached = reached[flat_out[reached] == ticket]
            flat_out[reached] = hop
            frontier_source, frontier_node = reached // n, reached % n


def hop_distances(
    graph: Graph, *, max_distance: int | None = None, max_bytes: int | None = None
) -> Tensor:
    """Hop counts between all pairs of nodes of each graph, by breadth-first search.

    .. math:: \\varphi(i, j) = \\min \\{ n : i = u_0 \\to u_1 \\to \\dots \\to u_n = j \\}

    One breadth-first search per source over the sparse edge list (a CSR adjacency), all
    sources of a block advancing together one hop per step: O(N·E) work, never an ``N × N``
    adjacency. With ``max_distance`` an undirected graph's search stops after
    ``max_distance`` hops and the pairs left in the same connected component read
    ``max_distance``; a directed graph is searched in full, then clamped. Paper: Ying et al.
    2021, https://arxiv.org/abs/2106.05234 (Graphormer's spatial encoding); tested against
    networkx's ``all_pairs_shortest_path_length`` and equal to
    :func:`~posenc.graph.shortest_path.shortest_paths`' ``distance``.

    Args:
        graph: a graph or a batch of graphs.
        max_distance: clamp reachable distances to at most this (None: exact).
        max_bytes: the largest result allocated, in bytes (None:
            :data:`~posenc.graph.shortest_path.MAX_RESULT_BYTES`, 4 GiB); the result takes
            ``8 · B · N²`` bytes.

    Returns:
        ``(B, N, N)`` int64, :data:`UNREACHABLE` where there is no path or a padding node.

    Raises:
        MemoryError: naming ``N`` and the bytes needed when the result exceeds ``max_bytes``
            (checked before allocating).

    Example::

        >>> g = Graph(torch.tensor([[0, 1], [1, 2]]), num_nodes=3, directed=True)
        >>> hop_distances(g)[0]
        tensor([[ 0,  1,  2],
                [-1,  0,  1],
                [-1, -1,  0]])
    """
    if max_distance is not None:
        max_distance = check_non_negative_int("max_distance", max_distance)
    sizes = check_graph(graph).sizes
    size = max(sizes)
    check_result_size(len(sizes), size, 8, max_bytes)
    distance = torch.full((len(sizes), size, size), UNREACHABLE, dtype=torch.long)
    cutoff = None if graph.directed else max_distance
    for index, sub in enumerate(graph.graphs()):
        n = sub.num_nodes
        src, dst = sub.edge_index.cpu()
        if not graph.directed:
            src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        out = distance[index] if n == size else distance.new_full((n, n), UNREACHABLE)
        _bfs_hops(src, dst, n, out, cutoff)
        if cutoff is not None:
            label = components(src, dst, n)
            out.masked_fill_((out < 0) & (label[:, None] == label[None, :]), cutoff)
        if n != size:
            distance[index, :n, :n] = out
    return clamp(distance, max_distance)

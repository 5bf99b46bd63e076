"""All-pairs shortest paths of every graph of a batch: distances, hop counts and the paths.

Graphormer's spatial encoding reads ``φ(v_i, v_j)``, the shortest-path distance (SPD) from
node ``i`` to node ``j``, and its edge encoding reads the edges along one shortest path.
Both are computed here for a whole batch of graphs (a :class:`~posenc.graph.Graph` with a
node → graph ``batch``) padded to a common size ``N`` (the largest graph), as
:func:`~posenc.graph.to_dense_batch` pads node features:

- :func:`hop_distances`: hop counts by breadth-first search over the sparse edge list (what
  Graphormer uses), O(N·E), the route for large graphs;
- :func:`shortest_paths`: distances (hop counts, or edge weights in float64) and one
  shortest path per pair, by Floyd–Warshall with Graphormer's tie-break (below).

Conventions (every function):

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

Tie-break of the paths (Graphormer's ``floyd_warshall`` + ``get_all_edges`` in
``graphormer/data/algos.pyx``): Floyd–Warshall over intermediate nodes ``k = 0, 1, …,
n − 1`` records for each pair the ``k`` of the last pass that *strictly* shortened it
(``via[i, j]``, ``-1`` for a direct edge); the path is ``path(i, via) + path(via, j)``,
expanded recursively. For each pair ``via`` is the highest-numbered intermediate node of the
path chosen, so the choice is deterministic and tested equal, node for node, to a float64
re-derivation of the reference; distances are tested against networkx.

Example::

    >>> import torch
    >>> from posenc.graph import Graph, shortest_paths
    >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=5)  # a path and node 4
    >>> sp = shortest_paths(g)
    >>> sp.distance[0, 0]
    tensor([ 0,  1,  2,  3, -1])
    >>> sp.path[0, 0, 3]
    tensor([0, 1, 2, 3])
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int
from posenc.graph.structure import Graph, check_graph

__all__ = [
    "MAX_RESULT_BYTES",
    "UNREACHABLE",
    "ShortestPaths",
    "dense_edges",
    "hop_distances",
    "shortest_paths",
]

#: Distance (and hop count) of a pair with no path, or with a padding node.
UNREACHABLE = -1


@dataclass(frozen=True, eq=False)
class ShortestPaths:
    """Shortest paths of a batch of graphs padded to ``N`` nodes (see the module docstring).

    Attributes:
        distance: ``(B, N, N)``: int64 hop counts, or float64 weighted lengths
            (``weighted``); :data:`UNREACHABLE` where there is no path; clamped to
            ``max_distance`` when it was given.
        hops: ``(B, N, N)`` int64 number of edges on the path in ``path``
            (:data:`UNREACHABLE` where none); equals ``distance`` for hop counts unclamped.
        path: ``(B, N, N, L + 1)`` int64 node ids (local) along one shortest path from
            ``i`` to ``j``, then ``-1``; ``L`` is the longest path's hop count. ``path[b,
            i, i] = [i, -1, …]``; unreachable pairs are all ``-1``.
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
        return self.hops >= 0


def dense_edges(graph: Graph) -> tuple[Tensor, Tensor, Tensor]:
    """Which pairs are joined by an edge, and its weight, per graph padded to ``N`` nodes.

    Returns:
        ``(edge, weight, node_mask)``: ``edge (B, N, N)`` bool, True where an edge goes
        from ``i`` to ``j`` (both ways for an undirected graph, self-loops included);
        ``weight (B, N, N)`` float64, the lightest of the edges listed from ``i`` to ``j``
        (either way for an undirected graph; 0 where there is no edge): what a path pays;
        ``node_mask (B, N)`` bool.
    """
    sizes = check_graph(graph).sizes
    size = max(sizes)
    batch = len(sizes)
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


def _check_max_distance(max_distance: object, weighted: bool) -> float | None:
    """``max_distance`` as a Python number: any real ``>= 0`` for weights, an integer for hops."""
    if max_distance is None:
        return None
    if not weighted:
        return check_non_negative_int("max_distance", max_distance)
    ok = isinstance(max_distance, numbers.Real) and not isinstance(max_distance, bool)
    if not ok or not 0 <= float(max_distance) < float("inf"):  # type: ignore[arg-type]
        raise ValueError(f"max_distance must be a finite number >= 0, got {max_distance!r}")
    return float(max_distance)  # type: ignore[arg-type]


def _clamp(distance: Tensor, max_distance: float | None) -> Tensor:
    if max_distance is None:
        return distance
    far = distance > max_distance
    return distance.masked_fill(far, max_distance)


#: Largest distance table (bytes) :func:`hop_distances` and :func:`shortest_paths` allocate
#: unless their ``max_bytes`` says otherwise: 4 GiB, an ``(N, N)`` int64 table of N ≈ 23,000.
MAX_RESULT_BYTES = 4 * 2**30

#: (source, node) pairs one breadth-first step expands at most: bounds the working memory
#: (a few int64 arrays of this length) by running the sources in blocks.
_PAIRS_PER_BLOCK = 2**24


def _check_result_size(batch: int, size: int, bytes_per_pair: int, max_bytes: object) -> None:
    """``MemoryError`` naming ``N`` and the bytes before a ``(B, N, N)`` table is allocated."""
    limit = (
        MAX_RESULT_BYTES if max_bytes is None else check_non_negative_int("max_bytes", max_bytes)
    )
    need = batch * size * size * bytes_per_pair
    if need > limit:
        raise MemoryError(
            f"the distance table of {batch} graph(s) padded to N={size} nodes needs {need:,} "
            f"bytes ({need / 2**30:.2f} GiB, {bytes_per_pair} per pair), above max_bytes="
            f"{limit:,} (default posenc.graph.shortest_path.MAX_RESULT_BYTES); pass a larger "
            "max_bytes to allocate it anyway"
        )


def _components(src: Tensor, dst: Tensor, n: int) -> Tensor:
    """Connected component of each node of an undirected graph (edges listed both ways): the
    smallest node id of its component, by min-label propagation with pointer jumping."""
    label = torch.arange(n)
    while True:
        new = label.scatter_reduce(0, dst, label[src], reduce="amin")
        new = new[new]  # pointer jumping: label[v] <= v lies in v's component
        if torch.equal(new, label):
            return label
        label = new


def _bfs_hops(src: Tensor, dst: Tensor, n: int, out: Tensor, cutoff: int | None) -> None:
    """Hop counts from every source of one graph into ``out`` (``(n, n)`` int64, all
    :data:`UNREACHABLE` on entry), by breadth-first search over a CSR adjacency.

    Every source advances one hop per step: the frontier is a list of (source, node) pairs,
    each expanded to its node's neighbours; pairs already reached are dropped, repeats merged.
    Each source reads each edge once per node it reaches: O(N·E) in all. With ``cutoff`` the
    search stops after ``cutoff`` hops (edges listed both ways: undirected).
    """
    flat_out = out.view(-1)
    order = torch.argsort(src, stable=True)
    neighbour = dst[order]
    degree = torch.bincount(src, minlength=n)
    row_start = torch.cumsum(degree, 0) - degree
    block = max(1, _PAIRS_PER_BLOCK // max(n, 1))
    for first in range(0, n, block):
        sources = torch.arange(first, min(first + block, n))
        flat_out[sources * (n + 1)] = 0
        frontier_source, frontier_node = sources, sources
        hop = 0
        while frontier_node.numel() and (cutoff is None or hop < cutoff):
            hop += 1
            count = degree[frontier_node]
            total = int(count.sum())
            if total == 0:
                break
            which = torch.repeat_interleave(torch.arange(count.numel()), count, output_size=total)
            # entry t of node u's run reads neighbour[row_start[u] + t - (first entry of the run)]
            shift = row_start[frontier_node] - (torch.cumsum(count, 0) - count)
            reached = (frontier_source * n)[which] + neighbour[torch.arange(total) + shift[which]]
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
    networkx's ``all_pairs_shortest_path_length`` and equal to :func:`shortest_paths`'
    ``distance``.

    Args:
        graph: a graph or a batch of graphs.
        max_distance: clamp reachable distances to at most this (None: exact).
        max_bytes: the largest result allocated, in bytes (None:
            :data:`MAX_RESULT_BYTES`, 4 GiB); the result takes ``8 · B · N²`` bytes.

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
    _check_result_size(len(sizes), size, 8, max_bytes)
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
            label = _components(src, dst, n)
            out.masked_fill_((out < 0) & (label[:, None] == label[None, :]), cutoff)
        if n != size:
            distance[index, :n, :n] = out
    return _clamp(distance, max_distance)


def shortest_paths(
    graph: Graph,
    *,
    weighted: bool = False,
    max_distance: float | None = None,
    max_bytes: int | None = None,
) -> ShortestPaths:
    """Distances and one shortest path between all pairs of nodes of each graph.

    Floyd–Warshall in float64, batched over the graphs: for ``k = 0 … N − 1``,

    .. math:: d_{ij} \\leftarrow \\min(d_{ij},\\ d_{ik} + d_{kj}),

    recording ``via[i, j] = k`` when the pass strictly shortens the pair; the paths are then
    expanded from ``via`` (see the module docstring for the tie-break, Graphormer's). Hop
    counts (``weighted=False``, every edge costs 1) are what Graphormer's spatial and edge
    encodings read. Paper: Ying et al. 2021, https://arxiv.org/abs/2106.05234; reference
    ``graphormer/data/algos.pyx`` (``floyd_warshall``, ``gen_edge_input``); distances tested
    against networkx (``all_pairs_shortest_path_length``, ``all_pairs_dijkstra_path_length``).

    Args:
        graph: a graph or a batch of graphs.
        weighted: sum the edges' weights (float64; they must be non-negative) instead of
            counting hops.
        max_distance: clamp reachable distances to at most this (an integer for hop counts);
            ``hops`` and ``path`` are not clamped.
        max_bytes: the largest ``(B, N, N)`` tables allocated, in bytes (None:
            :data:`MAX_RESULT_BYTES`); the weights, distances, via nodes and hops take ``32 ·
            B · N²`` bytes (the paths more: ``8 · B · N² · (L + 1)``). Floyd–Warshall and the
            paths cost O(N³) or more: past a few hundred nodes, :func:`hop_distances`.

    Returns:
        a :class:`ShortestPaths`.

    Raises:
        ValueError: naming ``edge_weight`` when ``weighted`` and a weight is negative;
            naming ``max_distance`` when it is not a number ``>= 0`` (an integer for hops).
        MemoryError: naming ``N`` and the bytes needed when the tables exceed ``max_bytes``
            (checked before allocating).

    Example::

        >>> g = Graph(torch.tensor([[0, 0, 1], [1, 2, 2]]), 3, torch.tensor([1.0, 5.0, 1.0]))
        >>> shortest_paths(g, weighted=True).distance[0, 0]
        tensor([0., 1., 2.], dtype=torch.float64)
    """
    max_distance = _check_max_distance(max_distance, weighted)
    sizes = check_graph(graph).sizes
    _check_result_size(len(sizes), max(sizes), 32, max_bytes)
    if weighted and graph.edge_weight is not None and bool((graph.edge_weight < 0).any()):
        raise ValueError(
            "edge_weight must be non-negative for shortest paths (Floyd–Warshall / Dijkstra "
            f"assume it); got a minimum of {float(graph.edge_weight.min())}"
        )
    edge, weight, node_mask = dense_edges(graph)
    batch, size, _ = edge.shape
    cost = weight if weighted else torch.ones_like(weight)
    inf = torch.tensor(float("inf"), dtype=torch.float64)
    distance = torch.where(edge, cost, inf)
    eye = torch.eye(size, dtype=torch.bool)
    distance = distance.masked_fill(eye, 0.0)
    via = torch.full((batch, size, size), -1, dtype=torch.long)
    for k in range(size):
        # Row k and column k cannot change in pass k (d_kk = 0), so the vectorized pass is
        # the reference's in-place loop.
        through = distance[:, :, k, None] + distance[:, None, k, :]
        shorter = through < distance
        distance = torch.where(shorter, through, distance)
        via = via.masked_fill(shorter, k)
    real = node_mask[:, :, None] & node_mask[:, None, :]
    reachable = torch.isfinite(distance) & real
    path = _expand_paths(via, reachable)
    hops = (path >= 0).sum(-1) - 1  # unreachable: all -1 → -1
    if weighted:
        out = distance.masked_fill(~reachable, float(UNREACHABLE))
    else:
        out = distance.masked_fill(~reachable, UNREACHABLE).long()
    return ShortestPaths(_clamp(out, max_distance), hops, path, node_mask, graph, weighted)


def _expand_paths(via: Tensor, reachable: Tensor) -> Tensor:
    """Expand every pair ``[i, j]`` by inserting ``via[a, b]`` between consecutive nodes
    ``a, b`` until no pair has a via node: Graphormer's recursion ``path(i, via) + path(via,
    j)``, breadth first, for all pairs at once.

    Returns ``(B, N, N, L + 1)`` node ids then ``-1`` (see :class:`ShortestPaths`).
    """
    batch, size, _ = via.shape
    nodes = torch.arange(size)
    start = nodes.view(1, size, 1).expand(batch, size, size)
    end = nodes.view(1, 1, size).expand(batch, size, size)
    end = end.masked_fill(start == end, -1)  # i == j: the path is [i]
    seq = torch.stack([start, end], dim=-1).masked_fill(~reachable[..., None], -1)
    seq = seq.reshape(-1, 2)  # (pairs, width)
    graph_of = torch.arange(batch).repeat_interleave(size * size)[:, None]
    while True:
        a, b = seq[:, :-1], seq[:, 1:]
        inner = via[graph_of, a.clamp(min=0), b.clamp(min=0)]
        inner = inner.masked_fill((a < 0) | (b < 0), -1)
        if not bool((inner >= 0).any()):
            break
        wider = seq.new_full((seq.shape[0], 2 * seq.shape[1] - 1), -1)
        wider[:, 0::2] = seq
        wider[:, 1::2] = inner
        # Close the gaps left by segments without a via node (a stable sort keeps order).
        order = torch.sort((wider < 0).to(torch.int8), dim=1, stable=True).indices
        wider = wider.gather(1, order)
        seq = wider[:, : int((wider >= 0).sum(1).max())]
    width = max(1, int((seq >= 0).sum(1).max())) if seq.numel() else 1
    return seq[:, :width].reshape(batch, size, size, width)

"""Distances and one shortest path between all pairs of nodes of a batch of graphs, with
Graphormer's Floyd–Warshall tie-break: a search per source deriving Floyd–Warshall's via
node, Floyd–Warshall itself for weights whose sums are not exact, and the paths built from
the via nodes. Conventions: :mod:`posenc.graph.shortest_path`.

Tie-break of the paths (Graphormer's ``floyd_warshall`` + ``get_all_edges`` in
``graphormer/data/algos.pyx``): Floyd–Warshall over intermediate nodes ``k = 0, 1, …,
n − 1`` records for each pair the ``k`` of the last pass that *strictly* shortened it
(``via[i, j]``, ``-1`` for a direct edge); the path is ``path(i, via) + path(via, j)``,
expanded recursively. For each pair ``via`` is the highest-numbered intermediate node of the
path chosen, so the choice is deterministic and tested equal, node for node, to a float64
re-derivation of the reference; distances are tested against networkx.

Why a search finds the same ``via`` (exact arithmetic; :func:`shortest_paths` checks that
the weights' sums are exact in float64 and runs Floyd–Warshall itself otherwise). After pass
``k`` Floyd–Warshall holds ``D_{k+1}(i, j)``, the shortest walk whose intermediate nodes are
all ``≤ k``; ``D_0`` is the direct edge. ``D_k`` only decreases with ``k`` and ends at the
distance ``d(i, j)``, so the last strict decrease is at the smallest ``k`` with ``D_{k+1} =
d``:

.. math:: \\mathrm{via}(i, j) = \\min_{P \\text{ shortest } i \\to j}\\ \\max
    \\,\\mathrm{intermediates}(P) \\qquad (-1 \\text{ when a direct edge or } i = j
    \\text{ is shortest}),

the least possible highest intermediate node of a shortest path. The search computes it as
the second key of a lexicographic label ``(length, highest intermediate)`` minimized over
all walks (``_search``); the paths then follow the same recursion as the reference.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int
from posenc.graph.shortest_path._common import (
    PAIRS_PER_BLOCK,
    UNREACHABLE,
    ShortestPaths,
    check_result_size,
    clamp,
    components,
    csr,
    dense_edges,
    out_edges,
)
from posenc.graph.structure import Graph, SubGraph, check_graph

__all__ = ["shortest_paths"]


def shortest_paths(
    graph: Graph,
    *,
    weighted: bool = False,
    max_distance: float | None = None,
    cutoff: bool = False,
    max_bytes: int | None = None,
) -> ShortestPaths:
    """Distances and one shortest path between all pairs of nodes of each graph.

    A search per source over the sparse edge list (breadth-first for hop counts, a
    label-correcting Dijkstra for weights), O(N·E) work for hop counts, that returns the
    distances and, for every pair, the ``via`` node of Graphormer's Floyd–Warshall:

    .. math:: d_{ij} \\leftarrow \\min(d_{ij},\\ d_{ik} + d_{kj}) \\quad (k = 0 … N − 1),

    with ``via[i, j] = k`` for the last pass ``k`` that strictly shortened the pair; the
    paths are then expanded from ``via`` (see the module docstring: the tie-break and why the
    search finds the same ``via``). Hop counts (``weighted=False``, every edge costs 1) are
    what Graphormer's spatial and edge encodings read. Weights whose path sums are not exact
    in float64 (not all multiples of one power of two, or too large) take Floyd–Warshall
    itself, O(N³), so that no path changes with the algorithm. Paper: Ying et al. 2021,
    https://arxiv.org/abs/2106.05234; reference ``graphormer/data/algos.pyx``
    (``floyd_warshall``, ``gen_edge_input``); distances tested against networkx
    (``all_pairs_shortest_path_length``, ``all_pairs_dijkstra_path_length``), ``via`` and
    the paths against Floyd–Warshall.

    Args:
        graph: a graph or a batch of graphs.
        weighted: sum the edges' weights (float64; they must be non-negative) instead of
            counting hops.
        max_distance: clamp reachable distances to at most this (an integer for hop counts);
            without ``cutoff``, ``hops`` and ``path`` are not clamped.
        cutoff: stop each search at ``max_distance`` (which it needs): the pairs farther
            apart read ``max_distance`` in ``distance`` (when reachable) but get no path:
            ``hops`` :data:`UNREACHABLE` and ``path`` all ``-1``. The paths then take at
            most ``max_distance + 1`` columns for hop counts. A directed graph is still
            searched in full (its reachability needs it), only the paths are cut.
        max_bytes: the largest tables allocated, in bytes (None:
            :data:`~posenc.graph.shortest_path.MAX_RESULT_BYTES`): the distances, via nodes
            and hops take ``32 · B · N²`` bytes (checked before the search), the paths ``8 ·
            B · N² · (L + 1)`` (checked once ``L``, the longest path's hop count, is known,
            before they are allocated).

    Returns:
        a :class:`ShortestPaths`.

    Raises:
        ValueError: naming ``edge_weight`` when ``weighted`` and a weight is negative;
            naming ``max_distance`` when it is not a number ``>= 0`` (an integer for hops),
            or ``cutoff`` without it.
        MemoryError: naming ``N`` and the bytes needed when a table exceeds ``max_bytes``
            (checked before allocating).

    Example::

        >>> g = Graph(torch.tensor([[0, 0, 1], [1, 2, 2]]), 3, torch.tensor([1.0, 5.0, 1.0]))
        >>> shortest_paths(g, weighted=True).distance[0, 0]
        tensor([0., 1., 2.], dtype=torch.float64)
    """
    max_distance = _check_max_distance(max_distance, weighted)
    if not isinstance(cutoff, bool):
        raise ValueError(f"cutoff must be True or False, got {cutoff!r}")
    if cutoff and max_distance is None:
        raise ValueError("cutoff=True needs max_distance: the distance the search stops at")
    sizes = check_graph(graph).sizes
    batch, size = len(sizes), max(sizes)
    check_result_size(batch, size, 32, max_bytes)
    if weighted and graph.edge_weight is not None and bool((graph.edge_weight < 0).any()):
        raise ValueError(
            "edge_weight must be non-negative for shortest paths (Floyd–Warshall / Dijkstra "
            f"assume it); got a minimum of {float(graph.edge_weight.min())}"
        )
    edges = [_edge_costs(sub, graph.directed, weighted) for sub in graph.graphs()]
    exact = all(_exact_sums(cost) for _, _, cost in edges)
    node_mask = torch.arange(size) < torch.tensor(sizes)[:, None]
    if exact:
        distance = torch.full((batch, size, size), math.inf, dtype=torch.float64)
        via = torch.full((batch, size, size), -1, dtype=torch.long)
        stop = max_distance if cutoff and not graph.directed else None
        for index, (src, dst, cost) in enumerate(edges):
            n = sizes[index]
            d, v = _search(src, dst, cost, n, stop)
            distance[index, :n, :n], via[index, :n, :n] = d, v
            del d, v
    else:
        distance, via = _floyd_warshall(graph, weighted)
    real = node_mask[:, :, None] & node_mask[:, None, :]
    finite = torch.isfinite(distance) & real
    reachable = finite.clone()
    if cutoff and not graph.directed:  # a pair of one component past the cutoff is far
        for index, (src, dst, _) in enumerate(edges):
            n = sizes[index]
            label = components(src, dst, n)
            reachable[index, :n, :n] |= label[:, None] == label[None, :]
    expand = finite
    if cutoff:
        assert max_distance is not None  # checked above
        expand = finite & (distance <= max_distance)
    if weighted:
        hops = _chosen_hops(via, expand)
    else:  # the chosen path is a shortest one: as many hops as the distance
        hops = torch.where(expand, distance, float(UNREACHABLE)).long()
    longest = int(hops.max())
    check_result_size(batch, size, 8 * (longest + 1), max_bytes, f"paths (L={longest})")
    path = _paths_from_via(via, hops, expand)
    del via
    if cutoff:  # far pairs were not searched: they read the cutoff, as the clamp gives
        assert max_distance is not None
        distance = distance.masked_fill(reachable & ~finite, float(max_distance))
    distance = distance.masked_fill(~reachable, float(UNREACHABLE))
    out = distance if weighted else distance.long()
    return ShortestPaths(clamp(out, max_distance), hops, path, node_mask, graph, weighted)


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


def _edge_costs(sub: SubGraph, directed: bool, weighted: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(src, dst, cost)`` of one graph, each undirected edge listed both ways; ``cost``
    float64, the weight (``weighted``) or 1. Parallel edges stay: the search keeps the
    lightest."""
    src, dst = sub.edge_index.cpu()
    if weighted and sub.edge_weight is not None:
        cost = sub.edge_weight.detach().to(torch.float64).cpu()
    else:
        cost = torch.ones(src.shape[0], dtype=torch.float64)
    if not directed:
        src, dst, cost = torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([cost, cost])
    return src, dst, cost


def _exact_sums(cost: Tensor) -> bool:
    """True when every sum the searches and Floyd–Warshall form is exact in float64: all
    costs are whole multiples of one ``2^-q`` and twice their total stays below ``2^53``
    units (a shortest path uses each listed edge at most once, a candidate ``d(i, k) +
    d(k, j)`` adds two of them). Then both algorithms compare exact lengths."""
    if cost.numel() == 0:
        return True
    if not bool(torch.isfinite(cost).all()):
        return False
    mantissa, exponent = torch.frexp(cost)  # cost = mantissa · 2^exponent, |mantissa| < 1
    units = (mantissa * 2.0**53).long()  # exact: 53 significant bits
    nonzero = units != 0
    if not bool(nonzero.any()):
        return True
    units, exponent = units[nonzero], exponent[nonzero].long()
    trailing = torch.log2((units & -units).double()).round().long()  # trailing zero bits
    fraction_bits = int((53 - exponent - trailing).clamp(min=0).max())
    scaled = cost * 2.0**fraction_bits  # whole numbers, exactly
    if float(scaled.max()) >= 2.0**53:
        return False
    return 2 * int(scaled.long().sum()) < 2**53


def _search(
    src: Tensor, dst: Tensor, cost: Tensor, n: int, stop: float | None
) -> tuple[Tensor, Tensor]:
    """``(distance, via)`` of one graph, ``(n, n)`` each: float64 lengths (inf where not
    reached) and Floyd–Warshall's via node (``-1``: none), by a label-correcting search
    from every source over a CSR adjacency.

    Each pair's label is the pair ``(d, v)``, compared lexicographically: the length of a
    walk from the source and the highest intermediate node on it (``-1`` for none). A
    label ``(d, v)`` at node ``u`` offers ``(d + w, u == source ? -1 : max(v, u))`` to each
    out-neighbour; the sources of a block advance together, each round expanding the pairs
    whose label dropped in the previous one (Bellman–Ford in rounds, the frontier of a
    breadth-first search when every cost is 1: each pair is then settled once, O(N·E)).
    Extending a walk is monotone in this order, so the labels end at the least ``(d, v)``
    over all walks: the distance and the smallest possible highest intermediate node of a
    shortest path, which is ``via`` (module docstring). With ``stop`` no label past it is
    offered: the pairs within it still get theirs, since their shortest paths only pass
    nodes at most as far.
    """
    distance = torch.full((n, n), math.inf, dtype=torch.float64)
    via = torch.full((n, n), -1, dtype=torch.long)
    flat_d, flat_v = distance.view(-1), via.view(-1)
    order, degree, row_start = csr(src, n)
    neighbour, weight = dst[order], cost[order]
    block = max(1, PAIRS_PER_BLOCK // max(n, 1))
    stamp = torch.empty(min(block, n) * n, dtype=torch.long)  # scratch to merge repeats
    unit = bool((cost == 1).all())
    for first in range(0, n, block):
        sources = torch.arange(first, min(first + block, n))
        flat_d[sources * (n + 1)] = 0.0
        frontier = sources * (n + 1)  # flat (source, node) pairs
        hop = 0
        while frontier.numel() and not (unit and stop is not None and hop >= stop):
            source, node = frontier // n, frontier % n
            expanded = out_edges(node, degree, row_start)
            if expanded is None:
                break
            which, edge = expanded
            highest = torch.maximum(flat_v[frontier], node).masked_fill(node == source, -1)
            offer_v = highest[which]
            target = (source * n)[which] + neighbour[edge]
            if unit:  # breadth first: each pair is settled by the first hop reaching it
                hop += 1
                fresh = flat_d[target] > hop
                changed, offer_v = target[fresh], offer_v[fresh]
                flat_d[changed] = float(hop)
                flat_v[changed] = n
                flat_v.scatter_reduce_(0, changed, offer_v, reduce="amin")
            else:
                offer_d = flat_d[frontier][which] + weight[edge]
                changed = _relax(flat_d, flat_v, target, offer_d, offer_v, stop)
            # Merge repeats without sorting: one write per pair wins its ticket.
            ticket = torch.arange(changed.numel())
            local = changed - first * n
            stamp[local] = ticket
            frontier = changed[stamp[local] == ticket]
    return distance, via


def _relax(
    flat_d: Tensor,
    flat_v: Tensor,
    target: Tensor,
    offer_d: Tensor,
    offer_v: Tensor,
    stop: float | None,
) -> Tensor:
    """Lower the labels ``(flat_d, flat_v)`` at ``target`` to the least of the offers
    (repeated targets allowed); returns the targets whose label dropped."""
    keep = offer_d <= flat_d[target]
    if stop is not None:
        keep &= offer_d <= stop
    target, offer_d, offer_v = target[keep], offer_d[keep], offer_v[keep]
    old_d, old_v = flat_d[target], flat_v[target]
    flat_d.scatter_reduce_(0, target, offer_d, reduce="amin")
    new_d = flat_d[target]
    shorter = new_d < old_d
    flat_v[target[shorter]] = torch.iinfo(torch.long).max  # restarts from the offers
    tie = offer_d == new_d
    flat_v.scatter_reduce_(0, target[tie], offer_v[tie], reduce="amin")
    return target[shorter | (flat_v[target] < old_v)]


def _floyd_warshall(graph: Graph, weighted: bool) -> tuple[Tensor, Tensor]:
    """Graphormer's Floyd–Warshall in float64, batched over the graphs: ``(distance, via)``
    ``(B, N, N)``, inf where there is no path (the route for weights whose sums are not
    exact, and the tests' reference)."""
    edge, weight, _ = dense_edges(graph)
    size = edge.shape[1]
    cost = weight if weighted else torch.ones_like(weight)
    distance = torch.where(edge, cost, math.inf)
    del edge, weight, cost
    distance = distance.masked_fill(torch.eye(size, dtype=torch.bool), 0.0)
    via = torch.full(distance.shape, -1, dtype=torch.long)
    for k in range(size):
        # Row k and column k cannot change in pass k (d_kk = 0), so the vectorized pass is
        # the reference's in-place loop.
        through = distance[:, :, k, None] + distance[:, None, k, :]
        shorter = through < distance
        distance = torch.where(shorter, through, distance)
        via = via.masked_fill(shorter, k)
    return distance, via


def _via_groups(via: Tensor, expand: Tensor) -> list[tuple[int, Tensor]]:
    """The flat ids ``b·N² + i·N + j`` of the pairs to expand that have a via node, grouped
    by it in increasing order. ``via[i, k] < k`` and ``via[k, j] < k`` for ``k = via[i,
    j]`` (the two halves of the chosen path have their intermediates below ``k``), so a
    group only reads pairs of earlier groups."""
    flat = via.reshape(-1)
    pairs = torch.nonzero((expand & (via >= 0)).reshape(-1)).squeeze(1)
    keys, order = torch.sort(flat[pairs], stable=True)
    pairs = pairs[order]
    values, counts = torch.unique_consecutive(keys, return_counts=True)
    return list(zip(values.tolist(), torch.split(pairs, counts.tolist()), strict=True))


def _halves(pairs: Tensor, k: int, size: int) -> tuple[Tensor, Tensor]:
    """Flat ids of ``(i, k)`` and ``(k, j)`` for the flat pairs ``(b, i, j)``."""
    i, j = (pairs // size) % size, pairs % size
    return pairs + (k - j), pairs + (k - i) * size


def _chosen_hops(via: Tensor, expand: Tensor) -> Tensor:
    """Edges on the chosen path of each pair to expand (``-1`` elsewhere): 0 for ``i =
    j``, 1 for a direct edge, ``hops(i, k) + hops(k, j)`` through ``k = via[i, j]``."""
    size = via.shape[-1]
    eye = torch.eye(size, dtype=torch.bool)
    hops = (~eye).long().repeat(via.shape[0], 1, 1).masked_fill(~expand, UNREACHABLE)
    flat = hops.reshape(-1)
    for k, pairs in _via_groups(via, expand):
        left, right = _halves(pairs, k, size)
        flat[pairs] = flat[left] + flat[right]
    return hops


def _paths_from_via(via: Tensor, hops: Tensor, expand: Tensor) -> Tensor:
    """Graphormer's recursion ``path(i, j) = path(i, k) + path(k, j)`` with ``k = via[i,
    j]`` for every pair to expand, ``(B, N, N, L + 1)`` node ids then ``-1``: the pairs
    without a via node first (``[i]`` or ``[i, j]``), then the others by increasing ``k``,
    each reading two rows built before it. O(B·N²·L)."""
    batch, size, _ = via.shape
    width = int(hops.max()) + 1
    path = torch.full((batch * size * size, width), -1, dtype=torch.long)
    nodes = torch.arange(size)
    start = nodes.view(1, size, 1).expand(batch, size, size).reshape(-1)
    end = nodes.view(1, 1, size).expand(batch, size, size).reshape(-1)
    flat_expand = expand.reshape(-1)
    path[:, 0] = start.masked_fill(~flat_expand, -1)
    if width > 1:
        direct = flat_expand & (via.reshape(-1) < 0) & (start != end)
        path[:, 1] = end.masked_fill(~direct, -1)
    flat_hops = hops.reshape(-1)
    columns = torch.arange(width)
    for k, pairs in _via_groups(via, expand):
        left, right = _halves(pairs, k, size)
        split = flat_hops[left][:, None]  # the left half's nodes before k
        shifted = (columns - split).clamp(min=0)
        path[pairs] = torch.where(columns < split, path[left], path[right].gather(1, shifted))
    return path.view(batch, size, size, width)

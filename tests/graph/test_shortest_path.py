"""Shortest paths: networkx parity (hops and weights, directed, disconnected, batched), the
reference's Floyd–Warshall paths node for node, clamps, permutations, bad input."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import pytest
import torch
from torch.testing import assert_close

from posenc.graph import (
    UNREACHABLE,
    Graph,
    dense_edges,
    from_networkx,
    hop_distances,
    shortest_paths,
)
from tests.graph.graphormer_reference import (
    batch_graphs,
    dense_listed,
    floyd_warshall,
    path_nodes,
    random_graph,
)

CASES = [  # (nodes, edge probability, seed): sparse ones are disconnected
    (1, 0.5, 0),
    (6, 0.15, 1),
    (9, 0.3, 2),
    (12, 0.2, 3),
]


def _nx_distances(g: nx.Graph, size: int, weighted: bool) -> torch.Tensor:
    dtype = torch.float64 if weighted else torch.long
    out = torch.full((size, size), UNREACHABLE, dtype=dtype)
    lengths = (
        nx.all_pairs_dijkstra_path_length(g, weight="weight")
        if weighted
        else nx.all_pairs_shortest_path_length(g)
    )
    for u, row in lengths:
        for v, d in row.items():
            out[u, v] = d
    return out


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_distances_match_networkx_on_a_batch(directed: bool, weighted: bool) -> None:
    pairs = [random_graph(n, p, s, directed=directed, weighted=True) for n, p, s in CASES]
    if not weighted:
        pairs = [(g, Graph(h.edge_index, h.num_nodes, directed=directed)) for g, h in pairs]
    batch = batch_graphs([h for _, h in pairs])
    size = max(h.num_nodes for _, h in pairs)
    expected = torch.full((len(pairs), size, size), UNREACHABLE, dtype=torch.float64)
    for b, (g, h) in enumerate(pairs):
        expected[b, : h.num_nodes, : h.num_nodes] = _nx_distances(g, h.num_nodes, weighted).double()
    paths = shortest_paths(batch, weighted=weighted)
    assert paths.distance.dtype == (torch.float64 if weighted else torch.long)
    assert_close(paths.distance.double(), expected, rtol=1e-12, atol=0)
    if not weighted:
        assert torch.equal(hop_distances(batch), expected.long())
        assert torch.equal(paths.hops, paths.distance)
    assert torch.equal(paths.reachable, expected >= 0)
    assert paths.node_mask.tolist() == [[i < h.num_nodes for i in range(size)] for _, h in pairs]


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_paths_equal_the_reference_floyd_warshall(directed: bool, weighted: bool) -> None:
    # Graphormer's tie-break (algos.pyx), node for node; integer weights keep its sums exact.
    graphs = [
        random_graph(n, 0.35, s, directed=directed, weighted=weighted, zeros=False)[1]
        for n, s in [(7, 4), (10, 5), (3, 6)]
    ]
    batch = batch_graphs(graphs)
    paths = shortest_paths(batch, weighted=weighted)
    for b, adj in enumerate(dense_listed(batch)):
        n = len(adj)
        dist, via = floyd_warshall(adj)
        for i in range(n):
            for j in range(n):
                nodes = path_nodes(via, i, j)
                got = paths.path[b, i, j]
                assert got[got >= 0].tolist() == nodes, (b, i, j)
                assert int(paths.hops[b, i, j]) == len(nodes) - 1
                want = UNREACHABLE if dist[i][j] == 510 else dist[i][j]
                assert float(paths.distance[b, i, j]) == want


def test_paths_are_shortest_walks_along_edges() -> None:
    g, graph = random_graph(11, 0.3, 7, directed=True, weighted=True)
    paths = shortest_paths(graph, weighted=True)
    for i in range(11):
        for j in range(11):
            nodes = paths.path[0, i, j]
            nodes = nodes[nodes >= 0].tolist()
            if not paths.reachable[0, i, j]:
                assert nodes == [] and not nx.has_path(g, i, j)
                continue
            assert nodes[0] == i and nodes[-1] == j
            length = sum(g.edges[u, v]["weight"] for u, v in itertools.pairwise(nodes))
            assert math.isclose(length, float(paths.distance[0, i, j]), abs_tol=1e-12)


def test_conventions_self_loops_zero_weights_and_both_directions() -> None:
    # 0 -> 1 weight 0 (an edge), a self-loop on 2, undirected 1 - 2 listed both ways.
    edge_index = torch.tensor([[0, 2, 1, 2], [1, 2, 2, 1]])
    weight = torch.tensor([0.0, 7.0, 2.0, 2.0])
    paths = shortest_paths(Graph(edge_index, 4, weight), weighted=True)
    expected = torch.tensor(
        [[0.0, 0.0, 2.0, -1.0], [0.0, 0.0, 2.0, -1.0], [2.0, 2.0, 0.0, -1.0], [-1, -1, -1, 0]],
        dtype=torch.float64,
    )
    assert_close(paths.distance[0], expected)
    assert paths.path[0, 3, 3].tolist()[:1] == [3] and paths.hops[0, 3, 3] == 0


def test_max_distance_clamps_reachable_pairs_only() -> None:
    line = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]), 6)  # node 5 isolated
    exact = shortest_paths(line)
    clamped = shortest_paths(line, max_distance=2)
    assert clamped.distance[0, 0].tolist() == [0, 1, 2, 2, 2, UNREACHABLE]
    assert torch.equal(clamped.hops, exact.hops) and torch.equal(clamped.path, exact.path)
    assert torch.equal(hop_distances(line, max_distance=2), clamped.distance)
    weighted = shortest_paths(line, weighted=True, max_distance=2.5)
    assert weighted.distance[0, 0].tolist() == [0.0, 1.0, 2.0, 2.5, 2.5, -1.0]


def test_distances_permute_with_the_nodes() -> None:
    _, graph = random_graph(10, 0.25, 8, directed=True)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    inverse = torch.argsort(perm)  # new id of each old node
    moved = Graph(inverse[graph.edge_index], 10, directed=True)
    d = shortest_paths(graph).distance[0]
    assert torch.equal(shortest_paths(moved).distance[0], d[perm][:, perm])
    assert torch.equal(hop_distances(moved)[0], d[perm][:, perm])


def test_negative_weights_raise_only_where_weights_are_read() -> None:
    graph = Graph(torch.tensor([[0, 1], [1, 2]]), 3, torch.tensor([1.0, -2.0]))
    with pytest.raises(ValueError, match="edge_weight"):
        shortest_paths(graph, weighted=True)
    assert shortest_paths(graph).distance[0, 0].tolist() == [0, 1, 2]  # hops ignore weights


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_distance": -1}, "max_distance"),
        ({"max_distance": 1.5}, "max_distance"),
        ({"max_distance": True}, "max_distance"),
        ({"weighted": True, "max_distance": float("inf")}, "max_distance"),
        ({"weighted": True, "max_distance": -0.5}, "max_distance"),
    ],
)
def test_bad_max_distance(kwargs: dict, name: str) -> None:
    graph = Graph(torch.tensor([[0], [1]]), 2)
    with pytest.raises(ValueError, match=name):
        shortest_paths(graph, **kwargs)
    if not kwargs.get("weighted"):
        with pytest.raises(ValueError, match=name):
            hop_distances(graph, **kwargs)


@pytest.mark.parametrize("directed", [False, True])
def test_parallel_edges_cost_the_lightest_as_networkx(directed: bool) -> None:
    edges = [(0, 1, 1.0), (0, 1, 5.0), (1, 2, 1.0), (2, 0, 4.0), (2, 0, 7.0)]
    multigraph = nx.MultiDiGraph() if directed else nx.MultiGraph()
    multigraph.add_weighted_edges_from(edges)
    graph = from_networkx(multigraph, weight="weight")
    expected = torch.full((3, 3), float("nan"), dtype=torch.float64)
    for i, lengths in nx.all_pairs_dijkstra_path_length(multigraph):
        for j, length in lengths.items():
            expected[i, j] = length
    got = shortest_paths(graph, weighted=True).distance[0]
    torch.testing.assert_close(got, expected.nan_to_num(UNREACHABLE))
    assert float(got[0, 2]) == 2.0


# --- hop_distances by breadth-first search on the sparse edge list -------------------------


def _dense_hop_distances(graph: Graph, max_distance: int | None = None) -> torch.Tensor:
    """The former ``hop_distances`` (one dense boolean frontier product per hop, all sources
    at once; benchmarks/graph_distances.py times it), the reference of the sparse search."""
    from benchmarks.graph_distances import dense_hop_distances

    distance = dense_hop_distances(graph)
    if max_distance is not None:
        distance = distance.masked_fill(distance > max_distance, max_distance)
    return distance


def _messy_graph(n: int, edges: int, seed: int, directed: bool) -> Graph:
    """``edges`` random edges on ``n`` nodes: self-loops, repeats and several components."""
    generator = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, edges), generator=generator)
    loops = torch.arange(0, n, 3)[: max(1, n // 4)]
    edge_index = torch.cat([edge_index, edge_index[:, :3], torch.stack([loops, loops])], dim=1)
    return Graph(edge_index, n, directed=directed)


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("max_distance", [None, 0, 1, 2, 3, 7])
def test_hop_distances_equal_the_dense_search_on_messy_batches(
    directed: bool, max_distance: int | None
) -> None:
    graphs = [
        _messy_graph(n, e, seed, directed)
        for seed, (n, e) in enumerate([(1, 0), (7, 4), (13, 9), (30, 25), (24, 60), (40, 30)])
    ]
    batch = batch_graphs(graphs)
    expected = _dense_hop_distances(batch, max_distance)
    exact = _dense_hop_distances(batch)
    assert (exact == UNREACHABLE).any() and (exact > 7).any()  # not trivial
    assert torch.equal(hop_distances(batch, max_distance=max_distance), expected)
    assert torch.equal(shortest_paths(batch, max_distance=max_distance).distance, expected)
    for index, graph in enumerate(graphs):  # one graph alone: no padding
        n = graph.num_nodes
        single = hop_distances(graph, max_distance=max_distance)
        assert torch.equal(single[0], expected[index, :n, :n])


@pytest.mark.parametrize(
    "fixture",
    [
        nx.karate_club_graph(),
        nx.petersen_graph(),
        nx.convert_node_labels_to_integers(nx.grid_2d_graph(6, 7)),
        nx.path_graph(60),
        nx.cycle_graph(45),
        nx.disjoint_union(nx.star_graph(9), nx.complete_graph(5)),
        nx.gnp_random_graph(50, 0.08, seed=3, directed=True),
    ],
    ids=["karate", "petersen", "grid", "path", "cycle", "star+clique", "directed"],
)
def test_hop_distances_on_published_graphs_equal_networkx_and_floyd_warshall(
    fixture: nx.Graph,
) -> None:
    graph = from_networkx(fixture)
    n = fixture.number_of_nodes()
    expected = _nx_distances(fixture, n, weighted=False)
    distance = hop_distances(graph)
    assert torch.equal(distance[0], expected)
    assert torch.equal(distance, _dense_hop_distances(graph))
    assert torch.equal(distance, shortest_paths(graph).distance)
    reference, _ = floyd_warshall(dense_listed(graph)[0])
    far = torch.tensor(reference) >= 510
    assert torch.equal(distance[0], torch.tensor(reference).long().masked_fill(far, UNREACHABLE))
    for cap in (1, 4):
        assert torch.equal(hop_distances(graph, max_distance=cap), distance.clamp(max=cap))


def test_hop_distances_cut_off_keeps_unreachable_apart_from_far() -> None:
    # Two chains 0-…-5 and 6-…-9: beyond the cutoff in one chain reads the cutoff, the
    # other chain stays unreachable.
    graph = Graph(torch.tensor([[0, 1, 2, 3, 4, 6, 7, 8], [1, 2, 3, 4, 5, 7, 8, 9]]), 10)
    distance = hop_distances(graph, max_distance=2)[0]
    assert distance[0].tolist() == [0, 1, 2, 2, 2, 2, -1, -1, -1, -1]
    assert distance[9].tolist() == [-1, -1, -1, -1, -1, -1, 2, 2, 1, 0]
    assert hop_distances(graph, max_distance=0)[0, 3].tolist() == [0] * 6 + [-1] * 4


def test_the_result_size_is_checked_before_allocating() -> None:
    from posenc.graph.shortest_path import MAX_RESULT_BYTES

    assert MAX_RESULT_BYTES == 4 * 2**30
    huge = Graph(torch.tensor([[0], [1]]), 1_000_000)  # 8 TB of int64 distances
    with pytest.raises(MemoryError, match=r"N=1000000 .*8,000,000,000,000 bytes"):
        hop_distances(huge)
    with pytest.raises(MemoryError, match=r"N=1000000 .*32,000,000,000,000 bytes"):
        shortest_paths(huge)
    small = Graph(torch.tensor([[0], [1]]), 10)  # 800 bytes
    with pytest.raises(MemoryError, match=r"N=10 .*800 bytes.*max_bytes=799"):
        hop_distances(small, max_bytes=799)
    assert torch.equal(hop_distances(small, max_bytes=800), hop_distances(small))
    with pytest.raises(MemoryError, match="max_bytes=3,199"):
        shortest_paths(small, max_bytes=3199)
    with pytest.raises(ValueError, match="max_bytes"):
        hop_distances(small, max_bytes=-1)
    with pytest.raises(MemoryError, match=r"dense edge tables .*N=1000000 .*9,000,000,000,000"):
        dense_edges(huge)


# --- the search equals Floyd–Warshall: distances, via nodes, hops and paths ----------------


def _tied_graph(n: int, edges: int, seed: int, directed: bool, weights: tuple[float, ...]) -> Graph:
    """Random edges (self-loops, repeats, several components) with weights drawn from a few
    values, so that many pairs have several shortest paths (ties) and weight-0 edges."""
    generator = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, edges), generator=generator)
    choice = torch.randint(0, len(weights), (edges,), generator=generator)
    return Graph(edge_index, n, torch.tensor(weights, dtype=torch.float64)[choice], directed)


def _floyd_warshall_result(graph: Graph, monkeypatch: pytest.MonkeyPatch, **kwargs: object):
    import posenc.graph.shortest_path.paths as paths

    with monkeypatch.context() as patch:
        patch.setattr(paths, "_exact_sums", lambda cost: False)
        return shortest_paths(graph, **kwargs)  # type: ignore[arg-type]


def _assert_same(got, want) -> None:  # type: ignore[no-untyped-def]
    assert torch.equal(got.distance, want.distance)
    assert torch.equal(got.hops, want.hops)
    assert torch.equal(got.path, want.path)
    assert torch.equal(got.node_mask, want.node_mask)


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("weights", [None, (0.0, 1.0, 2.0), (0.0, 0.5, 1.5, 3.0), (0.0,)], ids=str)
def test_the_search_equals_floyd_warshall_on_many_random_graphs(
    directed: bool, weights: tuple[float, ...] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 12 batches of 3 graphs: sparse (many components) to dense (many ties), weight-0 edges
    # (zero-length cycles), parallel edges of different weights, self-loops, padding.
    for seed in range(12):
        sizes = [(1 + (seed * 7 + t * 5) % 17, (seed * 3 + t * 11) % 40) for t in range(3)]
        graphs = [
            _tied_graph(n, e, 100 * seed + t, directed, weights or (1.0,))
            for t, (n, e) in enumerate(sizes)
        ]
        batch = batch_graphs(graphs)
        weighted = weights is not None
        got = shortest_paths(batch, weighted=weighted)
        want = _floyd_warshall_result(batch, monkeypatch, weighted=weighted)
        _assert_same(got, want)


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("max_distance", [0, 1, 2, 4])
def test_cutoff_keeps_the_paths_within_it_and_drops_the_others(
    directed: bool, weighted: bool, max_distance: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    graphs = [_tied_graph(n, e, s, directed, (0.0, 1.0, 2.0)) for s, (n, e) in
              enumerate([(12, 14), (25, 30), (9, 4), (1, 0)])]  # fmt: skip
    batch = batch_graphs(graphs)
    full = shortest_paths(batch, weighted=weighted)
    cut = shortest_paths(batch, weighted=weighted, max_distance=max_distance, cutoff=True)
    within = full.reachable & (full.distance <= max_distance)
    assert (full.reachable & ~within).any() and within.any()  # not trivial
    # distances as the clamp gives them; paths and hops of the pairs within, none beyond
    clamped = shortest_paths(batch, weighted=weighted, max_distance=max_distance)
    assert torch.equal(cut.distance, clamped.distance)
    assert torch.equal(cut.reachable, full.reachable)
    assert torch.equal(cut.hops, full.hops.masked_fill(~within, UNREACHABLE))
    width = cut.path.shape[-1]
    assert torch.equal(cut.path, full.path[..., :width].masked_fill(~within[..., None], -1))
    assert (full.path[..., width:] < 0).all() or not within.all()
    if not weighted:
        assert width == min(max_distance, int(full.hops.max())) + 1
    want = _floyd_warshall_result(
        batch, monkeypatch, weighted=weighted, max_distance=max_distance, cutoff=True
    )
    _assert_same(cut, want)


def test_cutoff_needs_max_distance() -> None:
    graph = Graph(torch.tensor([[0], [1]]), 2)
    with pytest.raises(ValueError, match="max_distance"):
        shortest_paths(graph, cutoff=True)
    with pytest.raises(ValueError, match="cutoff"):
        shortest_paths(graph, max_distance=1, cutoff=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("weights", "exact"),
    [
        ([1.0, 2.0, 0.0], True),
        ([0.5, 0.25, 3.75], True),
        ([2.0**-40, 1.0], True),
        ([0.1, 1.0], False),  # 0.1 is not a multiple of a power of two small enough
        ([2.0**52, 2.0**52], False),  # sums past 2^53
        ([1.0, float("inf")], False),
    ],
)
def test_weights_whose_sums_are_not_exact_take_floyd_warshall(
    weights: list[float], exact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc.graph.shortest_path.paths import _exact_sums

    assert _exact_sums(torch.tensor(weights, dtype=torch.float64)) is exact
    if not exact or not all(math.isfinite(w) for w in weights):
        return
    m = len(weights)  # a path 0 - 1 - … - m and the edge 0 - m
    edge_index = torch.tensor([[*range(m), 0], [*range(1, m + 1), m]])
    graph = Graph(edge_index, m + 1, torch.tensor([*weights, sum(weights)]))
    _assert_same(
        shortest_paths(graph, weighted=True),
        _floyd_warshall_result(graph, monkeypatch, weighted=True),
    )


def test_non_exact_weights_give_floyd_warshall_paths() -> None:
    # 0.1 + 0.2 > 0.3 in float64: Floyd–Warshall's sums decide, as in the reference.
    weight = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    graph = Graph(torch.tensor([[0, 1, 0], [1, 2, 2]]), 3, weight)
    paths = shortest_paths(graph, weighted=True)
    assert paths.path[0, 0, 2].tolist() == [0, 2]
    assert float(paths.distance[0, 0, 2]) == 0.3


def test_the_path_table_size_is_checked_before_allocating() -> None:
    chain = Graph(torch.stack([torch.arange(99), torch.arange(1, 100)]), 100)  # L = 99
    tables = 32 * 100 * 100
    with pytest.raises(MemoryError, match=r"paths \(L=99\) .*N=100 .*8,000,000 bytes"):
        shortest_paths(chain, max_bytes=8_000_000 - 1)
    assert shortest_paths(chain, max_bytes=8_000_000).path.shape == (1, 100, 100, 100)
    cut = shortest_paths(chain, max_distance=3, cutoff=True, max_bytes=max(tables, 320_000))
    assert cut.path.shape == (1, 100, 100, 4)

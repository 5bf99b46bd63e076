"""Random-walk encodings: RWSE against PyG's AddRandomWalkPE and explicit matrix powers,
RRWP against explicit matrix powers, node order, batches, and bad input."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from torch.testing import assert_close
from torch_geometric.data import Data
from torch_geometric.transforms import AddRandomWalkPE

from posenc.graph import Graph, from_networkx, random_walk_pe, rrwp, transition_matrix


def explicit_powers(graph: nx.Graph, steps: int, start: int) -> torch.Tensor:
    """``M^start .. M^(start + steps - 1)`` of ``M = D^{-1} A`` from networkx's adjacency,
    ``(n, n, steps)`` in float64 (isolated rows 0)."""
    a = torch.from_numpy(nx.to_numpy_array(graph)).double()
    degree = a.sum(1, keepdim=True)
    m = torch.where(degree > 0, a / degree.clamp(min=1e-300), 0.0)
    return torch.stack([torch.linalg.matrix_power(m, t) for t in range(start, start + steps)], -1)


def with_loops_and_isolated() -> nx.Graph:
    graph = nx.cycle_graph(5)
    graph.add_edge(0, 0)
    graph.add_edge(2, 5)
    graph.add_node(6)  # isolated
    return graph


def weighted_graph() -> nx.Graph:
    graph = nx.connected_watts_strogatz_graph(9, 4, 0.5, seed=2)
    gen = torch.Generator().manual_seed(0)
    for u, v in graph.edges:
        graph.edges[u, v]["weight"] = float(torch.rand((), generator=gen)) + 0.2
    return graph


def directed_graph() -> nx.DiGraph:
    return nx.DiGraph([(0, 1), (1, 2), (2, 0), (2, 3), (3, 3), (1, 4)])


GRAPHS = {
    "petersen": nx.petersen_graph(),
    "loops_isolated": with_loops_and_isolated(),
    "directed": directed_graph(),
    "ladder": nx.ladder_graph(4),
}


def pyg_data(graph: nx.Graph) -> Data:
    """PyG's layout: an undirected edge listed both ways, a self-loop once."""
    g = from_networkx(graph)
    ei = g.edge_index
    if not g.directed:
        reverse = ei.flip(0)[:, ei[0] != ei[1]]
        ei = torch.cat([ei, reverse], 1)
    return Data(edge_index=ei, num_nodes=g.num_nodes)


@pytest.mark.parametrize("name", GRAPHS)
def test_rwse_matches_pyg_add_random_walk_pe(name: str) -> None:
    graph = GRAPHS[name]
    theirs = AddRandomWalkPE(walk_length=6)(pyg_data(graph)).random_walk_pe
    ours = random_walk_pe(from_networkx(graph), 6)
    assert ours.shape == (graph.number_of_nodes(), 6) and ours.dtype == torch.float64
    assert_close(ours.float(), theirs, rtol=1e-6, atol=1e-7)  # PyG computes in float32


@pytest.mark.parametrize("graph", [weighted_graph(), *GRAPHS.values()], ids=["weighted", *GRAPHS])
def test_rwse_is_the_diagonal_of_matrix_powers(graph: nx.Graph) -> None:
    ours = random_walk_pe(from_networkx(graph, weight="weight"), 5)
    expected = explicit_powers(graph, 5, start=1).diagonal(0, 0, 1).T  # (n, 5)
    assert_close(ours, expected, rtol=0, atol=1e-14)


def test_transition_matrix_rows_and_isolated_nodes() -> None:
    graph = with_loops_and_isolated()
    m = transition_matrix(from_networkx(graph))[0]
    sums = m.sum(1)
    assert_close(sums[:6], torch.ones(6, dtype=torch.float64), rtol=0, atol=1e-15)
    assert sums[6] == 0  # isolated: a zero row
    assert_close(m[0, 0], torch.tensor(1 / 3, dtype=torch.float64))  # the loop is a step


@pytest.mark.parametrize("graph", [weighted_graph(), *GRAPHS.values()], ids=["weighted", *GRAPHS])
@pytest.mark.parametrize("steps", [1, 2, 5])
def test_rrwp_is_identity_then_matrix_powers(graph: nx.Graph, steps: int) -> None:
    g = from_networkx(graph, weight="weight")
    out = rrwp(g, steps)
    n = g.num_nodes
    assert out.pairs.shape == (1, n, n, steps) and out.mask.all()
    assert_close(out.pairs[0], explicit_powers(graph, steps, start=0), rtol=0, atol=1e-14)
    if steps > 1:  # GRIT's node encoding, the diagonal, is [1, RWSE]
        diagonal = out.pairs[0].diagonal(0, 0, 1).T
        assert_close(diagonal[:, 1:], random_walk_pe(g, steps - 1), rtol=0, atol=0)
        assert bool((diagonal[:, 0] == 1).all())


def batch_of(parts: list[nx.Graph]) -> Graph:
    union = from_networkx(nx.disjoint_union_all(parts), weight="weight")
    sizes = torch.tensor([p.number_of_nodes() for p in parts])
    batch = torch.repeat_interleave(torch.arange(len(parts)), sizes)
    return Graph(union.edge_index, union.num_nodes, union.edge_weight, batch=batch)


def test_batches_equal_each_graph_alone_with_padding() -> None:
    parts = [nx.path_graph(3), weighted_graph(), with_loops_and_isolated()]
    for part in parts:
        for u, v in part.edges:
            part.edges[u, v].setdefault("weight", 1.0)
    g = batch_of(parts)
    rw = random_walk_pe(g, 4)
    pairs, mask = rrwp(g, 4)
    width = max(p.number_of_nodes() for p in parts)
    assert pairs.shape == (3, width, width, 4)
    start = 0
    for index, part in enumerate(parts):
        alone = from_networkx(part, weight="weight")
        n = alone.num_nodes
        assert_close(rw[start : start + n], random_walk_pe(alone, 4), rtol=0, atol=0)
        assert_close(pairs[index, :n, :n], rrwp(alone, 4).pairs[0], rtol=0, atol=0)
        assert pairs[index, n:].abs().sum() == 0 and pairs[index, :, n:].abs().sum() == 0
        assert mask[index].tolist() == [True] * n + [False] * (width - n)
        start += n


@pytest.mark.parametrize("name", GRAPHS)
def test_node_permutation_permutes_the_encodings(name: str) -> None:
    g = from_networkx(GRAPHS[name])
    n = g.num_nodes
    perm = torch.randperm(n)  # new node i is old node perm[i]
    permuted = Graph(torch.argsort(perm)[g.edge_index], n, directed=g.directed)
    assert_close(random_walk_pe(permuted, 5), random_walk_pe(g, 5)[perm], rtol=0, atol=1e-14)
    ours, theirs = rrwp(permuted, 5).pairs[0], rrwp(g, 5).pairs[0]
    assert_close(ours, theirs[perm][:, perm], rtol=0, atol=1e-14)


@pytest.mark.parametrize("steps", [0, -2, 2.0, True])
def test_steps_must_be_a_positive_int(steps: object) -> None:
    g = Graph(torch.tensor([[0], [1]]), 2)
    with pytest.raises(ValueError, match="steps must"):
        random_walk_pe(g, steps)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps must"):
        rrwp(g, steps)  # type: ignore[arg-type]


def test_negative_weights_and_non_graphs_are_refused() -> None:
    g = Graph(torch.tensor([[0, 1], [1, 2]]), 3, torch.tensor([1.0, -1.0]))
    for fn in (random_walk_pe, rrwp):
        with pytest.raises(ValueError, match="edge_weight"):
            fn(g, 2)
    with pytest.raises(ValueError, match="graph"):
        transition_matrix(torch.tensor([[0], [1]]))  # type: ignore[arg-type]

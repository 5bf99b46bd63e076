"""Graph: the edge list conventions every encoding reads, batches, adapters, bad input."""

from __future__ import annotations

import pytest
import torch

from posenc.graph import Graph, from_networkx, from_pyg, to_dense_batch


def test_undirected_edge_listed_once_or_both_ways_gives_the_same_adjacency():
    once = Graph(torch.tensor([[0, 1], [1, 2]]), 3, torch.tensor([2.0, 3.0]))
    both = Graph(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), 3, torch.tensor([2.0, 2.0, 3.0, 3.0]))
    expected = torch.tensor([[0, 2, 0], [2, 0, 3], [0, 3, 0]], dtype=torch.float64)
    torch.testing.assert_close(once.adjacency()[0], expected)
    torch.testing.assert_close(both.adjacency()[0], expected)


def test_directed_adjacency_and_duplicates_add():
    g = Graph(torch.tensor([[0, 0, 1], [1, 1, 2]]), 3, directed=True)
    expected = torch.tensor([[0, 2, 0], [0, 0, 1], [0, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(g.adjacency()[0], expected)
    ins, outs = g.degrees()
    assert ins.tolist() == [0, 1, 1] and outs.tolist() == [1, 1, 0]


def test_batch_splits_graphs_with_local_ids():
    edge_index = torch.tensor([[0, 2, 3], [1, 3, 4]])
    g = Graph(edge_index, 5, batch=torch.tensor([0, 0, 1, 1, 1]))
    assert g.num_graphs == 2 and g.sizes == [2, 3]
    parts = list(g.graphs())
    assert [p.start for p in parts] == [0, 2]
    assert parts[1].edge_index.tolist() == [[0, 1], [1, 2]]
    x = torch.arange(5.0)[:, None]
    dense, mask = to_dense_batch(x, g)
    assert dense.shape == (2, 3, 1) and mask.tolist() == [[True, True, False], [True] * 3]
    assert dense[1, :, 0].tolist() == [2.0, 3.0, 4.0]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"edge_index": torch.tensor([[0], [3]]), "num_nodes": 3}, "edge_index"),
        ({"edge_index": torch.tensor([[0], [-1]]), "num_nodes": 3}, "edge_index"),
        ({"edge_index": torch.tensor([[0.0], [1.0]]), "num_nodes": 3}, "edge_index"),
        ({"edge_index": torch.tensor([0, 1]), "num_nodes": 3}, "edge_index"),
        ({"edge_index": torch.zeros(2, 0, dtype=torch.long), "num_nodes": 0}, "num_nodes"),
        (
            {"edge_index": torch.tensor([[0], [1]]), "num_nodes": 2, "edge_weight": torch.ones(2)},
            "edge_weight",
        ),
        (
            {
                "edge_index": torch.tensor([[0], [1]]),
                "num_nodes": 2,
                "edge_weight": torch.tensor([float("nan")]),
            },
            "edge_weight",
        ),
        (
            {
                "edge_index": torch.tensor([[0], [2]]),
                "num_nodes": 3,
                "batch": torch.tensor([0, 0, 1]),
            },
            "edge_index",
        ),
        (
            {
                "edge_index": torch.zeros(2, 0, dtype=torch.long),
                "num_nodes": 3,
                "batch": torch.tensor([0, 2, 2]),
            },
            "batch",
        ),
        (
            {
                "edge_index": torch.zeros(2, 0, dtype=torch.long),
                "num_nodes": 3,
                "batch": torch.tensor([1, 0, 0]),
            },
            "batch",
        ),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Graph(**kwargs)


def test_two_weights_for_one_undirected_edge_raise():
    g = Graph(torch.tensor([[0, 1], [1, 0]]), 2, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="edge_weight"):
        g.adjacency()


def test_from_networkx_matches_networkx_adjacency():
    nx = pytest.importorskip("networkx")
    graph = nx.karate_club_graph()
    g = from_networkx(graph, weight="weight")
    expected = torch.from_numpy(nx.to_numpy_array(graph, weight="weight"))
    torch.testing.assert_close(g.adjacency()[0], expected)
    digraph = nx.gnp_random_graph(12, 0.3, seed=1, directed=True)
    torch.testing.assert_close(
        from_networkx(digraph).adjacency()[0], torch.from_numpy(nx.to_numpy_array(digraph))
    )
    with pytest.raises(ValueError, match="graph"):
        from_networkx(nx.Graph())


def test_from_pyg_reads_batch_and_direction():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Batch, Data
    from torch_geometric.utils import to_dense_adj

    a = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3)
    b = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    batch = Batch.from_data_list([a, b])
    g = from_pyg(batch)
    assert not g.directed and g.sizes == [3, 2]
    dense = to_dense_adj(batch.edge_index, batch.batch).double()
    torch.testing.assert_close(g.adjacency()[0], dense[0])
    torch.testing.assert_close(g.adjacency()[1], dense[1, :2, :2])
    assert from_pyg(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)).directed


def test_functions_of_a_graph_name_it_when_given_something_else():
    from posenc.graph import dense_degrees, dense_edges, hop_distances, shortest_paths

    for call in (
        lambda: hop_distances("x"),
        lambda: shortest_paths(None),
        lambda: dense_edges([[0, 1]]),
        lambda: dense_degrees(torch.zeros(2, 2)),
        lambda: to_dense_batch(torch.zeros(2, 1), "graph"),
    ):
        with pytest.raises(ValueError, match=r"graph must be a posenc\.graph\.Graph"):
            call()

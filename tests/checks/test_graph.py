"""The graph property checks: each measurement is ~0 on an encoding with the property and
large on one without it, and every graph row of ``posenc check`` passes."""

from __future__ import annotations

import pytest
import torch

from posenc.checks import graph_checks
from posenc.checks.graph import (
    check_graph,
    check_tree,
    graphormer_pairs,
    node_permutation_gap,
    pair_permutation_gap,
    relabel,
    sign_flip_gap,
)
from posenc.graph import (
    EigenvectorMLP,
    Graph,
    SignNet,
    hop_distances,
    laplacian,
    laplacian_pe,
    random_walk_pe,
)

GRAPH = check_graph()
PERM = torch.randperm(GRAPH.num_nodes, generator=torch.Generator().manual_seed(3))


def test_relabel_moves_node_perm_a_to_a() -> None:
    graph = Graph(torch.tensor([[0, 1], [1, 2]]), 3, directed=True)  # 0 → 1 → 2
    moved = relabel(graph, torch.tensor([2, 0, 1]))  # new 0 = old 2, new 1 = old 0, ...
    assert moved.edge_index.tolist() == [[1, 2], [2, 0]]  # old 0 → 1 is new 1 → 2
    assert moved.directed
    with pytest.raises(ValueError, match="permutation"):
        relabel(graph, torch.tensor([0, 0, 1]))


def test_check_graphs_are_connected_and_the_spectrum_simple() -> None:
    assert bool((hop_distances(GRAPH) >= 0).all())
    tree = check_tree()
    assert tree.edge_index.shape[1] == tree.num_nodes - 1
    assert bool((hop_distances(tree) >= 0).all())  # n − 1 edges and connected: a tree
    for normalization in ("combinatorial", "sym"):  # rw shares sym's eigenvalues
        values = torch.linalg.eigvalsh(laplacian(GRAPH, normalization)[0])
        assert float(values.diff().min()) > 1e-3  # each eigenvector unique up to its sign


def test_node_gap_is_rounding_for_an_encoding_of_structure_and_large_for_node_ids() -> None:
    assert node_permutation_gap(lambda g: random_walk_pe(g, 6), GRAPH, PERM) < 1e-12
    ids = node_permutation_gap(lambda g: torch.arange(g.num_nodes)[:, None], GRAPH, PERM)
    assert ids >= 1.0  # a node keeps its id whatever it becomes


def test_up_to_sign_forgives_a_sign_per_column_and_nothing_else() -> None:
    def vectors(g: Graph) -> torch.Tensor:
        return laplacian_pe(g, 6).vectors

    def flipped_when_moved(g: Graph) -> torch.Tensor:
        return vectors(g) if g is GRAPH else -vectors(g)

    assert node_permutation_gap(vectors, GRAPH, PERM, up_to_sign=True) < 1e-10
    assert node_permutation_gap(flipped_when_moved, GRAPH, PERM, up_to_sign=True) < 1e-10
    assert node_permutation_gap(flipped_when_moved, GRAPH, PERM) > 0.1
    # a sign per node (not per column) is not forgiven
    signs = torch.where(torch.arange(GRAPH.num_nodes) % 2 == 0, 1.0, -1.0).double()[:, None]
    per_node = node_permutation_gap(lambda g: vectors(g) * signs, GRAPH, PERM, up_to_sign=True)
    assert per_node > 0.05


def test_pair_gap_is_zero_for_distances_and_large_when_rows_read_ids() -> None:
    assert pair_permutation_gap(lambda g: hop_distances(g)[0], GRAPH, PERM) == 0.0
    n = GRAPH.num_nodes
    broken = pair_permutation_gap(
        lambda g: hop_distances(g)[0] + torch.arange(n)[:, None], GRAPH, PERM
    )
    assert broken >= 1.0


def test_sign_flip_gap_separates_signnet_from_a_plain_mlp() -> None:
    pe = laplacian_pe(GRAPH, 6)
    adjacency = GRAPH.adjacency()[0]
    torch.manual_seed(0)
    signnet, mlp = SignNet(6, 8).double(), EigenvectorMLP(8).double()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        assert sign_flip_gap(lambda x: signnet(x, adjacency), pe, generator=generator) == 0.0
        assert sign_flip_gap(mlp, pe, generator=generator) > 1e-3
    assert sign_flip_gap(lambda x: x[..., 0].abs(), pe, generator=generator) == 0.0
    identity = sign_flip_gap(lambda x: x[..., 0], pe, draws=16, generator=generator)
    assert abs(identity - 2 * float(pe.vectors.abs().max())) < 1e-12  # some column flipped


def test_graphormer_pairs_permute_on_trees_but_read_ids_where_paths_tie() -> None:
    tree = check_tree()
    tree_perm = torch.randperm(tree.num_nodes, generator=torch.Generator().manual_seed(1))
    features = torch.randn(tree.num_nodes - 1, 3, dtype=torch.float64)
    encode = graphormer_pairs(features)
    assert encode(tree).shape == (tree.num_nodes, tree.num_nodes, 4)
    assert pair_permutation_gap(encode, tree, tree_perm) < 1e-12
    assert pair_permutation_gap(graphormer_pairs(), GRAPH, PERM) == 0.0
    cyclic = torch.randn(GRAPH.edge_index.shape[1], 3, dtype=torch.float64)
    assert pair_permutation_gap(graphormer_pairs(cyclic), GRAPH, PERM) > 1e-3


def test_every_graph_row_of_posenc_check_passes() -> None:
    results = graph_checks()
    failed = [(r.name, r.value, r.bound) for r in results if not r.passed]
    assert not failed
    names = {r.name for r in results}
    for normalization in ("combinatorial", "sym", "rw"):
        assert f"graph: laplacian_{normalization}(P·G) = ±P·PE(G)" in names
    assert {
        "graph: signnet(±v) = signnet(v)",
        "graph: rwse(P·G) = P·rwse(G)",
        "graph: shortest_paths(P·G) = P·SPD(G)·Pᵀ",
        "graph: graphormer_spatial(P·G) = P·B(G)·Pᵀ",
    } <= names
    exact = {r.name: r.value for r in results if r.bound == 0.0}
    assert exact and all(value == 0.0 for value in exact.values())

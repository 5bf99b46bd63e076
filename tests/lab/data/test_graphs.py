"""The CSL graphs and the triangle task: what they are, checked independently."""

from __future__ import annotations

import pytest
import torch

from posenc.lab.data.graphs import CSL_NODES, CSL_SKIPS, csl_dataset, csl_folds, triangle_dataset

nx = pytest.importorskip("networkx")
pytest.importorskip("sklearn")


def test_csl_graphs_are_the_circulants_renumbered():
    data = csl_dataset(seed=3)
    assert len(data) == 150 and torch.bincount(data.targets).tolist() == [15] * 10
    for index, (graph, label) in enumerate(zip(data.graphs, data.targets, strict=True)):
        g = nx.from_numpy_array(graph.adjacency()[0].numpy())
        reference = nx.circulant_graph(CSL_NODES, [1, CSL_SKIPS[int(label)]])
        if index % 15 == 0:  # the first of a class keeps the identity numbering
            assert {frozenset(e) for e in g.edges} == {frozenset(e) for e in reference.edges}
        else:
            assert nx.is_isomorphic(g, reference)
    assert not torch.equal(data.graphs[1].edge_index, data.graphs[2].edge_index)


@pytest.mark.filterwarnings("ignore:The hashes produced for graphs without node")
def test_csl_classes_are_one_wl_indistinguishable():
    data = csl_dataset()
    hashes = {
        nx.weisfeiler_lehman_graph_hash(
            nx.from_numpy_array(data.graphs[15 * c].adjacency()[0].numpy())
        )
        for c in range(10)
    }
    assert len(hashes) == 1


def test_csl_folds_partition_and_stratify():
    labels = csl_dataset().targets
    folds = csl_folds(labels, seed=1)
    assert len(folds) == 5
    tests = [set(f["test"]) for f in folds]
    assert set().union(*tests) == set(range(150)) and sum(map(len, tests)) == 150
    for fold in folds:
        parts = [set(fold[k]) for k in ("train", "val", "test")]
        assert [len(p) for p in parts] == [90, 30, 30]
        assert set().union(*parts) == set(range(150))
        for part, per_class in zip(("train", "val", "test"), (9, 3, 3), strict=True):
            counts = torch.bincount(labels[fold[part]], minlength=10)
            assert counts.tolist() == [per_class] * 10
    assert csl_folds(labels, seed=1) == folds and csl_folds(labels, seed=2) != folds


def test_triangle_targets_match_networkx():
    data = triangle_dataset(30, seed=5)
    for graph, target in zip(data.graphs, data.targets, strict=True):
        g = nx.from_numpy_array(graph.adjacency()[0].numpy())
        assert all(d == 3 for _, d in g.degree)
        assert sum(nx.triangles(g).values()) // 3 == int(target)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"count": 0}, "count"),
        ({"count": 2, "min_nodes": 2}, "min_nodes"),
        ({"count": 2, "seed": -1}, "seed"),
    ],
)
def test_triangle_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        triangle_dataset(**kwargs)

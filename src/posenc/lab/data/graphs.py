"""Graph datasets made on the machine: the CSL graphs and a triangle-counting task.

**CSL** (circular skip links; Murphy et al. 2019, https://arxiv.org/abs/1903.02541, as used
by Dwivedi et al.'s "Benchmarking GNNs", https://arxiv.org/abs/2003.00982): 10 classes, one
per skip length ``R ∈ {2, 3, 4, 5, 6, 9, 11, 12, 13, 16}``; the class-``R`` graph is the
circulant ``C_41(1, R)`` (a 41-cycle plus the chords ``i — i + R mod 41``), 4-regular, so
every class is 1-WL indistinguishable from every other. Each class holds 15 graphs: the first
with the identity numbering, the other 14 randomly renumbered. That is what the reference
files hold (``graphs_Kary_Deterministic_Graphs.pkl`` of PurdueMINDS/RelationalPooling, which
Benchmarking GNNs loads: 150 graphs; checked here, graph 0 of each class is the identity
circulant and the others are isomorphic renumberings; the files' self-loops are removed by
Benchmarking GNNs and absent here). The renumberings are drawn from ``seed``: the reference's
own permutations are a download. Splits: :func:`csl_folds` as Benchmarking GNNs makes them
(5 stratified folds, each fold's test set distinct; the rest split 3 : 1 into train and
validation, stratified), drawn from ``seed`` (their saved index files are a download too).

**Triangles**: random 3-regular graphs (networkx's ``random_regular_graph``) whose target is
the number of triangles. Every node has degree 3, so node degrees say nothing; the
diagonal of ``(D⁻¹A)³`` is ``2·t_i/27`` for a node in ``t_i`` triangles, which random-walk
encodings read directly and Laplacian eigenvectors only indirectly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.graph import Graph

__all__ = [
    "CSL_NODES",
    "CSL_SKIPS",
    "GraphDataset",
    "csl_dataset",
    "csl_folds",
    "triangle_dataset",
]

CSL_NODES = 41
CSL_SKIPS = (2, 3, 4, 5, 6, 9, 11, 12, 13, 16)


@dataclass(frozen=True)
class GraphDataset:
    """Graphs with one target each (a class id, or a count)."""

    graphs: tuple[Graph, ...]
    targets: Tensor  # (num_graphs,)

    def __len__(self) -> int:
        return len(self.graphs)


def circulant_edges(num_nodes: int, skips: tuple[int, ...]) -> Tensor:
    """Edges ``i — (i + s) mod n`` for each ``s`` in ``skips``, each listed once, ``(2, E)``."""
    nodes = torch.arange(num_nodes)
    return torch.cat([torch.stack([nodes, (nodes + s) % num_nodes]) for s in skips], dim=1)


def csl_dataset(seed: int = 0, graphs_per_class: int = 15) -> GraphDataset:
    """The 150 CSL graphs (see the module): class ``c`` has skip ``CSL_SKIPS[c]``; the first
    graph of a class keeps the identity numbering, the others are renumbered by a random
    permutation drawn from ``seed``."""
    seed = check_non_negative_int("seed", seed)
    graphs_per_class = check_positive_int("graphs_per_class", graphs_per_class)
    generator = torch.Generator().manual_seed(seed)
    graphs, targets = [], []
    for label, skip in enumerate(CSL_SKIPS):
        edges = circulant_edges(CSL_NODES, (1, skip))
        for copy in range(graphs_per_class):
            if copy:
                order = torch.randperm(CSL_NODES, generator=generator)
                edges_copy = order[edges]
            else:
                edges_copy = edges
            graphs.append(Graph(edges_copy, CSL_NODES))
            targets.append(label)
    return GraphDataset(tuple(graphs), torch.tensor(targets))


def csl_folds(labels: Tensor, seed: int = 0, folds: int = 5) -> list[dict[str, list[int]]]:
    """Benchmarking GNNs' CSL splits: ``folds`` stratified folds (scikit-learn's
    ``StratifiedKFold(shuffle=True)``), each fold's graphs the test set and the rest split
    3 : 1 into train and validation (``train_test_split(test_size=0.25, stratify=...)``);
    all drawn from ``seed``. Returns per fold ``{"train", "val", "test"}`` index lists."""
    from sklearn.model_selection import StratifiedKFold, train_test_split

    folds = check_positive_int("folds", folds)
    y = labels.numpy()
    splits = []
    outer = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for rest, test in outer.split(y, y):
        train, val = train_test_split(rest, test_size=0.25, stratify=y[rest], random_state=seed)
        splits.append(
            {
                "train": sorted(train.tolist()),
                "val": sorted(val.tolist()),
                "test": sorted(test.tolist()),
            }
        )
    return splits


def triangle_dataset(
    count: int, *, min_nodes: int = 12, max_nodes: int = 24, seed: int = 0
) -> GraphDataset:
    """``count`` random 3-regular graphs with ``min_nodes .. max_nodes`` nodes (even, as a
    3-regular graph needs), target = their number of triangles (``trace(A³) / 6``)."""
    import networkx as nx

    count = check_positive_int("count", count)
    seed = check_non_negative_int("seed", seed)
    if min_nodes < 4 or max_nodes < min_nodes:
        raise ValueError(
            f"min_nodes and max_nodes must satisfy 4 <= min_nodes <= max_nodes, got "
            f"{min_nodes} and {max_nodes}"
        )
    generator = torch.Generator().manual_seed(seed)
    sizes = [n for n in range(min_nodes, max_nodes + 1) if n % 2 == 0]
    if not sizes:
        raise ValueError(f"no even node count in [{min_nodes}, {max_nodes}]")
    graphs, targets = [], []
    for _ in range(count):
        n = sizes[int(torch.randint(len(sizes), (1,), generator=generator))]
        nx_seed = int(torch.randint(2**31 - 1, (1,), generator=generator))
        g = nx.random_regular_graph(3, n, seed=nx_seed)
        edges = torch.tensor(list(g.edges), dtype=torch.long).T.reshape(2, -1)
        graph = Graph(edges, n)
        a = graph.adjacency()[0]
        graphs.append(graph)
        targets.append(round(float(torch.trace(a @ a @ a)) / 6))
    return GraphDataset(tuple(graphs), torch.tensor(targets, dtype=torch.float32))

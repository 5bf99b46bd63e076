"""A graph as positions come from it: an edge list, optional weights, and batches of graphs.

A graph has no order: the encodings in :mod:`posenc.graph` read its structure (Laplacian
eigenvectors, random walks, shortest paths). They all start from :class:`Graph`, the edge
list of PyG (``edge_index`` ``(2, E)``, node ids ``0 .. num_nodes - 1``) with optional
non-negative or signed weights, directed or not, and a batch of graphs given as PyG gives it:
a node → graph index ``batch`` (sorted, every graph non-empty) over the concatenated nodes.
Adapters from a PyG ``Data`` and a networkx graph sit at the boundary
(:func:`from_pyg`, :func:`from_networkx`); nothing here imports either library.

Conventions (what every encoding reads through :meth:`Graph.adjacency`):

- the weight of an edge listed more than once in the same direction is the sum (a
  multigraph's edges add up, as networkx's ``to_scipy_sparse_array`` sums a MultiGraph);
- an undirected graph may list an edge once or in both directions (PyG's convention); listed
  both ways, the two weights must agree (``ValueError`` naming ``edge_weight`` otherwise);
- self-loops are kept in the adjacency; each encoding says what it does with them.

Example::

    >>> import torch
    >>> from posenc.graph import Graph
    >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
    >>> g.adjacency()[0]
    tensor([[0., 1., 0., 0.],
            [1., 0., 1., 0.],
            [0., 1., 0., 1.],
            [0., 0., 1., 0.]], dtype=torch.float64)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc._validate import check_positive_int

__all__ = ["Graph", "SubGraph", "check_graph", "from_networkx", "from_pyg", "to_dense_batch"]


@dataclass(frozen=True)
class SubGraph:
    """One graph of a batch: its nodes are ``start .. start + num_nodes - 1`` of the batch;
    ``edge_index`` holds local ids ``0 .. num_nodes - 1``."""

    start: int
    num_nodes: int
    edge_index: Tensor  # (2, E_g) int64, local ids
    edge_weight: Tensor | None  # (E_g,)


@dataclass(frozen=True, eq=False)
class Graph:
    """A graph or a batch of graphs, validated once.

    Args:
        edge_index: ``(2, E)`` integer tensor of (source, target) node ids in
            ``0 .. num_nodes - 1``; ``E`` may be 0.
        num_nodes: the number of nodes (≥ 1); isolated nodes have no edge.
        edge_weight: optional ``(E,)`` finite floating weights (default: all 1).
        directed: False reads each edge both ways (see the module's conventions).
        batch: optional ``(num_nodes,)`` integer node → graph index, sorted, every graph
            ``0 .. B - 1`` with at least one node; edges stay inside their graph.
    """

    edge_index: Tensor
    num_nodes: int
    edge_weight: Tensor | None = None
    directed: bool = False
    batch: Tensor | None = None

    def __post_init__(self) -> None:
        n = check_positive_int("num_nodes", self.num_nodes)
        object.__setattr__(self, "num_nodes", n)  # a numpy or tensor count, stored as an int
        ei = self.edge_index
        if not isinstance(ei, Tensor) or ei.dim() != 2 or ei.shape[0] != 2:
            raise ValueError("edge_index must be a (2, E) tensor of node ids")
        if ei.is_floating_point() or ei.is_complex() or ei.dtype == torch.bool:
            raise ValueError(f"edge_index must hold integer node ids, got dtype {ei.dtype}")
        if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
            raise ValueError(
                f"edge_index holds ids in [{int(ei.min())}, {int(ei.max())}] but node ids must "
                f"lie in [0, {n - 1}] (num_nodes={n})"
            )
        object.__setattr__(self, "edge_index", ei.long())
        w = self.edge_weight
        if w is not None:
            if not isinstance(w, Tensor) or not w.is_floating_point() or w.shape != (ei.shape[1],):
                raise ValueError(
                    f"edge_weight must be a floating tensor of shape ({ei.shape[1]},), one "
                    "weight per edge"
                )
            if not bool(torch.isfinite(w).all()):
                raise ValueError("edge_weight must be finite")
        if self.batch is not None:
            object.__setattr__(self, "batch", _check_batch(self.batch, n, self.edge_index))

    @property
    def num_graphs(self) -> int:
        """Graphs in the batch (1 without ``batch``)."""
        return 1 if self.batch is None else int(self.batch[-1]) + 1

    @property
    def sizes(self) -> list[int]:
        """Nodes per graph."""
        if self.batch is None:
            return [self.num_nodes]
        return torch.bincount(self.batch, minlength=self.num_graphs).tolist()

    def graphs(self) -> Iterator[SubGraph]:
        """Each graph of the batch with local node ids, in batch order."""
        start = 0
        graph_of_edge = None if self.batch is None else self.batch[self.edge_index[0]]
        for index, size in enumerate(self.sizes):
            if graph_of_edge is None:
                keep = slice(None)
                edges = self.edge_index
            else:
                keep = graph_of_edge == index  # type: ignore[assignment]
                edges = self.edge_index[:, keep] - start
            weight = None if self.edge_weight is None else self.edge_weight[keep]
            yield SubGraph(start, size, edges, weight)
            start += size

    def adjacency(self, dtype: torch.dtype = torch.float64) -> list[Tensor]:
        """Dense weighted adjacency ``A[i, j]`` (edge ``i → j``) of each graph, ``(n, n)``.

        Undirected graphs give symmetric matrices (an edge listed once counts both ways);
        duplicate edges add up.
        """
        return [dense_adjacency(g, self.directed, dtype) for g in self.graphs()]

    def degrees(self) -> tuple[Tensor, Tensor]:
        """Unweighted ``(in_degree, out_degree)`` per node, ``(num_nodes,)`` int64 each:
        the number of distinct neighbours an edge comes from / goes to (self-loops count;
        undirected graphs give equal degrees)."""
        ins, outs = [], []
        for a in self.adjacency():
            pattern = a != 0
            ins.append(pattern.sum(0))
            outs.append(pattern.sum(1))
        return torch.cat(ins).long(), torch.cat(outs).long()


def dense_adjacency(graph: SubGraph, directed: bool, dtype: torch.dtype) -> Tensor:
    """The dense adjacency of one graph under the module's conventions."""
    n, (src, dst) = graph.num_nodes, graph.edge_index
    weight = (
        torch.ones(src.shape[0], dtype=torch.float64)
        if graph.edge_weight is None
        else graph.edge_weight.detach().to(torch.float64, copy=True).cpu()
    )
    src, dst = src.cpu(), dst.cpu()
    a = torch.zeros(n, n, dtype=torch.float64).index_put_((src, dst), weight, accumulate=True)
    if not directed:
        listed = torch.zeros(n, n, dtype=torch.bool)
        listed[src, dst] = True
        both = listed & listed.T
        if not torch.equal(a[both], a.T[both]):
            raise ValueError(
                "edge_weight: an undirected edge listed in both directions has two different "
                "weights; give one weight per edge (or directed=True)"
            )
        a = torch.where(both, a, a + a.T)
    return a.to(dtype)


def _check_batch(batch: object, num_nodes: int, edge_index: Tensor) -> Tensor:
    if not isinstance(batch, Tensor) or batch.shape != (num_nodes,):
        raise ValueError(f"batch must be a ({num_nodes},) tensor: the graph of each node")
    if batch.is_floating_point() or batch.is_complex() or batch.dtype == torch.bool:
        raise ValueError(f"batch must hold integer graph ids, got dtype {batch.dtype}")
    batch = batch.long()
    if int(batch[0]) != 0 or bool((batch.diff() < 0).any()):
        raise ValueError("batch must be sorted and start at graph 0 (PyG's node → graph index)")
    if bool((batch.diff() > 1).any()):
        missing = int(batch[1:][batch.diff() > 1][0]) - 1
        raise ValueError(f"batch skips graph {missing}: every graph needs at least one node")
    if edge_index.numel() and not bool((batch[edge_index[0]] == batch[edge_index[1]]).all()):
        raise ValueError("edge_index has an edge between two graphs of the batch")
    return batch


def check_graph(graph: object, name: str = "graph") -> Graph:
    """``graph`` if it is a :class:`Graph`, else ``ValueError`` naming ``name``."""
    if not isinstance(graph, Graph):
        raise ValueError(f"{name} must be a posenc.graph.Graph, got {type(graph).__name__}")
    return graph


def to_dense_batch(x: Tensor, graph: Graph, fill: float = 0.0) -> tuple[Tensor, Tensor]:
    """Node rows ``(num_nodes, ...)`` as ``(num_graphs, max_nodes, ...)`` and a
    ``(num_graphs, max_nodes)`` mask (True = a real node); padded entries hold ``fill``."""
    check_graph(graph)
    if not isinstance(x, Tensor) or x.shape[:1] != (graph.num_nodes,):
        raise ValueError(f"x must have {graph.num_nodes} rows, one per node")
    sizes = graph.sizes
    width = max(sizes)
    out = x.new_full((len(sizes), width, *x.shape[1:]), fill)
    mask = torch.zeros(len(sizes), width, dtype=torch.bool, device=x.device)
    start = 0
    for index, size in enumerate(sizes):
        out[index, :size] = x[start : start + size]
        mask[index, :size] = True
        start += size
    return out, mask


def from_pyg(data: Any, *, directed: bool | None = None) -> Graph:
    """A :class:`Graph` from a PyG ``Data`` or ``Batch`` (``edge_index``, ``num_nodes``,
    optional ``edge_weight`` and ``batch``). ``directed=None`` asks PyG's
    ``is_undirected``."""
    edge_index = data.edge_index
    weight = getattr(data, "edge_weight", None)
    if directed is None:
        from torch_geometric.utils import is_undirected

        directed = not is_undirected(edge_index, weight, num_nodes=data.num_nodes)
    batch = getattr(data, "batch", None)
    return Graph(edge_index, int(data.num_nodes), weight, directed, batch)


def from_networkx(
    graph: Any, *, weight: str | None = None, dtype: torch.dtype = torch.float64
) -> Graph:
    """A :class:`Graph` from a networkx graph: nodes numbered in ``graph.nodes`` order,
    directed as the graph is, weights from the edge attribute ``weight`` (None: unweighted;
    a missing attribute reads 1, as networkx does)."""
    nodes = list(graph.nodes)
    if not nodes:
        raise ValueError("graph has no nodes: an empty graph has no positions")
    index = {node: i for i, node in enumerate(nodes)}
    edges = list(graph.edges(data=True))
    edge_index = torch.tensor(
        [[index[u] for u, _, _ in edges], [index[v] for _, v, _ in edges]], dtype=torch.long
    ).reshape(2, len(edges))
    edge_weight = None
    if weight is not None:
        edge_weight = torch.tensor([float(d.get(weight, 1.0)) for _, _, d in edges], dtype=dtype)
    return Graph(edge_index, len(nodes), edge_weight, bool(graph.is_directed()))

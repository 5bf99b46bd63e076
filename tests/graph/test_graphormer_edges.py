"""Graphormer's edge encoding: Eq. 7 pair by pair in float64, the edge conventions, gradcheck,
bad input."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.graph import (
    Graph,
    GraphormerEdgeEncoding,
    ShortestPaths,
    graphormer_edge_encoding,
    shortest_paths,
)
from tests.graph.graphormer_reference import sample_batch

F64 = torch.float64
HEADS, MAX_HOPS = 4, 3


def _eq7(paths: ShortestPaths, features: Tensor, weight: Tensor) -> Tensor:
    """Eq. 7 pair by pair: mean over the first min(N, M) hops of x_e · w_n."""
    graph = paths.graph
    sizes, size = graph.sizes, paths.distance.shape[-1]
    out = torch.zeros(len(sizes), weight.shape[-1], size, size, dtype=F64)
    start = 0
    for b, n in enumerate(sizes):
        feature: dict[tuple[int, int], Tensor] = {}
        listed = {tuple(e) for e in (graph.edge_index.T - start).tolist()}
        for e, (u, v) in enumerate(graph.edge_index.T.tolist()):
            if not start <= u < start + n:
                continue
            u, v = u - start, v - start
            feature[(u, v)] = feature.get((u, v), 0) + features[e]
            if not graph.directed and (v, u) not in listed:
                feature[(v, u)] = feature.get((v, u), 0) + features[e]
        for i in range(n):
            for j in range(n):
                nodes = paths.path[b, i, j]
                nodes = nodes[nodes >= 0].tolist()
                hops = min(len(nodes) - 1, weight.shape[0])
                for t in range(hops):
                    out[b, :, i, j] += feature[(nodes[t], nodes[t + 1])] @ weight[t] / hops
        start += n
    return out


@pytest.mark.parametrize("directed", [False, True])
def test_edge_encoding_is_eq7(directed: bool) -> None:
    graph, _ = sample_batch(directed, 3, 2)
    g = torch.Generator().manual_seed(2)
    features = torch.randn(graph.edge_index.shape[1], 5, generator=g, dtype=F64)
    weight = torch.randn(MAX_HOPS, 5, HEADS, generator=g, dtype=F64)
    paths = shortest_paths(graph)
    assert_close(graphormer_edge_encoding(paths, features, weight), _eq7(paths, features, weight))


def test_edge_features_per_direction_and_parallel_edges() -> None:
    # 0 - 1 listed both ways with two features, 1 - 2 listed once, 2 -> 3 twice (parallel).
    graph = Graph(torch.tensor([[0, 1, 1, 2, 2], [1, 0, 2, 3, 3]]), 4)
    features = torch.tensor([[1.0], [10.0], [100.0], [1000.0], [3000.0]], dtype=F64)
    weight = torch.ones(4, 1, 1, dtype=F64)
    paths = shortest_paths(graph)
    got = graphormer_edge_encoding(paths, features, weight)[0, 0]
    assert_close(got, _eq7(paths, features, weight)[0, 0])
    assert got[0, 1] == 1.0 and got[1, 0] == 10.0 and got[2, 1] == 100.0 and got[2, 3] == 4000.0
    assert got[0, 3] == (1.0 + 100.0 + 4000.0) / 3


def test_module_gradcheck_and_bad_features() -> None:
    graph, _ = sample_batch(False, 3, 2)
    paths = shortest_paths(graph)
    encoding = GraphormerEdgeEncoding(3, 2, max_hops=2, dtype=F64)
    features = torch.randn(graph.edge_index.shape[1], 3, dtype=F64, requires_grad=True)
    weight = encoding.weight.detach().clone().requires_grad_(True)

    def fn(w: Tensor, x: Tensor) -> Tensor:
        return torch.func.functional_call(encoding, {"weight": w}, (paths, x))

    assert torch.autograd.gradcheck(fn, (weight, features))
    for bad in (features[:-1], features[:, :2], features.long(), [[0.0] * 3]):
        with pytest.raises(ValueError, match="edge_features"):
            encoding(paths, bad)
    for name in ("edge_dim", "num_heads", "max_hops"):
        kwargs = {"edge_dim": 3, "num_heads": 2, "max_hops": 2, name: 0}
        with pytest.raises(ValueError, match=name):
            GraphormerEdgeEncoding(**kwargs)

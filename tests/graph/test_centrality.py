"""Centrality encoding: the reference's GraphNodeFeature in float64, permutations, gradcheck,
bad input."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from posenc.graph import CentralityEncoding, Graph, dense_degrees
from tests.graph.graphormer_reference import graph_node_feature, random_graph

DIM = 32
F64 = torch.float64


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_centrality_matches_the_reference_and_permutes() -> None:
    graph = random_graph(8, 0.3, 6, directed=True)[1]
    encoding = CentralityEncoding(DIM, max_degree=6, dtype=F64)
    g = _generator(3)
    in_table = torch.cat(
        [torch.zeros(1, DIM, dtype=F64), torch.randn(7, DIM, generator=g, dtype=F64)]
    )
    out_table = torch.cat(
        [torch.zeros(1, DIM, dtype=F64), torch.randn(7, DIM, generator=g, dtype=F64)]
    )
    with torch.no_grad():
        encoding.in_embedding.copy_(in_table[1:])
        encoding.out_embedding.copy_(out_table[1:])
    ins, outs = dense_degrees(graph)
    x = torch.randn(1, 8, DIM, dtype=F64)
    got = encoding(x, ins, outs)
    token = encoding.graph_token
    assert token is not None
    assert_close(got, graph_node_feature(x, ins, outs, in_table, out_table, token), rtol=0, atol=0)
    assert_close(encoding(x, ins), encoding(x, ins, ins))  # undirected: one degree, both tables
    perm = torch.randperm(8, generator=g)
    moved = Graph(torch.argsort(perm)[graph.edge_index], 8, directed=True)
    ins_moved, outs_moved = dense_degrees(moved)
    index = torch.cat([torch.tensor([0]), perm + 1])
    assert_close(encoding(x[:, perm], ins_moved, outs_moved), got[:, index], rtol=0, atol=0)


def test_centrality_gradcheck() -> None:
    encoding = CentralityEncoding(3, max_degree=2, dtype=F64)
    ins, outs = torch.tensor([[0, 2, 1]]), torch.tensor([[1, 1, 2]])
    params = {
        name: p.detach().clone().requires_grad_(True) for name, p in encoding.named_parameters()
    }
    x = torch.randn(1, 3, 3, dtype=F64, requires_grad=True)

    def fn(x: Tensor, *values: Tensor) -> Tensor:
        state = dict(zip(params, values, strict=True))
        return torch.func.functional_call(encoding, state, (x, ins, outs))

    assert torch.autograd.gradcheck(fn, (x, *params.values()))


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c: c(torch.zeros(1, 3, 4), torch.tensor([[0, 1, 7]])), "in_degree"),
        (lambda c: c(torch.zeros(1, 3, 4), torch.tensor([[0, -1, 1]])), "in_degree"),
        (
            lambda c: c(torch.zeros(1, 3, 4), torch.tensor([[0, 1, 1]]), torch.ones(1, 3)),
            "out_degree",
        ),
        (lambda c: c(torch.zeros(1, 3, 4), torch.tensor([[0, 1]])), "in_degree"),
        (lambda c: c(torch.zeros(1, 3, 5), torch.tensor([[0, 1, 1]])), "x"),
    ],
)
def test_centrality_bad_input(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=name):
        call(CentralityEncoding(4, max_degree=6))

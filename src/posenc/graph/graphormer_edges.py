"""Graphormer's edge encoding: edge features averaged along a shortest path, per head.

.. math:: c^h_{ij} = \\frac{1}{N} \\sum_{n=1}^{N} x_{e_n} \\cdot w^h_n \\quad \\text{(Eq. 7)}

over the edges ``e_1 … e_N`` of one shortest path from ``i`` to ``j``
(:func:`~posenc.graph.shortest_paths`, Graphormer's tie-break), with a learned weight per
hop. Paper: Ying et al. 2021, https://arxiv.org/abs/2106.05234; reference ``multi_hop`` in
``GraphAttnBias`` (``graphormer/modules/graphormer_layers.py``), which reads the first
``multi_hop_max_dist`` edges and divides by ``min(N, multi_hop_max_dist)``, as here with
``max_hops``. The reference embeds categorical edge features to ``x_e ∈ R^H`` and takes
``W_n`` of ``H × H``; here ``x_e`` is any ``(E, edge_dim)`` tensor and ``W_n`` is
``edge_dim × H``. Its padded hops read the padding row of its edge embedding, which the
original code re-initializes at random after construction (``init_params``) and Hugging
Face's port keeps at zero: here (the paper's sum) they add nothing.
:class:`~posenc.graph.GraphormerBias` adds the term to its spatial bias.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._validate import check_finite, check_positive_int
from posenc.graph.shortest_path import ShortestPaths
from posenc.graph.structure import Graph

__all__ = ["GraphormerEdgeEncoding", "dense_edge_features", "graphormer_edge_encoding"]


def dense_edge_features(graph: Graph, edge_features: Tensor) -> Tensor:
    """Edge features on the pairs they join, ``(B, N, N, edge_dim)`` (0 where no edge).

    ``edge_features[e]`` goes to ``(source, target)`` of edge ``e``; an undirected edge
    listed once serves both directions, one listed both ways keeps a feature per direction;
    parallel edges add up (the weights' convention, :class:`~posenc.graph.Graph`).
    Differentiable in ``edge_features``.
    """
    sizes = graph.sizes
    size, batch = max(sizes), len(sizes)
    src, dst = graph.edge_index.to(edge_features.device)
    starts = torch.tensor([0, *sizes[:-1]], device=edge_features.device).cumsum(0)
    graph_of = (
        torch.zeros_like(src) if graph.batch is None else graph.batch.to(edge_features.device)[src]
    )
    src, dst = src - starts[graph_of], dst - starts[graph_of]
    dense = edge_features.new_zeros(batch, size, size, edge_features.shape[-1])
    dense = dense.index_put((graph_of, src, dst), edge_features, accumulate=True)
    if not graph.directed:
        listed = torch.zeros(batch, size, size, dtype=torch.bool, device=edge_features.device)
        listed[graph_of, src, dst] = True
        alone = ~listed[graph_of, dst, src]  # the reverse direction is not listed
        rows = (graph_of[alone], dst[alone], src[alone])
        dense = dense.index_put(rows, edge_features[alone], accumulate=True)
    return dense


def graphormer_edge_encoding(paths: ShortestPaths, edge_features: Tensor, weight: Tensor) -> Tensor:
    """Graphormer's edge encoding (Eq. 7, the reference's ``multi_hop``), ``(B, H, N, N)``.

    .. math:: c^h_{ij} = \\frac{1}{\\min(N, M)} \\sum_{n=1}^{\\min(N, M)} x_{e_n} \\cdot
        W_{n, :, h}

    over the first ``M = weight.shape[0]`` edges ``e_n`` of ``paths.path[b, i, j]`` (``N``
    hops); 0 for ``i = j`` and unreachable pairs. No value checks.

    Args:
        paths: from :func:`~posenc.graph.shortest_paths`.
        edge_features: ``(E, edge_dim)``, one row per edge of ``paths.graph``.
        weight: ``(M, edge_dim, H)``, one matrix per hop.
    """
    dense = dense_edge_features(paths.graph, edge_features.to(weight.device, weight.dtype))
    hops = min(weight.shape[0], paths.path.shape[-1] - 1)
    path = paths.path[..., : hops + 1].to(weight.device)
    src, dst = path[..., :-1], path[..., 1:]  # (B, N, N, hops)
    on_path = dst >= 0
    graph_of = torch.arange(path.shape[0], device=path.device).view(-1, 1, 1, 1)
    along = dense[graph_of, src.clamp(min=0), dst.clamp(min=0)]  # (B, N, N, hops, edge_dim)
    along = along * on_path[..., None]
    total = torch.einsum("bijnd,ndh->bhij", along, weight[:hops])
    count = on_path.sum(-1).clamp(min=1)  # (B, N, N)
    return total / count[:, None]


class GraphormerEdgeEncoding(nn.Module):
    """Graphormer's edge encoding: a learned weight per hop and head, averaged along the
    shortest path (:func:`graphormer_edge_encoding`).

    Args:
        edge_dim: width of the edge features.
        num_heads: attention heads.
        max_hops: edges read along each path (the reference's ``multi_hop_max_dist``).
        device, dtype: of the weight.

    Attributes:
        weight: ``(max_hops, edge_dim, num_heads)``, initialized ``N(0, 0.02²)`` (the
            reference's ``edge_dis_encoder`` init).

    Shape:
        ``forward(paths, edge_features)``: ``edge_features (E, edge_dim)`` →
        ``(B, num_heads, N, N)``.

    Example::

        >>> from posenc.graph import Graph, shortest_paths
        >>> g = Graph(torch.tensor([[0, 1], [1, 2]]), 3)
        >>> GraphormerEdgeEncoding(6, 4)(shortest_paths(g), torch.randn(2, 6)).shape
        torch.Size([1, 4, 3, 3])
    """

    def __init__(
        self,
        edge_dim: int,
        num_heads: int,
        *,
        max_hops: int = 5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.edge_dim = check_positive_int("edge_dim", edge_dim)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.max_hops = check_positive_int("max_hops", max_hops)
        self.weight = nn.Parameter(
            torch.empty(max_hops, edge_dim, num_heads, device=device, dtype=dtype)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, paths: ShortestPaths, edge_features: Tensor) -> Tensor:
        """``c[b, h, i, j]`` for every pair; validates ``edge_features``."""
        self.check_edge_features(paths.graph, edge_features)
        return graphormer_edge_encoding(paths, edge_features, self.weight)

    def check_edge_features(self, graph: Graph, edge_features: object) -> None:
        """``edge_features`` must be a finite floating ``(E, edge_dim)`` tensor."""
        num_edges = graph.edge_index.shape[1]
        if (
            not isinstance(edge_features, Tensor)
            or not edge_features.is_floating_point()
            or tuple(edge_features.shape) != (num_edges, self.edge_dim)
        ):
            got = (
                tuple(edge_features.shape)
                if isinstance(edge_features, Tensor)
                else type(edge_features).__name__
            )
            raise ValueError(
                f"edge_features must be a floating tensor ({num_edges}, {self.edge_dim}): one "
                f"row of edge_dim={self.edge_dim} per edge of the graph; got {got}"
            )
        check_finite("edge_features", edge_features)

    def extra_repr(self) -> str:
        return f"edge_dim={self.edge_dim}, num_heads={self.num_heads}, max_hops={self.max_hops}"

"""Graphormer's centrality encoding: learned in- and out-degree embeddings added to nodes."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._validate import check_positive_int
from posenc.graph.structure import Graph, check_graph, to_dense_batch

__all__ = ["CentralityEncoding", "dense_degrees"]


def dense_degrees(graph: Graph) -> tuple[Tensor, Tensor]:
    """``(in_degree, out_degree)`` of each graph padded to ``N`` nodes, ``(B, N)`` int64 each
    (0 on padding): :meth:`Graph.degrees <posenc.graph.Graph.degrees>` laid out as
    :func:`~posenc.graph.to_dense_batch` lays out node features."""
    ins, outs = check_graph(graph).degrees()
    return to_dense_batch(ins, graph)[0], to_dense_batch(outs, graph)[0]


class CentralityEncoding(nn.Module):
    """Degree embeddings added to node features, and Graphormer's graph token.

    .. math:: h_i^{(0)} = x_i + z^-_{\\deg^-(v_i)} + z^+_{\\deg^+(v_i)} \\quad \\text{(Eq. 5)}

    Paper: Ying et al. 2021, https://arxiv.org/abs/2106.05234; reference ``GraphNodeFeature``
    (``graphormer/modules/graphormer_layers.py``), whose tables are indexed by ``degree + 1``
    (0 is padding) and which, for undirected graphs, reads the same degree in both tables
    (``out_degree=None`` here). With ``virtual_node`` a learned graph token is prepended as
    node 0 (the reference's ``graph_token``), the layout :class:`~posenc.graph.GraphormerBias`
    and its positions expect. This is a plain module, not posenc's additive hook: the hook's
    ``P(positions)`` reads positions only, while the degrees come with each batch of graphs.

    Args:
        dim: node feature width.
        max_degree: largest degree with an embedding; larger ones raise.
        virtual_node: prepend the graph token.
        device, dtype: of the parameters.

    Attributes:
        in_embedding, out_embedding: ``(max_degree + 1, dim)``, ``N(0, 0.02²)`` (the
            reference's init); graph_token ``(dim,)`` when ``virtual_node``.

    Shape:
        x ``(..., N, dim)``, degrees ``(..., N)`` integer → ``(..., N + virtual_node, dim)``.

    Example::

        >>> from posenc.graph import Graph
        >>> g = Graph(torch.tensor([[0, 1], [1, 2]]), 3)
        >>> ins, outs = dense_degrees(g)
        >>> CentralityEncoding(8)(torch.zeros(1, 3, 8), ins, outs).shape
        torch.Size([1, 4, 8])
    """

    def __init__(
        self,
        dim: int,
        *,
        max_degree: int = 64,
        virtual_node: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        self.max_degree = check_positive_int("max_degree", max_degree)
        self.virtual_node = bool(virtual_node)
        rows = max_degree + 1
        self.in_embedding = nn.Parameter(torch.empty(rows, dim, device=device, dtype=dtype))
        self.out_embedding = nn.Parameter(torch.empty(rows, dim, device=device, dtype=dtype))
        self.graph_token = (
            nn.Parameter(torch.empty(dim, device=device, dtype=dtype)) if virtual_node else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for table in (self.in_embedding, self.out_embedding, self.graph_token):
            if table is not None:
                nn.init.normal_(table, std=0.02)

    def forward(self, x: Tensor, in_degree: Tensor, out_degree: Tensor | None = None) -> Tensor:
        """``x + z⁻[in_degree] + z⁺[out_degree]``, the graph token first when
        ``virtual_node``. ``out_degree=None`` reads ``in_degree`` in both tables (undirected).

        Raises:
            ValueError: naming ``x``, ``in_degree`` or ``out_degree`` (shape, dtype, a
                negative degree or one above ``max_degree``).
        """
        if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be a tensor (..., N, {self.dim})")
        out_degree = in_degree if out_degree is None else out_degree
        for name, degree in (("in_degree", in_degree), ("out_degree", out_degree)):
            self._check_degree(name, degree, x)
        h = x + self.in_embedding[in_degree.long()] + self.out_embedding[out_degree.long()]
        if self.graph_token is None:
            return h
        token = self.graph_token.to(h.dtype).expand(*h.shape[:-2], 1, self.dim)
        return torch.cat([token, h], dim=-2)

    def _check_degree(self, name: str, degree: object, x: Tensor) -> None:
        if (
            not isinstance(degree, Tensor)
            or degree.is_floating_point()
            or degree.is_complex()
            or degree.dtype == torch.bool
            or tuple(degree.shape) != tuple(x.shape[:-1])
        ):
            raise ValueError(f"{name} must be an integer tensor of x's node shape {x.shape[:-1]}")
        if degree.numel() and (int(degree.min()) < 0 or int(degree.max()) > self.max_degree):
            raise ValueError(
                f"{name} must lie in [0, max_degree={self.max_degree}]; got "
                f"[{int(degree.min())}, {int(degree.max())}]: build the encoding with a larger "
                "max_degree, or clamp the degrees"
            )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, max_degree={self.max_degree}, virtual_node={self.virtual_node}"

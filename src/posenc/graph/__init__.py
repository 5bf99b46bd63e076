"""Positions from structure: where a graph has no order, encodings read it.

- :mod:`~posenc.graph.structure`: :class:`Graph` (edge list, weights, batches of graphs) and
  the adapters from PyG and networkx;
- :mod:`~posenc.graph.laplacian`: Laplacian eigenvector encodings (combinatorial, symmetric,
  random-walk), random sign flips;
- :mod:`~posenc.graph.random_walk`: random-walk structural encodings and RRWP;
- :mod:`~posenc.graph.shortest_path`: all-pairs shortest-path distances and paths of a batch
  of graphs; :mod:`~posenc.graph.graphormer`, :mod:`~posenc.graph.graphormer_edges` and
  :mod:`~posenc.graph.centrality`: Graphormer's spatial bias, edge and centrality encodings;
- :mod:`~posenc.graph.encoders`: SignNet and per-eigenvector MLPs (node encodings that enter
  node features through the additive hook);
- :mod:`~posenc.graph.lstep` and :mod:`~posenc.graph.link_prediction`: L-STEP's learnable
  spatial-temporal encodings and its link predictor.

``scipy`` and ``networkx`` come with the ``graph`` extra; the core needs neither.
"""

from __future__ import annotations

from posenc.graph.centrality import CentralityEncoding, dense_degrees
from posenc.graph.encoders import EigenvectorMLP, RandomWalkEncoder, SignNet
from posenc.graph.graphormer import GraphormerBias, graphormer_reach_mask, graphormer_spatial_index
from posenc.graph.graphormer_edges import (
    GraphormerEdgeEncoding,
    dense_edge_features,
    graphormer_edge_encoding,
)
from posenc.graph.laplacian import (
    LaplacianPE,
    Normalization,
    laplacian,
    laplacian_pe,
    random_sign_flip,
)
from posenc.graph.random_walk import RRWP, random_walk_pe, rrwp, transition_matrix
from posenc.graph.shortest_path import (
    UNREACHABLE,
    ShortestPaths,
    dense_edges,
    hop_distances,
    shortest_paths,
)
from posenc.graph.structure import (
    Graph,
    SubGraph,
    check_graph,
    from_networkx,
    from_pyg,
    to_dense_batch,
)

__all__ = [
    "RRWP",
    "UNREACHABLE",
    "CentralityEncoding",
    "EigenvectorMLP",
    "Graph",
    "GraphormerBias",
    "GraphormerEdgeEncoding",
    "LaplacianPE",
    "Normalization",
    "RandomWalkEncoder",
    "ShortestPaths",
    "SignNet",
    "SubGraph",
    "check_graph",
    "dense_degrees",
    "dense_edge_features",
    "dense_edges",
    "from_networkx",
    "from_pyg",
    "graphormer_edge_encoding",
    "graphormer_reach_mask",
    "graphormer_spatial_index",
    "hop_distances",
    "laplacian",
    "laplacian_pe",
    "random_sign_flip",
    "random_walk_pe",
    "rrwp",
    "shortest_paths",
    "to_dense_batch",
    "transition_matrix",
]

"""Positions from structure: where a graph has no order, encodings read it.

- :mod:`~posenc.graph.structure`: :class:`Graph` (edge list, weights, batches of graphs) and
  the adapters from PyG and networkx;
- :mod:`~posenc.graph.laplacian`: Laplacian eigenvector encodings (combinatorial, symmetric,
  random-walk), random sign flips;
- :mod:`~posenc.graph.random_walk`: random-walk structural encodings and RRWP;
- :mod:`~posenc.graph.shortest_path` and :mod:`~posenc.graph.graphormer`: shortest-path
  distances and Graphormer's spatial bias, centrality and edge encodings;
- :mod:`~posenc.graph.encoders`: SignNet and per-eigenvector MLPs (node encodings that enter
  node features through the additive hook);
- :mod:`~posenc.graph.lstep` and :mod:`~posenc.graph.link_prediction`: L-STEP's learnable
  spatial-temporal encodings and its link predictor.

``scipy`` and ``networkx`` come with the ``graph`` extra; the core needs neither.
"""

from __future__ import annotations

from posenc.graph.structure import Graph, SubGraph, from_networkx, from_pyg, to_dense_batch

__all__ = ["Graph", "SubGraph", "from_networkx", "from_pyg", "to_dense_batch"]

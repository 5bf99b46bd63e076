"""All-pairs shortest paths of every graph of a batch: distances, hop counts and the paths.

Graphormer's spatial encoding reads ``φ(v_i, v_j)``, the shortest-path distance (SPD) from
node ``i`` to node ``j``, and its edge encoding reads the edges along one shortest path.
Both are computed here for a whole batch of graphs (a :class:`~posenc.graph.Graph` with a
node → graph ``batch``) padded to a common size ``N`` (the largest graph), as
:func:`~posenc.graph.to_dense_batch` pads node features:

- :func:`hop_distances` (:mod:`~posenc.graph.shortest_path.hops`): hop counts by
  breadth-first search over the sparse edge list (what Graphormer uses), O(N·E), the route
  for large graphs;
- :func:`shortest_paths` (:mod:`~posenc.graph.shortest_path.paths`): distances (hop counts,
  or edge weights in float64) and one shortest path per pair with Graphormer's
  Floyd–Warshall tie-break, found by a search per source over the sparse edge list (O(N·E)
  for hop counts), then the paths (O(N²·L) for paths of at most ``L`` edges); that module
  states the tie-break and proves the search finds the same one;
- :class:`ShortestPaths`, :func:`dense_edges`, :data:`UNREACHABLE` and
  :data:`MAX_RESULT_BYTES` (``_common``): the result, the dense edge tables, and the
  conventions every function follows (stated there).

Example::

    >>> import torch
    >>> from posenc.graph import Graph, shortest_paths
    >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=5)  # a path and node 4
    >>> sp = shortest_paths(g)
    >>> sp.distance[0, 0]
    tensor([ 0,  1,  2,  3, -1])
    >>> sp.path[0, 0, 3]
    tensor([0, 1, 2, 3])
"""

from posenc.graph.shortest_path._common import (
    MAX_RESULT_BYTES,
    UNREACHABLE,
    ShortestPaths,
    dense_edges,
)
from posenc.graph.shortest_path.hops import hop_distances
from posenc.graph.shortest_path.paths import shortest_paths

__all__ = [
    "MAX_RESULT_BYTES",
    "UNREACHABLE",
    "ShortestPaths",
    "dense_edges",
    "hop_distances",
    "shortest_paths",
]

r"""Random-walk encodings: return probabilities per node (RWSE) and pairwise walk
probabilities (RRWP).

Both read the transition matrix of the random walk on a graph with weighted adjacency ``A``
(``A[i, j]``: edge ``i → j``) and out-degrees ``D = diag(A 1)``:

.. math::
    M = D^{-1} A, \qquad
    \mathrm{RWSE}(i) = \big( (M)_{ii}, (M^2)_{ii}, \ldots, (M^K)_{ii} \big), \qquad
    \mathrm{RRWP}(i, j) = \big( I_{ij}, M_{ij}, (M^2)_{ij}, \ldots, (M^{K-1})_{ij} \big).

``(M^t)_{ij}`` is the probability that a walk from ``i`` is at ``j`` after ``t`` steps, each
step to a neighbour chosen with probability proportional to the edge's weight.

- RWSE: Dwivedi et al. 2022, "Graph Neural Networks with Learnable Structural and Positional
  Representations", https://arxiv.org/abs/2110.07875 (GraphGPS's ``RWSE``); tested against
  PyG's ``AddRandomWalkPE`` (entrywise, unweighted graphs, see below).
- RRWP: Ma et al. 2023, "Graph Inductive Biases in Transformers without Message Passing"
  (GRIT), https://arxiv.org/abs/2305.17589, ``add_full_rrwp`` with ``add_identity=True``:
  ``K`` channels from ``I`` to ``M^{K-1}``; tested against explicit float64 matrix powers.

Conventions:

- **Weights** must be non-negative (``ValueError`` naming ``edge_weight``); parallel edges
  add up (:class:`~posenc.graph.Graph`'s convention). PyG's ``AddRandomWalkPE`` divides by
  the weighted degree but puts ``1 / degree`` on every edge, ignoring the edge's own weight
  (its rows of a weighted graph do not sum to 1); here ``M[i, j] = w_ij / Σ_l w_il``, as in
  GRIT. On unweighted graphs without parallel edges the two agree.
- **Self-loops** are kept: a walk may stay where it is (as PyG and GRIT keep them).
- **Isolated nodes** (no out-edge, or only edges of weight 0) have a zero row of ``M``
  (PyG clamps the degree to 1, GRIT reads ``1/0`` as 0): their RWSE is 0 and their RRWP is
  the identity channel only.
- **Directed graphs** are walked along edge directions (``D`` counts out-edges).

Example::

    >>> import torch
    >>> from posenc.graph import Graph, random_walk_pe
    >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)  # a triangle
    >>> random_walk_pe(g, steps=3)[0]
    tensor([0.0000, 0.5000, 0.2500], dtype=torch.float64)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.graph.structure import Graph

__all__ = ["RRWP", "random_walk_pe", "rrwp", "transition_matrix"]


class RRWP(NamedTuple):
    """Relative random-walk probabilities of a batch padded to ``N`` nodes (:func:`rrwp`).

    Attributes:
        pairs: ``(B, N, N, K)`` float64: ``pairs[b, i, j, t] = (M^t)_{ij}`` of graph ``b``
            (local ids), ``t = 0 .. K - 1``; 0 where ``i`` or ``j`` is padding.
        mask: ``(B, N)`` bool, True for a real node.
    """

    pairs: Tensor
    mask: Tensor


def transition_matrix(graph: Graph) -> list[Tensor]:
    """The random walk's transition matrix ``M = D^{-1} A`` of each graph, float64 ``(n, n)``.

    Rows of nodes with an out-edge sum to 1; an isolated node's row is 0 (module docstring).

    Raises:
        ValueError: naming ``edge_weight`` (a negative weight).

    Example::

        >>> g = Graph(torch.tensor([[0, 0], [1, 2]]), num_nodes=3, directed=True)
        >>> transition_matrix(g)[0]
        tensor([[0.0000, 0.5000, 0.5000],
                [0.0000, 0.0000, 0.0000],
                [0.0000, 0.0000, 0.0000]], dtype=torch.float64)
    """
    if not isinstance(graph, Graph):
        raise ValueError(f"graph must be a posenc.graph.Graph, got {type(graph).__name__}")
    if graph.edge_weight is not None and bool((graph.edge_weight < 0).any()):
        raise ValueError("edge_weight must be non-negative: random-walk steps are probabilities")
    matrices = []
    for a in graph.adjacency():
        degree = a.sum(1, keepdim=True)
        matrices.append(a / torch.where(degree > 0, degree, 1.0))
    return matrices


def random_walk_pe(graph: Graph, steps: int) -> Tensor:
    """Random-walk structural encodings: the return probabilities ``(M^t)_{ii}``,
    ``t = 1 .. steps``, of every node.

    Args:
        graph: a :class:`~posenc.graph.Graph` (or batch), directed or not, non-negative
            weights.
        steps: ``K``, the number of walk lengths (≥ 1; PyG's ``walk_length``).

    Returns:
        ``(num_nodes, steps)`` float64 on the device of ``graph.edge_index``; the same
        values whatever the node order (a permutation of the nodes permutes the rows).

    Raises:
        ValueError: naming ``steps`` (not an int ≥ 1) or ``edge_weight``.

    Example::

        >>> g = Graph(torch.tensor([[0], [1]]), num_nodes=2)  # one edge: back every 2 steps
        >>> random_walk_pe(g, 4)[0]
        tensor([0., 1., 0., 1.], dtype=torch.float64)
    """
    steps = check_positive_int("steps", steps)
    rows = []
    for m in transition_matrix(graph):
        power = m
        diagonals = [power.diagonal()]
        for _ in range(steps - 1):
            power = power @ m
            diagonals.append(power.diagonal())
        rows.append(torch.stack(diagonals, dim=-1))  # (n, steps)
    return torch.cat(rows).to(graph.edge_index.device)


def rrwp(graph: Graph, steps: int) -> RRWP:
    """Relative random-walk probabilities ``[I, M, M², …, M^{steps-1}]`` of every pair of
    nodes of each graph (GRIT), padded to the largest graph.

    The diagonal ``pairs[b, i, i, 1:]`` is :func:`random_walk_pe` with ``steps - 1``; GRIT's
    node encoding is the whole diagonal ``pairs[b, i, i]``.

    Args:
        graph: a :class:`~posenc.graph.Graph` (or batch), directed or not, non-negative
            weights.
        steps: ``K``, the number of channels (≥ 1; GRIT's ``walk_length``): ``I`` and the
            first ``K - 1`` powers of ``M``.

    Returns:
        :class:`RRWP` ``(pairs (B, N, N, K), mask (B, N))`` on the device of
        ``graph.edge_index``.

    Raises:
        ValueError: naming ``steps`` or ``edge_weight``.

    Example::

        >>> g = Graph(torch.tensor([[0], [1]]), num_nodes=2)
        >>> rrwp(g, 3).pairs[0, 0]
        tensor([[1., 0., 1.],
                [0., 1., 0.]], dtype=torch.float64)
    """
    steps = check_positive_int("steps", steps)
    matrices = transition_matrix(graph)
    sizes = graph.sizes
    width = max(sizes)
    pairs = torch.zeros(len(sizes), width, width, steps, dtype=torch.float64)
    mask = torch.zeros(len(sizes), width, dtype=torch.bool)
    for index, (n, m) in enumerate(zip(sizes, matrices, strict=True)):
        power = torch.eye(n, dtype=torch.float64)
        pairs[index, :n, :n, 0] = power
        for t in range(1, steps):
            power = power @ m
            pairs[index, :n, :n, t] = power
        mask[index, :n] = True
    device = graph.edge_index.device
    return RRWP(pairs.to(device), mask.to(device))

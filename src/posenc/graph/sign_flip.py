"""Random sign flips of eigenvectors: the training augmentation of Laplacian eigenvector
encodings, whose signs the eigensolver picks arbitrarily (Dwivedi et al. 2020, "Benchmarking
Graph Neural Networks", https://arxiv.org/abs/2003.00982; :mod:`posenc.graph.laplacian`)."""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.graph.structure import Graph

__all__ = ["random_sign_flip"]


def random_sign_flip(
    vectors: Tensor, graph: Graph | None = None, *, generator: torch.Generator | None = None
) -> Tensor:
    """Flip the sign of each eigenvector of each graph at random (a training augmentation).

    Each column of each graph is multiplied by its own ±1, drawn uniformly from
    ``generator`` (Dwivedi et al. 2020; PyG's transform draws one sign per column for a
    whole graph, GraphGPS one per column for a whole batch). Padding (0 or NaN) stays
    padding. To flip the eigenvector encoders' positions ``(..., k, 2)``, flip their vector
    entries ``positions[..., 0]``.

    Args:
        vectors: ``(num_nodes, k)`` with ``graph`` (one sign per graph of its batch and
            column), or, without ``graph``, a padded batch ``(..., N, k)`` (one sign per
            leading index and column; ``(N, k)`` is one graph).
        graph: the :class:`~posenc.graph.Graph` whose nodes index the rows of ``vectors``.
        generator: the source of the signs (its device draws them); None: torch's global
            generator.

    Returns:
        A new tensor like ``vectors``.

    Example::

        >>> gen = torch.Generator().manual_seed(0)
        >>> v = torch.ones(3, 2)
        >>> random_sign_flip(v, generator=gen).abs().equal(v)
        True
    """
    if not isinstance(vectors, Tensor) or vectors.dim() < 2 or not vectors.is_floating_point():
        raise ValueError("vectors must be a floating tensor (num_nodes, k) or (..., N, k)")
    k = vectors.shape[-1]
    device = generator.device if generator is not None else vectors.device
    if graph is None:
        shape = (*vectors.shape[:-2], 1, k)
        signs = torch.randint(0, 2, shape, generator=generator, device=device)
    else:
        if vectors.dim() != 2 or vectors.shape[0] != graph.num_nodes:
            raise ValueError(
                f"vectors must be (num_nodes, k) = ({graph.num_nodes}, k) for this graph; "
                f"got {tuple(vectors.shape)}"
            )
        drawn = torch.randint(0, 2, (graph.num_graphs, k), generator=generator, device=device)
        batch = graph.batch if graph.batch is not None else torch.zeros(graph.num_nodes)
        signs = drawn[batch.to(device).long()]
    flip = signs.to(vectors.device) == 1
    return torch.where(flip, -vectors, vectors)

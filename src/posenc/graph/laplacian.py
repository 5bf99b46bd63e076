r"""Laplacian eigenvector encodings: each node's entries in the k smallest non-trivial
eigenvectors of a graph Laplacian, with their eigenvalues.

Three Laplacians of a graph with weighted adjacency ``A`` (self-loops dropped) and degrees
``D = diag(A 1)``:

.. math::
    L = D - A, \qquad
    L_\mathrm{sym} = D^{-1/2} L D^{-1/2} = I - D^{-1/2} A D^{-1/2}, \qquad
    L_\mathrm{rw} = D^{-1} L = I - D^{-1} A,

with ``D^{-1/2}`` and ``D^{-1}`` read as 0 on an isolated node (Chung's convention, the
one networkx's ``normalized_laplacian_matrix`` uses): an isolated node's row and column of
``L_sym`` and its row of ``L_rw`` are 0.

Conventions (see ``docs/graph.md``):

- **Non-trivial.** A graph with ``c`` connected components (isolated nodes included) has
  eigenvalue 0 exactly ``c`` times under all three Laplacians, and that eigenspace only
  says which component a node is in. The ``c`` smallest eigenpairs are dropped; the next
  ``k`` (eigenvalues > 0, ascending) are kept. The components are counted from the graph,
  not from a threshold on computed eigenvalues. On a connected graph this is PyG's
  ``AddLaplacianEigenvectorPE`` (which drops the first eigenvector whatever the graph).
- **Padding.** A graph with fewer than ``k`` non-trivial eigenpairs (``n - c < k``) gets
  zero columns (vectors and eigenvalues 0, ``mask`` False) after its own; ``pad=False``
  asks for exactly ``k`` per graph and raises ``ValueError`` naming ``k`` instead.
- **Random walk.** ``L_rw`` is not symmetric; its eigenvectors are ``D^{-1/2} u`` for the
  eigenvectors ``u`` of ``L_sym`` (same eigenvalues), each rescaled to unit Euclidean norm
  (GraphGPS's ``L2`` eigenvector normalization): they are then ``D``-orthogonal, not
  orthogonal.
- **Undirected, non-negative weights.** A directed graph raises ``ValueError`` naming
  ``directed`` (build the :class:`~posenc.graph.Graph` with ``directed=False`` to read each
  edge both ways); a negative weight raises naming ``edge_weight``. An edge of weight 0 is
  no edge.
- **Signs and bases** are the eigensolver's (float64 ``torch.linalg.eigh``, dense, per
  graph; scipy's ``eigsh`` per component past :data:`SPARSE_THRESHOLD` nodes): a sign, and
  the basis inside a repeated eigenvalue, are arbitrary.
  :func:`random_sign_flip` draws signs for training; :class:`~posenc.graph.SignNet` is
  invariant to them.

Paper: Dwivedi et al. 2020, "Benchmarking Graph Neural Networks",
https://arxiv.org/abs/2003.00982 (Laplacian PE); tested against PyG's
``AddLaplacianEigenvectorPE`` (eigenspace projectors, sign-aligned simple eigenvectors) and
networkx's ``laplacian_matrix`` / ``normalized_laplacian_matrix``.

Example::

    >>> import torch
    >>> from posenc.graph import Graph, laplacian_pe
    >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)  # a path
    >>> pe = laplacian_pe(g, k=2)
    >>> pe.vectors.shape, pe.values[0]
    (torch.Size([4, 2]), tensor([0.5000, 1.5000], dtype=torch.float64))
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_int
from posenc.graph.shortest_path import MAX_RESULT_BYTES
from posenc.graph.sign_flip import random_sign_flip
from posenc.graph.structure import Graph, SubGraph, dense_adjacency

__all__ = [
    "SPARSE_THRESHOLD",
    "LaplacianPE",
    "Normalization",
    "laplacian",
    "laplacian_pe",
    "random_sign_flip",
]

Normalization = Literal["combinatorial", "sym", "rw"]

#: Graphs of more nodes than this take :func:`laplacian_pe`'s sparse route (scipy): a dense
#: float64 ``eigh`` costs O(n³) time and 8·n² bytes per matrix (2,000 nodes: 32 MB and about
#: a second; 100,000 nodes: 80 GB).
SPARSE_THRESHOLD = 2000
_NORMALIZATIONS: tuple[Normalization, ...] = ("combinatorial", "sym", "rw")


class LaplacianPE(NamedTuple):
    """Laplacian eigenvector encodings of every node of a batch (:func:`laplacian_pe`).

    Attributes:
        vectors: ``(num_nodes, k)`` float64: row ``i`` holds node ``i``'s entries in its
            graph's eigenvectors; 0 in padded columns.
        values: ``(num_nodes, k)`` float64: the eigenvalue of each column (the same on
            every node of a graph); 0 in padded columns.
        mask: ``(num_nodes, k)`` bool: True for a real eigenpair, False for padding.
    """

    vectors: Tensor
    values: Tensor
    mask: Tensor

    def positions(self) -> Tensor:
        """What the eigenvector encoders read: ``(num_nodes, k, 2)`` pairs (vector entry,
        eigenvalue), NaN in both entries of a padded column (GraphGPS's ``EigVecs`` /
        ``EigVals`` padding, so that the tensor carries its own mask through batching)."""
        pairs = torch.stack([self.vectors, self.values], dim=-1)
        return pairs.masked_fill(~self.mask[..., None], float("nan"))


def laplacian(graph: Graph, normalization: Normalization = "sym") -> list[Tensor]:
    """The dense float64 Laplacian of each graph of a batch, ``(n, n)`` each.

    Args:
        graph: an undirected :class:`~posenc.graph.Graph` with non-negative weights.
        normalization: ``"combinatorial"`` (``D - A``), ``"sym"`` (``I - D^{-1/2} A
            D^{-1/2}``) or ``"rw"`` (``I - D^{-1} A``); see the module docstring for
            isolated nodes and self-loops (dropped).

    Raises:
        ValueError: naming ``directed``, ``edge_weight`` or ``normalization``.
        MemoryError: naming ``N`` and the bytes when a matrix would exceed
            :data:`~posenc.graph.shortest_path.MAX_RESULT_BYTES` (checked before allocating).

    Example::

        >>> g = Graph(torch.tensor([[0], [1]]), num_nodes=2)
        >>> laplacian(g, "combinatorial")[0]
        tensor([[ 1., -1.],
                [-1.,  1.]], dtype=torch.float64)
    """
    check_in_choices("normalization", normalization, _NORMALIZATIONS)
    matrices = []
    for a in _adjacencies(graph, "laplacian"):
        degree = a.sum(1)
        lap = torch.diag(degree) - a
        if normalization == "sym":
            s = _inverse(degree.sqrt())
            lap = s[:, None] * lap * s[None, :]
        elif normalization == "rw":
            lap = _inverse(degree)[:, None] * lap
        matrices.append(lap)
    return matrices


def laplacian_pe(
    graph: Graph, k: int, normalization: Normalization = "sym", *, pad: bool = True
) -> LaplacianPE:
    r"""The k smallest non-trivial Laplacian eigenvectors of each graph and their eigenvalues.

    For each graph with ``n`` nodes and ``c`` components, the eigenpairs
    ``(λ_j, v_j)``, ``λ_1 ≤ … ≤ λ_n``, of its Laplacian (``normalization``) give node ``i``
    the row ``(v_{c+1}[i], …, v_{c+k}[i])``: the ``c`` zero eigenvalues are trivial (see the
    module docstring), and columns past ``n - c`` are zero padding.

    Computed with float64 ``torch.linalg.eigh`` on the dense matrix of each graph
    (``L_sym`` for ``"rw"``, whose vectors are then ``D^{-1/2} u`` rescaled to unit norm):
    ``O(n³)`` per graph. A graph of more than :data:`SPARSE_THRESHOLD` (2,000) nodes takes
    a sparse route instead (scipy): each connected component offers its ``k`` smallest
    non-zero eigenpairs (small components from a batched dense ``eigh``, large ones from
    scipy's ``eigsh``; the spectrum of a graph is the union of its components'), and the
    ``k`` smallest are kept. Tested equal to the dense route (eigenvalues, eigenspace
    projectors).

    Args:
        graph: an undirected :class:`~posenc.graph.Graph` (or batch) with non-negative
            weights; self-loops are dropped (as PyG's ``get_laplacian`` drops them).
        k: eigenvectors per node (≥ 1).
        normalization: ``"combinatorial"``, ``"sym"`` (PyG's choice) or ``"rw"``.
        pad: True zero-pads a graph with fewer than ``k`` non-trivial eigenpairs; False
            raises ``ValueError`` naming ``k`` for it.

    Returns:
        :class:`LaplacianPE` ``(vectors, values, mask)``, each ``(num_nodes, k)``, on the
        device of ``graph.edge_index``.

    Raises:
        ValueError: naming ``k`` (not an int ≥ 1; too large with ``pad=False``),
            ``normalization``, ``directed`` or ``edge_weight``.
        ImportError: on the sparse route without scipy (``pip install -e '.[graph]'`` in a posenc
            clone).
        RuntimeError: naming ``k`` and the graph when the sparse eigensolver does not
            converge.

    Example::

        >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=4)  # triangle + node
        >>> pe = laplacian_pe(g, k=3, normalization="combinatorial")
        >>> pe.values[0], pe.mask[3]
        (tensor([3., 3., 0.], dtype=torch.float64), tensor([ True,  True, False]))
    """
    k = check_positive_int("k", k)
    check_in_choices("normalization", normalization, _NORMALIZATIONS)
    _check_graph(graph, "laplacian_pe")
    n = graph.num_nodes
    vectors = torch.zeros(n, k, dtype=torch.float64)
    values = torch.zeros(n, k, dtype=torch.float64)
    mask = torch.zeros(n, k, dtype=torch.bool)
    for index, sub in enumerate(graph.graphs()):
        if sub.num_nodes > SPARSE_THRESHOLD:
            vec, val, components = _sparse_eigenpairs(sub, k, normalization, index)
            available = val.shape[0]
        else:
            a = dense_adjacency(sub, False, torch.float64).fill_diagonal_(0.0)
            components = _num_components(a > 0)
            available = min(k, sub.num_nodes - components)
            vec, val = _eigenpairs(a, normalization)
            vec = vec[:, components : components + available]
            val = val[components : components + available]
        if available < k and not pad:
            raise ValueError(
                f"k={k} but graph {index} has {sub.num_nodes} nodes in {components} "
                f"component(s), so only {sub.num_nodes - components} non-trivial "
                "eigenvectors; use a smaller k or pad=True (zero columns)"
            )
        if available == 0:
            continue
        rows = slice(sub.start, sub.start + sub.num_nodes)
        vectors[rows, :available] = vec
        values[rows, :available] = val
        mask[rows, :available] = True
    device = graph.edge_index.device
    return LaplacianPE(vectors.to(device), values.to(device), mask.to(device))


def _check_graph(graph: Graph, owner: str) -> None:
    """The checks every Laplacian needs: a :class:`Graph`, undirected, weights >= 0."""
    if not isinstance(graph, Graph):
        raise ValueError(f"graph must be a posenc.graph.Graph, got {type(graph).__name__}")
    if graph.directed:
        raise ValueError(
            f"{owner} needs an undirected graph but directed=True: build the Graph with "
            "directed=False to read each edge both ways"
        )
    if graph.edge_weight is not None and bool((graph.edge_weight < 0).any()):
        raise ValueError(f"edge_weight must be non-negative for {owner}")


def _adjacencies(graph: Graph, owner: str) -> list[Tensor]:
    """Each graph's loop-free dense float64 adjacency, after the checks (``MemoryError``
    naming ``N`` and the bytes past :data:`~posenc.graph.shortest_path.MAX_RESULT_BYTES`)."""
    _check_graph(graph, owner)
    largest = max(graph.sizes)
    need = 8 * largest * largest
    if need > MAX_RESULT_BYTES:
        raise MemoryError(
            f"{owner}: the dense float64 matrix of a graph of N={largest} nodes needs "
            f"{need:,} bytes ({need / 2**30:.2f} GiB), above MAX_RESULT_BYTES="
            f"{MAX_RESULT_BYTES:,}; laplacian_pe takes a sparse eigensolver past "
            f"SPARSE_THRESHOLD={SPARSE_THRESHOLD} nodes"
        )
    adjacencies = graph.adjacency()
    for a in adjacencies:
        a.fill_diagonal_(0.0)  # self-loops: no effect on D - A, dropped from D (as PyG)
    return adjacencies


def _eigenpairs(a: Tensor, normalization: Normalization) -> tuple[Tensor, Tensor]:
    """All eigenpairs ``(vectors (..., n, n), values (..., n))`` of graphs with adjacency
    ``a`` ``(..., n, n)``, ascending values."""
    degree = a.sum(-1)
    lap = torch.diag_embed(degree) - a
    if normalization == "combinatorial":
        values, vectors = torch.linalg.eigh(lap)
        return vectors, values
    s = _inverse(degree.sqrt())
    values, vectors = torch.linalg.eigh(s[..., :, None] * lap * s[..., None, :])
    if normalization == "rw":
        # L_rw (D^{-1/2} u) = λ D^{-1/2} u; an isolated node's u = e_i maps to 0, but that
        # eigenvalue is trivial and dropped, so the zero norm is never divided by.
        vectors = s[..., :, None] * vectors
        norms = vectors.norm(dim=-2, keepdim=True)
        vectors = vectors / torch.where(norms > 0, norms, 1.0)
    return vectors, values


def _num_components(pattern: Tensor) -> int:
    """Connected components of an undirected ``(n, n)`` boolean pattern (isolated nodes
    count): minimum-label propagation with pointer jumping."""
    n = pattern.shape[0]
    label = torch.arange(n)
    reach = pattern | torch.eye(n, dtype=torch.bool)
    while True:
        new = torch.where(reach, label[None, :], n).amin(1)
        new = torch.minimum(new, new[new])
        if torch.equal(new, label):
            return int((label == torch.arange(n)).sum())
        label = new


def _inverse(x: Tensor) -> Tensor:
    """``1 / x`` where ``x > 0``, 0 elsewhere (an isolated node's ``D^{-1}``)."""
    return torch.where(x > 0, 1.0 / torch.where(x > 0, x, 1.0), 0.0)


def _sparse_eigenpairs(
    sub: SubGraph, k: int, normalization: Normalization, index: int
) -> tuple[Tensor, Tensor, int]:
    """The ``k`` smallest non-trivial eigenpairs of one large graph without a dense matrix:
    ``(vectors (n, m), values (m,), components)``, ``m = min(k, n - components)``.

    The Laplacian of a graph is block diagonal over its components, so its spectrum is the
    union of theirs and each eigenvector of a simple eigenvalue lives on one component.
    Each component drops its one zero eigenvalue and offers its ``k`` smallest others:
    components of at most :data:`SPARSE_THRESHOLD` nodes from a batched dense ``eigh``,
    larger ones from scipy's ``eigsh`` (:func:`_component_eigsh`); the ``k`` smallest
    offers are kept in ascending order (ties in the order of the components: inside a
    repeated eigenvalue the basis is a convention, as with the dense solver).
    """
    try:
        import numpy as np
        from scipy.sparse import csgraph
    except ImportError as error:  # pragma: no cover - scipy is in the graph extra
        raise ImportError(
            f"laplacian_pe: graph {index} has {sub.num_nodes} nodes, past SPARSE_THRESHOLD="
            f"{SPARSE_THRESHOLD}, and its sparse eigensolver needs scipy: pip install "
            "-e '.[graph]' in a posenc clone"
        ) from error
    n = sub.num_nodes
    a = _sparse_adjacency(sub)
    count, label = csgraph.connected_components(a, directed=False)
    order = np.argsort(label, kind="stable")
    sizes = np.bincount(label, minlength=count)
    starts = np.cumsum(sizes) - sizes
    offers: list[tuple[Tensor, Tensor, Tensor]] = []  # (values (g,), nodes (g, m), vecs)
    coo = a.tocoo()
    small = np.unique(sizes[(sizes > 1) & (sizes <= SPARSE_THRESHOLD)])
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n) - starts[label[order]]
    for m in small.tolist():
        members = np.flatnonzero(sizes == m)
        chunk = max(1, 2**24 // (m * m))  # bounds the dense blocks to 128 MB
        for first in range(0, members.shape[0], chunk):
            comps = members[first : first + chunk]
            slot = np.full(count, -1, dtype=np.int64)
            slot[comps] = np.arange(comps.shape[0])
            inside = slot[label[coo.row]] >= 0
            row, col = coo.row[inside], coo.col[inside]
            blocks = torch.zeros(comps.shape[0], m, m, dtype=torch.float64)
            blocks[slot[label[row]], position[row], position[col]] = torch.from_numpy(
                coo.data[inside]
            )
            vec, val = _eigenpairs(blocks, normalization)
            want = min(k, m - 1)
            nodes = torch.from_numpy(order[starts[comps][:, None] + np.arange(m)])
            for j in range(1, 1 + want):  # drop each component's zero eigenvalue
                offers.append((val[:, j], nodes, vec[:, :, j]))
    for comp in np.flatnonzero(sizes > SPARSE_THRESHOLD).tolist():
        nodes_np = order[starts[comp] : starts[comp] + sizes[comp]]
        val, vec = _component_eigsh(a[nodes_np][:, nodes_np], k, normalization, index)
        nodes = torch.from_numpy(nodes_np)[None, :]
        for j in range(val.shape[0]):
            offers.append((val[j : j + 1], nodes, vec[None, :, j]))
    vectors = torch.zeros(n, 0, dtype=torch.float64)
    if not offers:
        return vectors, torch.zeros(0, dtype=torch.float64), count
    values = torch.cat([o[0] for o in offers])
    owner = torch.cat([torch.full((o[0].shape[0],), t) for t, o in enumerate(offers)])
    row_of = torch.cat([torch.arange(o[0].shape[0]) for o in offers])
    chosen = torch.argsort(values, stable=True)[: min(k, n - count)]
    vectors = torch.zeros(n, chosen.shape[0], dtype=torch.float64)
    for column, pick in enumerate(chosen.tolist()):
        _, nodes, vec = offers[int(owner[pick])]
        r = int(row_of[pick])
        vectors[nodes[r], column] = vec[r]
    return vectors, values[chosen], count


def _sparse_adjacency(sub: SubGraph) -> Any:
    """One graph's symmetric loop-free scipy CSR adjacency under :func:`dense_adjacency`'s
    conventions (parallel edges add up; an undirected edge listed once counts both ways,
    listed both ways once), weight-0 entries dropped."""
    import numpy as np
    from scipy import sparse

    n = sub.num_nodes
    src, dst = sub.edge_index.cpu().numpy()
    weight = (
        np.ones(src.shape[0])
        if sub.edge_weight is None
        else sub.edge_weight.detach().to(torch.float64).cpu().numpy()
    )
    a = sparse.csr_matrix((weight, (src, dst)), shape=(n, n))  # repeats add up
    listed = sparse.csr_matrix((np.ones(src.shape[0]), (src, dst)), shape=(n, n))
    listed.data[:] = 1.0
    both = listed.multiply(listed.T)  # listed in both directions
    twice = a.multiply(both)
    if abs(twice - twice.T).max() > 0 if twice.nnz else False:
        raise ValueError(
            "edge_weight: an undirected edge listed in both directions has two different "
            "weights; give one weight per edge (or directed=True)"
        )
    a = (a + a.T - twice).tocsr()
    a.setdiag(0.0)
    a.eliminate_zeros()
    return a


def _component_eigsh(
    a: Any, k: int, normalization: Normalization, index: int
) -> tuple[Tensor, Tensor]:
    """The ``min(k, m - 1)`` smallest non-zero eigenpairs ``(values (r,), vectors (m, r))``
    of one connected component's Laplacian (scipy CSR adjacency ``a``, ``m`` nodes).

    First Lanczos for the smallest algebraic eigenvalues (``eigsh(which="SA")``, relative
    tolerance 1e-10, at most 100 restarts): quick where the spectral gap is wide (random
    graphs, expanders). Failing that (grids, chains: gaps of order ``1/m`` to ``1/m²``),
    Lanczos on the pseudo-inverse ``L⁺`` (shift-invert at 0): ``L`` is singular with the
    known null vector ``u`` (``1``, or ``D^{1/2} 1`` for ``L_sym``), so ``L⁺ b`` solves the
    system with one node's row and column removed (a sparse LU, cheap on such graphs) and
    projects out ``u``; its largest eigenvalues are ``1 / λ`` of the smallest non-zero
    ``λ``.
    """
    import numpy as np
    from scipy import sparse
    from scipy.sparse import linalg as sparse_linalg

    m = a.shape[0]
    want = min(k, m - 1)
    degree = np.asarray(a.sum(axis=1)).ravel()
    lap = (sparse.diags(degree) - a).tocsr()
    null = np.ones(m)
    if normalization != "combinatorial":
        scale = 1.0 / np.sqrt(degree)  # a component of >= 2 nodes has no isolated node
        lap = (sparse.diags(scale) @ lap @ sparse.diags(scale)).tocsr()
        null = np.sqrt(degree)
    null = null / np.linalg.norm(null)
    start = np.random.default_rng(0).random(m)  # fixed: the same signs on every call
    if want + 1 >= m:
        values, vectors = np.linalg.eigh(lap.toarray())
        values, vectors = values[1 : 1 + want], vectors[:, 1 : 1 + want]
    else:
        try:
            values, vectors = sparse_linalg.eigsh(
                lap, k=want + 1, which="SA", v0=start, maxiter=100, tol=1e-10
            )
            order = np.argsort(values)[1:]  # drop the zero eigenvalue
            values, vectors = values[order], vectors[:, order]
        except sparse_linalg.ArpackNoConvergence:
            factor = sparse_linalg.splu(lap[1:, 1:].tocsc())

            def pseudo_inverse(b: np.ndarray) -> np.ndarray:
                b = b.ravel() - null * (null @ b.ravel())
                x = np.zeros(m)
                x[1:] = factor.solve(b[1:])
                return x - null * (null @ x)

            operator = sparse_linalg.LinearOperator((m, m), pseudo_inverse, dtype=np.float64)
            try:
                inverse, vectors = sparse_linalg.eigsh(
                    operator, k=want, which="LA", v0=pseudo_inverse(start), tol=1e-12
                )
            except sparse_linalg.ArpackNoConvergence as error:
                raise RuntimeError(
                    f"laplacian_pe: the sparse eigensolver (scipy eigsh) did not converge for "
                    f"the k={k} smallest eigenpairs of a {m}-node component of graph {index}"
                ) from error
            order = np.argsort(-inverse)
            values, vectors = 1.0 / inverse[order], vectors[:, order]
    vectors_t = torch.from_numpy(np.ascontiguousarray(vectors))
    if normalization == "rw":
        vectors_t = vectors_t * torch.from_numpy(scale)[:, None]
        vectors_t = vectors_t / vectors_t.norm(dim=0)
    return torch.from_numpy(np.ascontiguousarray(values)), vectors_t

"""Laplacian eigenvector encodings: the three Laplacians against networkx and PyG, the
eigenpairs against PyG's AddLaplacianEigenvectorPE (eigenspace projectors, sign-aligned
simple eigenvectors), the non-trivial rule on disconnected graphs, padding, node
permutations, sign flips and bad input."""

from __future__ import annotations

import importlib

import networkx as nx
import numpy as np
import pytest
import scipy.linalg
import torch
from torch.testing import assert_close
from torch_geometric.data import Data
from torch_geometric.transforms import AddLaplacianEigenvectorPE
from torch_geometric.utils import get_laplacian, to_dense_adj

from posenc.graph import Graph, from_networkx, laplacian, laplacian_pe, random_sign_flip
from tests.graph.graphormer_reference import batch_graphs

NORMALIZATIONS = ["combinatorial", "sym", "rw"]


def weighted(graph: nx.Graph, seed: int) -> nx.Graph:
    gen = torch.Generator().manual_seed(seed)
    for u, v in graph.edges:
        graph.edges[u, v]["weight"] = (
            float(torch.rand((), generator=gen, dtype=torch.float64)) + 0.1
        )
    return graph


def disconnected() -> nx.Graph:
    """A 4-cycle, a 3-path and an isolated node: 3 components, 5 non-trivial eigenpairs."""
    graph = nx.disjoint_union(nx.cycle_graph(4), nx.path_graph(3))
    graph.add_node(7)
    return graph


GRAPHS = {
    "path": nx.path_graph(6),
    "cycle": nx.cycle_graph(6),  # repeated eigenvalues
    "petersen": nx.petersen_graph(),  # multiplicities 5 and 4
    "star": nx.star_graph(5),
    "weighted": weighted(nx.connected_watts_strogatz_graph(12, 4, 0.4, seed=3), 0),
    "disconnected": disconnected(),
}


def clusters(values: torch.Tensor, tol: float = 1e-6) -> list[list[int]]:
    """Indices of ascending eigenvalues grouped into equal values."""
    groups: list[list[int]] = [[0]]
    for j in range(1, values.shape[0]):
        if values[j] - values[j - 1] > tol:
            groups.append([])
        groups[-1].append(j)
    return groups


def projector(vectors: torch.Tensor) -> torch.Tensor:
    """Orthogonal projector onto the span of the columns (basis- and sign-free)."""
    q, _ = torch.linalg.qr(vectors)
    return q @ q.T


def eigenspace_projectors(vectors: torch.Tensor, values: torch.Tensor) -> list[torch.Tensor]:
    return [projector(vectors[:, group]) for group in clusters(values)]


def nx_laplacian(graph: nx.Graph, normalization: str) -> torch.Tensor:
    if normalization == "combinatorial":
        return torch.from_numpy(nx.laplacian_matrix(graph).toarray()).double()
    return torch.from_numpy(nx.normalized_laplacian_matrix(graph).toarray()).double()


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("normalization", ["combinatorial", "sym"])
def test_laplacians_match_networkx(name: str, normalization: str) -> None:
    graph = GRAPHS[name]
    ours = laplacian(from_networkx(graph, weight="weight"), normalization)[0]  # type: ignore[arg-type]
    assert_close(ours, nx_laplacian(graph, normalization), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["path", "star", "weighted"])
def test_random_walk_laplacian_formula_and_pyg(name: str) -> None:
    graph = GRAPHS[name]
    g = from_networkx(graph, weight="weight")
    a = torch.from_numpy(nx.to_numpy_array(graph)).double()
    d = a.sum(1)
    rw = laplacian(g, "rw")[0]
    assert_close(rw, torch.eye(len(d), dtype=torch.float64) - a / d[:, None], rtol=0, atol=1e-14)
    sym = laplacian(g, "sym")[0]
    assert_close(rw, d[:, None] ** -0.5 * sym * d[None, :] ** 0.5, rtol=0, atol=1e-14)
    w = torch.tensor([graph.edges[e].get("weight", 1.0) for e in graph.edges], dtype=torch.float64)
    ei = g.edge_index
    both, w2 = torch.cat([ei, ei.flip(0)], 1), torch.cat([w, w])
    for norm, ours in (("rw", rw), ("sym", sym)):
        index, weight = get_laplacian(both, w2, normalization=norm, num_nodes=g.num_nodes)
        assert_close(ours, to_dense_adj(index, edge_attr=weight)[0], rtol=0, atol=1e-14)


def test_isolated_node_and_self_loops() -> None:
    # node 2 isolated, a self-loop on node 0: the loop is dropped (as PyG's get_laplacian)
    g = Graph(torch.tensor([[0, 0], [1, 0]]), 3)
    plain = Graph(torch.tensor([[0], [1]]), 3)
    for norm in NORMALIZATIONS:
        assert_close(laplacian(g, norm)[0], laplacian(plain, norm)[0], rtol=0, atol=0)  # type: ignore[arg-type]
        assert laplacian(g, norm)[0][2].abs().sum() == 0  # type: ignore[arg-type]
    # PyG's sym Laplacian puts 1 on an isolated node's diagonal (an eigenvalue 1, not 0)
    index, weight = get_laplacian(plain.edge_index, normalization="sym", num_nodes=3)
    assert float(to_dense_adj(index, edge_attr=weight, max_num_nodes=3)[0, 2, 2]) == 1.0


@pytest.mark.parametrize("name", ["path", "cycle", "petersen", "star", "weighted"])
def test_matches_pyg_laplacian_eigenvector_pe(name: str) -> None:
    """Connected graphs: PyG drops the first eigenvector, the one zero eigenvalue here.

    Signs and the basis inside a repeated eigenvalue are conventions: each eigenspace's
    projector is compared, and each simple eigenvector after aligning its sign."""
    graph = GRAPHS[name]
    g = from_networkx(graph, weight="weight")
    k = g.num_nodes - 1
    ours = laplacian_pe(g, k)
    data = Data(edge_index=torch.cat([g.edge_index, g.edge_index.flip(0)], 1), num_nodes=k + 1)
    if g.edge_weight is not None:
        data.edge_weight = torch.cat([g.edge_weight, g.edge_weight])
    theirs = AddLaplacianEigenvectorPE(k, is_undirected=True)(data).laplacian_eigenvector_pe
    assert theirs.dtype == torch.float64  # float64 weights (all 1 here) keep PyG in float64
    assert ours.mask.all()
    values = ours.values[0]
    for group in clusters(values):
        assert_close(projector(ours.vectors[:, group]), projector(theirs[:, group]))
    simple = [group[0] for group in clusters(values) if len(group) == 1]
    signs = (ours.vectors[:, simple] * theirs[:, simple]).sum(0).sign()
    assert_close(ours.vectors[:, simple] * signs, theirs[:, simple])


def test_matches_pyg_sparse_eigensolver_above_100_nodes() -> None:
    """Past 100 nodes PyG runs ARPACK's ``eigsh``; float64 weights keep it in float64, so
    the comparison is at float64's tolerance. (Its float32 route — no weights — differs from
    the exact vectors by the float32 solver's error, eps32·‖L‖/gap: 3.7e-6 on one CPU,
    1.5e-5 on another, so it checks the machine's float32 BLAS, not posenc.)"""
    graph = nx.connected_watts_strogatz_graph(120, 4, 0.3, seed=1)
    g = from_networkx(graph)
    k = 6
    ours = laplacian_pe(g, k).vectors
    data = Data(edge_index=torch.cat([g.edge_index, g.edge_index.flip(0)], 1), num_nodes=120)
    data.edge_weight = torch.ones(data.edge_index.shape[1], dtype=torch.float64)
    # ARPACK's own random start vector carries state across calls in a process: a fixed start
    # makes the reference one computation whatever the test order
    start = np.random.default_rng(0).standard_normal(120)
    transform = AddLaplacianEigenvectorPE(k, is_undirected=True, v0=start)
    theirs = transform(data).laplacian_eigenvector_pe
    assert theirs.dtype == torch.float64
    signs = (ours * theirs).sum(0).sign()
    assert_close(ours * signs, theirs)


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_eigenpairs_solve_the_laplacian(name: str, normalization: str) -> None:
    graph = GRAPHS[name]
    g = from_networkx(graph, weight="weight")
    components = nx.number_connected_components(graph)
    k = g.num_nodes - components
    pe = laplacian_pe(g, k, normalization)  # type: ignore[arg-type]
    lap = laplacian(g, normalization)[0]  # type: ignore[arg-type]
    v, values = pe.vectors, pe.values[0]
    assert pe.mask.all() and bool((values > 1e-9).all())
    assert_close(lap @ v, v * values, rtol=0, atol=1e-12)
    assert_close(v.norm(dim=0), torch.ones(k, dtype=torch.float64))
    # the eigenvalues: networkx's matrix (sym on rw: same spectrum), the zeros dropped
    expected = scipy.linalg.eigvalsh(nx_laplacian(graph, normalization).numpy())
    assert_close(values, torch.from_numpy(expected[components:]), rtol=0, atol=1e-12)
    if normalization != "rw":
        assert_close(v.T @ v, torch.eye(k, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_disconnected_graph_drops_one_zero_eigenvalue_per_component(normalization: str) -> None:
    graph = disconnected()
    g = from_networkx(graph)
    pe = laplacian_pe(g, 7, normalization)  # type: ignore[arg-type]
    assert pe.mask.tolist() == [[True] * 5 + [False] * 2] * 8
    assert bool((pe.values[:, :5] > 1e-9).all())
    assert pe.vectors[:, 5:].abs().sum() == 0 and pe.values[:, 5:].abs().sum() == 0
    # all non-trivial vectors span the complement of the component indicators (D^{1/2} 1_C
    # for L_sym; D-orthogonal for L_rw, so compare in the sym basis)
    degree = torch.from_numpy(nx.to_numpy_array(graph)).sum(1)
    weight = (
        torch.ones(8, dtype=torch.float64) if normalization == "combinatorial" else degree.sqrt()
    )
    weight[7] = 1.0  # the isolated node's own indicator
    null = torch.zeros(8, 8, dtype=torch.float64)
    for component in nx.connected_components(graph):
        ind = torch.zeros(8, dtype=torch.float64)
        ind[list(component)] = weight[list(component)]
        null += torch.outer(ind, ind) / ind.dot(ind)
    vectors = pe.vectors[:, :5]
    if normalization == "rw":
        vectors = torch.where(degree > 0, degree.sqrt(), 1.0)[:, None] * vectors
    assert_close(projector(vectors), torch.eye(8, dtype=torch.float64) - null)


def test_padding_and_positions() -> None:
    g = Graph(torch.tensor([[0, 1], [1, 2]]), 3)  # 3 nodes, 2 non-trivial eigenpairs
    pe = laplacian_pe(g, 4)
    assert pe.vectors.shape == pe.values.shape == pe.mask.shape == (3, 4)
    assert pe.mask.tolist() == [[True, True, False, False]] * 3
    positions = pe.positions()
    assert positions.shape == (3, 4, 2)
    assert torch.isnan(positions[:, 2:]).all() and not torch.isnan(positions[:, :2]).any()
    assert_close(positions[:, :2, 0], pe.vectors[:, :2])
    with pytest.raises(ValueError, match=r"k=4 .* 2 non-trivial"):
        laplacian_pe(g, 4, pad=False)
    single = laplacian_pe(Graph(torch.zeros(2, 0, dtype=torch.long), 1), 2)
    assert not single.mask.any() and single.vectors.abs().sum() == 0


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_batch_equals_each_graph_alone(normalization: str) -> None:
    parts = [GRAPHS["cycle"], GRAPHS["disconnected"], nx.path_graph(2)]
    union = nx.disjoint_union_all(parts)
    sizes = [p.number_of_nodes() for p in parts]
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    g = from_networkx(union)
    pe = laplacian_pe(Graph(g.edge_index, g.num_nodes, batch=batch), 4, normalization)  # type: ignore[arg-type]
    start = 0
    for part, size in zip(parts, sizes, strict=True):
        alone = laplacian_pe(from_networkx(part), 4, normalization)  # type: ignore[arg-type]
        rows = slice(start, start + size)
        for ours, theirs in zip(pe, alone, strict=True):
            assert_close(ours[rows], theirs, rtol=0, atol=1e-12)
        start += size


@pytest.mark.parametrize("name", ["cycle", "petersen", "weighted", "disconnected"])
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_node_permutation_permutes_eigenspaces(name: str, normalization: str) -> None:
    graph = GRAPHS[name]
    g = from_networkx(graph, weight="weight")
    n, k = g.num_nodes, g.num_nodes - nx.number_connected_components(graph)
    perm = torch.randperm(n)  # new node i is old node perm[i]
    inverse = torch.argsort(perm)
    permuted = Graph(inverse[g.edge_index], n, g.edge_weight)
    pe = laplacian_pe(g, k, normalization)  # type: ignore[arg-type]
    pe_perm = laplacian_pe(permuted, k, normalization)  # type: ignore[arg-type]
    assert_close(pe_perm.values, pe.values[perm], rtol=0, atol=1e-12)
    for ours, theirs in zip(
        eigenspace_projectors(pe_perm.vectors, pe_perm.values[0]),
        eigenspace_projectors(pe.vectors, pe.values[0]),
        strict=True,
    ):
        assert_close(ours, theirs[perm][:, perm])


def test_random_sign_flip_per_graph_and_column() -> None:
    parts = [nx.cycle_graph(5), nx.path_graph(4), nx.path_graph(2)]
    union = from_networkx(nx.disjoint_union_all(parts))
    batch = torch.tensor([0] * 5 + [1] * 4 + [2] * 2)
    g = Graph(union.edge_index, 11, batch=batch)
    positions = laplacian_pe(g, 8).positions()
    vectors = positions[..., 0]
    flipped = random_sign_flip(vectors, g, generator=torch.Generator().manual_seed(1))
    again = random_sign_flip(vectors, g, generator=torch.Generator().manual_seed(1))
    assert_close(flipped, again, rtol=0, atol=0, equal_nan=True)
    real = ~torch.isnan(vectors)
    assert torch.isnan(flipped).equal(~real)  # padding stays padding
    ratio = torch.where(real, flipped / torch.where(real & (vectors != 0), vectors, 1.0), 0.0)
    for index in range(3):  # one sign per graph and column, shared by its nodes
        rows = ratio[batch == index]
        assert bool(((rows == rows[:1]) | (vectors[batch == index] == 0)).all())
    assert flipped.abs().nan_to_num().equal(vectors.abs().nan_to_num())
    draws = torch.stack([random_sign_flip(vectors, g)[0] / vectors[0] for _ in range(32)])
    assert (draws[:, :4] > 0).any() and (draws[:, :4] < 0).any()


def test_random_sign_flip_on_a_padded_batch() -> None:
    dense = torch.randn(3, 5, 4, dtype=torch.float64)
    flipped = random_sign_flip(dense, generator=torch.Generator().manual_seed(0))
    signs = flipped / dense
    assert_close(signs, signs[:, :1].expand_as(signs), rtol=0, atol=0)
    assert bool((signs.abs() == 1).all())


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "2"])
def test_k_must_be_a_positive_int(k: object) -> None:
    with pytest.raises(ValueError, match="k must"):
        laplacian_pe(Graph(torch.tensor([[0], [1]]), 2), k)  # type: ignore[arg-type]


def test_bad_input_is_named() -> None:
    edges = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="directed"):
        laplacian_pe(Graph(edges, 3, directed=True), 1)
    with pytest.raises(ValueError, match="edge_weight"):
        laplacian_pe(Graph(edges, 3, torch.tensor([1.0, -0.5])), 1)
    with pytest.raises(ValueError, match="edge_weight"):
        laplacian(Graph(edges, 3, torch.tensor([1.0, -0.5])))
    with pytest.raises(ValueError, match="normalization"):
        laplacian_pe(Graph(edges, 3), 1, "random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="graph"):
        laplacian_pe(edges, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vectors"):
        random_sign_flip(torch.ones(4, 2), Graph(edges, 3))
    with pytest.raises(ValueError, match="vectors"):
        random_sign_flip(torch.ones(4))


def test_zero_weight_edge_is_no_edge() -> None:
    g = Graph(torch.tensor([[0, 1], [1, 2]]), 3, torch.tensor([1.0, 0.0]))
    pe = laplacian_pe(g, 2, "combinatorial")
    assert pe.mask[0].tolist() == [True, False]  # components {0, 1} and {2}
    assert_close(pe.values[0], torch.tensor([2.0, 0.0], dtype=torch.float64))


# --- the sparse route past SPARSE_THRESHOLD equals the dense one ------------------------------


def _sparse_cases() -> dict[str, Graph]:
    gen = torch.Generator().manual_seed(5)
    n = 260  # 2n random edges: a giant component, small trees, isolated nodes
    edges = torch.randint(0, n, (2, n), generator=gen)
    weights = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
    grid = nx.convert_node_labels_to_integers(nx.grid_2d_graph(9, 13))
    two = nx.disjoint_union(nx.cycle_graph(70), nx.path_graph(90))
    two.add_edges_from([(160, 161), (162, 163), (163, 164)])  # small components
    return {
        "random": Graph(edges, n),
        "random weighted": Graph(edges, n, weights),
        "grid": from_networkx(grid),
        "cycle+path+bits": from_networkx(two),
        "repeats and loops": Graph(
            torch.cat([edges, edges[:, :9], torch.tensor([[3], [3]])], 1), n
        ),
    }


def _assert_same_eigenspaces(ours, theirs, full_values: torch.Tensor, k: int) -> None:  # type: ignore[no-untyped-def]
    """Equal values, masks, and projectors of every eigenspace that lies inside the first
    ``k`` (one cut by column ``k`` is the solver's choice)."""
    assert torch.equal(ours.mask, theirs.mask)
    assert_close(ours.values, theirs.values)
    real = int(theirs.mask[0].sum())
    for group in clusters(full_values[: real + 1]):
        if max(group) >= real:
            continue  # cut by the last kept column
        assert_close(projector(ours.vectors[:, group]), projector(theirs.vectors[:, group]))


@pytest.mark.parametrize("name", list(_sparse_cases()))
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_sparse_route_equals_the_dense_one(
    name: str, normalization: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module("posenc.graph.laplacian")

    graph, k = _sparse_cases()[name], 8
    dense = laplacian_pe(graph, k, normalization)  # type: ignore[arg-type]
    wide = laplacian_pe(graph, k + 1, normalization)  # type: ignore[arg-type]
    monkeypatch.setattr(module, "SPARSE_THRESHOLD", 30)  # the big components take eigsh
    sparse = laplacian_pe(graph, k, normalization)  # type: ignore[arg-type]
    _assert_same_eigenspaces(sparse, dense, wide.values[0][wide.mask[0]], k)
    if normalization != "rw":  # orthonormal columns, as eigh's
        assert_close(sparse.vectors.T @ sparse.vectors, torch.eye(k, dtype=torch.float64))


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_sparse_route_pseudo_inverse_fallback(
    normalization: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # When Lanczos for the smallest eigenvalues does not converge (long chains, grids), the
    # pseudo-inverse route gives the same eigenpairs.
    import scipy.sparse.linalg as sparse_linalg

    module = importlib.import_module("posenc.graph.laplacian")

    eigsh = sparse_linalg.eigsh
    calls: list[str] = []

    def no_smallest(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs["which"])
        if kwargs["which"] == "SA":
            raise sparse_linalg.ArpackNoConvergence("test", None, None)
        return eigsh(*args, **kwargs)

    graph = _sparse_cases()["cycle+path+bits"]
    dense = laplacian_pe(graph, 6, normalization)  # type: ignore[arg-type]
    wide = laplacian_pe(graph, 7, normalization)  # type: ignore[arg-type]
    monkeypatch.setattr(module, "SPARSE_THRESHOLD", 30)
    monkeypatch.setattr(sparse_linalg, "eigsh", no_smallest)
    sparse = laplacian_pe(graph, 6, normalization)  # type: ignore[arg-type]
    assert calls == ["SA", "LA", "SA", "LA"]  # two big components, both fell back
    _assert_same_eigenspaces(sparse, dense, wide.values[0][wide.mask[0]], 6)

    def never(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise sparse_linalg.ArpackNoConvergence("test", None, None)

    monkeypatch.setattr(sparse_linalg, "eigsh", never)
    with pytest.raises(RuntimeError, match=r"did not converge .*k=6 .*graph 0"):
        laplacian_pe(graph, 6, normalization)  # type: ignore[arg-type]


def test_sparse_route_pads_and_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("posenc.graph.laplacian")

    cases = _sparse_cases()
    batch = batch_graphs([cases["grid"], Graph(torch.tensor([[0, 1], [1, 2]]), 3)])
    dense = laplacian_pe(batch, 4)
    monkeypatch.setattr(module, "SPARSE_THRESHOLD", 30)  # the grid only
    sparse = laplacian_pe(batch, 4)
    assert torch.equal(sparse.mask, dense.mask) and not sparse.mask[-1].all()
    assert_close(sparse.values, dense.values)
    assert_close(sparse.vectors[-3:], dense.vectors[-3:])  # the small graph: dense in both
    with pytest.raises(ValueError, match="k=259"):
        laplacian_pe(cases["random"], 259, pad=False)


def test_laplacian_checks_the_dense_size_before_allocating() -> None:
    with pytest.raises(MemoryError, match=r"N=100000 .*80,000,000,000 bytes"):
        laplacian(Graph(torch.tensor([[0], [1]]), 100_000))

"""Graph node encoders: SignNet's exact sign invariance and node equivariance, the
per-eigenvector MLP against an explicit loop, padding, the additive hook, gradients and
bad input."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.testing import assert_close

from posenc.attention import hooks_of
from posenc.encoding.protocols import AdditiveEncoding
from posenc.graph import (
    EigenvectorMLP,
    Graph,
    RandomWalkEncoder,
    SignNet,
    from_networkx,
    laplacian_pe,
    random_sign_flip,
    random_walk_pe,
    to_dense_batch,
)


def batch() -> Graph:
    """A 6-cycle, a 4-path and a 2-path: 3 graphs, columns past 1 and 3 padded."""
    parts = [nx.cycle_graph(6), nx.path_graph(4), nx.path_graph(2)]
    union = from_networkx(nx.disjoint_union_all(parts))
    index = torch.tensor([0] * 6 + [1] * 4 + [2] * 2)
    return Graph(union.edge_index, union.num_nodes, batch=index)


def block_adjacency(graph: Graph) -> torch.Tensor:
    return torch.block_diag(*graph.adjacency())


def flip_vectors(positions: torch.Tensor, graph: Graph | None, seed: int) -> torch.Tensor:
    flipped = positions.clone()
    gen = torch.Generator().manual_seed(seed)
    flipped[..., 0] = random_sign_flip(positions[..., 0], graph, generator=gen)
    return flipped


@pytest.mark.parametrize("module", [EigenvectorMLP(8), SignNet(4, 8), RandomWalkEncoder(3, 8)])
def test_encoders_are_additive_hooks(module: AdditiveEncoding) -> None:
    assert isinstance(module, AdditiveEncoding) and hooks_of(module).additive
    g = batch()
    positions = random_walk_pe(g, 3) if isinstance(module, RandomWalkEncoder) else None
    if positions is None:
        positions = laplacian_pe(g, 4).positions()
    out = module.position_embedding(positions)
    assert out.shape == (12, 8) and out.dtype == torch.float32
    assert_close(out, module(positions), rtol=0, atol=0)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("with_adjacency", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_signnet_is_exactly_sign_invariant(with_adjacency: bool, seed: int) -> None:
    g = batch()
    net = SignNet(4, 16, hidden=12, phi_layers=3, dtype=torch.float64)
    positions = laplacian_pe(g, 4).positions()
    adjacency = block_adjacency(g) if with_adjacency else None
    flipped = flip_vectors(positions, g, seed)
    assert not torch.equal(flipped.nan_to_num(), positions.nan_to_num())
    assert_close(net(flipped, adjacency), net(positions, adjacency), rtol=0, atol=0)


def dense_adjacency(graph: Graph) -> torch.Tensor:
    """Each graph's adjacency padded to ``(B, N, N)``."""
    width = max(graph.sizes)
    out = torch.zeros(graph.num_graphs, width, width)
    for index, a in enumerate(graph.adjacency(torch.float32)):
        out[index, : a.shape[0], : a.shape[0]] = a
    return out


def test_signnet_is_exactly_sign_invariant_on_a_padded_batch() -> None:
    g = batch()
    net = SignNet(4, 8)
    positions = laplacian_pe(g, 4).positions()
    dense, mask = to_dense_batch(positions, g, fill=float("nan"))
    adjacency = dense_adjacency(g)
    out = net(dense, adjacency, mask=mask)
    assert out.shape == (3, 6, 8) and out[~mask].abs().sum() == 0
    assert_close(net(flip_vectors(dense, None, 3), adjacency, mask=mask), out, rtol=0, atol=0)
    assert_close(out[mask], net(positions, block_adjacency(g)))  # each node its flat value


def test_signnet_with_the_graph_keeps_relative_signs() -> None:
    """Without the graph φ(v) + φ(−v) reads |v[i]| only; with it, relative signs count."""
    torch.manual_seed(0)
    net = SignNet(1, 8, dtype=torch.float64)
    adjacency = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    same = torch.tensor([[[0.5, 2.0]], [[0.5, 2.0]]], dtype=torch.float64)  # (2, 1, 2)
    opposite = same * torch.tensor([[[1.0, 1.0]], [[-1.0, 1.0]]], dtype=torch.float64)
    assert_close(net(same), net(opposite), rtol=0, atol=0)
    assert not torch.allclose(net(same, adjacency), net(opposite, adjacency))


def test_signnet_equivariant_to_node_order() -> None:
    g = batch()
    net = SignNet(4, 8, dtype=torch.float64)
    positions = laplacian_pe(g, 4).positions()
    adjacency = block_adjacency(g)
    perm = torch.randperm(12)
    out = net(positions[perm], adjacency[perm][:, perm])
    assert_close(out, net(positions, adjacency)[perm])


def _gin(net: SignNet, x: Tensor, adjacency: Tensor) -> Tensor:
    """φ written from the paper's GIN, one column ``(N, 2)`` at a time, from the weights:
    ``h ← W₂ relu(W₁ ((1 + ε) h + A h) + b₁) + b₂`` per layer, ε = 0, ReLU between layers."""
    h = x
    for index, layer in enumerate(net.phi):
        if index:
            h = torch.relu(h)
        first, second = layer[0], layer[2]
        aggregated = h + adjacency @ h
        h = torch.relu(aggregated @ first.weight.T + first.bias) @ second.weight.T + second.bias
    return h


def test_signnet_matches_an_explicit_loop_over_columns() -> None:
    """ρ of the concatenated φ(v_j, λ_j) + φ(−v_j, λ_j), padded columns as 0, φ a GIN."""
    g = batch()
    net = SignNet(4, 8, dtype=torch.float64)
    positions = laplacian_pe(g, 4).positions()
    adjacency = block_adjacency(g)
    terms = []
    for j in range(4):
        column = positions[:, j]  # (12, 2)
        real = ~torch.isnan(column[:, 0])
        x = column.nan_to_num()
        flipped = x * x.new_tensor([-1.0, 1.0])
        term = _gin(net, x, adjacency) + _gin(net, flipped, adjacency)
        terms.append(term * real[:, None])
    first, second = net.rho[0], net.rho[2]
    concatenated = torch.cat(terms, dim=-1)  # (12, k·hidden), column by column
    expected = torch.relu(concatenated @ first.weight.T + first.bias) @ second.weight.T
    assert_close(net(positions, adjacency), expected + second.bias, rtol=0, atol=1e-12)


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_eigenvector_mlp_matches_an_explicit_loop_over_columns(pooling: str) -> None:
    g = batch()
    net = EigenvectorMLP(8, hidden=6, layers=3, pooling=pooling, dtype=torch.float64)  # type: ignore[arg-type]
    positions = laplacian_pe(g, 4).positions()
    rows = []
    for node in positions:
        terms = [net.phi(pair) for pair in node if not torch.isnan(pair).any()]
        total = torch.stack(terms).sum(0) if terms else torch.zeros(8, dtype=torch.float64)
        rows.append(total / max(len(terms), 1) if pooling == "mean" else total)
    assert_close(net(positions), torch.stack(rows))


def test_eigenvector_mlp_is_not_sign_invariant() -> None:
    g = batch()
    net = EigenvectorMLP(8, dtype=torch.float64)
    positions = laplacian_pe(g, 4).positions()
    assert not torch.allclose(net(flip_vectors(positions, g, 0)), net(positions))


def test_node_masks_and_padded_batches() -> None:
    g = batch()
    rw = random_walk_pe(g, 3)
    encoder = RandomWalkEncoder(3, 8)
    dense, mask = to_dense_batch(rw, g)
    out = encoder(dense, mask=mask)
    assert out.shape == (3, 6, 8) and out[~mask].abs().sum() == 0
    assert_close(out[mask], encoder(rw))
    assert_close(encoder(rw), rw.float() @ encoder.linear.weight.T + encoder.linear.bias)
    mlp = EigenvectorMLP(8)
    eig, eig_mask = to_dense_batch(laplacian_pe(g, 4).positions(), g, fill=float("nan"))
    assert_close(mlp(eig, mask=eig_mask)[eig_mask], mlp(laplacian_pe(g, 4).positions()))


def gradcheck_parameters(module: nn.Module, *args: torch.Tensor) -> None:
    names = [name for name, _ in module.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in module.parameters())

    def f(*values: torch.Tensor) -> torch.Tensor:
        return functional_call(module, dict(zip(names, values, strict=True)), args)

    assert torch.autograd.gradcheck(f, params)


def test_gradcheck_every_learnable_part() -> None:
    g = Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), 4)
    positions = laplacian_pe(g, 4).positions()  # one padded column
    adjacency = g.adjacency()[0]
    gradcheck_parameters(SignNet(4, 3, hidden=4, dtype=torch.float64), positions, adjacency)
    gradcheck_parameters(EigenvectorMLP(3, hidden=4, dtype=torch.float64), positions)
    gradcheck_parameters(RandomWalkEncoder(2, 3, dtype=torch.float64), random_walk_pe(g, 2))


def test_padded_columns_give_finite_gradients() -> None:
    net = SignNet(4, 8)
    positions = laplacian_pe(Graph(torch.tensor([[0], [1]]), 2), 4).positions()  # 3 padded
    net(positions).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


@pytest.mark.parametrize("cls", [EigenvectorMLP, SignNet, RandomWalkEncoder])
def test_reset_parameters_draws_what_the_constructor_draws(cls: type) -> None:
    args = (8,) if cls is EigenvectorMLP else (4, 8)
    torch.manual_seed(5)
    built = cls(*args)
    torch.manual_seed(5)
    meta = cls(*args, device="meta")
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    for a, b in zip(built.parameters(), meta.parameters(), strict=True):
        assert_close(a, b, rtol=0, atol=0)


def test_bad_input_is_named() -> None:
    positions = laplacian_pe(Graph(torch.tensor([[0, 1], [1, 2]]), 3), 2).positions()
    net = SignNet(2, 8)
    with pytest.raises(ValueError, match="positions"):
        net(positions[..., :1])
    with pytest.raises(ValueError, match=r"2 eigenvectors .* k=3"):
        SignNet(3, 8)(positions)
    with pytest.raises(ValueError, match="positions"):
        EigenvectorMLP(8)(positions[0])
    with pytest.raises(ValueError, match="positions"):
        EigenvectorMLP(8)(positions.long())
    with pytest.raises(ValueError, match="adjacency"):
        net(positions, torch.zeros(4, 4))
    with pytest.raises(ValueError, match="mask"):
        net(positions, mask=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="positions"):
        RandomWalkEncoder(3, 8)(torch.zeros(5, 4))
    with pytest.raises(ValueError, match="mask"):
        RandomWalkEncoder(3, 8)(torch.zeros(5, 3), mask=torch.ones(4, dtype=torch.bool))
    for call, name in [
        (lambda: SignNet(0, 8), "k"),
        (lambda: SignNet(2, 0), "dim"),
        (lambda: SignNet(2, 8, phi_layers=0), "phi_layers"),
        (lambda: EigenvectorMLP(8, pooling="max"), "pooling"),  # type: ignore[arg-type]
        (lambda: EigenvectorMLP(8, layers=0), "layers"),
        (lambda: RandomWalkEncoder(0, 8), "steps"),
    ]:
        with pytest.raises(ValueError, match=name):
            call()

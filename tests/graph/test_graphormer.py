"""GraphormerBias: the bias against a float64 re-derivation of the reference's GraphAttnBias,
attention on every backend against an explicit softmax (values and gradients), score_mod,
permutations, the reach mask, gradcheck, bad input."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, Backend, attend, hooks_of
from posenc.attention.flex import flex_available, score_mod_of
from posenc.graph import (
    Graph,
    GraphormerBias,
    graphormer_reach_mask,
    hop_distances,
    shortest_paths,
)
from tests.attention.test_flex import evaluate_score_mod
from tests.graph.graphormer_reference import (
    FAR,
    batch_graphs,
    collate,
    graph_attn_bias,
    random_graph,
    random_tree,
    sample_batch,
)

HEADS, DIM = 4, 32
MAX_DISTANCE, MAX_HOPS = 8, 3
NUM_TYPES, FEATURES = 3, 2
F64 = torch.float64


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _batch(directed: bool = False) -> tuple[Graph, Tensor]:
    return sample_batch(directed, NUM_TYPES, FEATURES)


def _reference_tables() -> dict[str, Tensor]:
    g = _generator(1)
    tables = {
        "spatial_table": torch.randn(512, HEADS, generator=g, dtype=F64),
        "virtual": torch.randn(HEADS, generator=g, dtype=F64),
        "edge_table": torch.randn(FEATURES * NUM_TYPES + 3, HEADS, generator=g, dtype=F64),
        "hop_weights": torch.randn(8, HEADS, HEADS, generator=g, dtype=F64),
    }
    tables["spatial_table"][0] = 0.0  # padding rows zero (Hugging Face's initialization)
    tables["edge_table"][0] = 0.0
    return tables


def _ours_from_reference(tables: dict[str, Tensor], types: Tensor) -> tuple[GraphormerBias, Tensor]:
    """Our bias holding the reference's tables, and the edge features the reference embeds."""
    bias = GraphormerBias(
        HEADS, max_distance=MAX_DISTANCE, edge_dim=HEADS, max_hops=MAX_HOPS, dtype=F64
    )
    assert bias.edge_encoding is not None
    with torch.no_grad():
        bias.weight[: MAX_DISTANCE + 1] = tables["spatial_table"][1 : MAX_DISTANCE + 2]
        bias.weight[MAX_DISTANCE + 1] = tables["spatial_table"][FAR + 1]
        bias.weight[MAX_DISTANCE + 2] = tables["virtual"]
        bias.edge_encoding.weight.copy_(tables["hop_weights"][:MAX_HOPS])
    rows = types + torch.arange(FEATURES) * NUM_TYPES + 3  # the reference's three offsets
    return bias, tables["edge_table"][rows].mean(1)  # x_e: (E, HEADS)


def _real_pairs(padding: Tensor) -> Tensor:
    return padding[:, None, :, None] & padding[:, None, None, :]


@pytest.mark.parametrize("directed", [False, True])
def test_bias_matches_the_reference_graph_attn_bias(directed: bool) -> None:
    graph, types = _batch(directed)
    tables = _reference_tables()
    collated = collate(graph, types, NUM_TYPES, MAX_HOPS, spatial_pos_max=1024)
    want = graph_attn_bias(collated, **tables, max_hops=MAX_HOPS)
    bias, features = _ours_from_reference(tables, types)
    positions, padding = bias.set_graphs(shortest_paths(graph), features)
    got = bias.bias(positions, positions)
    assert got.shape == want.shape == (3, HEADS, 8, 8)
    real = _real_pairs(padding).expand_as(got)
    assert_close(got[real], want[real], rtol=1e-12, atol=1e-14)
    assert bool(torch.isinf(want[~real]).any())  # padded keys: the reference's -inf


def _explicit(attn: Attention, x: Tensor, bias: Tensor) -> Tensor:
    """softmax(scale · q kᵀ + B) v through the layer's own projections."""
    b, s, _ = x.shape
    head_dim = DIM // HEADS

    def heads(t: Tensor) -> Tensor:
        return t.view(b, s, HEADS, head_dim).transpose(1, 2)

    q, k, v = heads(attn.q_proj(x)), heads(attn.k_proj(x)), heads(attn.v_proj(x))
    probs = torch.softmax(q @ k.transpose(-1, -2) * head_dim**-0.5 + bias, dim=-1)
    return attn.out_proj((probs @ v).transpose(1, 2).reshape(b, s, DIM))


BACKENDS = {
    "sdpa": Backend("sdpa"),
    "chunked": Backend("chunked"),
    "chunked-blocks": Backend("chunked", block_size=3),
    "flex": Backend("flex", compile=False),
}


@pytest.mark.parametrize(
    ("backend", "grad"),
    [(name, grad) for name in BACKENDS for grad in (False, True) if (name, grad) != ("flex", True)],
)
def test_attention_equals_explicit_softmax(backend: str, grad: bool) -> None:
    if backend == "flex" and not flex_available():
        pytest.skip("torch has no FlexAttention")
    graph, types = _batch()
    tables = _reference_tables()
    want_bias = graph_attn_bias(
        collate(graph, types, NUM_TYPES, MAX_HOPS, 1024), **tables, max_hops=MAX_HOPS
    )
    bias, features = _ours_from_reference(tables, types)
    torch.manual_seed(0)
    attn = Attention(DIM, HEADS, pos=bias, causal=False, backend=BACKENDS[backend], dtype=F64)
    x = torch.randn(3, 8, DIM, dtype=F64)
    with torch.set_grad_enabled(grad):
        positions, padding = bias.set_graphs(shortest_paths(graph), features)
        got = attn(x, positions, key_padding_mask=padding)
        want = _explicit(attn, x, want_bias)
    assert_close(got[padding], want[padding], rtol=1e-12, atol=1e-12)
    if grad:  # gradients of every learnable part equal the explicit softmax's
        params = [bias.weight, bias.edge_encoding.weight]  # type: ignore[union-attr]
        got_grads = torch.autograd.grad(got[padding].square().sum(), params)
        positions, padding = bias.set_graphs(shortest_paths(graph), features)
        ours = bias.bias(positions, positions).masked_fill(~padding[:, None, None], -torch.inf)
        want_grads = torch.autograd.grad(_explicit(attn, x, ours)[padding].square().sum(), params)
        for g, w in zip(got_grads, want_grads, strict=True):
            assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["sdpa", "chunked-blocks", "flex"])
def test_reach_mask_is_the_reference_collators(backend: str) -> None:
    if backend == "flex" and not flex_available():
        pytest.skip("torch has no FlexAttention")
    graph, types = _batch()
    tables = _reference_tables()
    collated = collate(graph, types, NUM_TYPES, MAX_HOPS, spatial_pos_max=3)
    paths = shortest_paths(graph)
    allowed = graphormer_reach_mask(paths, max_reach=2)  # spatial_pos_max - 1
    bias, features = _ours_from_reference(tables, types)
    positions, padding = bias.set_graphs(paths, features)
    real = _real_pairs(padding)[:, 0]
    assert torch.equal(allowed[real], torch.isfinite(collated["attn_bias"])[real])
    assert not bool(allowed[real].all())
    # Through attention as attn_mask: the reference's -inf entries.
    torch.manual_seed(0)
    attn = Attention(DIM, HEADS, pos=bias, causal=False, backend=BACKENDS[backend], dtype=F64)
    x = torch.randn(3, 8, DIM, dtype=F64)
    with torch.no_grad():
        got = attn(x, positions, key_padding_mask=padding, attn_mask=allowed)
        want = _explicit(attn, x, graph_attn_bias(collated, **tables, max_hops=MAX_HOPS))
    assert_close(got[padding], want[padding], rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
def test_flex_cannot_train_on_the_cpu() -> None:
    graph, _ = _batch()
    bias = GraphormerBias(HEADS)
    attn = Attention(DIM, HEADS, pos=bias, causal=False, backend=Backend("flex", compile=False))
    positions, padding = bias.set_graphs(shortest_paths(graph))
    with pytest.raises(ValueError, match="forward only on the CPU"):
        attn(torch.randn(3, 8, DIM), positions, key_padding_mask=padding)


@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_score_mod_equals_materialized_bias(dtype: torch.dtype) -> None:
    graph, types = _batch()
    bias, features = _ours_from_reference(_reference_tables(), types)
    positions, _ = bias.set_graphs(shortest_paths(graph), features)
    hooks = hooks_of(bias)
    hooks.prepare(torch.device("cpu"), dtype)
    score_mod = score_mod_of(hooks, positions, positions)
    got = evaluate_score_mod(score_mod, 3, HEADS, 8, 8, dtype)
    assert_close(got, bias.bias(positions, positions, dtype), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
def test_compiled_flex_equals_sdpa() -> None:
    torch._dynamo.reset()
    graph, types = _batch()
    bias, features = _ours_from_reference(_reference_tables(), types)
    bias.float()
    positions, padding = bias.set_graphs(shortest_paths(graph), features.float())
    q, k, v = (torch.randn(3, HEADS, 8, 16) for _ in range(3))
    kwargs = {"pos": bias, "q_pos": positions, "k_pos": positions, "causal": False}
    with torch.no_grad():
        got = attend(q, k, v, key_padding_mask=padding, backend=Backend("flex"), **kwargs)
        want = attend(q, k, v, key_padding_mask=padding, backend="sdpa", **kwargs)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("edges", [False, True])
def test_bias_permutes_with_the_nodes(edges: bool) -> None:
    # With the edge encoding: a tree (one shortest path per pair; with several, the chosen
    # path follows the node numbering, in the reference too). Without: any graph.
    n = 9
    graph = random_tree(n, 3) if edges else random_graph(n, 0.3, 4, directed=True)[1]
    features = torch.randn(graph.edge_index.shape[1], 3, generator=_generator(), dtype=F64)
    perm = torch.randperm(n, generator=_generator(5))
    moved = Graph(torch.argsort(perm)[graph.edge_index], n, directed=graph.directed)
    bias = GraphormerBias(HEADS, edge_dim=3 if edges else None, dtype=F64)
    extra = (features,) if edges else ()
    positions, _ = bias.set_graphs(shortest_paths(graph), *extra)
    before = bias.bias(positions, positions)
    positions, _ = bias.set_graphs(shortest_paths(moved), *extra)
    after = bias.bias(positions, positions)
    index = torch.cat([torch.tensor([0]), perm + 1])  # the graph token stays first
    permuted = before[:, :, index][:, :, :, index]
    if edges:
        # The edge term's einsum sums each path's edges in a matmul: permuting the nodes moves
        # the pairs to other rows, which another CPU's kernel may sum in another order (1e-17
        # apart seen): equal to float64 rounding, not bitwise.
        assert_close(after, permuted, rtol=1e-12, atol=1e-15)
    else:
        assert_close(after, permuted, rtol=0, atol=0)  # table rows only: bitwise


def test_tables_and_edge_encoder_gradcheck() -> None:
    graph = batch_graphs([random_tree(5, 1), random_graph(4, 0.6, 2)[1]])
    bias = GraphormerBias(2, max_distance=4, edge_dim=3, max_hops=2, dtype=F64)
    features = torch.randn(graph.edge_index.shape[1], 3, dtype=F64, requires_grad=True)
    paths = shortest_paths(graph)

    class Through(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoding = bias

        def forward(self, x: Tensor) -> Tensor:
            positions, _ = self.encoding.set_graphs(paths, x)
            return self.encoding.bias(positions, positions)

    through = Through()
    weights = [bias.weight.detach().clone(), bias.edge_encoding.weight.detach().clone()]  # type: ignore[union-attr]

    def fn(w: Tensor, w_edge: Tensor, x: Tensor) -> Tensor:
        state = {"encoding.weight": w, "encoding.edge_encoding.weight": w_edge}
        return torch.func.functional_call(through, state, (x,))

    inputs = (*(w.requires_grad_(True) for w in weights), features)
    assert torch.autograd.gradcheck(fn, inputs)


def test_a_path_longer_than_the_table_raises_unless_clamped() -> None:
    line = Graph(torch.stack([torch.arange(29), torch.arange(1, 30)]), 30)
    bias = GraphormerBias(2, max_distance=20)
    with pytest.raises(ValueError, match=r"paths.*max_distance=20"):
        bias.set_graphs(shortest_paths(line))
    positions, _ = bias.set_graphs(shortest_paths(line, max_distance=20))
    got = bias.bias(positions, positions)
    assert_close(got[0, :, 1, 29], bias.weight[20])  # 28 hops read the last distance's row


def test_bad_graph_inputs_name_the_argument() -> None:
    graph, _ = _batch()
    paths = shortest_paths(graph)
    with pytest.raises(ValueError, match="paths"):
        GraphormerBias(2).set_graphs(shortest_paths(graph, weighted=True))
    with_edges = GraphormerBias(2, edge_dim=3)
    with pytest.raises(ValueError, match="edge_features"):
        with_edges.set_graphs(paths)
    with pytest.raises(ValueError, match="edge_features"):
        with_edges.set_graphs(paths, torch.zeros(graph.edge_index.shape[1], 4))
    with pytest.raises(ValueError, match="edge_features"):
        with_edges.set_graphs(paths, torch.full((graph.edge_index.shape[1], 3), float("nan")))
    with pytest.raises(ValueError, match="edge_features"):
        GraphormerBias(2).set_graphs(paths, torch.zeros(graph.edge_index.shape[1], 3))
    with pytest.raises(ValueError, match="edge_features"):
        with_edges.set_graphs(paths, [[0.0] * 3])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_reach"):
        graphormer_reach_mask(paths, max_reach=-1)


def test_positions_out_of_range_name_the_argument() -> None:
    graph, _ = _batch()
    bias = GraphormerBias(HEADS)
    attn = Attention(DIM, HEADS, pos=bias, causal=False)
    x = torch.randn(3, 8, DIM)
    with pytest.raises(ValueError, match=r"positions.*set_graphs"):
        attn(x)  # no graphs yet
    positions, padding = bias.set_graphs(shortest_paths(graph))
    for bad in (positions + 24, positions - 1, positions.flip(0), positions[0]):
        with pytest.raises(ValueError, match="positions"):
            attn(x, bad, key_padding_mask=padding)
    with pytest.raises(ValueError, match="q_pos"):
        bias.bias(positions + 0.5, positions)
    with pytest.raises(ValueError, match="k_pos"):
        bias.bias(positions, positions + 100)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 2, "max_distance": 0}, "max_distance"),
        ({"num_heads": 2, "edge_dim": 0}, "edge_dim"),
        ({"num_heads": 2, "edge_dim": 2, "max_hops": 0}, "max_hops"),
        ({"num_heads": 2, "max_hops": -1}, "max_hops"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        GraphormerBias(**kwargs)


@pytest.mark.parametrize("virtual_node", [False, True])
def test_set_distances_equals_set_graphs(virtual_node: bool) -> None:
    graph, _ = _batch()
    paths = shortest_paths(graph)
    bias = GraphormerBias(HEADS, max_distance=MAX_DISTANCE, virtual_node=virtual_node)
    nn.init.normal_(bias.weight, generator=_generator(3))
    positions, padding = bias.set_graphs(paths)
    expected = bias.bias(positions, positions)
    again, padding_again = bias.set_distances(hop_distances(graph), paths.node_mask)
    assert torch.equal(again, positions) and torch.equal(padding_again, padding)
    assert_close(bias.bias(again, again), expected, rtol=0, atol=0)


def test_set_distances_bad_input_names_the_argument() -> None:
    graph, _ = _batch()
    distance, mask = hop_distances(graph), shortest_paths(graph).node_mask
    bias = GraphormerBias(HEADS, max_distance=MAX_DISTANCE)
    with pytest.raises(ValueError, match="distance"):
        bias.set_distances(distance.float() + 0.5, mask)
    with pytest.raises(ValueError, match="node_mask"):
        bias.set_distances(distance, mask[:, :-1])
    with pytest.raises(ValueError, match="distance"):
        GraphormerBias(HEADS, max_distance=1).set_distances(distance, mask)
    with pytest.raises(ValueError, match="edge_features"):
        GraphormerBias(HEADS, max_distance=MAX_DISTANCE, edge_dim=2).set_distances(distance, mask)

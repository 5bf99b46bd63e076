"""Inputs at the graph APIs' public boundary: integer arguments given as numpy integers or 0-d
tensors mean the int they hold; NaN and inf are refused (naming the argument) wherever the
graph encoders, L-STEP, the time encoding and Graphormer's distances read values; padding is
read only where it is signalled (NaN in both entries of an eigenpair, ``mask``, the
``UNREACHABLE`` marker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from posenc.checks.graph import check_graph
from posenc.graph import (
    UNREACHABLE,
    CentralityEncoding,
    EigenvectorMLP,
    Graph,
    GraphormerBias,
    RandomWalkEncoder,
    SignNet,
    hop_distances,
    laplacian_pe,
    random_walk_pe,
    rrwp,
    shortest_paths,
)
from posenc.graph.link_prediction import LSTEPConfig
from posenc.graph.lstep import LSTEPEncoding, initial_history, push_history, time_encoding
from posenc.graph.temporal_graph import TemporalGraph

THREE = [
    pytest.param(np.int64(3), id="np.int64"),
    pytest.param(np.int32(3), id="np.int32"),
    pytest.param(torch.tensor(3), id="tensor"),
]


def path4() -> Graph:
    return Graph(torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)


def events() -> TemporalGraph:
    return TemporalGraph(
        src=torch.tensor([0, 1, 2, 0]),
        dst=torch.tensor([1, 2, 3, 3]),
        times=torch.tensor([1.0, 2.0, 3.0, 4.0]),
        node_features=torch.randn(4, 2, generator=torch.Generator().manual_seed(0)),
        edge_features=torch.randn(4, 3, generator=torch.Generator().manual_seed(1)),
    )


# Integer arguments -----------------------------------------------------------------------

FUNCTIONS: list[tuple[str, Callable[[Any], Any]]] = [
    ("laplacian_pe.k", lambda k: laplacian_pe(path4(), k=k).vectors),
    ("random_walk_pe.steps", lambda s: random_walk_pe(path4(), s)),
    ("rrwp.steps", lambda s: rrwp(path4(), s).pairs),
    ("hop_distances.max_distance", lambda d: hop_distances(path4(), max_distance=d)),
    ("shortest_paths.max_distance", lambda d: shortest_paths(path4(), max_distance=d).distance),
    ("time_encoding.time_dim", lambda d: time_encoding(torch.tensor([0.5, 2.0]), d)),
    ("initial_history.history_len", lambda n: initial_history(torch.ones(4, 2), n)),
    (
        "TemporalGraph.recent.k",
        lambda k: events().recent(torch.tensor([3]), torch.tensor([9.0]), k),
    ),
    (
        "TemporalGraph.neighbor_mean.k",
        lambda k: events().neighbor_mean(torch.tensor([3]), torch.tensor([9.0]), k),
    ),
    ("check_graph.num_nodes", lambda n: check_graph(num_nodes=n, chords=0).edge_index),
]


@pytest.mark.parametrize("value", THREE)
@pytest.mark.parametrize(("what", "call"), FUNCTIONS, ids=[w for w, _ in FUNCTIONS])
def test_functions_read_an_integral_scalar_as_its_int(
    what: str, call: Callable[[Any], Any], value: object
) -> None:
    assert_close(call(value), call(3), rtol=0, atol=0)


MODULES: list[tuple[str, Callable[[Any], torch.nn.Module], tuple[str, ...]]] = [
    ("EigenvectorMLP", lambda v: EigenvectorMLP(v, hidden=v, layers=v), ("dim", "hidden")),
    ("SignNet", lambda v: SignNet(v, v, phi_layers=v, rho_layers=v), ("k", "dim", "phi_layers")),
    ("RandomWalkEncoder", lambda v: RandomWalkEncoder(v, v), ("steps", "dim")),
    ("GraphormerBias", lambda v: GraphormerBias(v, max_distance=v, max_hops=v), ("num_heads",)),
    ("LSTEPEncoding", lambda v: LSTEPEncoding(v, v, v), ("dim", "history_len", "time_dim")),
    ("CentralityEncoding", lambda v: CentralityEncoding(v, max_degree=v), ("dim",)),
]


@pytest.mark.parametrize("value", THREE)
@pytest.mark.parametrize(("what", "build", "fields"), MODULES, ids=[w for w, _, _ in MODULES])
def test_modules_store_an_integral_scalar_as_its_int(
    what: str, build: Callable[[Any], torch.nn.Module], fields: tuple[str, ...], value: object
) -> None:
    torch.manual_seed(0)
    module = build(value)
    torch.manual_seed(0)
    reference = build(3)
    for field in fields:
        assert type(getattr(module, field)) is int and getattr(module, field) == 3
    for a, b in zip(module.state_dict().values(), reference.state_dict().values(), strict=True):
        assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("value", THREE)
def test_graph_and_config_store_an_integral_scalar_as_its_int(value: object) -> None:
    graph = Graph(torch.tensor([[0, 1], [1, 2]]), num_nodes=value)  # type: ignore[arg-type]
    assert type(graph.num_nodes) is int and graph.num_nodes == 3
    assert_close(graph.adjacency()[0], Graph(graph.edge_index, 3).adjacency()[0])
    config = LSTEPConfig(node_dim=value, edge_dim=2, time_gap=value)  # type: ignore[arg-type]
    assert (type(config.node_dim), type(config.time_gap)) == (int, int)
    assert (config.node_dim, config.time_gap) == (3, 3)


NOT_INTEGRAL = [
    pytest.param(3.0, "float", id="float"),
    pytest.param(True, "bool", id="bool"),
    pytest.param(np.float64(3.0), "float64", id="np.float64"),
    pytest.param(torch.tensor(3.0), "tensor", id="tensor-float"),
    pytest.param(torch.tensor([3]), "tensor", id="tensor-1d"),
]


@pytest.mark.parametrize(("value", "kind"), NOT_INTEGRAL)
@pytest.mark.parametrize(
    ("argument", "call"),
    [
        ("num_nodes", lambda v: Graph(torch.tensor([[0], [1]]), num_nodes=v)),
        ("k", lambda v: laplacian_pe(path4(), k=v)),
        ("steps", lambda v: random_walk_pe(path4(), v)),
        ("steps", lambda v: RandomWalkEncoder(v, 8)),
        ("k", lambda v: SignNet(v, 8)),
        ("max_distance", lambda v: hop_distances(path4(), max_distance=v)),
    ],
)
def test_non_integral_arguments_get_one_message(
    argument: str, call: Callable[[Any], Any], value: object, kind: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{argument} must be a (positive|non-negative) integer"):
        call(value)
    try:
        call(value)
    except ValueError as error:
        assert "an int, numpy integer or 0-d integer tensor" in str(error)
        assert kind in str(error)


# Non-finite values ------------------------------------------------------------------------


def eigen_positions() -> torch.Tensor:
    """``(4, 5, 2)``: a 4-path has 3 non-trivial eigenpairs; columns 3 and 4 are padding (NaN
    in both entries)."""
    positions = laplacian_pe(path4(), k=5).positions().float()
    assert torch.isnan(positions[:, 3:]).all() and torch.isfinite(positions[:, :3]).all()
    return positions


EIGEN_ENCODERS: list[tuple[str, Callable[[], torch.nn.Module]]] = [
    ("EigenvectorMLP", lambda: EigenvectorMLP(8)),
    ("SignNet", lambda: SignNet(5, 8)),
]


@pytest.mark.parametrize(("name", "build"), EIGEN_ENCODERS, ids=[n for n, _ in EIGEN_ENCODERS])
@pytest.mark.parametrize(
    "where",
    [
        pytest.param((1, 2, 1), id="nan-eigenvalue"),
        pytest.param((1, 2, 0), id="nan-vector-entry"),
    ],
)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_eigen_encoders_refuse_a_non_finite_real_pair(
    name: str, build: Callable[[], torch.nn.Module], where: tuple[int, int, int], bad: float
) -> None:
    positions = eigen_positions()
    positions[where] = bad
    with pytest.raises(ValueError, match=rf"^positions of {name} must be finite"):
        build()(positions)


@pytest.mark.parametrize(("name", "build"), EIGEN_ENCODERS, ids=[n for n, _ in EIGEN_ENCODERS])
def test_eigen_encoders_read_nan_pairs_and_masked_nodes_as_padding(
    name: str, build: Callable[[], torch.nn.Module]
) -> None:
    torch.manual_seed(0)
    net = build()
    positions = eigen_positions()
    zeroed = positions.clone()
    zeroed[:, 3:] = 0.0  # what a padded column reads as ...
    out = net(positions)
    assert torch.isfinite(out).all()
    if name == "EigenvectorMLP":  # ... and it is left out of the pool: not the zeroed pair's
        assert not torch.allclose(out, net(zeroed))
        assert_close(out, net(positions[:, :3]))
    # a padding node (mask False) may hold anything, NaN in one entry included: not read
    dense = torch.cat([positions, torch.full((1, 5, 2), float("nan"))])
    dense[4, 0, 0] = 1.0
    mask = torch.tensor([True] * 4 + [False])
    padded = net(dense, mask=mask)
    assert_close(padded[:4], out)
    assert_close(padded[4], torch.zeros(8), rtol=0, atol=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_random_walk_encoder_refuses_non_finite_encodings(bad: float) -> None:
    positions = random_walk_pe(path4(), 3).float()
    positions[2, 1] = bad
    encoder = RandomWalkEncoder(3, 8)
    with pytest.raises(ValueError, match=r"^positions of RandomWalkEncoder must be finite"):
        encoder(positions)
    # on a padding node the same value is not read, and no NaN reaches the output or gradients
    mask = torch.tensor([True, True, False, True])
    out = encoder(positions, mask=mask)
    out.sum().backward()
    assert_close(out[2], torch.zeros(8), rtol=0, atol=0)
    assert_close(out[mask], encoder(positions[mask]))
    assert all(torch.isfinite(p.grad).all() for p in encoder.parameters() if p.grad is not None)


def lstep() -> LSTEPEncoding:
    return LSTEPEncoding(4, 3, 2, generator=torch.Generator().manual_seed(0))


def update(now: object = 5.0, encodings: torch.Tensor | None = None) -> Any:
    encodings = torch.zeros(3, 4) if encodings is None else encodings
    src, dst, times = torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([1.0, 2.0])
    return lstep().update(encodings, src, dst, times, now)  # type: ignore[arg-type]


NAN_ROW = torch.tensor([[0.0] * 4, [float("nan")] + [0.0] * 3, [0.0] * 4])


@pytest.mark.parametrize(
    ("argument", "call"),
    [
        ("history", lambda: lstep()(torch.full((3, 3, 4), float("inf")))),
        (
            "history",
            lambda: lstep()(
                initial_history(torch.zeros(3, 4), 3).index_fill(0, torch.tensor([1]), float("nan"))
            ),
        ),
        ("now", lambda: update(float("nan"))),
        ("now", lambda: update(float("inf"))),
        ("now", lambda: update(torch.tensor(float("nan")))),
        ("now", lambda: update(torch.tensor([5.0]))),
        ("now", lambda: update("5")),
        ("encodings", lambda: update(encodings=NAN_ROW)),
        ("delta", lambda: time_encoding(torch.tensor([0.0, float("nan")]), 4)),
        ("delta", lambda: time_encoding(torch.tensor([float("inf")]), 4)),
        ("delta", lambda: time_encoding(2.0, 4)),  # type: ignore[arg-type]
        ("initial_encodings", lambda: initial_history(NAN_ROW, 3)),
        ("encodings", lambda: push_history(initial_history(torch.zeros(3, 4), 3), NAN_ROW)),
        (
            "node_features",
            lambda: TemporalGraph(
                torch.tensor([0]),
                torch.tensor([1]),
                torch.tensor([1.0]),
                NAN_ROW,
                torch.zeros(1, 2),
            ),
        ),
        (
            "edge_features",
            lambda: TemporalGraph(
                torch.tensor([0]),
                torch.tensor([1]),
                torch.tensor([1.0]),
                torch.zeros(3, 4),
                torch.tensor([[float("inf"), 0.0]]),
            ),
        ),
    ],
)
def test_lstep_refuses_non_finite_values(argument: str, call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=rf"^{argument} must be"):
        call()


def test_lstep_update_reads_a_numpy_or_tensor_now_as_the_float() -> None:
    nodes, new = update(5.0)
    for now in (np.float64(5.0), np.int64(5), torch.tensor(5.0), torch.tensor(5)):
        other_nodes, other = update(now)
        assert_close(other_nodes, nodes, rtol=0, atol=0)
        assert_close(other, new, rtol=0, atol=0)


def first_set(distance: torch.Tensor, value: float) -> torch.Tensor:
    out = distance.double()
    out[0, 0, 1] = value
    return out


def distances() -> torch.Tensor:
    return hop_distances(Graph(torch.tensor([[0, 2], [1, 3]]), num_nodes=4))  # two 1-edge parts


@pytest.mark.parametrize(
    ("what", "edit", "message"),
    [
        (
            "negative",
            lambda d: d.masked_fill(d == UNREACHABLE, -3),
            r"^distance must hold hop counts >= 0, or -1 \(UNREACHABLE\).*got -3",
        ),
        ("nan", lambda d: first_set(d, float("nan")), "^distance must be finite"),
        ("inf", lambda d: first_set(d, float("inf")), "^distance must be finite"),
        ("fraction", lambda d: d.double() + 0.5, "^distance must hold whole numbers"),
        ("bool", lambda d: d >= 0, "^distance must be a real tensor"),
    ],
)
def test_graphormer_set_distances_reads_only_hop_counts_and_the_marker(
    what: str, edit: Callable[[torch.Tensor], torch.Tensor], message: str
) -> None:
    bias = GraphormerBias(2, max_distance=4)
    node_mask = torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=message):
        bias.set_distances(edit(distances()), node_mask)


def test_graphormer_set_distances_marker_and_masks() -> None:
    bias = GraphormerBias(2, max_distance=4)
    d = distances()
    assert (d == UNREACHABLE).any()
    positions, padding = bias.set_distances(d, torch.ones(1, 4, dtype=torch.bool))
    expected = bias.bias(positions, positions)
    for mask in (torch.ones(1, 4), torch.ones(1, 4, dtype=torch.long)):  # 0/1 masks are masks
        other_positions, other_padding = bias.set_distances(d, mask)
        assert_close(other_padding, padding, rtol=0, atol=0)
        assert_close(bias.bias(other_positions, other_positions), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^node_mask must be bool \(or 0/1\)"):
        bias.set_distances(d, torch.full((1, 4), 0.5))
    with pytest.raises(ValueError, match=r"^q_pos must be finite"):
        bias.bias(positions.double().index_fill(1, torch.tensor([1]), float("inf")), positions)


def sampler(**kwargs: Any) -> Any:
    from posenc.graph.link_evaluation import NegativeSampler

    src, dst = torch.tensor([0, 1, 2, 0]), torch.tensor([1, 2, 3, 3])
    return NegativeSampler(src, dst, torch.tensor([1.0, 2.0, 3.0, 4.0]), **kwargs)


@pytest.mark.parametrize(
    ("argument", "kwargs"),
    [
        ("last_observed_time", {"strategy": "inductive", "last_observed_time": float("nan")}),
        ("last_observed_time", {"strategy": "inductive", "last_observed_time": float("inf")}),
        ("last_observed_time", {"strategy": "inductive", "last_observed_time": "2"}),
        ("seed", {"seed": 1.5}),
        ("seed", {"seed": True}),
        ("seed", {"seed": -1}),
    ],
)
def test_negative_sampler_refuses_a_non_finite_time_or_bad_seed(
    argument: str, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=rf"^{argument} must be"):
        sampler(**kwargs)


def test_negative_sampler_reads_numpy_and_tensor_scalars_as_numbers() -> None:
    reference = sampler(strategy="inductive", last_observed_time=2.0, seed=3)
    src, dst, times = torch.tensor([0, 1]), torch.tensor([3, 2]), torch.tensor([5.0, 6.0])
    expected = reference.sample(src, dst, times)
    for last, seed in [(np.float64(2.0), np.int64(3)), (torch.tensor(2.0), torch.tensor(3))]:
        other = sampler(strategy="inductive", last_observed_time=last, seed=seed)
        assert other.seed == 3 and type(other.seed) is int
        assert_close(other.observed, reference.observed, rtol=0, atol=0)
        for a, b in zip(other.sample(src, dst, times), expected, strict=True):
            assert_close(a, b, rtol=0, atol=0)

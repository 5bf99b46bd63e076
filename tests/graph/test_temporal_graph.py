"""TemporalGraph: recent neighbours and neighbour means against a brute-force scan of the
events (DyGLib's ``recent`` sampler: strictly earlier, most recent last), bad input."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.graph.temporal_graph import TemporalGraph


def random_graph(seed: int, num_nodes: int = 6, num_events: int = 25) -> TemporalGraph:
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_events,), generator=generator)
    dst = torch.randint(0, num_nodes, (num_events,), generator=generator)  # self-loops too
    times = torch.randint(0, 8, (num_events,), generator=generator).sort().values.double()
    node_features = torch.randn(num_nodes, 3, generator=generator, dtype=torch.float64)
    edge_features = torch.randn(num_events, 2, generator=generator, dtype=torch.float64)
    return TemporalGraph(src, dst, times, node_features, edge_features)


def brute_force(graph: TemporalGraph, node: int, t: float) -> list[tuple[int, int, float]]:
    """(neighbour, event, time) of every interaction of ``node`` strictly before ``t``."""
    found = []
    for i, (s, d, time) in enumerate(
        zip(graph.src.tolist(), graph.dst.tolist(), graph.times.tolist(), strict=True)
    ):
        if time < t:
            found += [(other, i, time) for owner, other in ((s, d), (d, s)) if owner == node]
    return found


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_recent_matches_brute_force(seed: int, k: int) -> None:
    graph = random_graph(seed)
    nodes = torch.arange(6).repeat(4)
    times = torch.tensor([0.0, 2.0, 5.0, 9.0]).repeat_interleave(6)  # ties with event times
    got = graph.recent(nodes, times, k)
    for q, (node, t) in enumerate(zip(nodes.tolist(), times.tolist(), strict=True)):
        last = brute_force(graph, node, t)[-k:]
        pad = k - len(last)
        assert got.mask[q].tolist() == [False] * pad + [True] * len(last)
        assert got.nodes[q].tolist() == [0] * pad + [v for v, _, _ in last]
        assert got.events[q].tolist() == [0] * pad + [e for _, e, _ in last]
        assert got.times[q].tolist() == [0.0] * pad + [s for _, _, s in last]


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("k", [1, 2, 50])
def test_neighbor_mean_matches_brute_force(seed: int, k: int) -> None:
    graph = random_graph(seed)
    nodes = torch.arange(6).repeat(3)
    times = torch.tensor([0.0, 4.0, 100.0]).repeat_interleave(6)
    got = graph.neighbor_mean(nodes, times, k)
    want = []
    for node, t in zip(nodes.tolist(), times.tolist(), strict=True):
        last = [v for v, _, _ in brute_force(graph, node, t)[-k:]]
        want.append(graph.node_features[last].mean(0) if last else torch.zeros(3).double())
    assert_close(got, torch.stack(want))


def test_events_at_the_query_time_are_not_neighbours() -> None:
    graph = TemporalGraph(
        torch.tensor([0, 0]), torch.tensor([1, 2]), torch.tensor([1.0, 2.0]),
        torch.zeros(3, 1), torch.zeros(2, 1),
    )  # fmt: skip
    assert graph.recent(torch.tensor([0]), torch.tensor([2.0]), 2).nodes.tolist() == [[0, 1]]
    assert graph.recent(torch.tensor([0]), torch.tensor([2.0]), 2).mask.tolist() == [[False, True]]
    assert graph.recent(torch.tensor([0]), torch.tensor([2.5]), 2).nodes.tolist() == [[1, 2]]


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"src": torch.tensor([0.0, 1.0])}, "src"),
        ({"dst": torch.tensor([0, 3])}, "dst"),
        ({"dst": torch.tensor([0])}, "dst"),
        ({"times": torch.tensor([2.0, 1.0])}, "times"),
        ({"node_features": torch.zeros(3)}, "node_features"),
        ({"node_features": torch.zeros(3, 2).long()}, "node_features"),
        ({"edge_features": torch.zeros(3, 2)}, "edge_features"),
        ({"edge_features": torch.zeros(2, 2).long()}, "edge_features"),
    ],
)
def test_bad_input(change: dict, name: str) -> None:
    args = {
        "src": torch.tensor([0, 1]),
        "dst": torch.tensor([1, 2]),
        "times": torch.tensor([1.0, 2.0]),
        "node_features": torch.zeros(3, 2),
        "edge_features": torch.zeros(2, 2),
    }
    with pytest.raises(ValueError, match=name):
        TemporalGraph(**(args | change))


@pytest.mark.parametrize(
    ("nodes", "times", "k", "name"),
    [
        (torch.tensor([7]), torch.tensor([1.0]), 2, "nodes"),
        (torch.tensor([-1]), torch.tensor([1.0]), 2, "nodes"),
        (torch.tensor([0.0]), torch.tensor([1.0]), 2, "nodes"),
        (torch.tensor([0]), torch.tensor([float("nan")]), 2, "times"),  # would read the future
        (torch.tensor([0, 1]), torch.tensor([1.0]), 2, "times"),
        (torch.tensor([0]), torch.tensor([1.0]), 0, "k"),
        (torch.tensor([0]), torch.tensor([1.0]), -2, "k"),
    ],
)
def test_bad_query_names_the_argument(nodes, times, k, name) -> None:
    graph = random_graph(0)
    with pytest.raises(ValueError, match=name):
        graph.recent(nodes, times, k)
    with pytest.raises(ValueError, match=name):
        graph.neighbor_mean(nodes, times, k)


def test_a_graph_without_events_has_no_neighbours() -> None:
    empty = torch.zeros(0, dtype=torch.long)
    graph = TemporalGraph(empty, empty, torch.zeros(0), torch.ones(3, 2), torch.zeros(0, 1))
    recent = graph.recent(torch.tensor([0, 2]), torch.tensor([1.0, 5.0]), 3)
    assert recent.mask.shape == (2, 3) and not bool(recent.mask.any())
    assert_close(
        graph.neighbor_mean(torch.tensor([0, 2]), torch.tensor([1.0, 5.0]), 3), torch.zeros(2, 2)
    )

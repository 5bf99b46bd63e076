"""Link evaluation: AP and ROC AUC against scikit-learn, DyGLib's negative sampling strategies
against set computations on the events, a training and evaluation pass, bad input."""

from __future__ import annotations

import pytest
import torch

from posenc.graph.link_evaluation import NegativeSampler, average_precision, roc_auc, run_stream
from posenc.graph.link_prediction import LSTEPConfig, LSTEPLinkPredictor
from posenc.graph.temporal_graph import TemporalGraph

sklearn_metrics = pytest.importorskip("sklearn.metrics")


@pytest.mark.parametrize("seed", range(4))
def test_metrics_match_sklearn(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (40,), generator=generator)
    labels[:2] = torch.tensor([0, 1])
    scores = torch.randint(0, 6, (40,), generator=generator) / 5.0  # many ties
    if seed % 2:
        scores = torch.rand(40, generator=generator, dtype=torch.float64)
    want_ap = sklearn_metrics.average_precision_score(labels.numpy(), scores.numpy())
    want_auc = sklearn_metrics.roc_auc_score(labels.numpy(), scores.numpy())
    assert average_precision(scores, labels) == pytest.approx(want_ap, abs=1e-12)
    assert roc_auc(scores, labels) == pytest.approx(want_auc, abs=1e-12)


def test_metrics_of_perfect_and_reversed_scores() -> None:
    labels = torch.tensor([1, 1, 0, 0, 0])
    scores = torch.tensor([0.9, 0.8, 0.3, 0.2, 0.1])
    assert average_precision(scores, labels) == 1.0
    assert roc_auc(scores, labels) == 1.0
    assert roc_auc(-scores, labels) == 0.0
    assert roc_auc(torch.zeros(5), labels) == 0.5  # one threshold: ties count one half


@pytest.mark.parametrize(
    ("scores", "labels", "name"),
    [
        (torch.rand(3), torch.tensor([0, 0, 0]), "labels"),
        (torch.rand(3), torch.tensor([0, 2, 1]), "labels"),
        (torch.rand(3), torch.tensor([0, 1]), "scores"),
        # a diverged model: NaN scores must not rank as a perfect one
        (torch.full((4,), float("nan")), torch.tensor([1, 1, 0, 0]), "finite"),
        (torch.tensor([0.5, float("inf"), 0.1, 0.2]), torch.tensor([1, 1, 0, 0]), "finite"),
    ],
)
def test_bad_metric_input(scores: torch.Tensor, labels: torch.Tensor, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        roc_auc(scores, labels)
    with pytest.raises(ValueError, match=name):
        average_precision(scores, labels if name in ("scores", "finite") else torch.zeros(3))


def events(seed: int = 0, num_events: int = 60, num_nodes: int = 9) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes // 2, (num_events,), generator=generator)
    dst = torch.randint(num_nodes // 2, num_nodes, (num_events,), generator=generator)
    times = torch.randint(0, 30, (num_events,), generator=generator).sort().values.double()
    return src, dst, times


def pairs(src: torch.Tensor, dst: torch.Tensor) -> set[tuple[int, int]]:
    return set(zip(src.tolist(), dst.tolist(), strict=True))


def test_random_keeps_sources_and_draws_seen_destinations() -> None:
    src, dst, times = events()
    sampler = NegativeSampler(src, dst, times, seed=3)
    negative_src, negative_dst = sampler.sample(src[40:50], dst[40:50], times[40:50])
    assert torch.equal(negative_src, src[40:50])
    assert set(negative_dst.tolist()) <= set(dst.tolist())
    sampler.reset()  # the same negatives at every evaluation
    assert torch.equal(sampler.sample(src[40:50], dst[40:50], times[40:50])[1], negative_dst)


def window(src: torch.Tensor, dst: torch.Tensor, times: torch.Tensor, lo: float, hi: float):
    keep = (times >= lo) & (times <= hi)
    return pairs(src[keep], dst[keep])


@pytest.mark.parametrize("strategy", ["historical", "inductive"])
def test_historical_and_inductive_draw_from_the_past(strategy: str) -> None:
    src, dst, times = events()
    observed_until = float(times[5])
    sampler = NegativeSampler(
        src, dst, times, strategy=strategy, last_observed_time=observed_until, seed=0
    )
    b_src, b_dst, b_times = src[48:52], dst[48:52], times[48:52]
    start, end = float(b_times[0]), float(b_times[-1])
    candidates = window(src, dst, times, float(times[0]), start) - window(
        src, dst, times, start, end
    )
    if strategy == "inductive":
        candidates -= window(src, dst, times, float(times[0]), observed_until)
    assert len(candidates) >= 4
    negative = pairs(*sampler.sample(b_src, b_dst, b_times))
    assert len(negative) == 4  # drawn without replacement
    assert negative <= candidates


def test_historical_fills_with_random_pairs_outside_the_batch() -> None:
    src, dst, times = events()
    sampler = NegativeSampler(src, dst, times, strategy="historical", seed=1)
    b_src, b_dst, b_times = src[:30], dst[:30], times[:30]  # little history before them
    start, end = float(b_times[0]), float(b_times[-1])
    candidates = window(src, dst, times, float(times[0]), start) - window(
        src, dst, times, start, end
    )
    negative_src, negative_dst = sampler.sample(b_src, b_dst, b_times)
    assert len(negative_src) == 30
    negative = list(zip(negative_src.tolist(), negative_dst.tolist(), strict=True))
    filled = [p for p in negative if p not in candidates]
    assert len(filled) == 30 - len(candidates)
    assert candidates <= set(negative)
    assert not set(filled) & pairs(b_src, b_dst)
    assert {s for s, _ in filled} <= set(src.tolist())
    assert {d for _, d in filled} <= set(dst.tolist())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"strategy": "inductive"}, "last_observed_time"),
        ({"strategy": "hard"}, "strategy"),
        ({"src": torch.tensor([0.5, 1.0, 2.0])}, "src"),
        ({"times": torch.tensor([3.0, 1.0, 2.0])}, "times"),
        ({"dst": torch.tensor([1, 2])}, "dst"),
    ],
)
def test_bad_sampler_input(kwargs: dict, name: str) -> None:
    args = {"src": torch.tensor([0, 1, 2]), "dst": torch.tensor([3, 4, 5])}
    args |= {"times": torch.tensor([0.0, 1.0, 2.0])}
    with pytest.raises(ValueError, match=name):
        NegativeSampler(**(args | kwargs))


def test_bad_sample_input() -> None:
    sampler = NegativeSampler(torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([0.0, 1]))
    with pytest.raises(ValueError, match="times"):
        sampler.sample(torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="src"):
        sampler.sample(torch.tensor([0.0]), torch.tensor([2]), torch.tensor([1.0]))


def test_training_pass_then_evaluation_continue_the_stream() -> None:
    # Repeated pairs are predictable from when each node last interacted: a few training
    # passes must beat chance on the held-out end of the stream.
    num_nodes = 8
    pattern = torch.tensor([[0, 4], [1, 5], [2, 6], [3, 7]])
    src, dst = pattern.repeat(20, 1).T
    times = torch.arange(80, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    graph = TemporalGraph(
        src, dst, times, torch.zeros(num_nodes, 16), torch.zeros(80, 2)
    )  # featureless: only the times and the encodings tell links apart
    config = LSTEPConfig(
        node_dim=16, edge_dim=2, position_dim=8, history_len=4, time_dim=4, num_neighbors=4
    )
    model = LSTEPLinkPredictor(config, generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    initial = torch.randn(num_nodes, 8, generator=generator)
    train = slice(0, 60)
    sampler = NegativeSampler(src[train], dst[train], times[train], seed=0)
    for _ in range(5):
        trained = run_stream(
            model, model.initial_state(initial), graph, src[train], dst[train], times[train],
            batch_size=8, sampler=sampler, optimizer=optimizer,
        )  # fmt: skip
    assert len(trained.losses) == 8 and trained.state.time == 59.0
    results = {}
    for strategy in ("random", "historical"):
        evaluation = NegativeSampler(src, dst, times, strategy=strategy, seed=1)  # type: ignore[arg-type]
        with torch.no_grad():
            results[strategy] = run_stream(
                model, trained.state, graph, src[60:], dst[60:], times[60:],
                batch_size=8, sampler=evaluation,
            )  # fmt: skip
    assert len(results["random"].average_precisions) == 3
    assert results["random"].average_precision > 0.75
    assert results["random"].roc_auc > 0.75
    assert 0.0 <= results["historical"].roc_auc <= 1.0
    assert results["historical"].state.time == 79.0

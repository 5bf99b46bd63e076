"""L-STEP's link predictor: the encoders and the loss against float64 evaluations of the
formulas, one step's wiring, gradients to every learnable part, equivariance, bad input."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.testing import assert_close

from posenc.graph.link_prediction import (
    LSTEPConfig,
    LSTEPLinkPredictor,
    LSTEPState,
    lstep_loss,
)
from posenc.graph.lstep import initial_history
from posenc.graph.temporal_graph import TemporalGraph

CONFIG = LSTEPConfig(
    node_dim=3,
    edge_dim=2,
    position_dim=4,
    history_len=3,
    time_dim=3,
    num_neighbors=3,
    time_gap=4,
)
NUM_NODES = 7


def small_stream(
    seed: int = 0, num_events: int = 18, node_dim: int = 3, edge_dim: int = 2
) -> TemporalGraph:
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, NUM_NODES, (num_events,), generator=generator)
    dst = torch.randint(0, NUM_NODES, (num_events,), generator=generator)
    times = torch.randint(0, 12, (num_events,), generator=generator).sort().values.double()
    node_features = torch.randn(NUM_NODES, node_dim, generator=generator, dtype=torch.float64)
    edge_features = torch.randn(num_events, edge_dim, generator=generator, dtype=torch.float64)
    return TemporalGraph(src, dst, times, node_features, edge_features)


def make_model(config: LSTEPConfig = CONFIG, seed: int = 0) -> LSTEPLinkPredictor:
    generator = torch.Generator().manual_seed(seed)
    model = LSTEPLinkPredictor(config, generator=generator, dtype=torch.float64)
    with torch.no_grad():  # a nonzero imaginary filter part (the init's is zero)
        model.encoding.filter_imag.normal_(generator=generator)
    return model


def initial_encodings(seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(NUM_NODES, CONFIG.position_dim, generator=generator, dtype=torch.float64)


def batch(graph: TemporalGraph, start: int, stop: int) -> tuple[torch.Tensor, ...]:
    """Events ``start:stop`` with negatives: the same sources, destinations shifted by 1."""
    src, dst, times = graph.src[start:stop], graph.dst[start:stop], graph.times[start:stop]
    return src, dst, times, src.clone(), (dst + 1) % NUM_NODES


def linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return layer.weight.detach() @ x + layer.bias.detach()


def direct_embedding(
    model: LSTEPLinkPredictor, graph: TemporalGraph, node: int, t: float, ep: torch.Tensor
) -> torch.Tensor:
    """h_u of the module docstring written per query, scanning the events, in float64."""
    c, enc = model.config, model.encoder
    omega = [10.0 ** (-9.0 * i / (c.time_dim - 1)) for i in range(c.time_dim)]

    def phi(delta: float) -> torch.Tensor:
        return torch.tensor([math.cos(delta * w) for w in omega], dtype=torch.float64)

    history = []  # (neighbour, event, time) strictly before t, in time order
    for i, (s, d, time) in enumerate(
        zip(graph.src.tolist(), graph.dst.tolist(), graph.times.tolist(), strict=True)
    ):
        if time < t:
            history += [(other, i, time) for owner, other in ((s, d), (d, s)) if owner == node]
    recent = history[-c.num_neighbors :]
    slots = [None] * (c.num_neighbors - len(recent)) + recent  # padding first
    zero_link = torch.zeros(c.time_dim + c.edge_dim, dtype=torch.float64)
    link_inputs = [
        zero_link if s is None else torch.cat([phi(t - s[2]), graph.edge_features[s[1]]])
        for s in slots
    ]
    pool_w, pool_b = enc.link_pool.weight.detach()[0], enc.link_pool.bias.detach()
    pooled = sum(pool_w[k] * linear(enc.link_in, z) for k, z in enumerate(link_inputs)) + pool_b
    link = linear(enc.link_out, torch.relu(pooled))
    gap = [v for v, _, _ in history[-c.time_gap :]]
    mean = graph.node_features[gap].mean(0) if gap else torch.zeros(c.node_dim).double()
    node_part = linear(enc.node_out, torch.cat([graph.node_features[node] + mean, link]))
    message = torch.zeros(c.position_dim + c.time_dim, dtype=torch.float64)
    for v, _, time in recent:
        message = message + torch.cat([ep[v], phi(t - time)])
    block = enc.position
    hidden = linear(block.message_out, torch.relu(linear(block.message_in, message)))
    position = ep[node] + torch.tanh(linear(block.self_update, ep[node]) + hidden)
    return linear(enc.out, torch.cat([node_part, position]))


@pytest.mark.parametrize("seed", [0, 1])
def test_embedding_matches_direct_formula(seed: int) -> None:
    model, graph = make_model(seed=seed), small_stream(seed)
    ep = torch.randn(NUM_NODES, CONFIG.position_dim, dtype=torch.float64)
    nodes = torch.arange(NUM_NODES).repeat(3)
    times = torch.tensor([0.0, 5.0, 20.0]).repeat_interleave(NUM_NODES)
    got = model.embed(graph, nodes, times, ep)
    want = [
        direct_embedding(model, graph, u, t, ep)
        for u, t in zip(nodes.tolist(), times.tolist(), strict=True)
    ]
    assert_close(got, torch.stack(want), rtol=1e-12, atol=1e-12)


def test_score_is_the_merge_layer() -> None:
    model = make_model()
    h_src, h_dst = torch.randn(2, 5, 3, dtype=torch.float64)
    want = [
        linear(model.score_out, torch.relu(linear(model.score_hidden, torch.cat([x, y]))))[0]
        for x, y in zip(h_src, h_dst, strict=True)
    ]
    assert_close(model.score(h_src, h_dst), torch.stack(want))


@pytest.mark.parametrize(("weight", "beta"), [(0.5, 0.3), (0.0, 0.3), (1.0, 0.0), (0.2, 2.0)])
def test_loss_matches_formula(weight: float, beta: float) -> None:
    generator = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(2, 6, generator=generator, dtype=torch.float64) * 3
    pairs = tuple(torch.randn(6, 4, generator=generator, dtype=torch.float64) for _ in range(4))
    got = lstep_loss(pos, neg, pairs, position_weight=weight, negative_weight=beta)  # type: ignore[arg-type]
    sigmoid = [1 / (1 + math.exp(-x)) for x in pos.tolist() + neg.tolist()]
    labels = [1.0] * 6 + [0.0] * 6
    bce = -sum(
        y * math.log(s) + (1 - y) * math.log(1 - s) for s, y in zip(sigmoid, labels, strict=True)
    ) / len(labels)

    def mse(a: torch.Tensor, b: torch.Tensor) -> float:
        return (
            sum(
                (x - y) ** 2
                for x, y in zip(a.flatten().tolist(), b.flatten().tolist(), strict=True)
            )
            / a.numel()
        )

    position = mse(pairs[0], pairs[1]) - beta * mse(pairs[2], pairs[3])
    assert_close(got.link, torch.tensor(bce, dtype=torch.float64))
    assert_close(got.position, torch.tensor(position, dtype=torch.float64))
    assert_close(got.total, torch.tensor((1 - weight) * bce + weight * position).double())


def test_two_steps_wire_the_update_history_and_encodings() -> None:
    model, graph = make_model(), small_stream()
    p0 = initial_encodings()
    state = model.initial_state(p0)
    assert_close(state.history, initial_history(p0, CONFIG.history_len), rtol=0, atol=0)
    first, second = batch(graph, 0, 6), batch(graph, 6, 12)
    out1 = model.step(state, graph, *first)
    assert_close(out1.state.history, state.history, rtol=0, atol=0)  # nothing pending yet
    assert out1.state.pending is not None and out1.state.time == float(first[2][-1])
    out2 = model.step(out1.state, graph, *second)

    with torch.no_grad():
        src, dst, times = first[:3]
        nodes, updated = model.encoding.update(out1.state.encodings, src, dst, times, times[-1])
        stored = p0.clone()
        stored[nodes] = updated
        history = torch.cat([state.history[:, 1:], stored.unsqueeze(1)], dim=1)
        ep = model.encoding(history)  # every node; the step reads only the ones it needs
        src, dst, times, negative_src, negative_dst = second
        queried = torch.cat([src, dst, negative_src, negative_dst])
        h = model.embed(graph, queried, times.repeat(4), ep).chunk(4)
        positive, negative = model.score(h[0], h[1]), model.score(h[2], h[3])
    assert_close(out2.state.history, history)
    assert_close(out2.positive_logits, positive)
    assert_close(out2.negative_logits, negative)
    # Negatives read ep like positives (no raw-vs-filtered tell), and so do the neighbours.
    read = torch.unique(queried)
    assert_close(out2.state.encodings[read], ep[read])


def test_involved_history_appends_only_to_updated_nodes() -> None:
    config = dataclasses.replace(CONFIG, history_update="involved")
    model, graph = make_model(config), small_stream()
    state = model.initial_state(initial_encodings())
    src, dst = torch.tensor([0, 1]), torch.tensor([1, 2])
    times = torch.tensor([0.0, 1.0])
    out1 = model.step(state, graph, src, dst, times, src, torch.tensor([3, 4]))
    out2 = model.step(out1.state, graph, src, dst, times + 2, src, torch.tensor([5, 6]))
    moved = out2.state.history[:, -1] != out2.state.history[:, -2]
    assert moved.any(-1).tolist() == [True, True, True, False, False, False, False]
    assert_close(out2.state.history[3:], state.history[3:], rtol=0, atol=0)


def test_gradients_reach_every_learnable_part() -> None:
    # Wide enough that some ReLU units of the scorer are alive for this batch.
    config = dataclasses.replace(CONFIG, node_dim=16)
    model, graph = make_model(config), small_stream(node_dim=16)
    out1 = model.step(model.initial_state(initial_encodings()), graph, *batch(graph, 0, 6))
    out1.loss.backward()
    update = model.encoding.update_block
    assert all(p.grad is None for p in update.parameters())  # nothing was pending yet
    model.zero_grad()
    model.step(out1.state, graph, *batch(graph, 6, 12)).loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and bool(parameter.grad.abs().sum() > 0), name


def test_static_positions_read_the_initial_encodings_unchanged() -> None:
    config = dataclasses.replace(CONFIG, positions="static")
    model, graph = make_model(config), small_stream()
    p0 = initial_encodings()
    out1 = model.step(model.initial_state(p0), graph, *batch(graph, 0, 6))
    out2 = model.step(out1.state, graph, *batch(graph, 6, 12))
    assert_close(out2.state.history, initial_history(p0, CONFIG.history_len), rtol=0, atol=0)
    assert_close(out2.state.encodings, p0, rtol=0, atol=0)
    with torch.no_grad():  # ep is p0 itself: the predictor read through embed, nothing else
        src, dst, times, negative_src, negative_dst = batch(graph, 6, 12)
        queried = torch.cat([src, dst, negative_src, negative_dst])
        h = model.embed(graph, queried, times.repeat(4), p0).chunk(4)
        assert_close(out2.positive_logits, model.score(h[0], h[1]))
        for parameter in model.encoding.parameters():  # no filter, sum or update is read
            parameter.normal_()
        again = model.step(out1.state, graph, *batch(graph, 6, 12))
    assert_close(again.positive_logits, out2.positive_logits, rtol=0, atol=0)


def test_no_positions_leave_nothing_positional() -> None:
    config = dataclasses.replace(CONFIG, positions="none", node_dim=16)
    model, graph = make_model(config), small_stream(node_dim=16)
    outs = []
    for seed in (1, 2):  # whatever the initial encodings, the logits are the same
        out1 = model.step(model.initial_state(initial_encodings(seed)), graph, *batch(graph, 0, 6))
        outs.append(model.step(out1.state, graph, *batch(graph, 6, 12)))
    assert_close(outs[0].positive_logits, outs[1].positive_logits, rtol=0, atol=0)
    assert float(outs[0].position_loss) == 0.0
    outs[0].loss.backward()
    for name, parameter in model.named_parameters():
        positional = name.startswith(("encoding.", "encoder.position."))
        assert (parameter.grad is None) == positional, name
    assert bool(model.encoder.out.weight.grad[:, config.node_dim :].eq(0).all())


class StepLoss(torch.nn.Module):
    """``model.step(...)``'s loss and logits as a module forward, for functional_call."""

    def __init__(self, model: LSTEPLinkPredictor, graph: TemporalGraph, state: LSTEPState) -> None:
        super().__init__()
        self.model, self.graph, self.state = model, graph, state

    def forward(self) -> torch.Tensor:
        out = self.model.step(self.state, self.graph, *batch(self.graph, 6, 10))
        return torch.stack([out.loss, out.positive_logits.sum(), out.negative_logits.sum()])


def test_gradcheck_encoding_through_a_step() -> None:
    # The filter, the sum weights and the update's layers, all through one step's loss (the
    # update of the pending batch, the history, ep, the encoders and the scorer).
    model, graph = make_model(), small_stream()
    out1 = model.step(model.initial_state(initial_encodings()), graph, *batch(graph, 0, 6))
    module = StepLoss(model, graph, out1.state)
    params = {n: p for n, p in module.named_parameters() if n.startswith("model.encoding.")}
    inputs = tuple(p.detach().clone().requires_grad_() for p in params.values())

    def fn(*tensors: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, dict(zip(params, tensors, strict=True)), ())

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


def test_gradcheck_encoder_and_scorer() -> None:
    model = make_model()
    c, q = model.config, 4
    generator = torch.Generator().manual_seed(3)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    data = (
        draw(q, c.node_dim),
        draw(q, c.num_neighbors, c.edge_dim),
        draw(q, c.num_neighbors, c.time_dim),
        draw(q, c.num_neighbors, c.position_dim),
        draw(q, c.position_dim),
        torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 0], [0, 0, 1]], dtype=torch.bool),
    )

    class Scores(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            h = self.model.encoder(*inputs)
            return self.model.score(h[:2], h[2:])

    module = Scores()
    params = {n: p for n, p in module.named_parameters() if not n.startswith("model.encoding.")}
    tensors = tuple(p.detach().clone().requires_grad_() for p in params.values())
    features = tuple(x.requires_grad_() for x in data[:5])

    def fn(*args: torch.Tensor) -> torch.Tensor:
        values = dict(zip(params, args[: len(params)], strict=True))
        return torch.func.functional_call(module, values, (*args[len(params) :], data[5]))

    assert torch.autograd.gradcheck(fn, (*tensors, *features))


def test_permuting_nodes_permutes_nothing_but_labels() -> None:
    model, graph = make_model(), small_stream()
    perm = torch.tensor([4, 6, 0, 2, 5, 1, 3])  # new id i is old node perm[i]
    inverse = torch.argsort(perm)
    relabeled = TemporalGraph(
        inverse[graph.src], inverse[graph.dst], graph.times,
        graph.node_features[perm], graph.edge_features,
    )  # fmt: skip
    p0 = initial_encodings()
    states = [model.initial_state(p0), model.initial_state(p0[perm])]
    for start, stop in ((0, 6), (6, 12), (12, 18)):
        events = batch(graph, start, stop)
        moved = (
            inverse[events[0]],
            inverse[events[1]],
            events[2],
            *(inverse[e] for e in events[3:]),
        )
        out, out_relabeled = (
            model.step(states[0], graph, *events),
            model.step(states[1], relabeled, *moved),
        )
        assert_close(out_relabeled.positive_logits, out.positive_logits)
        assert_close(out_relabeled.negative_logits, out.negative_logits)
        assert_close(out_relabeled.loss, out.loss)
        assert_close(out_relabeled.state.history, out.state.history[perm])
        states = [out.state, out_relabeled.state]


def test_float32_model_follows_float64() -> None:
    model64, graph = make_model(), small_stream()
    model32 = LSTEPLinkPredictor(CONFIG)
    model32.load_state_dict(model64.state_dict())
    graph32 = TemporalGraph(
        graph.src, graph.dst, graph.times, graph.node_features.float(), graph.edge_features.float()
    )
    p0 = initial_encodings()
    out64 = model64.step(model64.initial_state(p0), graph, *batch(graph, 0, 6))
    out32 = model32.step(model32.initial_state(p0.float()), graph32, *batch(graph, 0, 6))
    assert out32.positive_logits.dtype == torch.float32
    assert_close(out32.positive_logits.double(), out64.positive_logits, rtol=1e-4, atol=1e-5)
    assert_close(out32.loss.double(), out64.loss, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"node_dim": 0}, "node_dim"),
        ({"edge_dim": -1}, "edge_dim"),
        ({"position_dim": 2.5}, "position_dim"),
        ({"history_len": 0}, "history_len"),  # L < 1
        ({"time_dim": 0}, "time_dim"),
        ({"num_neighbors": 0}, "num_neighbors"),
        ({"time_gap": 0}, "time_gap"),
        ({"position_weight": 1.5}, "position_weight"),
        ({"position_weight": -0.1}, "position_weight"),
        ({"negative_weight": -1.0}, "negative_weight"),
        ({"negative_weight": math.inf}, "negative_weight"),
        ({"history_update": "sometimes"}, "history_update"),
        ({"positions": "fixed"}, "positions"),
    ],
)
def test_bad_config(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        LSTEPConfig(**{"node_dim": 2, "edge_dim": 2, **kwargs})


def test_bad_model_arguments() -> None:
    with pytest.raises(ValueError, match="config"):
        LSTEPLinkPredictor({"node_dim": 2})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype"):
        LSTEPLinkPredictor(CONFIG, dtype=torch.int32)
    model = make_model()
    with pytest.raises(ValueError, match="initial_encodings"):
        model.initial_state(torch.zeros(NUM_NODES, CONFIG.position_dim + 1))
    with pytest.raises(ValueError, match="initial_encodings"):
        model.initial_state(torch.zeros(NUM_NODES))


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"src": torch.tensor([0.0, 1.0])}, "src"),  # non-integer ids
        ({"dst": torch.tensor([1, NUM_NODES])}, "dst"),  # out of range
        ({"negative_src": torch.tensor([0, -1])}, "negative_src"),
        ({"negative_dst": torch.tensor([2.0, 3.0])}, "negative_dst"),
        ({"negative_dst": torch.tensor([2, 3, 4])}, "negative_dst"),  # length mismatch
        ({"dst": torch.tensor([1])}, "dst"),
        ({"times": torch.tensor([5.0, 4.0])}, "times"),  # out of order
        ({"times": torch.tensor([0.0, 1.0])}, "times"),  # before the previous batch
        ({"src": torch.tensor([], dtype=torch.long), "dst": torch.tensor([], dtype=torch.long),
          "negative_src": torch.tensor([], dtype=torch.long),
          "negative_dst": torch.tensor([], dtype=torch.long), "times": torch.tensor([])}, "times"),
    ],
)  # fmt: skip
def test_bad_step_arguments(change: dict, name: str) -> None:
    model, graph = make_model(), small_stream()
    out = model.step(model.initial_state(initial_encodings()), graph, *batch(graph, 0, 2))
    args = {
        "src": torch.tensor([0, 1]),
        "dst": torch.tensor([1, 2]),
        "times": out.state.time + torch.tensor([0.0, 1.0]),
        "negative_src": torch.tensor([0, 1]),
        "negative_dst": torch.tensor([2, 3]),
    }
    with pytest.raises(ValueError, match=name):
        model.step(out.state, graph, **(args | change))


def test_bad_graph_for_the_model() -> None:
    model, graph = make_model(), small_stream()
    state = model.initial_state(initial_encodings())
    events = batch(graph, 0, 2)
    fewer = TemporalGraph(
        graph.src % 3, graph.dst % 3, graph.times, graph.node_features[:3], graph.edge_features
    )
    with pytest.raises(ValueError, match="graph"):
        model.step(state, fewer, *events)
    wide = TemporalGraph(
        graph.src, graph.dst, graph.times, graph.node_features.repeat(1, 2), graph.edge_features
    )
    with pytest.raises(ValueError, match="node_features"):
        model.step(state, wide, *events)
    narrow = TemporalGraph(
        graph.src, graph.dst, graph.times, graph.node_features, graph.edge_features[:, :1]
    )
    with pytest.raises(ValueError, match="edge_features"):
        model.step(state, narrow, *events)

"""The graph transformer: what each encoding lets it see, its tensors and its training."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("networkx")

from posenc.graph import Graph, hop_distances, laplacian_pe, random_walk_pe
from posenc.lab.data.graphs import csl_dataset, triangle_dataset
from posenc.lab.graph_models import (
    GRAPH_ENCODINGS,
    GRAPH_SCHEDULE,
    GraphTransformer,
    encoding_table,
    evaluate_graph_model,
    fit_graph_model,
    flip_signs,
    graph_tensors,
)


def _model(encoding: str, attention: str = "full", outputs: int = 3) -> GraphTransformer:
    torch.manual_seed(0)
    return GraphTransformer(
        encoding,
        dim=16,
        num_heads=2,
        depth=2,
        num_outputs=outputs,
        k=4,
        steps=4,
        max_distance=12,
        attention=attention,
    )


def _mixed_graphs() -> list[Graph]:
    data = triangle_dataset(6, min_nodes=8, max_nodes=12, seed=1)
    return list(data.graphs)


def test_tensors_hold_each_graph_padded():
    graphs = _mixed_graphs()
    targets = torch.arange(len(graphs), dtype=torch.float32)
    width = max(g.num_nodes for g in graphs)
    for encoding in GRAPH_ENCODINGS:
        data = graph_tensors(graphs, targets, encoding, k=4, steps=4)
        assert data.mask.shape == (6, width)
        assert data.mask.sum(1).tolist() == [g.num_nodes for g in graphs]
    lap = graph_tensors(graphs, targets, "signnet", k=4, steps=4)
    walks = graph_tensors(graphs, targets, "rwse", k=4, steps=4)
    spd = graph_tensors(graphs, targets, "spd", k=4, steps=4)
    for index, g in enumerate(graphs):
        n = g.num_nodes
        assert_close(lap.eigen[index, :n], laplacian_pe(g, 4).positions().float(), equal_nan=True)
        assert_close(lap.adjacency[index, :n, :n], g.adjacency(torch.float32)[0])
        assert_close(walks.walks[index, :n], random_walk_pe(g, 4).float())
        assert torch.equal(spd.distance[index, :n, :n], hop_distances(g)[0])
        assert bool((spd.distance[index, n:] == -1).all())
        neighbours = g.adjacency()[0].bool() | torch.eye(n, dtype=torch.bool)
        assert torch.equal(spd.neighbours[index, :n, :n], neighbours)
    picked = spd.take(torch.tensor([2, 0]))
    assert torch.equal(picked.distance[1], spd.distance[0]) and picked.walks is None


@pytest.mark.parametrize("encoding", ["none", "spd"])
@pytest.mark.parametrize("attention", ["full", "graph"])
def test_without_node_encoding_every_regular_graph_gets_one_output(encoding, attention):
    # Nodes start alike; a logit bias only reweights equal values: CSL's classes all look
    # the same to such a model, whatever its weights.
    data = csl_dataset()
    chosen = [0, 20, 40, 149]
    tensors = graph_tensors(
        [data.graphs[i] for i in chosen], data.targets[chosen], encoding, k=4, steps=4
    )
    model = _model(encoding, attention).eval()
    if encoding == "spd":
        torch.nn.init.normal_(model.bias.weight, std=1.0)
    with torch.no_grad():
        out = model(tensors)
    assert_close(out, out[:1].expand_as(out), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("encoding", ["lap", "signnet", "rwse"])
def test_node_encodings_tell_regular_graphs_apart(encoding):
    data = csl_dataset()
    chosen = [0, 20, 40]
    tensors = graph_tensors(
        [data.graphs[i] for i in chosen], data.targets[chosen], encoding, k=4, steps=4
    )
    with torch.no_grad():
        out = _model(encoding).eval()(tensors)
    assert (out[0] - out[1]).abs().max() > 1e-4 and (out[1] - out[2]).abs().max() > 1e-4


def test_padding_does_not_change_a_graphs_output():
    graphs = _mixed_graphs()
    targets = torch.zeros(len(graphs))
    for encoding in ("lap", "signnet", "rwse", "spd"):
        model = _model(encoding, outputs=1).eval()
        together = graph_tensors(graphs, targets, encoding, k=4, steps=4)
        with torch.no_grad():
            batch_out = model(together)
            alone = [model(graph_tensors([g], targets[:1], encoding, k=4, steps=4)) for g in graphs]
        assert_close(batch_out, torch.cat(alone), rtol=1e-5, atol=1e-5)


def test_flip_signs_flips_whole_eigenvectors_only():
    data = csl_dataset()
    tensors = graph_tensors(list(data.graphs[:4]), data.targets[:4], "lap", k=6, steps=4)
    flipped = flip_signs(tensors, torch.Generator().manual_seed(0))
    assert torch.equal(flipped.eigen[..., 1], tensors.eigen[..., 1])  # eigenvalues kept
    ratio = flipped.eigen[..., 0] / tensors.eigen[..., 0]
    assert bool((ratio.abs() == 1).all())
    assert bool((ratio == ratio[:, :1]).all())  # one sign per graph and column
    assert bool((ratio == -1).any()) and bool((ratio == 1).any())


def test_training_learns_what_the_encoding_shows():
    # Random-walk encodings separate two CSL classes at once; without them it stays at chance.
    data = csl_dataset()
    chosen = list(range(0, 15)) + list(range(135, 150))
    graphs = [data.graphs[i] for i in chosen]
    labels = (data.targets[chosen] > 0).long()
    for encoding, expected in (("rwse", 1.0), ("none", 0.5)):
        tensors = replace(graph_tensors(graphs, labels, encoding, k=4, steps=4), targets=labels)
        model = _model(encoding, outputs=2)
        fit_graph_model(
            model,
            tensors,
            task="classify",
            schedule=replace(GRAPH_SCHEDULE, epochs=30, batch_size=10, lr=1e-2),
            generator=torch.Generator().manual_seed(0),
            validation=tensors,
        )
        assert evaluate_graph_model(model, tensors, "classify") == expected


def test_encoding_table_averages_folds_then_seeds():
    rows = [
        {"encoding": "lap", "seed": s, "fold": f, "acc": v}
        for s, vals in ((0, (0.5, 1.0)), (1, (1.0, 1.0)))
        for f, v in enumerate(vals)
    ]
    table = encoding_table(rows, "acc", "T", scale=100.0)
    assert "87.50 ± 17.68" in table and "2 seed(s)" in table and "2 folds" in table


def test_bad_encoding_and_attention_are_named():
    with pytest.raises(ValueError, match="encoding"):
        _model("laplace")
    with pytest.raises(ValueError, match="attention"):
        _model("none", attention="sparse")
    with pytest.raises(ValueError, match="encoding"):
        graph_tensors(_mixed_graphs(), torch.zeros(6), "laplace", k=4, steps=4)


def test_seed_means_average_each_seeds_folds_and_mark_a_missing_cell():
    from posenc.lab.tables import seed_means

    rows = [
        {"encoding": "lap", "seed": 0, "fold": 0, "acc": 0.5, "val": 1.0},
        {"encoding": "lap", "seed": 0, "fold": 1, "acc": 1.0, "val": None},
        {"encoding": "rwse", "seed": 0, "fold": 0, "acc": 0.25, "val": 0.5},
    ]
    assert seed_means(rows, ("acc", "val")) == [
        {"encoding": "lap", "seed": 0, "acc": 0.75, "val": None},
        {"encoding": "rwse", "seed": 0, "acc": 0.25, "val": 0.5},
    ]

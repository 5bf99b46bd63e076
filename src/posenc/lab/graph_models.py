"""A small graph transformer, the node encodings it can take, and its training loop.

Shared by the graph experiments (:mod:`posenc.lab.experiments.csl`,
:mod:`~posenc.lab.experiments.triangles`). Full attention over a graph's nodes (Graphormer's
layout, Ying et al. 2021, without an adjacency mask): the nodes carry no features of their
own (CSL's and the triangle task's nodes are all alike), so everything the model knows of the
structure comes from its positional encoding — a node encoding added to the node states, or
Graphormer's spatial bias on the attention logits through :class:`posenc.attention.Attention`.
Without either every node state is the same and every graph gets the same output.

Encodings (:data:`GRAPH_ENCODINGS`):

* ``none``: nothing;
* ``lap``: the ``k`` smallest non-trivial eigenvectors of ``L_sym`` through a linear layer
  (Dwivedi et al.'s Benchmarking GNNs: ``h + W·v``), eigenvector signs as ``eigh`` gives them;
* ``lap_flip``: the same, each training graph's eigenvector signs flipped at random every
  batch (Benchmarking GNNs' augmentation);
* ``signnet``: SignNet (Lim et al. 2022) over the eigenvectors and eigenvalues, φ a GIN on
  the graph: invariant to the signs by construction;
* ``rwse``: random-walk return probabilities ``(M^t)_ii``, ``t = 1..K``, through a linear
  layer (GraphGPS's RWSE);
* ``spd``: Graphormer's spatial bias ``b_h(SPD(i, j))`` in every layer (no node encoding).

Graphs of a batch are padded to the largest (:class:`GraphTensors`); padded nodes are masked
out of attention (``key_padding_mask``) and out of the mean pooling.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_in_choices,
    check_non_negative_int,
    check_positive_int,
)
from posenc.attention import Attention
from posenc.graph import (
    Graph,
    GraphormerBias,
    RandomWalkEncoder,
    SignNet,
    hop_distances,
    laplacian_pe,
    random_walk_pe,
)
from posenc.lab.claims import aggregate, format_mean_std
from posenc.lab.config import EpochArgs, ModelArgs, RunnerArgs
from posenc.lab.tables import seed_means, text_table

__all__ = [
    "GRAPH_ENCODINGS",
    "GRAPH_SCHEDULE",
    "GraphRunConfig",
    "GraphTensors",
    "GraphTransformer",
    "encoding_table",
    "evaluate_graph_model",
    "fit_graph_model",
    "graph_tensors",
]

GRAPH_ENCODINGS = ("none", "lap", "lap_flip", "signnet", "rwse", "spd")
Task = Literal["classify", "regress"]


@dataclass(frozen=True)
class GraphTensors:
    """A dataset of graphs as padded tensors; ``G`` graphs of at most ``N`` nodes.

    Attributes:
        mask: ``(G, N)`` True for a real node. targets: ``(G,)``.
        eigen: ``(G, N, k, 2)`` (eigenvector entry, eigenvalue), NaN in padded columns.
        adjacency: ``(G, N, N)`` for SignNet's φ. walks: ``(G, N, K)`` return probabilities.
        distance: ``(G, N, N)`` hop counts, ``-1`` where unreachable or padding.
        neighbours: ``(G, N, N)`` bool, an edge or the node itself (graph attention).
    """

    mask: Tensor
    targets: Tensor
    eigen: Tensor | None = None
    adjacency: Tensor | None = None
    walks: Tensor | None = None
    distance: Tensor | None = None
    neighbours: Tensor | None = None

    def __len__(self) -> int:
        return int(self.mask.shape[0])

    def take(self, index: Tensor) -> GraphTensors:
        """The graphs at ``index``, in that order."""

        def pick(x: Tensor | None) -> Tensor | None:
            return None if x is None else x[index]

        return GraphTensors(
            self.mask[index],
            self.targets[index],
            **{f.name: pick(getattr(self, f.name)) for f in fields(self)[2:]},
        )


def _pad(rows: Sequence[Tensor], width: int, fill: float = 0.0) -> Tensor:
    """Stack per-graph ``(n, ...)`` tensors padded to ``width`` nodes with ``fill``."""
    out = rows[0].new_full((len(rows), width, *rows[0].shape[1:]), fill)
    for index, row in enumerate(rows):
        out[index, : row.shape[0]] = row
    return out


def _pad_square(matrices: Sequence[Tensor], width: int, fill: float) -> Tensor:
    """Stack per-graph ``(n, n)`` matrices padded to ``(width, width)`` with ``fill``."""
    out = matrices[0].new_full((len(matrices), width, width), fill)
    for index, matrix in enumerate(matrices):
        n = matrix.shape[0]
        out[index, :n, :n] = matrix
    return out


def graph_tensors(
    graphs: Sequence[Graph], targets: Tensor, encoding: str, *, k: int, steps: int
) -> GraphTensors:
    """What ``encoding`` reads of each graph, padded: ``k`` Laplacian eigenpairs, ``steps``
    random-walk steps, hop distances (computed once in float64, stored in float32)."""
    if encoding not in GRAPH_ENCODINGS:
        raise ValueError(f"encoding must be one of {GRAPH_ENCODINGS}, got {encoding!r}")
    width = max(g.num_nodes for g in graphs)
    mask = _pad([torch.ones(g.num_nodes, dtype=torch.bool) for g in graphs], width, False)
    adjacency = [g.adjacency()[0] for g in graphs]  # dense float64, once per graph
    neighbours = [(a != 0) | torch.eye(len(a), dtype=torch.bool) for a in adjacency]
    data = GraphTensors(mask, targets, neighbours=_pad_square(neighbours, width, False))
    if encoding in ("lap", "lap_flip", "signnet"):
        eigen = _pad([laplacian_pe(g, k).positions().float() for g in graphs], width)
        data = replace(data, eigen=eigen)
    if encoding == "signnet":
        data = replace(data, adjacency=_pad_square([a.float() for a in adjacency], width, 0.0))
    if encoding == "rwse":
        data = replace(data, walks=_pad([random_walk_pe(g, steps).float() for g in graphs], width))
    if encoding == "spd":
        distance = _pad_square([hop_distances(g)[0] for g in graphs], width, -1)
        data = replace(data, distance=distance)
    return data


class _LinearEigen(nn.Module):
    """Benchmarking GNNs' Laplacian PE: ``W·v`` over the eigenvector entries (padded
    columns read as 0)."""

    def __init__(self, k: int, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(k, dim)

    def forward(self, batch: GraphTensors) -> Tensor:
        assert batch.eigen is not None
        return self.linear(batch.eigen[..., 0].nan_to_num(0.0))


class _SignNetNodes(nn.Module):
    def __init__(self, k: int, dim: int) -> None:
        super().__init__()
        self.net = SignNet(k, dim)

    def forward(self, batch: GraphTensors) -> Tensor:
        assert batch.eigen is not None and batch.adjacency is not None
        return self.net(batch.eigen, batch.adjacency, mask=batch.mask)


class _WalkNodes(nn.Module):
    def __init__(self, steps: int, dim: int) -> None:
        super().__init__()
        self.net = RandomWalkEncoder(steps, dim)

    def forward(self, batch: GraphTensors) -> Tensor:
        assert batch.walks is not None
        return self.net(batch.walks, mask=batch.mask)


class GraphTransformer(nn.Module):
    """Pre-norm transformer encoder over nodes with one of :data:`GRAPH_ENCODINGS`, masked
    mean pooling and a linear head (``num_outputs`` classes, or 1 for regression)."""

    def __init__(
        self,
        encoding: str,
        *,
        dim: int,
        num_heads: int,
        depth: int,
        num_outputs: int,
        k: int,
        steps: int,
        max_distance: int,
        attention: Literal["full", "graph"] = "full",
        backend: str = "auto",
    ) -> None:
        super().__init__()
        if encoding not in GRAPH_ENCODINGS:
            raise ValueError(f"encoding must be one of {GRAPH_ENCODINGS}, got {encoding!r}")
        if attention not in ("full", "graph"):
            raise ValueError(f"attention must be 'full' or 'graph', got {attention!r}")
        self.encoding, self.attention = encoding, attention
        self.node_state = nn.Parameter(torch.randn(dim) / math.sqrt(dim))
        node_encoder: nn.Module | None = None
        if encoding in ("lap", "lap_flip"):
            node_encoder = _LinearEigen(k, dim)
        elif encoding == "signnet":
            node_encoder = _SignNetNodes(k, dim)
        elif encoding == "rwse":
            node_encoder = _WalkNodes(steps, dim)
        self.node_encoder = node_encoder
        self.bias = (
            GraphormerBias(num_heads, max_distance=max_distance, virtual_node=False)
            if encoding == "spd"
            else None
        )
        self.attn_norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.attns = nn.ModuleList(
            Attention(dim, num_heads, pos=self.bias, causal=False, backend=backend)
            for _ in range(depth)
        )
        self.mlp_norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_outputs)

    def forward(self, batch: GraphTensors) -> Tensor:
        """``(B, num_outputs)``."""
        mask = batch.mask
        x = self.node_state.expand(*mask.shape, -1)
        if self.node_encoder is not None:
            x = x + self.node_encoder(batch)
        positions = None
        neighbours = batch.neighbours if self.attention == "graph" else None
        if self.bias is not None:
            assert batch.distance is not None
            positions, _ = self.bias.set_distances(batch.distance, mask)
        for attn_norm, attn, mlp_norm, mlp in zip(
            self.attn_norms, self.attns, self.mlp_norms, self.mlps, strict=True
        ):
            x = x + attn(attn_norm(x), positions, key_padding_mask=mask, attn_mask=neighbours)
            x = x + mlp(mlp_norm(x))
        weights = mask.to(x.dtype).unsqueeze(-1)
        pooled = (self.norm(x) * weights).sum(1) / weights.sum(1)
        return self.head(pooled)


def flip_signs(batch: GraphTensors, generator: torch.Generator) -> GraphTensors:
    """Each graph's eigenvector signs flipped at random (``lap_flip``'s augmentation)."""
    assert batch.eigen is not None
    graphs, _, k, _ = batch.eigen.shape
    signs = torch.randint(0, 2, (graphs, 1, k), generator=generator) * 2 - 1
    eigen = batch.eigen.clone()
    eigen[..., 0] = eigen[..., 0] * signs
    return replace(batch, eigen=eigen)


def _loss(task: Task, outputs: Tensor, targets: Tensor) -> Tensor:
    if task == "classify":
        return F.cross_entropy(outputs, targets.long())
    return F.l1_loss(outputs.squeeze(-1), targets.to(outputs.dtype))


@torch.no_grad()
def evaluate_graph_model(
    model: GraphTransformer, data: GraphTensors, task: Task, batch_size: int = 256
) -> float:
    """Accuracy (``classify``) or mean absolute error (``regress``) over ``data``."""
    was_training = model.training
    model.eval()
    total = 0.0
    for start in range(0, len(data), batch_size):
        batch = data.take(torch.arange(start, min(start + batch_size, len(data))))
        outputs = model(batch)
        if task == "classify":
            total += float((outputs.argmax(-1) == batch.targets).sum())
        else:
            total += float((outputs.squeeze(-1) - batch.targets).abs().sum())
    model.train(was_training)
    return total / len(data)


def fit_graph_model(
    model: GraphTransformer,
    train: GraphTensors,
    *,
    task: Task,
    schedule: EpochArgs,
    generator: torch.Generator,
    validation: GraphTensors | None = None,
) -> dict[str, float]:
    """AdamW with ``schedule``'s warmup and cosine decay
    (:meth:`~posenc.lab.config.EpochArgs.lr_factor`) for ``schedule.epochs`` passes in
    batches shuffled by ``generator`` (``lap_flip`` flips signs per batch from it too). With
    ``validation`` the weights of the best validation epoch are kept (Benchmarking GNNs
    reports the test score of the best validation model). Returns the last training loss and
    the best validation score."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=schedule.lr, weight_decay=schedule.weight_decay
    )
    steps = schedule.epochs * math.ceil(len(train) / schedule.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(schedule.lr_factor, steps=steps)
    )
    best: float | None = None
    best_state: dict[str, Tensor] | None = None
    loss = torch.zeros(())
    model.train()
    for _ in range(schedule.epochs):
        order = torch.randperm(len(train), generator=generator)
        for start in range(0, len(train), schedule.batch_size):
            batch = train.take(order[start : start + schedule.batch_size])
            if model.encoding == "lap_flip":
                batch = flip_signs(batch, generator)
            loss = _loss(task, model(batch), batch.targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
        if validation is not None:
            score = evaluate_graph_model(model, validation, task)
            improved = best is None or (score > best if task == "classify" else score < best)
            if improved:
                best = score
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    summary = {"train_loss": float(loss.detach())}
    if best is not None:
        summary["best_validation"] = best
    return summary


def encoding_table(
    rows: Sequence[dict[str, object]], value: str, title: str, scale: float = 1.0
) -> str:
    """One line per encoding: ``value`` × ``scale`` as mean ± std over seeds of each seed's
    mean over its folds (rows without a ``fold`` are one fold)."""
    means = [{**mean, value: scale * mean[value]} for mean in seed_means(rows, (value,))]
    body = [
        [str(group["encoding"]), format_mean_std(group["mean"], group["std"], digits=2)]
        for group in aggregate(means, ("encoding",), value)
    ]
    folds = len({row.get("fold") for row in rows})
    seeds = len({row.get("seed") for row in rows})
    note = f"{seeds} seed(s), mean ± std" + (
        f"; each seed the mean of {folds} folds" if folds > 1 else ""
    )
    return f"{title} ({note})\n" + text_table(["encoding", value], body)


#: The graph experiments' default training: 60 epochs of 32 graphs at lr 3e-3, three seeds,
#: cosine decay without warmup or weight decay.
GRAPH_SCHEDULE = EpochArgs(epochs=60, batch_size=32, lr=3e-3, weight_decay=0.0, warmup_steps=0)


@dataclass(frozen=True)
class GraphRunConfig:
    """What the graph experiments share: the encodings, the model and its training, as
    sections (:mod:`posenc.lab.config`); each experiment adds its data and may change the
    defaults.

    Args:
        encodings: graph encodings (:data:`GRAPH_ENCODINGS`).
        attention: ``"graph"`` (each node attends to its neighbours and itself) or ``"full"``
            (to every node).
        data_seed: seed of the data (shared by every run).
        k: Laplacian eigenvectors per node.
        steps: random-walk steps of ``rwse``.
        model: the transformer's shape.
        train: the model seeds (initialization, batch order, sign flips) and the schedule of
            :func:`fit_graph_model` (:data:`GRAPH_SCHEDULE`).
        runner: how the runs execute.
    """

    encodings: tuple[str, ...] = GRAPH_ENCODINGS
    attention: Literal["graph", "full"] = "full"
    data_seed: int = 0
    k: int = 8
    steps: int = 8
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, dim=64, depth=3))
    train: EpochArgs = GRAPH_SCHEDULE
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        self.model.check_supports("the graph transformer")
        object.__setattr__(self, "encodings", tuple(self.encodings))
        if not self.encodings or any(e not in GRAPH_ENCODINGS for e in self.encodings):
            raise ValueError(
                f"encodings must be a non-empty subset of {GRAPH_ENCODINGS}, got {self.encodings}"
            )
        check_in_choices("attention", self.attention, ("graph", "full"))
        object.__setattr__(self, "data_seed", check_non_negative_int("data_seed", self.data_seed))
        for name in ("k", "steps"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))

    def train_model(
        self,
        encoding: str,
        seed: int,
        train: GraphTensors,
        validation: GraphTensors,
        *,
        task: Task,
        num_outputs: int,
        max_distance: int,
    ) -> tuple[GraphTransformer, dict[str, float]]:
        """A :class:`GraphTransformer` built from ``seed`` and trained by
        :func:`fit_graph_model`; returns it (at its best validation epoch) and the summary."""
        torch.manual_seed(seed)
        model = GraphTransformer(
            encoding,
            dim=self.model.dim,
            num_heads=self.model.num_heads,
            depth=self.model.depth,
            num_outputs=num_outputs,
            k=self.k,
            steps=self.steps,
            max_distance=max_distance,
            attention=self.attention,
        )
        summary = fit_graph_model(
            model,
            train,
            task=task,
            schedule=self.train,
            generator=torch.Generator().manual_seed(seed),
            validation=validation,
        )
        return model, summary

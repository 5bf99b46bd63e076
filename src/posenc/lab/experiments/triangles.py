"""Triangles: a structural count that random-walk encodings read and eigenvectors do not.

Random 3-regular graphs (:func:`posenc.lab.data.graphs.triangle_dataset`: 12–24 nodes) and
their number of triangles, regressed by :class:`posenc.lab.graph_models.GraphTransformer`
(L1 loss, mean absolute error reported). Every node has degree 3 and no features, so the
model knows only what its encoding (:data:`~posenc.lab.graph_models.GRAPH_ENCODINGS`) tells
it. A node in ``t_i`` triangles of a 3-regular graph returns after three steps of a random
walk with probability ``(M³)_ii = 2·t_i / 27``: the random-walk structural encoding holds the
answer node by node (a sum of linear readouts), which is why GraphGPS (Rampášek et al. 2022,
https://arxiv.org/abs/2205.12454) and Dwivedi et al.'s LSPE (2022,
https://arxiv.org/abs/2110.07875) propose it for such substructure signals. Laplacian
eigenvectors carry the same graph, but in a basis the model must learn to read; a bias on
logits over equal node states carries nothing (see :mod:`posenc.lab.experiments.csl`).
The baseline to beat is the constant predictor: the training set's median count.

Rows: ``experiment="triangles"``, ``attention``, ``encoding``, ``seed``, ``test_mae``,
``val_mae``, ``constant_mae`` (the median predictor's test error), ``relative_mae`` (the
ratio of the two), ``train_loss``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from posenc._validate import (
    check_in_choices,
    check_non_negative_int,
    check_positive_float,
    check_positive_int,
)
from posenc.lab.data.graphs import triangle_dataset
from posenc.lab.graph_models import (
    GRAPH_ENCODINGS,
    GraphTransformer,
    encoding_table,
    evaluate_graph_model,
    fit_graph_model,
    graph_tensors,
)
from posenc.lab.runner import Experiment, Run, check_seeds, run_experiment
from posenc.lab.seed_claims import claims_of

__all__ = ["EXPERIMENT", "TrianglesConfig", "format_triangles_table", "run_triangles"]

Row = dict[str, Any]


@dataclass(frozen=True)
class TrianglesConfig:
    """The triangle-counting experiment (defaults: about 5 min on 2 cores, ``workers=2``).

    Args:
        encodings: graph encodings (:data:`~posenc.lab.graph_models.GRAPH_ENCODINGS`).
        seeds: model seeds (initialization, batch order, sign flips).
        attention: ``"full"`` (every node attends to every node) or ``"graph"``
            (neighbours and itself).
        train: training graphs.
        val: validation graphs (the best validation epoch's model is tested).
        test: test graphs.
        data_seed: seed of the graphs (shared by every run).
        k: Laplacian eigenvectors per node.
        steps: random-walk steps of ``rwse``.
        dim: the transformer's width.
        num_heads: attention heads per layer.
        depth: transformer layers.
        epochs: passes over the training graphs (AdamW, cosine decay).
        batch_size: graphs per step.
        lr: peak learning rate.
        workers: runs in parallel (processes).
        threads: torch intra-op threads per run (``None`` = leave as is).
    """

    encodings: tuple[str, ...] = GRAPH_ENCODINGS
    seeds: tuple[int, ...] = (0, 1, 2)
    attention: Literal["graph", "full"] = "full"
    train: int = 1000
    val: int = 200
    test: int = 200
    data_seed: int = 0
    k: int = 8
    steps: int = 8
    dim: int = 64
    num_heads: int = 4
    depth: int = 3
    epochs: int = 60
    batch_size: int = 32
    lr: float = 3e-3
    workers: int = 1
    threads: int | None = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        object.__setattr__(self, "encodings", tuple(self.encodings))
        if not self.encodings or any(e not in GRAPH_ENCODINGS for e in self.encodings):
            raise ValueError(
                f"encodings must be a non-empty subset of {GRAPH_ENCODINGS}, got {self.encodings}"
            )
        check_in_choices("attention", self.attention, ("graph", "full"))
        check_non_negative_int("data_seed", self.data_seed)
        for name in ("train", "val", "test", "k", "steps", "dim", "num_heads", "depth"):
            check_positive_int(name, getattr(self, name))
        for name in ("epochs", "batch_size", "workers"):
            check_positive_int(name, getattr(self, name))
        check_positive_float("lr", self.lr)


def _plan(config: TrianglesConfig) -> list[Run]:
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for encoding in config.encodings
        for seed in config.seeds
    ]


def _execute(config: TrianglesConfig, run: Run, run_dir: Path) -> list[Row]:
    encoding, seed = run.params["encoding"], run.params["seed"]
    total = config.train + config.val + config.test
    data = triangle_dataset(total, seed=config.data_seed)
    tensors = graph_tensors(data.graphs, data.targets, encoding, k=config.k, steps=config.steps)
    cut = (config.train, config.train + config.val)
    train = tensors.take(torch.arange(0, cut[0]))
    val = tensors.take(torch.arange(*cut))
    test = tensors.take(torch.arange(cut[1], total))
    torch.manual_seed(seed)
    model = GraphTransformer(
        encoding,
        dim=config.dim,
        num_heads=config.num_heads,
        depth=config.depth,
        num_outputs=1,
        k=config.k,
        steps=config.steps,
        max_distance=24,
        attention=config.attention,
    )
    summary = fit_graph_model(
        model,
        train,
        task="regress",
        epochs=config.epochs,
        batch_size=config.batch_size,
        lr=config.lr,
        generator=torch.Generator().manual_seed(seed),
        validation=val,
    )
    constant = train.targets.median()
    constant_mae = float((test.targets - constant).abs().mean())
    test_mae = evaluate_graph_model(model, test, "regress")
    return [
        {
            "experiment": "triangles",
            "attention": config.attention,
            "encoding": encoding,
            "seed": seed,
            "test_mae": test_mae,
            "val_mae": summary["best_validation"],
            "constant_mae": constant_mae,
            "relative_mae": test_mae / constant_mae,
            "train_loss": summary["train_loss"],
        }
    ]


def format_triangles_table(rows: Sequence[Row]) -> str:
    """Test mean absolute error per encoding, and the constant predictor's."""
    table = encoding_table(rows, "test_mae", "Triangle count, test MAE")
    constant = sum(row["constant_mae"] for row in rows) / len(rows)
    return f"{table}\n(predicting the training median: MAE {constant:.2f})"


def run_triangles(config: TrianglesConfig, out: str | Path, **kwargs: Any) -> list[Row]:
    """Run (or resume) the triangle-counting experiment in ``out``."""
    return run_experiment(EXPERIMENT, config, out, **kwargs)


EXPERIMENT: Experiment[TrianglesConfig] = Experiment(
    name="triangles",
    summary="triangle counts of 3-regular graphs: random-walk against eigenvector encodings",
    title="Triangles: which graph encodings read a substructure count",
    config=TrianglesConfig,
    plan=_plan,
    execute=_execute,
    table=format_triangles_table,
    claims=claims_of("triangles"),
)

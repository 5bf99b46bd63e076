"""Temporal link prediction: L-STEP's learned encodings against a static Laplacian one and none.

L-STEP (Tieu et al., ICML 2025, https://arxiv.org/abs/2506.08309) reads each node's
positional encoding at time ``t`` from its ``L`` most recent ones and updates it from every
batch of links (:mod:`posenc.graph.lstep`). Here the same link predictor
(:class:`~posenc.graph.link_prediction.LSTEPLinkPredictor`) runs with three positional parts
(``LSTEPConfig.positions``), so that only the encoding differs:

* ``lstep``: L-STEP, its encodings starting from the Laplacian eigenvectors of the training
  graph (the paper's initial encoding) and learned and updated through the stream;
* ``static_laplacian``: the same eigenvectors read unchanged at every step (no filter, no
  update; the predictor's positional encoder still reads them and their neighbours');
* ``none``: no positional part (``h^pos = 0``, the reference's ``no_pe`` ablation); node and
  link encoders, scorer and time features are the same.

Data (:mod:`posenc.lab.data.temporal`): ``debian``, the uploader → source-package events of
the machine's Debian changelogs (real, bipartite, 1995 onwards), and ``drifting``, a
synthetic stream whose communities move every ``drift_period`` steps (known dynamics). The
datasets have no features: node and edge features are zeros, as DyGLib pads featureless
datasets (with 172 zeros there, one edge column and ``hidden_dim`` node columns here).

Protocol, DyGLib's (Yu et al. 2023, https://arxiv.org/abs/2303.13047) as L-STEP uses it:
a chronological split at the 70 % and 85 % quantiles of the event times (train ``t ≤ q70``,
validation ``q70 < t ≤ q85``, test ``t > q85``); each epoch streams the training events from
the initial encodings with random negatives (Adam), then the validation events from the
state training ended in; the epoch with the best validation AP (random negatives, the same
every epoch) is kept; its validation pass is repeated, and each test pass starts from the
state it ends in, under ``random`` and ``historical`` negatives (``inductive`` on request):
AP and ROC AUC per batch of ``batch_size`` positives and as many negatives, averaged over
batches (:mod:`posenc.graph.link_evaluation`). Transductive: every test event counts. The
loop is :mod:`posenc.lab.train_links` (a run resumes after its last finished epoch).

Departures from the paper, for two CPU cores and a one-process lab: sizes far below the
reference's (``d_P`` 172, ``L`` 100, ``d_T`` 100, ``K`` 20, ``time_gap`` 2000, 100 epochs with
early stopping at learning rate 1e-4): ``d_P`` 32, ``L`` 16, ``d_T`` 32, ``K`` 20,
``time_gap`` 40, 30 epochs at 1e-3 and no early stopping (the best epoch is kept). The
initial encodings are the ``d_P`` smallest non-trivial eigenvectors of ``L_sym`` of the whole
training graph (distinct unordered pairs, unweighted; zero rows for nodes first seen after
training), each column's sign drawn from the run's seed, where the reference takes the first
training batch's 200 edges. Test passes continue from the validation state (DyGLib's memory
models), where the reference restarts them from the end of training.

``separation`` (``drifting`` only): how well the encodings a run reads follow the current
communities: mean cosine similarity of the centred encodings of nodes in the same community
minus that of nodes in different ones (:func:`community_separation`), averaged over the test
batches. The communities of each
period are read back from the events as the connected components of that period's links (a
period's 1,000 links connect each group of 25 nodes). ``runs/drifting/separation/`` draws it
over the validation and test time of every seed (``separation.png``).

Rows: ``experiment="temporal_links"``, ``dataset``, ``encoding``, ``seed``, ``negatives``,
``ap``, ``auc``, ``val_ap``, ``best_epoch``, ``separation``, ``nodes``, ``train_events``,
``test_events``, ``train_seconds``.

The package: this module (config, runs, evaluation, tables and figures) and :mod:`.claims`
(the findings its rows test).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int
from posenc.graph import Graph, laplacian_pe, random_sign_flip
from posenc.graph.link_evaluation import NegativeStrategy
from posenc.graph.link_prediction import (
    LSTEPConfig,
    LSTEPLinkPredictor,
    LSTEPState,
    PositionMode,
)
from posenc.lab.config import RunnerArgs
from posenc.lab.data.temporal import (
    TemporalEvents,
    debian_changelog_events,
    drifting_communities,
    period_communities,
)
from posenc.lab.experiments.temporal_links.claims import CLAIMS
from posenc.lab.figures import encoding_color, finite, mean_line, new_figure, without_seed
from posenc.lab.run import atomic_write_text, read_json
from posenc.lab.runner import Experiment, Run, Section, check_seeds, run_experiment
from posenc.lab.tables import Table, complete_rows, has_column, pivot, seed_note, text_table
from posenc.lab.train_links import (
    VALIDATION_SALT,
    LinkData,
    derived_seed,
    evaluation_sampler,
    link_data,
    stream,
    train_links,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DATASETS",
    "ENCODINGS",
    "EXPERIMENT",
    "NEGATIVES",
    "TemporalLinksConfig",
    "community_separation",
    "run_temporal_links",
    "separation_over_time",
    "temporal_link_precision",
    "training_laplacian",
]

Row = dict[str, Any]
DATASETS = ("debian", "drifting")
ENCODINGS = ("lstep", "static_laplacian", "none")
NEGATIVES: tuple[NegativeStrategy, ...] = ("random", "historical", "inductive")
_POSITIONS: dict[str, PositionMode] = {
    "lstep": "learned",
    "static_laplacian": "static",
    "none": "none",
}
_POSITIVE = (
    "drift_steps drift_period position_dim history_len hidden_dim time_dim num_neighbors "
    "time_gap epochs batch_size"
)


@dataclass(frozen=True)
class TemporalLinksConfig:
    """The temporal link prediction experiment (defaults: the documented setting, 18 runs in
    about 8 minutes with ``workers=2`` on two shared CPU cores).

    Args:
        datasets: ``"debian"`` and/or ``"drifting"`` (see the module).
        encodings: ``"lstep"``, ``"static_laplacian"``, ``"none"``.
        seeds: one run per (dataset, encoding, seed): model init, signs, negatives.
        negatives: test negative sampling, ``"random"``, ``"historical"``, ``"inductive"``.
        changelog_root: where the Debian changelogs are (``*/changelog.Debian.gz``).
        drift_steps: steps of the synthetic stream
            (:func:`~posenc.lab.data.temporal.drifting_communities`; its other arguments at
            their defaults: 200 nodes, 8 groups, 20 links a step, a quarter of the nodes
            moving at each drift).
        drift_period: steps between its drifts (and the periods of ``separation``).
        data_seed: its seed (one stream for every run seed).
        position_dim: ``d_P``, also the number of Laplacian eigenvectors.
        history_len: ``L``, encodings L-STEP reads per node.
        hidden_dim: width of the node representation (the predictor's ``node_dim``).
        time_dim: size of the time encoding.
        num_neighbors: ``K`` recent links per node.
        time_gap: recent neighbours the node encoder averages.
        epochs: passes over the training events; the best by validation AP is kept.
        batch_size: positive events per batch (and as many negatives).
        lr: Adam's learning rate.
        runner: how the runs execute.
    """

    datasets: tuple[str, ...] = DATASETS
    encodings: tuple[str, ...] = ENCODINGS
    seeds: tuple[int, ...] = (0, 1, 2)
    negatives: tuple[NegativeStrategy, ...] = ("random", "historical")
    changelog_root: str = "/usr/share/doc"
    drift_steps: int = 400
    drift_period: int = 50
    data_seed: int = 0
    position_dim: int = 32
    history_len: int = 16
    hidden_dim: int = 64
    time_dim: int = 32
    num_neighbors: int = 20
    time_gap: int = 40
    epochs: int = 30
    batch_size: int = 200
    lr: float = 1e-3
    runner: RunnerArgs = field(default_factory=RunnerArgs)

    def __post_init__(self) -> None:
        for name, allowed in (
            ("datasets", DATASETS),
            ("encodings", ENCODINGS),
            ("negatives", NEGATIVES),
        ):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)
            if not values or len(set(values)) != len(values) or not set(values) <= set(allowed):
                raise ValueError(
                    f"{name} must be distinct names among {', '.join(allowed)}, got {values}"
                )
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        for name in _POSITIVE.split():
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        object.__setattr__(self, "data_seed", check_non_negative_int("data_seed", self.data_seed))
        check_positive_float("lr", self.lr)


def load_events(config: TemporalLinksConfig, dataset: str) -> TemporalEvents:
    """The events of ``dataset`` (``"debian"`` or ``"drifting"``) under ``config``."""
    if dataset == "debian":
        return debian_changelog_events(config.changelog_root)
    return drifting_communities(
        steps=config.drift_steps, period=config.drift_period, seed=config.data_seed
    )


def training_laplacian(
    src: Tensor, dst: Tensor, num_nodes: int, k: int, generator: torch.Generator
) -> Tensor:
    """``(num_nodes, k)`` float32: the ``k`` smallest non-trivial eigenvectors of ``L_sym`` of
    the graph of the distinct unordered pairs ``(src, dst)`` (self-loops dropped), each
    column's sign drawn from ``generator`` (the reference's random signs)."""
    low, high = torch.minimum(src, dst), torch.maximum(src, dst)
    keys = torch.unique((low * num_nodes + high)[low != high])
    graph = Graph(torch.stack([keys // num_nodes, keys % num_nodes]), num_nodes=num_nodes)
    vectors = laplacian_pe(graph, k, "sym").vectors
    return random_sign_flip(vectors, generator=generator).float()


def community_separation(encodings: Tensor, communities: Tensor) -> float:
    """Mean cosine similarity of the centred encodings of two distinct nodes of one community
    minus that of two nodes of different communities (nodes labelled -1 left out; centred:
    minus their mean, so that a part common to every node, such as a bias the update adds,
    does not make all of them alike)."""
    keep = communities >= 0
    x, labels = encodings[keep].double(), communities[keep]
    x = F.normalize(x - x.mean(0), dim=-1)
    similarity = x @ x.T
    same = labels[:, None] == labels[None, :]
    same.fill_diagonal_(False)
    return float(similarity[same].mean() - similarity[labels[:, None] != labels[None, :]].mean())


def _test_salt(strategy: str) -> int:
    """The test sampler's salt of each strategy (:func:`~posenc.lab.train_links.derived_seed`)."""
    return VALIDATION_SALT + 1 + NEGATIVES.index(strategy)


def _separation_trace(
    model: LSTEPLinkPredictor,
    state: LSTEPState,
    data: LinkData,
    config: TemporalLinksConfig,
    seed: int,
    p0: Tensor,
) -> list[dict[str, Any]]:
    """Validation then test with random negatives (the evaluation's own), batch by batch:
    the separation of the encodings each batch reads, every node's ``ep``."""
    communities = period_communities(data.events, config.drift_period)
    trace = []
    for mask, name, salt in (
        (data.val, "val", VALIDATION_SALT),
        (data.test, "test", _test_salt("random")),
    ):
        sampler = evaluation_sampler(data, derived_seed(seed, salt))
        src, dst, times = data.part(mask)
        for start in range(0, len(src), config.batch_size):
            part = slice(start, start + config.batch_size)
            negatives = sampler.sample(src[part], dst[part], times[part])
            with torch.no_grad():
                out = model.step(state, data.graph, src[part], dst[part], times[part], *negatives)
                learned = model.config.positions == "learned"
                read = model.encoding(out.state.history) if learned else p0
            state, first = out.state, float(times[part][0])
            groups = communities[int(first // config.drift_period)]
            trace.append(
                {"split": name, "time": first, "separation": community_separation(read, groups)}
            )
    return trace


def _execute(config: TemporalLinksConfig, run: Run, folder: Path) -> list[Row]:
    dataset, encoding, seed = run.params["dataset"], run.params["encoding"], run.params["seed"]
    if encoding == "figure":
        return _separation_figure(folder)
    data = link_data(load_events(config, dataset), config.hidden_dim)
    e = data.events
    generator = torch.Generator().manual_seed(seed)
    model = LSTEPLinkPredictor(
        LSTEPConfig(
            node_dim=config.hidden_dim,
            edge_dim=1,
            position_dim=config.position_dim,
            history_len=config.history_len,
            time_dim=config.time_dim,
            num_neighbors=config.num_neighbors,
            time_gap=config.time_gap,
            positions=_POSITIONS[encoding],
        ),
        generator=generator,
    )
    p0 = training_laplacian(
        e.src[data.train], e.dst[data.train], e.num_nodes, config.position_dim, generator
    )
    size = config.batch_size
    best = train_links(
        model, p0, data, folder, epochs=config.epochs, batch_size=size, lr=config.lr, seed=seed
    )
    model.load_state_dict(best["model"])
    sampler = evaluation_sampler(data, derived_seed(seed, VALIDATION_SALT))
    val = stream(model, best["state"], data, data.val, sampler, size)
    separation = None
    if dataset == "drifting" and encoding != "none":
        trace = _separation_trace(model, best["state"], data, config, seed, p0)
        atomic_write_text(folder / "trace.json", json.dumps(trace))
        tested = [point["separation"] for point in trace if point["split"] == "test"]
        separation = sum(tested) / len(tested)
    rows = []
    for strategy in config.negatives:
        sampler = evaluation_sampler(data, derived_seed(seed, _test_salt(strategy)), strategy)
        test = stream(model, val.state, data, data.test, sampler, size)
        rows.append(
            {
                "experiment": "temporal_links",
                "dataset": dataset,
                "encoding": encoding,
                "seed": seed,
                "negatives": strategy,
                "ap": test.average_precision,
                "auc": test.roc_auc,
                "val_ap": val.average_precision,
                "best_epoch": best["epoch"],
                "separation": separation,
                "nodes": e.num_nodes,
                "train_events": int(data.train.sum()),
                "test_events": int(data.test.sum()),
                "train_seconds": round(best["seconds"], 2),
            }
        )
    return rows


def _separation_figure(folder: Path) -> list[Row]:
    """Stage 1: ``separation.png`` from the ``trace.json`` of the drifting runs (no rows)."""
    traces = {
        str(path.parent.relative_to(folder.parent)): read_json(path)
        for path in sorted(folder.parent.glob("*/seed*/trace.json"))
    }
    figure = separation_over_time(traces)
    figure.savefig(folder / "separation.png", dpi=110)
    return []


def _plan(config: TemporalLinksConfig) -> list[Run]:
    runs = [
        Run(
            f"{dataset}/{encoding}/seed{seed}",
            {"dataset": dataset, "encoding": encoding, "seed": seed},
        )
        for dataset in config.datasets
        for encoding in config.encodings
        for seed in config.seeds
    ]
    if "drifting" in config.datasets and set(config.encodings) - {"none"}:
        params = {"dataset": "drifting", "encoding": "figure", "seed": 0}
        runs.append(Run("drifting/separation", params, stage=1, rows=False))
    return runs


def _prepare(config: TemporalLinksConfig) -> None:
    """Load each dataset once, so that a missing changelog folder fails before any run."""
    for dataset in config.datasets:
        load_events(config, dataset)


def format_temporal_links_table(rows: Sequence[Row]) -> str:
    """Test AP and ROC AUC by (dataset, encoding) and negative sampling, mean ± std."""
    selected = [r for r in rows if r.get("experiment") == "temporal_links"]
    if not selected:
        return ""
    lines = []
    for value in ("ap", "auc"):
        header, body = pivot(selected, ["dataset", "encoding"], "negatives", value, digits=3)
        lines += [
            f"test {value.upper()} by negatives; {seed_note(selected)}",
            text_table(header, body),
        ]
    return "\n".join(lines)


def run_temporal_links(
    config: TemporalLinksConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in ``out`` (see the module); return its rows."""
    return run_experiment(EXPERIMENT, config, out, echo=echo)


def _tables(rows: Sequence[Row]) -> list[Table]:
    """The report's tables: test AP and ROC AUC by (dataset, encoding) × negative sampling."""
    rows = complete_rows(rows, ["dataset", "encoding", "negatives"])
    tables = []
    for value, what in (("ap", "average precision"), ("auc", "ROC AUC")):
        if has_column(rows, value):
            header, body = pivot(rows, ["dataset", "encoding"], "negatives", value)
            caption = f"Test {what} by negative sampling; {seed_note(rows)}."
            tables.append((caption, header, body))
    return tables


def temporal_link_precision(rows: Sequence[Row]) -> Figure:
    """Test AP per encoding and negative sampling, one panel per dataset: bars the mean over
    seeds, dots the seeds (``temporal_links`` rows)."""
    cells: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.get("experiment") == "temporal_links" and finite(row.get("ap")):
            cells[row["dataset"]][(row["encoding"], row["negatives"])].append(row["ap"])
    fig = new_figure(figsize=(5.2 * max(len(cells), 1), 3.6), layout="constrained")
    for index, (dataset, cell) in enumerate(cells.items()):
        ax = fig.add_subplot(1, len(cells), index + 1)
        encodings = list(dict.fromkeys(encoding for encoding, _ in cell))
        negatives = list(dict.fromkeys(strategy for _, strategy in cell))
        width = 0.8 / len(negatives)
        for n, strategy in enumerate(negatives):
            for e, encoding in enumerate(encodings):
                values = cell.get((encoding, strategy), [])
                if not values:
                    continue
                x = e + (n - (len(negatives) - 1) / 2) * width
                label = strategy if e == 0 else None
                ax.bar(x, statistics.fmean(values), width, color=f"C{n}", alpha=0.6, label=label)
                ax.plot([x] * len(values), values, "k.", ms=4)
        ax.set_xticks(range(len(encodings)), encodings)
        ax.axhline(0.5, color="gray", lw=0.8, ls=":")
        ax.set(title=dataset, ylabel="test AP (bar: mean, dots: seeds)", ylim=(0.4, 1.0))
        ax.legend(title="negatives", fontsize=7)
    return fig


def separation_over_time(traces: Mapping[str, Sequence[Mapping[str, Any]]]) -> Figure:
    """How well the encodings follow the drifting communities, batch by batch: separation
    (same minus cross-community cosine similarity) against time, one line per encoding (the
    mean over its seeds), the test part shaded.

    Args:
        traces: run name (``"lstep/seed0"``) -> its ``trace.json`` records
            (``{"split", "time", "separation"}``, one per evaluation batch).
    """
    by_encoding: dict[str, list[tuple[float, float]]] = defaultdict(list)
    test_start = math.inf
    for name, records in traces.items():
        for record in records:
            by_encoding[without_seed(name)].append((record["time"], record["separation"]))
            if record["split"] == "test":
                test_start = min(test_start, record["time"])
    fig = new_figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for encoding, points in sorted(by_encoding.items()):
        mean_line(ax, points, marker=".", label=encoding, color=encoding_color(encoding))
    if math.isfinite(test_start):
        ax.axvspan(test_start, max(t for p in by_encoding.values() for t, _ in p), alpha=0.1)
    ax.set(
        xlabel="time (validation, then test: shaded)",
        ylabel="community separation of the encodings",
        title="drifting communities: do the encodings follow them?",
    )
    ax.legend(fontsize=7)
    return fig


EXPERIMENT = Experiment(
    name="temporal_links",
    summary="temporal link prediction: L-STEP vs static Laplacian vs no encoding, AP and AUC "
    "under random and historical negatives (Debian changelogs, drifting communities)",
    title="posenc: temporal link prediction (L-STEP)",
    config=TemporalLinksConfig,
    plan=_plan,
    execute=_execute,
    table=format_temporal_links_table,
    prepare=_prepare,
    claims=CLAIMS,
    sections=(
        Section(
            "Temporal link prediction (L-STEP)",
            _tables,
            {"temporal_links.png": temporal_link_precision},
        ),
    ),
)

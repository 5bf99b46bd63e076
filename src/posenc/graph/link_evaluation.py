"""How temporal link prediction is evaluated: negative sampling, AP / ROC AUC, a stream loop.

DyGLib's conventions (Yu et al., NeurIPS 2023, https://arxiv.org/abs/2303.13047), which
L-STEP's reference uses (``utils/utils.py``: ``NegativeEdgeSampler``; ``utils/metrics.py``;
``evaluate_model_utils.py``): each batch of ``B`` positive events is scored against ``B``
negative pairs; the metrics are computed per batch and averaged over batches.

Negative sampling strategies (:class:`NegativeSampler`):

- ``"random"``: the batch's sources with destinations drawn uniformly from the distinct
  destinations of the sampler's events (what the reference's scripts do with
  ``random_sample``: they keep the batch's sources);
- ``"historical"``: distinct pairs seen from the first event up to the batch's first time,
  minus the pairs seen during the batch's time span, drawn without replacement; if too few,
  all of them plus uniform pairs (distinct source × distinct destination) that are not
  among the batch's own pairs (Poursafaei et al., NeurIPS 2022);
- ``"inductive"``: the same from the pairs not seen up to ``last_observed_time`` (the end of
  training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_non_negative_int, check_positive_int
from posenc.graph.link_prediction import LSTEPLinkPredictor, LSTEPState
from posenc.graph.lstep import check_node_ids, check_time, check_times
from posenc.graph.temporal_graph import TemporalGraph

__all__ = [
    "NegativeSampler",
    "NegativeStrategy",
    "StreamResult",
    "average_precision",
    "roc_auc",
    "run_stream",
]

NegativeStrategy = Literal["random", "historical", "inductive"]
_STRATEGIES: tuple[NegativeStrategy, ...] = ("random", "historical", "inductive")
#: Rejection rounds for the random fill before giving up (each draws the whole deficit).
_MAX_ROUNDS = 1000


class NegativeSampler:
    """Negative pairs for batches of events, DyGLib's ``random``/``historical``/``inductive``.

    Args:
        src, dst, times: the events the sampler knows (training events to train, all events to
            evaluate, as the reference does), ``times`` non-decreasing.
        strategy: ``"random"`` (default), ``"historical"`` or ``"inductive"``.
        last_observed_time: the end of training; required by ``"inductive"``.
        seed: seeds the sampler's own generator (None: a nondeterministic seed);
            :meth:`reset` restarts it, so that every evaluation draws the same negatives.

    The random fill differs from the reference in one way: it draws with replacement and
    rejects the batch's pairs, where the reference draws without replacement from the set of
    all source × destination pairs minus the batch's (a set it builds in memory).
    """

    def __init__(
        self,
        src: Tensor,
        dst: Tensor,
        times: Tensor,
        *,
        strategy: NegativeStrategy = "random",
        last_observed_time: float | None = None,
        seed: int | None = None,
    ) -> None:
        check_in_choices("strategy", strategy, _STRATEGIES)
        if not isinstance(src, Tensor) or src.dim() != 1 or len(src) == 0:
            raise ValueError("src must be a non-empty 1-D tensor of node ids")
        bound = int(max(int(src.max()), int(dst.max()) if isinstance(dst, Tensor) else 0)) + 1
        self.src = check_node_ids("src", src, bound)
        self.dst = check_node_ids("dst", dst, bound)
        if self.dst.shape != self.src.shape:
            raise ValueError(f"dst must have the length of src ({len(src)}); got {len(dst)}")
        self.times = check_times("times", times, len(src))
        if strategy == "inductive" and last_observed_time is None:
            raise ValueError("last_observed_time is required for strategy='inductive'")
        if last_observed_time is not None:  # a NaN would read every pair as observed
            last_observed_time = float(check_time("last_observed_time", last_observed_time))
        if seed is not None:
            seed = check_non_negative_int("seed", seed)
        self.strategy: NegativeStrategy = strategy
        self.num_nodes = bound
        self.keys = self.src * bound + self.dst  # (E,) one key per pair
        self.unique_src, self.unique_dst = torch.unique(self.src), torch.unique(self.dst)
        self.observed = (
            self._pairs_between(float(self.times[0]), float(last_observed_time))
            if last_observed_time is not None
            else None
        )
        self.seed = seed if seed is not None else int(torch.randint(2**62, ()).item())
        self.generator = torch.Generator(device=self.src.device)
        self.reset()

    def reset(self) -> None:
        """Restart the generator from ``seed`` (DyGLib's ``reset_random_state``)."""
        self.generator.manual_seed(self.seed)

    def _pairs_between(self, start: float, end: float) -> Tensor:
        """Distinct pair keys with ``start ≤ time ≤ end``."""
        lo = int(torch.searchsorted(self.times, torch.tensor(start, dtype=torch.float64)))
        hi = int(torch.searchsorted(self.times, torch.tensor(end, dtype=torch.float64), right=True))
        return torch.unique(self.keys[lo:hi])

    def _draw(self, values: Tensor, size: int) -> Tensor:
        index = torch.randint(len(values), (size,), generator=self.generator, device=values.device)
        return values[index]

    def _random_pairs(self, size: int, src: Tensor, dst: Tensor) -> Tensor:
        """``size`` uniform pair keys that are not among the batch's pairs."""
        inside = (src < self.num_nodes) & (dst < self.num_nodes)
        batch = (src * self.num_nodes + dst)[inside]
        found: list[Tensor] = []
        missing = size
        for _ in range(_MAX_ROUNDS):
            keys = self._draw(self.unique_src, missing) * self.num_nodes
            keys = keys + self._draw(self.unique_dst, missing)
            keys = keys[~torch.isin(keys, batch)]
            found.append(keys)
            missing -= len(keys)
            if missing <= 0:
                return torch.cat(found)[:size]
        raise ValueError("src, dst: every source x destination pair is in the batch")

    def sample(self, src: Tensor, dst: Tensor, times: Tensor) -> tuple[Tensor, Tensor]:
        """``(negative_src, negative_dst)``, ``(B,)`` each, for a batch of ``B`` events."""
        if not isinstance(src, Tensor) or src.dim() != 1 or len(src) == 0:
            raise ValueError("src must be a non-empty 1-D tensor of node ids")
        src = check_node_ids("src", src, max(self.num_nodes, int(src.max()) + 1))
        dst = check_node_ids("dst", dst, max(self.num_nodes, int(dst.max()) + 1))
        if dst.shape != src.shape:
            raise ValueError(f"dst must have the length of src ({len(src)}); got {len(dst)}")
        times = check_times("times", times, len(src))
        size = len(src)
        if self.strategy == "random":
            return src.clone(), self._draw(self.unique_dst, size)
        start, end = float(times[0]), float(times[-1])
        candidates = self._pairs_between(float(self.times[0]), start)
        candidates = candidates[~torch.isin(candidates, self._pairs_between(start, end))]
        if self.observed is not None:
            candidates = candidates[~torch.isin(candidates, self.observed)]
        if size <= len(candidates):
            order = torch.randperm(len(candidates), generator=self.generator, device=src.device)
            keys = candidates[order[:size]]
        else:
            keys = torch.cat([self._random_pairs(size - len(candidates), src, dst), candidates])
        return keys // self.num_nodes, keys % self.num_nodes


def _ranked(scores: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """True and false positives at each distinct score threshold, highest first."""
    if scores.shape != labels.shape or scores.dim() != 1:
        raise ValueError("scores and labels must be 1-D tensors of one length")
    if not bool(torch.isfinite(scores).all()):
        # NaN never equals itself: each would be its own threshold and rank as it came,
        # positives first, giving a perfect score to a model that diverged
        raise ValueError("scores must be finite (a NaN or inf score has no rank)")
    labels = labels.to(torch.float64)
    if not bool(((labels == 0) | (labels == 1)).all()):
        raise ValueError("labels must be 0 or 1")
    order = torch.argsort(scores.to(torch.float64), descending=True, stable=True)
    ranked_scores, labels = scores[order].to(torch.float64), labels[order]
    last = torch.ones_like(ranked_scores, dtype=torch.bool)
    last[:-1] = ranked_scores[1:] != ranked_scores[:-1]  # the end of each run of ties
    positives = torch.cumsum(labels, 0)
    counts = torch.arange(1, len(labels) + 1, dtype=torch.float64, device=labels.device)
    return positives[last], (counts - positives)[last]


def average_precision(scores: Tensor, labels: Tensor) -> float:
    """``AP = Σ_n (R_n − R_{n−1}) P_n`` over the distinct score thresholds, highest first
    (scikit-learn's ``average_precision_score``, no interpolation)."""
    true_positives, false_positives = _ranked(scores, labels)
    if float(true_positives[-1]) == 0:
        raise ValueError("labels must contain at least one positive")
    precision = true_positives / (true_positives + false_positives)
    recall = true_positives / true_positives[-1]
    steps = torch.diff(recall, prepend=recall.new_zeros(1))
    return float((steps * precision).sum())


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve by the trapezoid rule over the distinct score thresholds
    (scikit-learn's ``roc_auc_score``; ties count one half)."""
    true_positives, false_positives = _ranked(scores, labels)
    if float(true_positives[-1]) == 0 or float(false_positives[-1]) == 0:
        raise ValueError("labels must contain both classes")
    zero = true_positives.new_zeros(1)
    tpr = torch.cat([zero, true_positives / true_positives[-1]])
    fpr = torch.cat([zero, false_positives / false_positives[-1]])
    return float(torch.trapezoid(tpr, fpr))


@dataclass(frozen=True)
class StreamResult:
    """Per-batch losses and metrics of a pass over a stream, and the state after it."""

    state: LSTEPState
    losses: list[float]
    average_precisions: list[float]
    roc_aucs: list[float]

    @property
    def average_precision(self) -> float:
        """Mean over batches (DyGLib's reported number)."""
        return sum(self.average_precisions) / len(self.average_precisions)

    @property
    def roc_auc(self) -> float:
        return sum(self.roc_aucs) / len(self.roc_aucs)


def run_stream(
    model: LSTEPLinkPredictor,
    state: LSTEPState,
    graph: TemporalGraph,
    src: Tensor,
    dst: Tensor,
    times: Tensor,
    *,
    batch_size: int,
    sampler: NegativeSampler,
    optimizer: torch.optim.Optimizer | None = None,
) -> StreamResult:
    """One pass over events in time order, in batches of ``batch_size`` (the last may be
    shorter): train with ``optimizer``, else evaluate without gradients.

    A training pass starts from :meth:`LSTEPLinkPredictor.initial_state` (the reference
    restarts every epoch from the initial encodings); validation then continues from the
    state the training pass ends in. ``losses`` are the total loss (training) or the link
    BCE (evaluation, as the reference logs).
    """
    batch_size = check_positive_int("batch_size", batch_size)
    losses: list[float] = []
    precisions: list[float] = []
    aucs: list[float] = []
    for start in range(0, len(src), batch_size):
        batch = slice(start, start + batch_size)
        negative_src, negative_dst = sampler.sample(src[batch], dst[batch], times[batch])
        with torch.set_grad_enabled(optimizer is not None):
            out = model.step(
                state, graph, src[batch], dst[batch], times[batch], negative_src, negative_dst
            )
        if optimizer is not None:
            optimizer.zero_grad()
            out.loss.backward()
            optimizer.step()
        state = out.state
        scores = torch.cat([out.positive_logits, out.negative_logits]).detach().sigmoid()
        labels = torch.cat(
            [torch.ones_like(out.positive_logits), torch.zeros_like(out.negative_logits)]
        )
        losses.append(float((out.loss if optimizer is not None else out.link_loss).detach()))
        precisions.append(average_precision(scores, labels))
        aucs.append(roc_auc(scores, labels))
    return StreamResult(state, losses, precisions, aucs)

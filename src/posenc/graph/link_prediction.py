r"""L-STEP's link predictor: node, link and positional encoders, an MLP scorer, its objective.

Tieu et al., ICML 2025, https://arxiv.org/abs/2506.08309 (reference:
https://github.com/kthrn22/L-STEP, ``models/LSTEP.py`` and ``train_LSTEP_link_prediction.py``).
For a node ``u`` queried at time ``t``, with ``N_K(u, t)`` its ``K`` most recent interactions
``(v, e, t_e)`` strictly before ``t`` (DyGLib's ``recent`` neighbours, most recent last) and
``Φ(Δt) = cos(Δt ω)`` the fixed time encoding of :func:`~posenc.graph.lstep.time_encoding`:

.. math::
    h^{\text{link}}_u = W_3\,\operatorname{ReLU}\Big(\textstyle\sum_{k=1}^{K} a_k\,
        W_1 [\Phi(t - t_{e_k}) \,\|\, x_{e_k}] + c\Big), \qquad
    h^{\text{node}}_u = W_4 \big[\, x_u + \operatorname{mean}_{v \in N_G(u, t)} x_v \,\|\,
        h^{\text{link}}_u \big],

    h^{\text{pos}}_u = ep_u + \tanh\Big(W_5\, ep_u + \operatorname{MLP}\big(
        \textstyle\sum_{k} [\, ep_{v_k} \,\|\, \Phi(t - t_{e_k}) \,]\big)\Big), \qquad
    h_u = W_6 [\, h^{\text{node}}_u \,\|\, h^{\text{pos}}_u \,],

    s(u, v) = W_8 \operatorname{ReLU}(W_7 [h_u \| h_v]), \qquad
    \mathcal L = (1 - \lambda)\, \mathrm{BCE} + \lambda \big(\overline{\|ep_u - ep_v\|^2}^{+}
        - \beta\, \overline{\|ep_{u'} - ep_{v'}\|^2}^{-}\big)

(affine layers with biases, ``a ∈ R^K`` and ``c`` the learned sum over the ``K`` slots,
``N_G(u, t)`` the ``time_gap`` most recent neighbours, ``ep`` the encodings of
:class:`~posenc.graph.lstep.LSTEPEncoding` read at ``t``, the overlines means over the
positive and negative pairs and their ``d_P`` channels). A batch of events is one step
(:meth:`LSTEPLinkPredictor.step`); negative sampling, metrics and a loop over a stream are in
:mod:`posenc.graph.link_evaluation`. ``docs/graph.md`` lists where this follows the paper and
where the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_floating_dtype, check_in_choices, check_positive_int
from posenc.graph.lstep import (
    HISTORY_UPDATES,
    HistoryUpdate,
    LSTEPEncoding,
    PositionUpdate,
    check_node_ids,
    check_times,
    initial_history,
    push_history,
    time_encoding,
)
from posenc.graph.temporal_graph import RecentNeighbors, TemporalGraph

__all__ = [
    "POSITION_MODES",
    "LSTEPConfig",
    "LSTEPLinkPredictor",
    "LSTEPLoss",
    "LSTEPState",
    "NodeLinkPositionalEncoder",
    "PositionMode",
    "StepOutput",
    "lstep_loss",
]

#: What the positional part of the predictor reads (:class:`LSTEPConfig`): L-STEP's learned
#: encodings, the initial encodings held fixed, or nothing (the ablations' baselines).
PositionMode = Literal["learned", "static", "none"]
POSITION_MODES: tuple[PositionMode, ...] = ("learned", "static", "none")


@dataclass(frozen=True)
class LSTEPConfig:
    """L-STEP's sizes and loss weights; defaults are the reference's (``load_configs.py``).

    Args:
        node_dim, edge_dim: feature sizes ``d_N``, ``d_E`` of the graph (≥ 1).
        position_dim: ``d_P`` (172: ``position_feat_dim``).
        history_len: ``L`` (100: ``num_fft_batches``; 20–200 in its per-dataset table).
        time_dim: size of the time encoding (100).
        num_neighbors: ``K`` recent interactions for the link and positional encoders (20).
        time_gap: neighbours averaged by the node encoder (2000).
        position_weight: ``λ`` of the positional-encoding loss, in ``[0, 1]`` (0.5:
            ``pe_weight``).
        negative_weight: ``β`` of its negative term, ≥ 0 (0.3: ``neg_sample_weight``).
        history_update: ``"every_batch"`` (the reference) or ``"involved"``, see
            :data:`~posenc.graph.lstep.HistoryUpdate`.
        positions: ``"learned"`` (L-STEP: ``ep`` read through Eqs. 1–2 from a history that
            every batch updates), ``"static"`` (``ep`` = the initial encodings at every step:
            no filter, no update, the history never changes; the positional encoder still
            reads them, so a fixed encoding such as Laplacian eigenvectors gets the same
            predictor) or ``"none"`` (no positional part: ``h^pos_u = 0``, so ``h_u = W_6
            [h^node_u ‖ 0]``, the predictor with ``W_6``'s positional columns removed, and
            ``ep = 0``, so the positional-encoding loss is 0; the reference's ``no_pe``
            ablation).
    """

    node_dim: int
    edge_dim: int
    position_dim: int = 172
    history_len: int = 100
    time_dim: int = 100
    num_neighbors: int = 20
    time_gap: int = 2000
    position_weight: float = 0.5
    negative_weight: float = 0.3
    history_update: HistoryUpdate = "every_batch"
    positions: PositionMode = "learned"

    def __post_init__(self) -> None:
        names = ("node_dim", "edge_dim", "position_dim", "history_len", "time_dim")
        for name in (*names, "num_neighbors", "time_gap"):  # stored as Python ints
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        weight = self.position_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
            raise ValueError(f"position_weight must be a number in [0, 1]; got {weight!r}")
        beta = self.negative_weight
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta < math.inf:
            raise ValueError(f"negative_weight must be a finite number >= 0; got {beta!r}")
        check_in_choices("history_update", self.history_update, HISTORY_UPDATES)
        check_in_choices("positions", self.positions, POSITION_MODES)


class NodeLinkPositionalEncoder(nn.Module):
    """``h_u`` from a node's features, its ``K`` recent links and positional encodings.

    The three encoders and the output layer of the module docstring's formula; inputs are
    already gathered (:meth:`LSTEPLinkPredictor.embed` gathers them), padded slots are
    ``mask`` False and read as zero features, as the reference's padding rows do.

    Shape:
        ``node_features (Q, d_N)`` (own plus the neighbour mean), ``edge_features (Q, K, d_E)``,
        ``time_features (Q, K, d_T)``, ``neighbor_encodings (Q, K, d_P)``,
        ``encodings (Q, d_P)``, ``mask (Q, K)`` → ``(Q, d_N)``.
    """

    def __init__(
        self,
        config: LSTEPConfig,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        c = config
        kwargs: dict[str, Any] = {"device": device, "dtype": dtype}
        link_dim = c.time_dim + c.edge_dim
        self.link_in = nn.Linear(link_dim, link_dim, **kwargs)
        self.link_pool = nn.Linear(c.num_neighbors, 1, **kwargs)
        self.link_out = nn.Linear(link_dim, link_dim, **kwargs)
        self.node_out = nn.Linear(c.node_dim + link_dim, c.node_dim, **kwargs)
        self.position = PositionUpdate(c.position_dim, c.time_dim, **kwargs)
        self.out = nn.Linear(c.node_dim + c.position_dim, c.node_dim, **kwargs)
        self.positions = c.positions

    def forward(
        self,
        node_features: Tensor,
        edge_features: Tensor,
        time_features: Tensor,
        neighbor_encodings: Tensor,
        encodings: Tensor,
        mask: Tensor,
    ) -> Tensor:
        keep = mask.unsqueeze(-1).to(time_features.dtype)
        time_features = time_features * keep
        link = self.link_in(torch.cat([time_features, edge_features * keep], -1))
        link = self.link_pool(link.transpose(-1, -2)).squeeze(-1)  # learned sum over K slots
        link = self.link_out(torch.relu(link))
        node = self.node_out(torch.cat([node_features, link], -1))
        if self.positions == "none":  # no positional part at all (not even its biases)
            position = encodings.new_zeros(encodings.shape)
        else:
            messages = (torch.cat([neighbor_encodings, time_features], -1) * keep).sum(-2)
            position = self.position(encodings, messages)
        return self.out(torch.cat([node, position], -1))


class LSTEPLoss(NamedTuple):
    """``total = (1 - λ) link + λ position``."""

    total: Tensor
    link: Tensor
    position: Tensor


def lstep_loss(
    positive_logits: Tensor,
    negative_logits: Tensor,
    pairs: tuple[Tensor, Tensor, Tensor, Tensor],
    *,
    position_weight: float = 0.5,
    negative_weight: float = 0.3,
) -> LSTEPLoss:
    """L-STEP's objective: BCE on the links plus the positional-encoding loss.

    ``link``: binary cross-entropy of ``sigmoid(logits)`` against 1 (positives) and 0
    (negatives), averaged over all ``2B``. ``position``: ``MSE(ep_src, ep_dst) - β
    MSE(ep_neg_src, ep_neg_dst)`` (each mean over pairs and channels): positive endpoints
    pulled together, negative ones pushed apart. The reference's weighting
    (``train_LSTEP_link_prediction.py``).

    Args:
        positive_logits, negative_logits: ``(B,)`` scores before the sigmoid.
        pairs: encodings ``(B, d_P)`` of the positive sources, destinations, then the negative
            sources and destinations.
        position_weight: ``λ`` in ``[0, 1]``; negative_weight: ``β ≥ 0``.
    """
    logits = torch.cat([positive_logits, negative_logits])
    labels = torch.cat([torch.ones_like(positive_logits), torch.zeros_like(negative_logits)])
    link = F.binary_cross_entropy_with_logits(logits, labels)
    src, dst, negative_src, negative_dst = pairs
    position = F.mse_loss(src, dst) - negative_weight * F.mse_loss(negative_src, negative_dst)
    return LSTEPLoss((1 - position_weight) * link + position_weight * position, link, position)


@dataclass(frozen=True)
class LSTEPState:
    """What a stream carries from one batch to the next (detached).

    Attributes:
        history: ``(N, L, d_P)`` stored encodings, oldest first.
        encodings: ``(N, d_P)`` the encodings read at the last batch (``ep``).
        pending: the last batch's ``(src, dst, times)``, applied at the next step, or None.
        time: the last batch's last event time (``-inf`` before any).
    """

    history: Tensor
    encodings: Tensor
    pending: tuple[Tensor, Tensor, Tensor] | None = None
    time: float = -math.inf


@dataclass(frozen=True)
class StepOutput:
    """One batch: the loss and its parts, the logits and the state for the next batch."""

    loss: Tensor
    link_loss: Tensor
    position_loss: Tensor
    positive_logits: Tensor
    negative_logits: Tensor
    state: LSTEPState


class LSTEPLinkPredictor(nn.Module):
    """L-STEP: learnable spatial-temporal encodings, an MLP encoder and scorer, no attention.

    A stream of event batches in time order goes through :meth:`step`; the state starts at
    :meth:`initial_state` from initial encodings (Laplacian eigenvectors or random-walk
    features: the reference computes them from the first training batch's edges).

    One step, for a batch at times ``t`` with the previous batch's events pending:
    (1) update the pending events' nodes (:meth:`LSTEPEncoding.update`) and append to the
    history; (2) read ``ep`` (Eqs. 1–2) for every node the batch reads (endpoints, negatives
    and their neighbours); (3) embed, score, and the loss. Doing (1) at the start of the next
    step rather than at the end of this one lets the loss reach the update's parameters (the
    reference updates after its loss and detaches, so its update layers never get a
    gradient); the values are the same. With ``config.positions`` ``"static"`` or
    ``"none"`` (the ablations' baselines) (1) and (2) are skipped: ``ep`` is the initial
    encodings, or 0 with the positional part cut, and the history never changes.

    Args:
        config: :class:`LSTEPConfig`.
        generator: optional ``torch.Generator`` for the initialization.
        device, dtype: of the parameters.

    Example::

        >>> cfg = LSTEPConfig(node_dim=4, edge_dim=3, position_dim=6, history_len=3,
        ...                   time_dim=5, num_neighbors=2, time_gap=4)
        >>> model = LSTEPLinkPredictor(cfg, generator=torch.Generator().manual_seed(0))
        >>> src, dst = torch.tensor([0, 1, 2, 0]), torch.tensor([1, 2, 3, 3])
        >>> times = torch.tensor([0.0, 1.0, 2.0, 3.0])
        >>> graph = TemporalGraph(src, dst, times, torch.randn(5, 4), torch.randn(4, 3))
        >>> state = model.initial_state(torch.randn(5, 6))
        >>> out = model.step(state, graph, src[:2], dst[:2], times[:2], src[:2], dst[:2] + 2)
        >>> out = model.step(out.state, graph, src[2:], dst[2:], times[2:], src[2:], dst[2:] - 2)
        >>> out.positive_logits.shape, out.loss.dim()
        (torch.Size([2]), 0)
    """

    def __init__(
        self,
        config: LSTEPConfig,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(config, LSTEPConfig):
            raise ValueError(f"config must be an LSTEPConfig; got {type(config).__name__}")
        check_floating_dtype("dtype", dtype)
        self.config = config
        kwargs: dict[str, Any] = {"device": device, "dtype": dtype}
        self.encoding = LSTEPEncoding(
            config.position_dim, config.history_len, config.time_dim, **kwargs
        )
        self.encoder = NodeLinkPositionalEncoder(config, **kwargs)
        self.score_hidden = nn.Linear(2 * config.node_dim, config.node_dim, **kwargs)
        self.score_out = nn.Linear(config.node_dim, 1, **kwargs)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """``nn.Linear``'s initialization everywhere, the filter and sum as the reference."""
        self.encoding.reset_parameters(generator)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(module.in_features)
                nn.init.uniform_(module.weight, -bound, bound, generator=generator)
                nn.init.uniform_(module.bias, -bound, bound, generator=generator)

    @property
    def dtype(self) -> torch.dtype:
        return self.encoding.filter_real.dtype

    def initial_state(self, initial_encodings: Tensor) -> LSTEPState:
        """The state before any event: every node's history is its initial encoding."""
        if not isinstance(initial_encodings, Tensor) or initial_encodings.dim() != 2:
            raise ValueError("initial_encodings must be a (num_nodes, position_dim) tensor")
        if initial_encodings.shape[1] != self.config.position_dim:
            raise ValueError(
                f"initial_encodings must have position_dim = {self.config.position_dim} "
                f"columns; got {initial_encodings.shape[1]}"
            )
        history = initial_history(initial_encodings.to(self.dtype), self.config.history_len)
        return LSTEPState(history, history[:, -1].clone())

    def embed(
        self,
        graph: TemporalGraph,
        nodes: Tensor,
        times: Tensor,
        encodings: Tensor,
        neighbors: RecentNeighbors | None = None,
    ) -> Tensor:
        """``h_u`` of ``nodes`` queried at ``times`` (``(Q,)`` each), given ``ep`` ``(N, d_P)``
        (and ``graph.recent(nodes, times, num_neighbors)`` if already at hand)."""
        c = self.config
        if neighbors is None:
            neighbors = graph.recent(nodes, times, c.num_neighbors)
        features = graph.node_features[nodes] + graph.neighbor_mean(nodes, times, c.time_gap)
        delta = times.to(torch.float64).unsqueeze(-1) - neighbors.times
        return self.encoder(
            features.to(self.dtype),
            graph.edge_features[neighbors.events].to(self.dtype),
            time_encoding(delta, c.time_dim, self.dtype),
            encodings[neighbors.nodes],
            encodings[nodes],
            neighbors.mask,
        )

    def score(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        """Link logits ``W_8 ReLU(W_7 [h_u ‖ h_v])`` (DyGLib's ``MergeLayer``), ``(B,)``."""
        hidden = torch.relu(self.score_hidden(torch.cat([h_src, h_dst], -1)))
        return self.score_out(hidden).squeeze(-1)

    def _check_step(self, state: LSTEPState, graph: TemporalGraph, times: Tensor) -> None:
        c, n = self.config, state.history.shape[0]
        if not isinstance(graph, TemporalGraph) or graph.num_nodes != n:
            raise ValueError(f"graph must be a TemporalGraph over the state's {n} nodes")
        if graph.node_features.shape[1] != c.node_dim:
            raise ValueError(f"node_features must have node_dim = {c.node_dim} columns")
        if graph.edge_features.shape[1] != c.edge_dim:
            raise ValueError(f"edge_features must have edge_dim = {c.edge_dim} columns")
        if len(times) == 0:
            raise ValueError("times must hold at least one event")
        if float(times[0]) < state.time:
            raise ValueError(
                f"times must not precede the previous batch (it ended at {state.time}); "
                f"got {float(times[0])}"
            )

    def step(
        self,
        state: LSTEPState,
        graph: TemporalGraph,
        src: Tensor,
        dst: Tensor,
        times: Tensor,
        negative_src: Tensor,
        negative_dst: Tensor,
    ) -> StepOutput:
        """Score a batch of events ``(src, dst, times)`` against negatives and compute the
        loss; returns the state for the next batch (call under ``torch.no_grad()`` to
        evaluate). ``graph`` supplies the neighbours (events strictly before each query)."""
        c, n = self.config, state.history.shape[0]
        src, dst = check_node_ids("src", src, n), check_node_ids("dst", dst, n)
        negative_src = check_node_ids("negative_src", negative_src, n)
        negative_dst = check_node_ids("negative_dst", negative_dst, n)
        for name, ids in (
            ("dst", dst),
            ("negative_src", negative_src),
            ("negative_dst", negative_dst),
        ):
            if ids.shape != src.shape:
                raise ValueError(f"{name} must have the length of src ({len(src)}); got {len(ids)}")
        times = check_times("times", times, len(src))
        self._check_step(state, graph, times)

        history = state.history
        if c.positions != "learned":  # fixed encodings (or none): no update, no filter
            encodings = state.encodings
            if c.positions == "none":
                encodings = torch.zeros_like(encodings)
        elif state.pending is not None:
            pending_src, pending_dst, pending_times = state.pending
            nodes, updated = self.encoding.update(
                state.encodings, pending_src, pending_dst, pending_times, now=pending_times[-1]
            )
            if c.history_update == "every_batch":
                history = push_history(history, history[:, -1].index_put((nodes,), updated))
            else:
                history = push_history(history, updated, nodes)

        queried = torch.cat([src, dst, negative_src, negative_dst])
        query_times = times.repeat(4)
        neighbors = graph.recent(queried, query_times, c.num_neighbors)
        if c.positions == "learned":
            # Every node this step reads gets ep, positives and negatives alike: reading ep
            # for the batch's endpoints only (as the reference does) would tell them apart.
            needed = torch.unique(torch.cat([queried, neighbors.nodes[neighbors.mask]]))
            encodings = history[:, -1].index_put((needed,), self.encoding(history[needed]))

        h = self.embed(graph, queried, query_times, encodings, neighbors)
        h_src, h_dst, h_negative_src, h_negative_dst = h.chunk(4)
        positive, negative = self.score(h_src, h_dst), self.score(h_negative_src, h_negative_dst)
        pairs = (encodings[src], encodings[dst], encodings[negative_src], encodings[negative_dst])
        loss = lstep_loss(
            positive,
            negative,
            pairs,
            position_weight=c.position_weight,
            negative_weight=c.negative_weight,
        )
        next_state = LSTEPState(
            history.detach(), encodings.detach(), (src, dst, times), float(times[-1])
        )
        return StepOutput(loss.total, loss.link, loss.position, positive, negative, next_state)

    def extra_repr(self) -> str:
        return f"config={self.config}"

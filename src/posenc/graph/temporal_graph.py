"""Events in time order as a graph: each node's most recent interactions before a time.

The temporal neighbourhood that L-STEP's encoders read (:mod:`posenc.graph.link_prediction`),
with DyGLib's ``recent`` neighbour sampler's semantics (Yu et al., NeurIPS 2023,
https://arxiv.org/abs/2303.13047; ``utils/utils.py``: ``NeighborSampler``): the interactions
of a node strictly before the query time, the most recent last, both directions of every
event. All queries are vectorized (one ``searchsorted`` over the events sorted by node).

Example::

    >>> g = TemporalGraph(torch.tensor([0, 1, 0]), torch.tensor([1, 2, 2]),
    ...                   torch.tensor([1.0, 2.0, 3.0]), torch.zeros(3, 2), torch.zeros(3, 1))
    >>> g.recent(torch.tensor([2]), torch.tensor([3.5]), k=3).nodes
    tensor([[0, 1, 0]])
    >>> g.recent(torch.tensor([2]), torch.tensor([3.5]), k=3).mask
    tensor([[False,  True,  True]])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc._validate import check_finite, check_positive_int
from posenc.graph.lstep import check_node_ids, check_times

__all__ = ["RecentNeighbors", "TemporalGraph"]


class RecentNeighbors(NamedTuple):
    """The ``K`` most recent interactions of each queried node before its query time, most
    recent last; slots without one hold 0 and ``mask`` False. Each ``(Q, K)``."""

    nodes: Tensor
    events: Tensor
    times: Tensor
    mask: Tensor


@dataclass(frozen=True, eq=False)
class TemporalGraph:
    """Events ``(src[i], dst[i], times[i])`` in time order with node and event features.

    Each event links both ways (DyGLib's neighbour sampler). Node ids are ``0 .. N - 1`` and
    event ``i`` has features ``edge_features[i]`` (DyGLib numbers both from 1 and keeps row 0
    as padding; here padding is a mask).

    Args:
        src, dst: ``(E,)`` integer node ids.
        times: ``(E,)`` non-decreasing event times.
        node_features: ``(N, d_N)``; ``N`` is the number of nodes.
        edge_features: ``(E, d_E)``.
    """

    src: Tensor
    dst: Tensor
    times: Tensor
    node_features: Tensor
    edge_features: Tensor
    _keys: Tensor = field(init=False, repr=False)
    _other: Tensor = field(init=False, repr=False)
    _event: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        nf, ef = self.node_features, self.edge_features
        if not isinstance(nf, Tensor) or nf.dim() != 2 or not nf.is_floating_point():
            raise ValueError("node_features must be a floating (num_nodes, node_dim) tensor")
        src = check_node_ids("src", self.src, nf.shape[0])
        dst = check_node_ids("dst", self.dst, nf.shape[0])
        if dst.shape != src.shape:
            raise ValueError(f"dst must have the length of src ({len(src)}); got {len(dst)}")
        times = check_times("times", self.times, len(src))
        if not isinstance(ef, Tensor) or ef.dim() != 2 or ef.shape[0] != len(src):
            raise ValueError(f"edge_features must be an (E, edge_dim) tensor with E = {len(src)}")
        if not ef.is_floating_point():
            raise ValueError(f"edge_features must be floating; got {ef.dtype}")
        check_finite("node_features", nf)
        check_finite("edge_features", ef)
        # Both directions of every event, sorted by (node, event): each node's interactions
        # are a contiguous run in time order, found by searchsorted on node * (E + 1) + event.
        n_events = len(src)
        owner = torch.cat([src, dst])
        event = torch.arange(n_events, device=src.device).repeat(2)
        keys, order = torch.sort(owner * (n_events + 1) + event, stable=True)
        for name, value in (("src", src), ("dst", dst), ("times", times), ("_keys", keys)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_other", torch.cat([dst, src])[order])
        object.__setattr__(self, "_event", event[order])

    @property
    def num_nodes(self) -> int:
        return self.node_features.shape[0]

    def _runs(self, nodes: Tensor, times: Tensor) -> tuple[Tensor, Tensor]:
        """Where each queried node's interactions before its time start and end (queries
        checked here: the public entry of both lookups)."""
        nodes = check_node_ids("nodes", nodes, self.num_nodes)
        if not isinstance(times, Tensor) or times.shape != nodes.shape or times.is_complex():
            raise ValueError(
                f"times must be a real tensor of shape {tuple(nodes.shape)}, one per node"
            )
        if not bool(torch.isfinite(times).all()):
            raise ValueError(
                "times must be finite: a NaN time would read every event, the future too"
            )
        stride = len(self.src) + 1
        before = torch.searchsorted(self.times, times.to(torch.float64).contiguous())
        start = torch.searchsorted(self._keys, nodes * stride)
        end = torch.searchsorted(self._keys, nodes * stride + before)
        return start, end

    def recent(self, nodes: Tensor, times: Tensor, k: int) -> RecentNeighbors:
        """The ``k`` most recent interactions of ``nodes[q]`` strictly before ``times[q]``."""
        k = check_positive_int("k", k)
        start, end = self._runs(nodes, times)
        if not len(self.src):  # no events: no neighbours
            zeros = torch.zeros(len(nodes), k, dtype=torch.long, device=nodes.device)
            return RecentNeighbors(zeros, zeros, zeros.to(torch.float64), zeros.bool())
        slots = end.unsqueeze(-1) - k + torch.arange(k, device=nodes.device)  # (Q, k)
        mask = slots >= start.unsqueeze(-1)
        slots = slots.clamp(min=0)
        event = self._event[slots].masked_fill(~mask, 0)
        return RecentNeighbors(
            self._other[slots].masked_fill(~mask, 0),
            event,
            self.times[event].masked_fill(~mask, 0.0),
            mask,
        )

    def neighbor_mean(self, nodes: Tensor, times: Tensor, k: int) -> Tensor:
        """Mean node features of the ``k`` most recent neighbours before ``times`` (zeros
        without any), as one ``embedding_bag`` (no ``(Q, k, d_N)`` tensor)."""
        k = check_positive_int("k", k)
        start, end = self._runs(nodes, times)
        count = torch.minimum(end - start, torch.full_like(end, k))
        offsets = torch.cumsum(count, 0) - count
        within = torch.arange(int(count.sum()), device=nodes.device)
        within = within - torch.repeat_interleave(offsets, count)
        members = self._other[torch.repeat_interleave(end - count, count) + within]
        return F.embedding_bag(members, self.node_features, offsets, mode="mean")

"""Graphormer's attention bias: spatial encoding per head and distance, and edge encoding.

Graphormer (Ying et al. 2021, https://arxiv.org/abs/2106.05234) adds to the scaled logits of
node ``i`` attending to node ``j``, head ``h``:

.. math::
    B_{hij} = b_h\\big(\\varphi(v_i, v_j)\\big) + c^h_{ij},\\qquad
    c^h_{ij} = \\frac{1}{N} \\sum_{n=1}^{N} x_{e_n} \\cdot w^h_n \\quad \\text{(Eq. 6, 7)}

with ``φ`` the shortest-path distance (:mod:`posenc.graph.shortest_path`), ``b`` a learned
table per head and distance, ``e_1 … e_N`` the edges of one shortest path from ``i`` to
``j`` and ``w_n`` a learned weight per hop. A virtual node (the graph token, index 0) attends
to and is attended by every node through a learned bias of its own.

What the reference (``microsoft/Graphormer``: ``GraphAttnBias`` in
``graphormer/modules/graphormer_layers.py``, ``collator.py``, ``algos.pyx``) does, and here:

- distances enter with ``+1`` (0 is padding) and unreachable pairs at 510 (index 511 of a
  512-row table); here row ``d`` holds distance ``d``, row ``max_distance + 1``
  unreachable pairs, row ``max_distance + 2`` the virtual node: no padding row (padded keys
  are masked by ``key_padding_mask``);
- the virtual node's bias ``t_h`` (``graph_token_virtual_distance``) fills row 0 and
  column 0, including ``(0, 0)``; it gets no spatial or edge term;
- the edge encoding (``multi_hop``) sums ``x_{e_n} W_n`` over the first
  ``multi_hop_max_dist`` hops (here ``max_hops``, default 5 as the reference's datasets)
  and divides by ``min(N, multi_hop_max_dist)``; ``i = j`` and unreachable pairs get 0.
  The reference embeds categorical edge features to ``x_e ∈ R^H`` and takes ``W_n`` of
  ``H × H``; here ``x_e`` is any ``(E, edge_dim)`` tensor and ``W_n`` is ``edge_dim × H``;
- its collator masks pairs with ``spd ≥ spatial_pos_max`` out of attention (``-inf``; the
  raw distance, before the ``+1`` of ``pad_spatial_pos_unsqueeze``):
  :func:`graphormer_reach_mask` gives that mask, for ``attn_mask``.

Positions: the bias is a pointwise ``bias_at(head, q_pos, k_pos)`` whose positions are node
ids into per-graph matrices set once per forward (:meth:`GraphormerBias.set_graphs`): with
``S`` the padded graph size (plus the virtual node), node ``i`` of graph ``b`` sits at
position ``b·S + i``, so ``bias_at`` reads graph ``⌊q/S⌋`` and nodes ``q mod S``, ``k mod
S`` with broadcastable ops, and every backend serves it: ``sdpa`` (materialized),
``chunked`` (blocks of rows) and ``flex`` (the same lookups as ``score_mod``; forward only
on the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_finite,
    check_integer_valued,
    check_non_negative_int,
    check_positive_int,
    validating_values,
)
from posenc.encoding.protocols import BiasEncoding
from posenc.graph.graphormer_edges import GraphormerEdgeEncoding
from posenc.graph.shortest_path import UNREACHABLE, ShortestPaths

__all__ = ["GraphormerBias", "graphormer_reach_mask", "graphormer_spatial_index"]


def graphormer_spatial_index(distance: Tensor, max_distance: int, virtual_node: bool) -> Tensor:
    """Row of :class:`GraphormerBias`'s table for every pair, ``(B, S, S)`` int64.

    Row ``d`` for distance ``d ≤ max_distance``, ``max_distance + 1`` for unreachable (and
    padding) pairs, and with ``virtual_node`` row ``max_distance + 2`` for the first row and
    column (the graph token at index 0; ``S = N + 1``). Distances are not checked here.
    """
    index = distance.long().masked_fill(distance < 0, max_distance + 1)
    if virtual_node:
        index = F.pad(index, (1, 0, 1, 0), value=max_distance + 2)
    return index


def graphormer_reach_mask(
    paths: ShortestPaths, max_reach: int, *, virtual_node: bool = True
) -> Tensor:
    """The reference collator's mask as ``attn_mask``: ``(B, S, S)`` bool, True where node
    ``i`` may attend to node ``j``: ``0 ≤ φ(i, j) ≤ max_reach``; the virtual node's row and
    column are always True.

    The reference masks the raw distance ``spd ≥ spatial_pos_max`` (``collator.py``, before
    its ``+1`` offset), i.e. ``max_reach = spatial_pos_max − 1`` for reachable pairs (it lets
    unreachable pairs, at 510, attend when ``spatial_pos_max > 510``, its datasets' default
    1024, where this mask would be all of ``reachable``).
    """
    if paths.weighted:
        raise ValueError("paths must hold hop counts (shortest_paths(graph, weighted=False))")
    max_reach = check_non_negative_int("max_reach", max_reach)
    allowed = (paths.distance >= 0) & (paths.distance <= max_reach)
    if virtual_node:
        allowed = F.pad(allowed, (1, 0, 1, 0), value=True)
    return allowed


@dataclass(frozen=True, eq=False)
class _GraphState:
    """What :meth:`GraphormerBias.bias_at` reads in one forward."""

    index: Tensor  # (B, S, S) int64 table rows
    edge: Tensor | None  # (B, H, S, S) edge encoding, 0 on the virtual node's row and column
    stride: int  # S
    num_graphs: int


class GraphormerBias(BiasEncoding):
    """Graphormer's spatial (and optionally edge) encoding as a pointwise attention bias.

    .. math:: B_{hij} = W_{\\text{row}(i, j),\\, h} + c^h_{ij}

    ``row(i, j)`` is ``φ(i, j)`` for ``φ ≤ max_distance``, the unreachable row, or the virtual
    node's row (:func:`graphormer_spatial_index`); ``c`` is the edge encoding
    (:class:`GraphormerEdgeEncoding`, when ``edge_dim`` is given). Added to ``scale · q kᵀ``
    as is, as the reference adds its ``attn_bias``; one instance serves every layer (the
    reference computes the bias once per forward). Paper: Ying et al. 2021,
    https://arxiv.org/abs/2106.05234; tested against float64 evaluations of the reference's
    ``GraphAttnBias`` (see the module docstring for what differs in layout).

    Call :meth:`set_graphs` once per forward (each training step, before the layers run):
    it computes the table rows and the edge term of this batch of graphs and returns the
    positions and key padding mask to give the attention.

    Args:
        num_heads: attention heads (≥ 1).
        max_distance: largest distance with its own row (default 20, the reference
            collator's ``spatial_pos_max``); longer paths raise in :meth:`set_graphs`
            unless clamped (``shortest_paths(graph, max_distance=...)``).
        virtual_node: prepend the graph token at index 0 with its own bias.
        edge_dim: width of the edge features for the edge encoding (None: no edge term).
        max_hops: edges read along each path by the edge encoding.
        device, dtype: of the parameters; the bias has their dtype.

    Attributes:
        weight: ``(max_distance + 2 + virtual_node, num_heads)``, ``N(0, 0.02²)`` as the
            reference's embeddings.
        edge_encoding: a :class:`GraphormerEdgeEncoding` or None.

    Shape:
        ``set_graphs(paths, edge_features)`` → positions and key padding mask ``(B, S)``,
        ``S = N + virtual_node``; ``bias(positions, positions)``: ``(B, num_heads, S, S)``.

    Example::

        >>> from posenc.attention import Attention
        >>> from posenc.graph import Graph, shortest_paths
        >>> g = Graph(torch.tensor([[0, 1, 3], [1, 2, 4]]), 5, batch=torch.tensor([0, 0, 0, 1, 1]))
        >>> bias = GraphormerBias(4)
        >>> positions, padding = bias.set_graphs(shortest_paths(g))
        >>> attn = Attention(32, 4, pos=bias, causal=False)
        >>> attn(torch.randn(2, 4, 32), positions, key_padding_mask=padding).shape
        torch.Size([2, 4, 32])
    """

    shared_across_layers: ClassVar[bool] = True

    def __init__(
        self,
        num_heads: int,
        *,
        max_distance: int = 20,
        virtual_node: bool = True,
        edge_dim: int | None = None,
        max_hops: int = 5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.max_distance = check_positive_int("max_distance", max_distance)
        max_hops = check_positive_int("max_hops", max_hops)
        self.virtual_node = bool(virtual_node)
        rows = self.max_distance + 2 + int(self.virtual_node)
        self.weight = nn.Parameter(torch.empty(rows, self.num_heads, device=device, dtype=dtype))
        self.edge_encoding = (
            None
            if edge_dim is None
            else GraphormerEdgeEncoding(
                edge_dim, num_heads, max_hops=max_hops, device=device, dtype=dtype
            )
        )
        self._state: _GraphState | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)
        if self.edge_encoding is not None:
            self.edge_encoding.reset_parameters()

    def set_graphs(
        self, paths: ShortestPaths, edge_features: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Set this forward's graphs; returns ``(positions, key_padding_mask)``, ``(B, S)``.

        ``positions[b, i] = b·S + i`` (node ``i − 1`` of graph ``b`` when ``virtual_node``,
        the graph token at ``i = 0``); ``key_padding_mask`` True for real nodes and the
        token. The table rows and the edge term (with its autograd graph) are kept for the
        layers of this forward: call it again for the next forward.

        Raises:
            ValueError: naming ``paths`` (not hop counts, or a distance above
                ``max_distance``) or ``edge_features`` (missing, unexpected or malformed).
        """
        if not isinstance(paths, ShortestPaths) or paths.weighted:
            raise ValueError(
                "paths must be the hop counts of shortest_paths(graph) (weighted=False): the "
                "table is indexed by whole distances"
            )
        edge = None
        if self.edge_encoding is not None:
            if edge_features is None:
                raise ValueError(
                    "edge_features must be given: this GraphormerBias has an edge encoding "
                    f"(edge_dim={self.edge_encoding.edge_dim})"
                )
            edge = self.edge_encoding(paths, edge_features)
            if self.virtual_node:
                edge = F.pad(edge, (1, 0, 1, 0))
        elif edge_features is not None:
            raise ValueError(
                "edge_features were given but this GraphormerBias has no edge encoding; "
                "build it with edge_dim"
            )
        return self._set(paths.distance, paths.node_mask, edge, "paths")

    def set_distances(self, distance: Tensor, node_mask: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`set_graphs` from hop counts computed once (:func:`~posenc.graph.hop_distances`
        of a dataset, indexed per batch): ``distance`` ``(B, N, N)`` whole numbers ``>= 0``,
        or :data:`~posenc.graph.UNREACHABLE` (``-1``) where there is no path, the only
        negative value read (other negatives, NaN and inf raise ``ValueError`` naming
        ``distance``); ``node_mask`` ``(B, N)`` bool (or 0/1) True for real nodes. Spatial
        bias only: a bias with an edge encoding needs the paths (``ValueError`` naming
        ``edge_features``)."""
        if self.edge_encoding is not None:
            raise ValueError(
                "edge_features: this GraphormerBias has an edge encoding, which reads the "
                "paths; call set_graphs(paths, edge_features)"
            )
        if not isinstance(distance, Tensor) or distance.dim() != 3:
            raise ValueError("distance must be a (B, N, N) tensor of hop counts")
        if distance.is_complex() or distance.dtype == torch.bool:
            raise ValueError(f"distance must be a real tensor of hop counts; got {distance.dtype}")
        check_finite("distance", distance)
        check_integer_valued("distance", distance)
        if validating_values() and distance.numel() and bool((distance < UNREACHABLE).any()):
            raise ValueError(
                f"distance must hold hop counts >= 0, or {UNREACHABLE} (UNREACHABLE) where there "
                f"is no path; got {int(distance.min())}"
            )
        if not isinstance(node_mask, Tensor) or node_mask.shape != distance.shape[:2]:
            raise ValueError(f"node_mask must be a (B, N) = {tuple(distance.shape[:2])} tensor")
        if node_mask.dtype != torch.bool and validating_values():
            binary = not node_mask.is_complex() and bool(
                ((node_mask == 0) | (node_mask == 1)).all()
            )
            if not binary:  # 0.5 is neither a node nor padding
                raise ValueError("node_mask must be bool (or 0/1): True for a real node")
        return self._set(distance, node_mask.bool(), None, "distance")

    def _set(
        self, distance: Tensor, node_mask: Tensor, edge: Tensor | None, name: str
    ) -> tuple[Tensor, Tensor]:
        longest = int(distance.max()) if distance.numel() else 0
        if longest > self.max_distance:
            raise ValueError(
                f"{name} holds a distance of {longest} hops but this GraphormerBias has rows up "
                f"to max_distance={self.max_distance}: build it with a larger max_distance, or "
                f"clamp: shortest_paths(graph, max_distance={self.max_distance})"
            )
        device = self.weight.device
        index = graphormer_spatial_index(distance.to(device), self.max_distance, self.virtual_node)
        batch, stride = index.shape[0], index.shape[-1]
        self._state = _GraphState(index, edge, stride, batch)
        positions = torch.arange(batch * stride, device=device).view(batch, stride)
        padding = node_mask.to(device)
        if self.virtual_node:
            padding = F.pad(padding, (1, 0), value=True)
        return positions, padding

    def _graphs(self, name: str) -> _GraphState:
        if self._state is None:
            raise ValueError(
                f"{name}: this GraphormerBias has no graphs; call set_graphs(paths) first (once "
                "per forward) and use the positions it returns"
            )
        return self._state

    def prepare_bias(
        self, device: torch.device, dtype: torch.dtype, *, reach: int | None = None
    ) -> None:
        self._graphs("positions")

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``weight[row(i, j), head] + c[b, head, i, j]`` with ``b = ⌊q_pos / S⌋``, ``i =
        q_pos − b·S``, ``j = k_pos − b·S`` (positions from :meth:`set_graphs`)."""
        state = self._state
        assert state is not None  # prepare_bias raised otherwise
        q, k = q_pos.long(), k_pos.long()
        graph = torch.div(q, state.stride, rounding_mode="floor")
        i, j = q - graph * state.stride, k - graph * state.stride
        bias = self.weight[state.index[graph, i, j], head]
        if state.edge is not None:
            bias = bias + state.edge[graph, head, i, j]
        return bias.to(dtype)

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """Raise ``ValueError`` naming ``name`` unless the positions are node positions of
        the graphs set by :meth:`set_graphs`: whole numbers in ``[0, B·S)``, each row of a
        ``(B, seq)`` tensor inside its own graph (1-D positions: one graph only)."""
        state = self._graphs(name)
        check_finite(name, positions)
        check_integer_valued(name, positions)
        if positions.numel() == 0:
            return
        p = positions.long()
        total = state.num_graphs * state.stride
        low, high = int(p.min()), int(p.max())
        if low < 0 or high >= total:
            raise ValueError(
                f"{name} must be node positions from set_graphs, in [0, {total}) for "
                f"{state.num_graphs} graphs of {state.stride} positions; got [{low}, {high}]"
            )
        graph = torch.div(p, state.stride, rounding_mode="floor")
        if p.dim() == 2 and p.shape[0] == state.num_graphs:
            expected = torch.arange(state.num_graphs, device=p.device)[:, None]
        elif state.num_graphs == 1:
            expected = torch.zeros((), dtype=torch.long, device=p.device)
        else:
            raise ValueError(
                f"{name} must have one row per graph ({state.num_graphs}, seq), as set_graphs "
                f"returns them; got shape {tuple(p.shape)}"
            )
        if not bool((graph == expected).all()):
            raise ValueError(
                f"{name}: row b must hold positions of graph b only (b·{state.stride} .. "
                f"b·{state.stride} + {state.stride - 1}), as set_graphs returns them"
            )

    def check_bias_positions(self, q_pos: Tensor, k_pos: Tensor) -> None:
        super().check_bias_positions(q_pos, k_pos)
        self.validate_positions(q_pos, "q_pos")
        self.validate_positions(k_pos, "k_pos")

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``(num_heads, q, k)`` or ``(batch, num_heads, q, k)``; ``dtype`` defaults to the
        table's."""
        return super().bias(q_pos, k_pos, dtype or self.weight.dtype)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, max_distance={self.max_distance}, "
            f"virtual_node={self.virtual_node}"
        )

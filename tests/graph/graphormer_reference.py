"""Float64 re-derivations of Graphormer's reference code (microsoft/Graphormer, written anew).

- :func:`floyd_warshall` and :func:`path_nodes`: ``graphormer/data/algos.pyx``
  (``floyd_warshall``: unreachable at 510, the via node of the last strict improvement;
  ``get_all_edges``: ``path(i, via) + [via] + path(via, j)``);
- :func:`collate`: ``preprocess_item`` (``wrapper.py``) and ``collator`` (``collator.py``):
  the ``+1`` offsets, padding with 0, ``attn_bias`` with the graph token and ``-inf`` for
  padded keys and pairs at ``spd >= spatial_pos_max`` (the raw distance: the collator masks
  before ``pad_spatial_pos_unsqueeze`` adds 1);
- :func:`graph_attn_bias` and :func:`graph_node_feature`: ``GraphAttnBias`` and
  ``GraphNodeFeature`` (``graphormer/modules/graphormer_layers.py``) on the collated batch,
  with the padding rows of the embeddings zero (Hugging Face's initialization).

Also :func:`batch_graphs`, :func:`random_graph`, :func:`random_tree` and
:func:`sample_batch` for the tests.
"""

from __future__ import annotations

import math
import random

import networkx as nx
import torch
from torch import Tensor

from posenc.graph import Graph, from_networkx

FAR = 510  # the reference's distance of an unreachable pair


def batch_graphs(graphs: list[Graph]) -> Graph:
    """One :class:`Graph` holding ``graphs`` as a batch (PyG's layout)."""
    edges, weights, batch, start = [], [], [], 0
    for index, g in enumerate(graphs):
        edges.append(g.edge_index + start)
        weights.append(
            g.edge_weight
            if g.edge_weight is not None
            else torch.ones(g.edge_index.shape[1], dtype=torch.float64)
        )
        batch += [index] * g.num_nodes
        start += g.num_nodes
    has_weight = any(g.edge_weight is not None for g in graphs)
    return Graph(
        torch.cat(edges, dim=1),
        start,
        torch.cat(weights) if has_weight else None,
        graphs[0].directed,
        torch.tensor(batch),
    )


def random_graph(
    n: int,
    p: float,
    seed: int,
    *,
    directed: bool = False,
    weighted: bool = False,
    zeros: bool = True,
) -> tuple[nx.Graph, Graph]:
    """A G(n, p) graph (often disconnected for small ``p``) with integer weights in 1..5 (and
    0 when ``zeros``: the reference reads a 0 as no edge) used when ``weighted``; the
    networkx graph and its :class:`Graph`."""
    g = nx.gnp_random_graph(n, p, seed=seed, directed=directed)
    rng = random.Random(seed)
    choices = [0, 1, 2, 3, 4, 5] if zeros else [1, 2, 3, 4, 5]
    for u, v in g.edges:
        g.edges[u, v]["weight"] = float(rng.choice(choices))
    return g, from_networkx(g, weight="weight" if weighted else None)


def random_tree(n: int, seed: int) -> Graph:
    """A random tree on ``n`` nodes (one shortest path per pair)."""
    rng = random.Random(seed)
    parents = [rng.randrange(i) for i in range(1, n)]
    return Graph(torch.tensor([parents, list(range(1, n))]), n)


def sample_batch(directed: bool, num_types: int, features: int) -> tuple[Graph, Tensor]:
    """Three graphs of 7, 5 and 4 nodes (disconnected ones, one without edges) and
    categorical edge features ``(E, features)`` in ``[0, num_types)``."""
    graphs = [
        random_graph(7, 0.3, 11, directed=directed)[1],
        random_graph(5, 0.5, 12, directed=directed)[1],
        random_graph(4, 0.0, 13, directed=directed)[1],
    ]
    graph = batch_graphs(graphs)
    generator = torch.Generator().manual_seed(0)
    types = torch.randint(0, num_types, (graph.edge_index.shape[1], features), generator=generator)
    return graph, types


def dense_listed(graph: Graph, values: Tensor | None = None) -> list[list[list[float]]]:
    """Per graph of the batch, ``A[u][v]`` = the value of edge ``u → v`` as listed (weights
    or 1), both ways for an undirected graph; 0 where no edge."""
    out = []
    for sub in graph.graphs():
        n = sub.num_nodes
        a = [[0.0] * n for _ in range(n)]
        w = sub.edge_weight if values is None else values
        for e, (u, v) in enumerate(sub.edge_index.T.tolist()):
            value = 1.0 if w is None else float(w[e])
            a[u][v] = value
            if not graph.directed:
                a[v][u] = value
        out.append(a)
    return out


def floyd_warshall(adj: list[list[float]]) -> tuple[list[list[float]], list[list[int]]]:
    """The reference's Floyd–Warshall: 0 = no edge, unreachable at :data:`FAR` (via FAR)."""
    n = len(adj)
    d = [[0.0 if i == j else (adj[i][j] if adj[i][j] else FAR) for j in range(n)] for i in range(n)]
    via = [[-1] * n for _ in range(n)]
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if d[i][j] > d[i][k] + d[k][j]:
                    d[i][j] = d[i][k] + d[k][j]
                    via[i][j] = k
    for i in range(n):
        for j in range(n):
            if d[i][j] >= FAR:
                d[i][j], via[i][j] = FAR, FAR
    return d, via


def path_nodes(via: list[list[int]], i: int, j: int) -> list[int]:
    """Nodes of the reference's path from ``i`` to ``j`` ([] when unreachable)."""

    def inner(a: int, b: int) -> list[int]:
        k = via[a][b]
        return [] if k == -1 else [*inner(a, k), k, *inner(k, b)]

    if i == j:
        return [i]
    if via[i][j] == FAR:
        return []
    return [i, *inner(i, j), j]


def collate(
    graph: Graph, edge_types: Tensor, num_types: int, max_hops: int, spatial_pos_max: int
) -> dict[str, Tensor]:
    """The reference's per-graph preprocessing then its collator, for a batch.

    ``edge_types (E, F)`` categorical features in ``[0, num_types)``; each is shifted as
    ``convert_to_single_emb`` (``+ 1 + f · num_types``) then ``+ 1`` (``attn_edge_type``)
    then ``+ 1`` (the collator's ``pad_3d``): the embedding row of a hop's feature.
    """
    sizes = graph.sizes
    size = max(sizes)
    b_count, features = len(sizes), edge_types.shape[1]
    spatial_pos = torch.zeros(b_count, size, size, dtype=torch.long)
    edge_input = torch.zeros(b_count, size, size, max_hops, features, dtype=torch.long)
    attn_bias = torch.full((b_count, size + 1, size + 1), -math.inf, dtype=torch.float64)
    offset = 1 + torch.arange(features) * num_types
    for b, (sub, adj) in enumerate(zip(graph.graphs(), dense_listed(graph), strict=True)):
        n = sub.num_nodes
        keep = slice(None) if graph.batch is None else graph.batch[graph.edge_index[0]] == b
        types = edge_types[keep] + offset + 1  # attn_edge_type
        edge_type: dict[tuple[int, int], Tensor] = {}
        for e, (u, v) in enumerate(sub.edge_index.T.tolist()):
            edge_type[(u, v)] = types[e]
            if not graph.directed:
                edge_type[(v, u)] = types[e]
        dist, via = floyd_warshall(adj)
        for i in range(n):
            for j in range(n):
                spatial_pos[b, i, j] = int(dist[i][j]) + 1
                nodes = path_nodes(via, i, j)
                for hop in range(min(len(nodes) - 1, max_hops)):
                    edge_input[b, i, j, hop] = edge_type[(nodes[hop], nodes[hop + 1])] + 1
        bias = torch.zeros(n + 1, n + 1, dtype=torch.float64)
        bias[1:, 1:][spatial_pos[b, :n, :n] - 1 >= spatial_pos_max] = -math.inf  # raw spd
        attn_bias[b, : n + 1, : n + 1] = bias
        attn_bias[b, n + 1 :, : n + 1] = 0.0
    return {"spatial_pos": spatial_pos, "edge_input": edge_input, "attn_bias": attn_bias}


def graph_attn_bias(
    batch: dict[str, Tensor],
    spatial_table: Tensor,
    virtual: Tensor,
    edge_table: Tensor,
    hop_weights: Tensor,
    max_hops: int,
) -> Tensor:
    """``GraphAttnBias.forward`` (edge_type ``multi_hop``) in float64, ``(B, H, N+1, N+1)``.

    ``spatial_table (num_spatial, H)`` and ``edge_table (num_edges + 1, H)`` with row 0 zero
    (padding), ``virtual (H,)``, ``hop_weights (num_edge_dis, H, H)``.
    """
    attn_bias, spatial_pos = batch["attn_bias"], batch["spatial_pos"]
    edge_input = batch["edge_input"]
    heads = virtual.shape[0]
    out = attn_bias[:, None].repeat(1, heads, 1, 1)
    out[:, :, 1:, 1:] += spatial_table[spatial_pos].permute(0, 3, 1, 2)
    out[:, :, 1:, 0] += virtual[None, :, None]
    out[:, :, 0, :] += virtual[None, :, None]
    divisor = spatial_pos.clone()
    divisor[divisor == 0] = 1
    divisor = torch.where(divisor > 1, divisor - 1, divisor).clamp(0, max_hops)
    hops = edge_input[..., :max_hops, :]
    per_hop = edge_table[hops].mean(-2)  # (B, N, N, hops, H)
    summed = torch.einsum("bijnh,nhg->bijg", per_hop, hop_weights[: hops.shape[-2]])
    edge = (summed / divisor[..., None].double()).permute(0, 3, 1, 2)
    out[:, :, 1:, 1:] += edge
    return out + attn_bias[:, None]


def graph_node_feature(
    x: Tensor, in_degree: Tensor, out_degree: Tensor, in_table: Tensor, out_table: Tensor,
    token: Tensor,
) -> Tensor:  # fmt: skip
    """``GraphNodeFeature.forward`` on given node features: ``x + in[deg + 1] + out[deg +
    1]`` (the collator's ``+1``), the graph token first."""
    h = x + in_table[in_degree + 1] + out_table[out_degree + 1]
    return torch.cat([token.expand(x.shape[0], 1, -1), h], dim=1)

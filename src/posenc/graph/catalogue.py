"""The graph methods by name: what ``posenc list`` shows beside the sequence encodings.

The registry (:mod:`posenc.registry`) builds *sequence* encodings from a model's shape
(``build_encoding(name, ModelDims)``); a model's ``pos=`` and the lab's ``--encodings``
choose among those. Graph encodings are not built that way: their positions are a graph's
structure (Laplacian eigenvectors and random walks are functions of a
:class:`~posenc.graph.Graph`; SignNet and the per-eigenvector MLP read those; Graphormer's
bias reads shortest paths; L-STEP reads a stream of events), so they are listed here, in a
catalogue that names each method's paper and the callable whose keyword parameters
``posenc list`` shows, and never reach ``build_encoding``.

Example::

    >>> rw = graph_method("laplacian_rw")
    >>> rw.required(), rw.parameters()
    (('k',), {'pad': True})
    >>> graph_method("signnet").target.__name__
    'SignNet'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from posenc.graph.centrality import CentralityEncoding
from posenc.graph.encoders import EigenvectorMLP, RandomWalkEncoder, SignNet
from posenc.graph.graphormer import GraphormerBias
from posenc.graph.graphormer_edges import GraphormerEdgeEncoding
from posenc.graph.laplacian import laplacian_pe
from posenc.graph.lstep import LSTEPEncoding
from posenc.graph.random_walk import random_walk_pe, rrwp
from posenc.graph.shortest_path import shortest_paths

__all__ = ["FAMILY", "GraphMethod", "graph_method", "list_graph_methods"]

#: The family every catalogue entry is listed under.
FAMILY = "graph"

#: Arguments that are inputs or placement, not settings: the graph an encoding reads, and
#: the device, dtype and random generator of a module's parameters.
_NOT_SETTINGS = frozenset({"graph", "device", "dtype", "generator"})


@dataclass(frozen=True)
class GraphMethod:
    """One graph method as ``posenc list`` shows it.

    Attributes:
        name, paper, summary: the listing's columns.
        target: the function or class that computes it.
        preset: keyword arguments fixed by this name (a variant is a preset value, e.g.
            ``normalization="rw"``); they are not listed as parameters.
    """

    name: str
    paper: str
    summary: str
    target: Callable[..., Any]
    preset: Mapping[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return FAMILY

    def required(self) -> tuple[str, ...]:
        """The target's arguments a user must give (no default), e.g. ``k``, ``num_heads``."""
        return tuple(name for name, p in self._settings().items() if p.default is p.empty)

    def parameters(self) -> dict[str, Any]:
        """The target's other keyword parameters with their defaults."""
        return {name: p.default for name, p in self._settings().items() if p.default is not p.empty}

    def _settings(self) -> dict[str, inspect.Parameter]:
        """The target's arguments a user sets: not the graph input, device, dtype,
        generator, ``*args``/``**kwargs`` or the preset."""
        skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        return {
            name: p
            for name, p in inspect.signature(self.target).parameters.items()
            if p.kind not in skip and name not in _NOT_SETTINGS and name not in self.preset
        }


_DWIVEDI_2020 = "Dwivedi et al. 2020, https://arxiv.org/abs/2003.00982"
_YING_2021 = "Ying et al. 2021, https://arxiv.org/abs/2106.05234"
_EIGENVECTORS = "the k smallest non-trivial eigenvectors of"

_METHODS: tuple[GraphMethod, ...] = (
    GraphMethod(
        "laplacian_combinatorial",
        _DWIVEDI_2020,
        f"node encoding: {_EIGENVECTORS} L = D − A, with their eigenvalues",
        laplacian_pe,
        {"normalization": "combinatorial"},
    ),
    GraphMethod(
        "laplacian_sym",
        _DWIVEDI_2020,
        f"node encoding: {_EIGENVECTORS} L_sym = I − D^-1/2 A D^-1/2 (PyG's choice)",
        laplacian_pe,
        {"normalization": "sym"},
    ),
    GraphMethod(
        "laplacian_rw",
        _DWIVEDI_2020,
        f"node encoding: {_EIGENVECTORS} L_rw = I − D^-1 A (D^-1/2 u, unit norm)",
        laplacian_pe,
        {"normalization": "rw"},
    ),
    GraphMethod(
        "rwse",
        "Dwivedi et al. 2022, https://arxiv.org/abs/2110.07875",
        "node encoding: random-walk return probabilities (M^t)_ii, M = D^-1 A, t = 1..steps",
        random_walk_pe,
    ),
    GraphMethod(
        "rrwp",
        "Ma et al. 2023 (GRIT), https://arxiv.org/abs/2305.17589",
        "pair encoding: walk probabilities [I, M, …, M^(steps-1)]_ij of every pair",
        rrwp,
    ),
    GraphMethod(
        "signnet",
        "Lim et al. 2022, https://arxiv.org/abs/2202.13013",
        "learned node encoding from eigenvectors, invariant to their signs: ρ(φ(v) + φ(−v))",
        SignNet,
    ),
    GraphMethod(
        "eigenvector_mlp",
        "Kreuzer et al. 2021, https://arxiv.org/abs/2106.03893",
        "learned node encoding: an MLP per (eigenvector entry, eigenvalue), pooled; "
        "train with random sign flips",
        EigenvectorMLP,
    ),
    GraphMethod(
        "rwse_linear",
        "Rampášek et al. 2022 (GraphGPS), https://arxiv.org/abs/2205.12454",
        "learned node encoding: a linear map of the random-walk encodings",
        RandomWalkEncoder,
    ),
    GraphMethod(
        "shortest_paths",
        _YING_2021,
        "pair encoding: shortest-path distances and one path per pair (Graphormer's tie-break)",
        shortest_paths,
    ),
    GraphMethod(
        "graphormer_spatial",
        _YING_2021,
        "attention bias per head and shortest-path distance (edge_dim: plus the edge term)",
        GraphormerBias,
    ),
    GraphMethod(
        "graphormer_edges",
        _YING_2021,
        "attention bias per head: edge features averaged along a shortest path",
        GraphormerEdgeEncoding,
    ),
    GraphMethod(
        "graphormer_centrality",
        _YING_2021,
        "learned in- and out-degree embeddings added to nodes, and the graph token",
        CentralityEncoding,
    ),
    GraphMethod(
        "lstep",
        "Tieu et al. 2025, https://arxiv.org/abs/2506.08309",
        "temporal node encoding: DFT filter and weighted sum of its L most recent, "
        "updated from its links",
        LSTEPEncoding,
    ),
)
_BY_NAME = {method.name: method for method in _METHODS}


def list_graph_methods() -> tuple[GraphMethod, ...]:
    """Every graph method: eigenvectors, random walks, the learned encoders that read them,
    shortest paths and Graphormer, L-STEP."""
    return _METHODS


def graph_method(name: str) -> GraphMethod:
    """The method listed as ``name``; ``ValueError`` listing the names otherwise."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown graph method {name!r}; choose one of {', '.join(_BY_NAME)}")
    return _BY_NAME[name]

"""Property checks with measured numbers: what ``posenc check`` and ``posenc demo`` print.

Each check returns a :class:`CheckResult` holding the measured value and the bound it must
stay under (or, for "breaks" checks, above). They are the same properties the test suite
asserts, run at a size a person can read the numbers of.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from posenc.models import EncoderClassifier, ModelConfig

__all__ = ["CheckResult", "equivariance_gaps", "format_result", "graph_checks", "run_checks"]


@dataclass(frozen=True)
class CheckResult:
    """One measured property: ``value`` must be ``<= bound`` (or ``>= bound``)."""

    name: str
    value: float
    bound: float
    direction: Literal["<=", ">="]
    detail: str

    @property
    def passed(self) -> bool:
        return self.value <= self.bound if self.direction == "<=" else self.value >= self.bound

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def _encoder(name: str, kwargs: dict[str, Any] | None = None) -> EncoderClassifier:
    config = ModelConfig(
        vocab_size=64, dim=32, depth=2, num_heads=4, pos=name, pos_kwargs=kwargs or {}
    )
    model = EncoderClassifier(config, num_classes=2).double().eval()
    encoding = model.encoding
    if encoding is not None:  # trained encodings are not at their (often tiny) init
        for p in encoding.parameters():
            nn.init.normal_(p, std=0.5)
    return model


def equivariance_gaps(names: list[str] | None = None, seq: int = 16) -> dict[str, float]:
    """``max |f(Px) − P f(x)|`` of a bidirectional encoder per encoding (float64)."""
    from posenc.registry import list_encodings

    # a bidirectional encoder's property: causal-only methods (xPos, CoPE, the segment
    # methods) are refused by it
    names = names or [
        spec.name for spec in list_encodings() if not spec.needs_grid and not spec.causal_only
    ]
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 64, (2, seq), generator=generator)
    perm = torch.randperm(seq, generator=generator)
    gaps = {}
    for name in names:
        torch.manual_seed(0)
        model = _encoder(name)
        with torch.no_grad():
            gap = (model.encode(tokens[:, perm]) - model.encode(tokens)[:, perm]).abs().max()
        gaps[name] = float(gap)
    return gaps


def _rope_relative() -> CheckResult:
    from posenc.rotary import RotaryEmbedding

    rope = RotaryEmbedding(64)
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, 256, 64, generator=generator, dtype=torch.float64)
    k = torch.randn(1, 1, 256, 64, generator=generator, dtype=torch.float64)
    m = torch.randint(0, 10_000, (256,), generator=generator)
    n = torch.randint(0, 10_000, (256,), generator=generator)
    shift = 123_457
    q0, k0 = rope(q, k, m, n)
    q1, k1 = rope(q, k, m + shift, n + shift)
    gap = float(((q0 * k0).sum(-1) - (q1 * k1).sum(-1)).abs().max())
    return CheckResult(
        "rope: score(m+s, n+s) = score(m, n)",
        gap,
        1e-9,
        "<=",
        "256 random (m, n) pairs, s = 123457, float64",
    )


def _rope_norm() -> CheckResult:
    from posenc.rotary import RotaryEmbedding

    rope = RotaryEmbedding(64, layout="interleaved")
    x = torch.randn(1, 2, 512, 64, dtype=torch.float64)
    rotated = rope.rotate(x, torch.arange(512) * 997)
    gap = float((rotated.norm(dim=-1) - x.norm(dim=-1)).abs().max())
    return CheckResult("rope: rotation keeps norms", gap, 1e-10, "<=", "float64, 512 positions")


def _rope_precision() -> CheckResult:
    from posenc.rotary import rope_cos_sin, rope_inv_freq

    positions = torch.arange(2**20 - 4096, 2**20 + 1)
    inv_freq = rope_inv_freq(128, 10000.0)
    cos, sin = rope_cos_sin(positions, inv_freq, dtype=torch.float32)
    angles = positions.double()[:, None] * inv_freq.double()
    ref = torch.cat([angles, angles], dim=-1)
    gap = max(
        float((cos.double() - ref.cos()).abs().max()), float((sin.double() - ref.sin()).abs().max())
    )
    return CheckResult(
        "rope: cos/sin exact at position 2^20",
        gap,
        1e-6,
        "<=",
        "float32 tables vs float64 reference, head_dim 128",
    )


def _sinusoidal_shift() -> CheckResult:
    from posenc.additive import sinusoidal_encoding

    dim, k = 64, 37
    p = torch.arange(0, 5000, 7)
    pe = sinusoidal_encoding(p, dim, dtype=torch.float64)
    shifted = sinusoidal_encoding(p + k, dim, dtype=torch.float64)
    omega = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    sin_part, cos_part = pe[:, 0::2], pe[:, 1::2]
    # M_k acts on each (sin, cos) pair as the rotation by k·ω_i; it depends on k only.
    predicted = torch.stack([sin_part * c + cos_part * s, cos_part * c - sin_part * s], -1)
    gap = float((predicted.flatten(-2) - shifted).abs().max())
    return CheckResult(
        "sinusoidal: PE(p+k) = M_k PE(p)", gap, 1e-9, "<=", "d = 64, k = 37, p < 5000, float64"
    )


def _alibi_row_constant() -> CheckResult:
    from posenc.attention import causal_mask
    from posenc.bias import AlibiBias, alibi_slopes

    heads, length = 12, 64
    logits = torch.randn(heads, length, length, dtype=torch.float64)
    ours = (
        AlibiBias(heads, dtype=torch.float64)
        .bias(torch.arange(length), torch.arange(length))
        .double()
    )
    slopes = alibi_slopes(heads).double()
    reference = slopes[:, None, None] * torch.arange(length, dtype=torch.float64)  # m·j
    mask = causal_mask(length, length)
    a = (logits + ours).masked_fill(~mask, float("-inf")).softmax(-1)
    b = (logits + reference).masked_fill(~mask, float("-inf")).softmax(-1)
    gap = float((a - b).abs().max())
    return CheckResult(
        "alibi: causal softmax equals reference row-constant m·j",
        gap,
        1e-12,
        "<=",
        "12 heads (not a power of two), 64 tokens",
    )


def _kv_cache(name: str) -> CheckResult:
    from posenc.models import DecoderLM, ModelConfig
    from posenc.segments import ILLUSTRATIVE

    torch.manual_seed(0)
    kwargs = ILLUSTRATIVE.get(name, {})  # a segment method: windows the 24 tokens cross
    model = DecoderLM(
        ModelConfig(
            vocab_size=64,
            dim=32,
            depth=2,
            num_heads=4,
            pos=name,
            pos_kwargs=dict(kwargs),
            max_seq_len=64,
        )
    ).eval()
    tokens = torch.randint(0, 64, (2, 24))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(24)]
    gap = float((torch.cat(steps, 1) - full).abs().max())
    return CheckResult(
        f"kv cache: {name} decode = full forward",
        gap,
        1e-5,
        "<=",
        "24 tokens one at a time, float32",
    )


def graph_checks() -> list[CheckResult]:
    """The graph rows of :func:`run_checks`: graph encodings permute with the nodes
    (eigenvectors up to sign), SignNet ignores eigenvector signs, and what breaks either
    (:mod:`posenc.checks.graph` measures)."""
    from posenc.checks.graph import (
        check_graph,
        check_tree,
        graphormer_pairs,
        node_permutation_gap,
        pair_permutation_gap,
        sign_flip_gap,
    )
    from posenc.graph import (
        EigenvectorMLP,
        Graph,
        Normalization,
        SignNet,
        hop_distances,
        laplacian_pe,
        random_walk_pe,
        rrwp,
        shortest_paths,
    )

    graph, tree = check_graph(), check_tree()
    generator = torch.Generator().manual_seed(0)
    perm = torch.randperm(graph.num_nodes, generator=generator)
    tree_perm = torch.randperm(tree.num_nodes, generator=generator)
    where = "24-node cycle + 12 random chords, relabelled"

    def laplacian_gap(normalization: Normalization) -> float:
        def encode(g: Graph) -> Tensor:
            return laplacian_pe(g, 8, normalization).vectors

        return node_permutation_gap(encode, graph, perm, up_to_sign=True)

    def distances(g: Graph) -> Tensor:  # BFS hop counts and Floyd–Warshall's, side by side
        return torch.stack([hop_distances(g)[0], shortest_paths(g).distance[0]], dim=-1)

    results = [
        CheckResult(
            f"graph: laplacian_{normalization}(P·G) = ±P·PE(G)",
            laplacian_gap(normalization),
            1e-10,
            "<=",
            f"k = 8, one sign per column; {where}",
        )
        for normalization in ("combinatorial", "sym", "rw")
    ]
    pe, adjacency = laplacian_pe(graph, 8), graph.adjacency()[0]
    torch.manual_seed(0)
    signnet, mlp = SignNet(8, 16).double(), EigenvectorMLP(16).double()
    flips = "8 random sign flips per column, k = 8, float64"
    with torch.no_grad():
        signless = sign_flip_gap(lambda x: signnet(x, adjacency), pe, generator=generator)
        signed = sign_flip_gap(mlp, pe, generator=generator)
    walk_gaps = (
        node_permutation_gap(lambda g: random_walk_pe(g, 8), graph, perm),
        pair_permutation_gap(lambda g: rrwp(g, 8).pairs[0], graph, perm),
    )
    features = torch.randn(graph.edge_index.shape[1], 3, generator=generator, dtype=torch.float64)
    tree_features = torch.randn(tree.num_nodes - 1, 3, generator=generator, dtype=torch.float64)
    graphormer = "4 heads, N(0, 1) tables"
    return [
        *results,
        CheckResult("graph: signnet(±v) = signnet(v)", signless, 0.0, "<=", f"GIN φ; {flips}"),
        CheckResult("graph: sign flips change eigenvector_mlp", signed, 1e-3, ">=", flips),
        CheckResult("graph: rwse(P·G) = P·rwse(G)", walk_gaps[0], 1e-12, "<=", f"8 steps; {where}"),
        CheckResult(
            "graph: rrwp(P·G) = P·rrwp(G)·Pᵀ", walk_gaps[1], 1e-12, "<=", f"8 steps; {where}"
        ),
        CheckResult(
            "graph: shortest_paths(P·G) = P·SPD(G)·Pᵀ",
            pair_permutation_gap(distances, graph, perm),
            0.0,
            "<=",
            f"BFS and Floyd–Warshall; {where}",
        ),
        CheckResult(
            "graph: graphormer_spatial(P·G) = P·B(G)·Pᵀ",
            pair_permutation_gap(graphormer_pairs(), graph, perm),
            0.0,
            "<=",
            f"{graphormer}; {where}",
        ),
        CheckResult(
            "graph: graphormer + edges, tree: P·B(G)·Pᵀ",
            pair_permutation_gap(graphormer_pairs(tree_features), tree, tree_perm),
            1e-12,
            "<=",
            f"{graphormer}, edge features N(0, 1); a 16-node tree: one path per pair",
        ),
        CheckResult(
            "graph: node order read by graphormer_edges",
            pair_permutation_gap(graphormer_pairs(features), graph, perm),
            1e-3,
            ">=",
            f"tied shortest paths: the one taken follows the node ids; {where}",
        ),
    ]


def run_checks(progress: Callable[[str], None] | None = None) -> list[CheckResult]:
    """Run every property check and return the measured results.

    ``progress`` receives each result's line (:func:`format_result`) as soon as it is
    measured, so that ``posenc check`` shows its rows while the run goes on.

    The checks run on one torch thread (torch's thread count is restored afterwards): their
    models are tiny, and more threads only contend for the cores, which on a loaded machine
    costs several times the CPU time of the work itself.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_checks(progress)
    finally:
        torch.set_num_threads(before)


def _run_checks(progress: Callable[[str], None] | None) -> list[CheckResult]:
    from posenc.registry import list_encodings

    results: list[CheckResult] = []

    def add(result: CheckResult) -> None:
        results.append(result)
        if progress is not None:
            progress(format_result(result))

    checks: list[Callable[[], CheckResult]] = [
        _rope_relative,
        _rope_norm,
        _rope_precision,
        _sinusoidal_shift,
        _alibi_row_constant,
    ]
    for check in checks:
        add(check())
    for result in graph_checks():
        add(result)
    names = [spec.name for spec in list_encodings() if not spec.needs_grid]  # sequence models
    for name in names:
        add(_kv_cache(name))
    # a bidirectional encoder's property: causal-only methods are refused by it
    for name in [
        spec.name for spec in list_encodings() if spec.name in names and not spec.causal_only
    ]:
        gap = equivariance_gaps([name])[name]  # one encoding at a time: same seeds as all at once
        if name == "nope":
            add(
                CheckResult(
                    "equivariance: nope, f(Px) = P f(x)",
                    gap,
                    1e-10,
                    "<=",
                    "bidirectional encoder, float64",
                )
            )
        else:
            add(
                CheckResult(
                    f"equivariance broken by {name}",
                    gap,
                    1e-3,
                    ">=",
                    "max |f(Px) − P f(x)|, float64",
                )
            )
    return results


def format_result(result: CheckResult) -> str:
    mark = "ok  " if result.passed else "FAIL"
    value = f"{result.value:.3e}" if math.isfinite(result.value) else str(result.value)
    return f"{mark} {result.name:<52} {value:>10} {result.direction} {result.bound:.0e}"

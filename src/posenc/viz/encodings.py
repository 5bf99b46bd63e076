"""Figures of what each encoding does; every function returns a matplotlib ``Figure``.

matplotlib is an optional dependency (the ``plot`` extra); importing this module
without it raises an ``ImportError`` that says so.

The RoPE and context-extension figures (``posenc plot wavelengths|rope-decay|rope-scaling``,
see :data:`FIGURES`) live in :mod:`posenc.viz.rope`, the patch-grid ones in
:mod:`posenc.viz.grids`, the graph ones in :mod:`posenc.viz.graph`; all are re-exported here.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc.encoding.base import PositionalEncoding
from posenc.encoding.protocols import (
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    RotaryEncoding,
    TokenPhaseEncoding,
    TokenTransformEncoding,
)
from posenc.registry import ModelDims, build_encoding, encoding_spec
from posenc.token_state.path import path_logits_reference
from posenc.viz.base import encoding_color, new_figure
from posenc.viz.graph import (
    graph_method_figure,
    plot_graph_laplacian,
    plot_graph_spd_bias,
    plot_lstep,
)
from posenc.viz.grids import plot_mrope_ids, plot_patch_similarity, plot_rotary_scores
from posenc.viz.rope import (
    default_scalings,
    plot_hope_decay,
    plot_rope_decay,
    plot_rope_decay_scalings,
    plot_rope_scaling_scores,
    plot_wavelengths,
    plot_xpos,
    rope_decay_curves,
    rope_wavelengths,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


__all__ = [
    "FIGURES",
    "default_scalings",
    "plot_bias",
    "plot_encoding",
    "plot_equivariance",
    "plot_figure",
    "plot_hope_decay",
    "plot_rope_decay",
    "plot_rope_decay_scalings",
    "plot_rope_scaling_scores",
    "plot_sinusoidal",
    "plot_wavelengths",
    "plot_xpos",
    "rope_decay_curves",
    "rope_wavelengths",
]


def plot_sinusoidal(dim: int = 64, length: int = 128, base: float = 10000.0) -> Figure:
    """Heatmap of the sinusoidal encoding: positions down, channels across."""
    from posenc.additive import sinusoidal_encoding

    table = sinusoidal_encoding(torch.arange(length), dim, base=base)
    fig = new_figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set(xlabel="channel", ylabel="position", title=f"sinusoidal PE (d={dim}, base={base:g})")
    fig.colorbar(image, ax=ax, label="encoding value")
    return fig


def _is_causal(encoding: BiasEncoding) -> bool:
    """Whether ``encoding``'s bias is defined for keys at or before the query only: ALiBi's
    causal form ``m (j − i)`` (its values above the diagonal are never used, and grow
    positive) and T5's unidirectional buckets."""
    return (
        getattr(encoding, "mode", None) == "causal"
        or getattr(encoding, "bidirectional", True) is False
    )


def plot_bias(
    encoding: PositionalEncoding,
    length: int = 64,
    heads: int | None = None,
    *,
    causal: bool | None = None,
) -> Figure:
    """Heatmaps of a bias encoding's ``bias(i, j)``, one per head, four to a row.

    Args:
        heads: how many heads, from head 0; ``None``: all of them. The title says which.
        causal: blank the pairs above the diagonal (key after query), which causal
            attention never reads; ``None``: when the encoding is causal (ALiBi's causal
            mode, T5 unidirectional).
    """
    if not isinstance(encoding, BiasEncoding):
        raise ValueError(f"encoding must be a BiasEncoding, got {type(encoding).__name__}")
    if heads is not None and heads < 1:
        raise ValueError(f"heads must be at least 1 or None, got {heads}")
    positions = torch.arange(length)
    with torch.no_grad():
        bias = encoding.bias(positions, positions).float()
    causal = _is_causal(encoding) if causal is None else causal
    if causal:  # NaN is drawn blank
        above = torch.ones(length, length, dtype=torch.bool).triu(1)
        bias = bias.masked_fill(above, float("nan"))
    total = bias.shape[0]
    shown = total if heads is None else min(heads, total)
    columns = min(shown, 4)
    rows = math.ceil(shown / columns)
    fig = new_figure(figsize=(3.3 * columns, 3.1 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    for head, ax in enumerate(axes[:shown]):
        image = ax.imshow(bias[head].numpy(), cmap="viridis")
        ax.set(title=f"head {head}", xlabel="key j", ylabel="query i")
        fig.colorbar(image, ax=ax, shrink=0.8, label="bias")
    for ax in axes[shown:]:
        ax.set_axis_off()
    which = f"all {total} heads" if shown == total else f"heads 0–{shown - 1} of {total}"
    where = ", key after query blank (causal)" if causal else ""
    fig.suptitle(f"{type(encoding).__name__}: bias(i, j), {which}{where}")
    return fig


def plot_equivariance(gaps: Mapping[str, float]) -> Figure:
    """Horizontal bars of ``max |f(Px) − P f(x)|`` per encoding (log scale), each bar in the
    encoding's colour; names on the y axis, so none overlaps another."""
    names = list(gaps)
    fig = new_figure(figsize=(7, 1.2 + 0.28 * max(len(names), 1)), layout="constrained")
    ax = fig.add_subplot()
    values = [max(gaps[n], 1e-18) for n in names]
    ax.barh(names, values, color=[encoding_color(n) for n in names])
    ax.invert_yaxis()  # the first encoding on top
    ax.set(xscale="log", xlabel="max |f(Px) − P f(x)|")
    ax.set_title("permutation equivariance broken by each encoding\n(bidirectional encoder)")
    return fig


def _plot_token_embedding(name: str, encoding: Any, length: int) -> Figure:
    """One token's embedding at every position (complex-order: a rotation per position)."""
    positions = torch.arange(length)
    with torch.no_grad():
        table = encoding.embed_tokens(torch.full((1, length), 3), positions)[0].float()
    fig = new_figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(table.numpy(), aspect="auto", cmap="RdBu_r")
    ax.set(xlabel="channel ([Re | Im])", ylabel="position", title=f"{name}: token 3 (init)")
    fig.colorbar(image, ax=ax, label="embedding value")
    return fig


def _plot_scores_reader(name: str, encoding: Any, dims: ModelDims) -> Figure:
    """A scores reader on random causal scores, head 0: CoPE's contextual positions (what
    it counts), otherwise what it adds to the scores."""
    q, k, positions = _random_qk(dims)
    length = positions.shape[0]
    allowed = torch.ones(length, length, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-1, -2)) * dims.resolved_head_dim**-0.5
    with torch.no_grad():
        if callable(getattr(encoding, "positions", None)):
            shown, what = encoding.positions(scores, allowed), "contextual position p(i, j)"
        else:
            out = encoding.transform_scores(
                scores, q=q, k=k, q_pos=positions, k_pos=positions, allowed=allowed
            )
            shown, what = out - scores, "added to the scores"
    masked = shown[0, 0].masked_fill(~allowed, float("nan"))  # causal: key after query blank
    return _pair_heatmap(masked, f"{name}: {what}", what)


def _plot_token_bias(name: str, encoding: Any, dims: ModelDims, length: int = 48) -> Figure:
    """A token-state bias (FoX's ``c_i − c_j``) for seeded random hidden states, head 0, with
    gate biases drawn in [−1, 3] (a trained model's range of forgetting, not the init's
    near-1 gates); keys after the query are blank (causal)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, length, dims.dim, generator=generator)
    shown = copy.deepcopy(encoding)
    with torch.no_grad():
        shown.bias.copy_(torch.rand(shown.bias.shape, generator=generator) * 4 - 1)
        c = shown.token_state(x, None, None)
        bias = shown.state_bias(c[..., :, None], c[..., None, :])[0, 0]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    bias = bias.masked_fill(~causal, float("nan"))
    return _pair_heatmap(bias, f"{name}: c_i − c_j, random states", "bias")


def _plot_token_transforms(
    name: str, encoding: TokenTransformEncoding, dims: ModelDims, length: int = 32
) -> Figure:
    """PaTH's logits ``q_iᵀ H_i ⋯ H_{j+1} k_j`` of one content (``q = k`` everywhere, so only
    the transforms differ) for seeded random hidden states, head 0; keys after the query
    are blank (causal)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, length, dims.dim, generator=generator)
    content = torch.randn(dims.resolved_head_dim, generator=generator)
    with torch.no_grad():
        inputs = encoding.transform_inputs(x, None)
        window = torch.nn.functional.pad(inputs, (0, 0, encoding.history, 0))
        w, beta = encoding.token_transforms(window, None, None)
        qk = content.expand(length, -1)
        logits = path_logits_reference(qk, qk, w[0, 0], beta[0, 0])
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    logits = logits.masked_fill(~causal, float("nan")) * dims.resolved_head_dim**-0.5
    return _pair_heatmap(logits, f"{name}: q·H_i⋯H_(j+1)·k", "logit")


def _plot_token_phases(
    name: str, encoding: TokenPhaseEncoding, dims: ModelDims, length: int = 32
) -> Figure:
    """CARoPE's logits ``q · R(φ_i − φ_j) k`` of one content (``q = k`` everywhere, so only
    the phases differ) for seeded random hidden states, head 0; keys after the query are
    blank (causal)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, length, dims.dim, generator=generator)
    content = torch.randn(dims.resolved_head_dim, generator=generator)
    qk = content.expand(1, encoding.num_heads, length, -1)
    with torch.no_grad():
        phases = encoding.token_phases(x, None, None, None)
        q, k = encoding.rotate_by_phases(qk, qk, phases)
        logits = (q @ k.transpose(-1, -2))[0, 0] * dims.resolved_head_dim**-0.5
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return _pair_heatmap(
        logits.masked_fill(~causal, float("nan")), f"{name}: q·R(φ_i − φ_j)·k", "logit"
    )


def _random_qk(dims: ModelDims, length: int = 48) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded random q, k ``(1, heads, length, head_dim)`` and positions ``arange(length)``:
    the inputs of the figures of terms that read q or k."""
    generator = torch.Generator().manual_seed(0)
    shape = (1, dims.num_heads, length, dims.resolved_head_dim)
    q = torch.randn(shape, generator=generator)
    k = torch.randn(shape, generator=generator)
    return q, k, torch.arange(length)


def _pair_heatmap(values: Tensor, title: str, label: str) -> Figure:
    """One head's ``(query, key)`` matrix as a heatmap; ``label`` names its colour bar."""
    fig = new_figure(figsize=(4.5, 4), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(values.float().numpy(), cmap="viridis")
    ax.set(xlabel="key j", ylabel="query i", title=f"{title}, head 0")
    fig.colorbar(image, ax=ax, label=label)
    return fig


def plot_encoding(name: str, **kwargs: Any) -> Figure:
    """The figure that shows encoding ``name`` (what ``posenc plot NAME`` writes).

    Additive: the encoding as a heatmap; rotary: score and decay bound against distance;
    bias: bias matrices per head; contextual: the positional logit term for random q, k;
    scores readers: CoPE's contextual positions, DAPE's change to random causal scores; a
    token embedding (complex-order): one token at every position; a segment method: the
    segment of each pair and the distance it is rotated by (at illustrative sizes). A graph
    method of ``posenc list`` draws its figure (:data:`posenc.viz.graph.METHOD_FIGURES`).
    """
    graph_figure = graph_method_figure(name)  # None: not a graph method
    if graph_figure is not None:
        figure, preset = graph_figure
        return plot_figure(figure, **{**preset, **kwargs})
    spec = encoding_spec(name)
    grid = (8, 16) if spec.needs_grid else None  # 128 patches, numbered row by row
    dims = ModelDims(dim=64, num_heads=4, max_seq_len=128, grid=grid, vocab_size=256)
    if name == "sinusoidal":
        return plot_sinusoidal(**kwargs)
    if name == "rope":
        return plot_rope_decay(**kwargs)
    if name == "xpos":
        return plot_xpos(**kwargs)
    if name == "hope":  # RoPE's score against distance beside HoPE's, trained at L
        return plot_hope_decay(**kwargs)
    if spec.family == "segments":  # where each pair lies (viz_segments)
        from posenc.segments import ILLUSTRATIVE
        from posenc.viz.segments import plot_segments

        settings = {**ILLUSTRATIVE.get(name, {}), **kwargs}
        return plot_segments(build_encoding(name, dims, settings), title=f"{name} {settings}")
    encoding = build_encoding(name, dims, kwargs)
    bind = getattr(encoding, "bind_projections", None)
    if callable(bind):  # DeBERTa's shared keys: a layer's (random) projections
        width = dims.num_heads * dims.resolved_head_dim
        bind(*(torch.nn.Linear(dims.dim, width, bias=False) for _ in range(2)))
    if callable(getattr(encoding, "embed_tokens", None)):
        return _plot_token_embedding(name, encoding, dims.max_seq_len)
    if callable(getattr(encoding, "map_scores", None)) or callable(
        getattr(encoding, "sink_logits", None)
    ):  # soft-capping, learned sinks: their change to the softmax, not the inner encoding
        from posenc.viz.softmax import plot_softmax_wrapper

        return plot_softmax_wrapper(name, encoding)
    if callable(getattr(encoding, "transform_scores", None)):
        return _plot_scores_reader(name, encoding, dims)
    if callable(getattr(encoding, "token_state", None)):  # FoX: gates from hidden states
        return _plot_token_bias(name, encoding, dims)
    if isinstance(encoding, TokenTransformEncoding):  # PaTH: transforms from hidden states
        return _plot_token_transforms(name, encoding, dims)
    if isinstance(encoding, TokenPhaseEncoding):  # CARoPE: phases from hidden states
        return _plot_token_phases(name, encoding, dims)
    if callable(getattr(encoding, "attention_weights", None)):  # stick-breaking
        q, k, positions = _random_qk(dims)
        length = positions.shape[0]
        earlier = torch.ones(length, length, dtype=torch.bool).tril(-1)  # j < i
        with torch.no_grad():
            scores = q @ k.transpose(-1, -2) * dims.resolved_head_dim**-0.5
            weigh: Any = encoding.attention_weights  # the attention-weights hook
            weights = weigh(scores, earlier)[0, 0]
        return _pair_heatmap(weights, f"{name}: A_ij, random q, k", "weight")
    if encoding.num_axes == 3:  # M-RoPE: (time, row, column) ids of a text, image, video run
        return plot_mrope_ids()
    if grid is not None or encoding.num_axes > 1:  # positions on a grid: viz_grids' figures
        height, width = grid or (8, 16)
        if isinstance(encoding, AdditiveEncoding):
            return plot_patch_similarity(encoding, height, width, title=name)
        if isinstance(encoding, RotaryEncoding):
            return plot_rotary_scores(encoding, height, width, title=name)
    if isinstance(encoding, BiasEncoding):
        return plot_bias(encoding)
    if isinstance(encoding, AdditiveEncoding):
        with torch.no_grad():
            table = encoding(torch.arange(dims.max_seq_len)).float()
        fig = new_figure(figsize=(7, 4.5), layout="constrained")
        ax = fig.add_subplot()
        image = ax.imshow(table.numpy(), aspect="auto", cmap="RdBu_r")
        ax.set(xlabel="channel", ylabel="position", title=f"{name} (untrained init)")
        fig.colorbar(image, ax=ax, label="encoding value")
        return fig
    if isinstance(encoding, ContextualEncoding):
        q, k, positions = _random_qk(dims)
        with torch.no_grad():
            term = encoding.logit_term(q, k, positions, positions, dims.resolved_head_dim**-0.5)
        return _pair_heatmap(term[0, 0], f"{name}: positional logit term", "logit term")
    if isinstance(encoding, RotaryEncoding):  # PoPE: scores of one q against every key
        q, k, positions = _random_qk(dims)
        k = q[:, :, :1].expand_as(k)  # the same content everywhere: only positions differ
        with torch.no_grad():
            q_rot, k_rot = encoding(q, k, positions, positions)
            scores = q_rot @ k_rot.transpose(-1, -2) * dims.resolved_head_dim**-0.5
        return _pair_heatmap(scores[0, 0], f"{name}: q_i · k_j, one content", "logit")
    raise ValueError(f"there is nothing to plot for {name!r} (family {spec.family!r})")


#: Figures that are not one encoding: what ``posenc plot NAME`` writes for these names.
FIGURES: dict[str, Callable[..., Figure]] = {
    "wavelengths": plot_wavelengths,
    "rope-decay": plot_rope_decay_scalings,
    "rope-scaling": plot_rope_scaling_scores,
    "mrope-ids": plot_mrope_ids,
    "graph-laplacian": plot_graph_laplacian,
    "graph-spd-bias": plot_graph_spd_bias,
    "lstep": plot_lstep,
}


def plot_figure(name: str, **kwargs: Any) -> Figure:
    """The figure registered as ``name`` in :data:`FIGURES`, drawn with ``kwargs``.

    Unknown names or keyword arguments raise ``ValueError`` naming them.
    """
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; choose one of {', '.join(FIGURES)}")
    function = FIGURES[name]
    allowed = set(inspect.signature(function).parameters)
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(
            f"unknown argument(s) {', '.join(unknown)} for figure {name!r}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    return function(**kwargs)

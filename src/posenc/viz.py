"""Figures of what each encoding does; every function returns a matplotlib ``Figure``.

matplotlib is an optional dependency (``pip install posenc[plot]``); importing this module
without it raises an ``ImportError`` that says so.

Context-extension figures (``posenc plot wavelengths|rope-decay|rope-scaling``, see
:data:`FIGURES`) take scalings from :mod:`posenc.rotary.scaling` as a mapping
``label -> Scaling`` (or posenc's dict form ``{"type": "yarn", ...}``); ``None`` draws
:func:`default_scalings`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc.base import (
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    PositionalEncoding,
    RotaryEncoding,
)
from posenc.registry import ModelDims, build_encoding, encoding_spec
from posenc.viz_base import encoding_color, log_ticks, new_figure, set_log_ticks
from posenc.viz_graph import (
    graph_method_figure,
    plot_graph_laplacian,
    plot_graph_spd_bias,
    plot_lstep,
)
from posenc.viz_grids import plot_mrope_ids, plot_patch_similarity, plot_rotary_scores

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from posenc.rotary.scaling import Scaling

__all__ = [
    "FIGURES",
    "default_scalings",
    "plot_bias",
    "plot_encoding",
    "plot_equivariance",
    "plot_figure",
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


def default_scalings(
    head_dim: int = 128, original_length: int = 4096, factor: float = 8.0
) -> dict[str, Scaling]:
    """One of each context-extension scaling, extending ``original_length`` by ``factor``.

    Linear (PI), NTK-aware, dynamic NTK fixed at ``factor · original_length`` (vLLM mode),
    YaRN (default betas), Llama-3 (low/high frequency factors 1 and 4), LongRoPE with
    **made-up** factors (short: all 1; long: ``1 + (s − 1)(i/(n − 1))²``, rising from 1 on
    the fastest pair to ``s`` on the slowest; real checkpoints ship searched factors) and
    Gemma-style proportional with ``partial_rotary_factor = 0.25`` (the other pairs do not
    rotate).
    """
    from posenc.rotary.scaling import (
        DynamicNTK,
        Linear,
        Llama3,
        LongRoPE,
        NTKAware,
        Proportional,
        YaRN,
    )

    pairs = head_dim // 2
    target = round(factor * original_length)
    long_factor = tuple(1.0 + (factor - 1.0) * (i / max(pairs - 1, 1)) ** 2 for i in range(pairs))
    return {
        "linear (PI)": Linear(factor),
        "NTK-aware": NTKAware(factor),
        f"dynamic NTK (fixed at {target})": DynamicNTK(
            factor, original_length, mode="fixed", target_length=target
        ),
        "YaRN": YaRN(factor, original_length),
        "Llama-3 (lf 1, hf 4)": Llama3(factor, 1.0, 4.0, original_length),
        "LongRoPE (made-up factors)": LongRoPE(
            (1.0,) * pairs, long_factor, original_length, factor=factor
        ),
        "proportional (p = 0.25, rest θ = 0)": Proportional(0.25, factor),
    }


def _resolve_scalings(
    scalings: Mapping[str, Scaling | Mapping[str, Any]] | None,
    head_dim: int,
    original_length: int,
    factor: float,
) -> dict[str, Scaling]:
    if scalings is None:
        return default_scalings(head_dim, original_length, factor)
    if not isinstance(scalings, Mapping):
        raise ValueError(f"scalings must be a mapping label -> Scaling, got {scalings!r}")
    from posenc.rotary.scaling import Scaling, scaling_from_dict

    resolved = {}
    for label, value in scalings.items():
        scaling = scaling_from_dict(value) if isinstance(value, Mapping) else value
        if not isinstance(scaling, Scaling):
            raise ValueError(f"scalings[{label!r}] must be a Scaling or its dict, got {value!r}")
        resolved[str(label)] = scaling
    return resolved


def rope_decay_curves(
    head_dim: int = 128,
    base: float = 10000.0,
    max_distance: int = 2048,
    *,
    scaling: Scaling | None = None,
    seq_len: int | None = None,
) -> dict[str, torch.Tensor]:
    """RoPE score against relative distance r = m − n, in float64, optionally scaled.

    Returns ``distance``, ``score`` (q = k = all-ones, so
    score(r) = 2 A² Σ_i cos(r θ_i) / head_dim, with ``θ`` and the attention factor ``A`` of
    ``scaling``, ``A = 1`` without) and ``bound`` (RoFormer §3.4.3: the long-term decay bound
    (1/(d/2)) Σ_j |S_j| with S_j = Σ_{i<j} e^{i r θ_i}, normalised by its value at r = 0, so
    ``A`` cancels). ``seq_len`` is passed to length-dependent scalings (dynamic NTK in "hf"
    mode, LongRoPE); ``None`` means ``max_distance + 1``.
    """
    from posenc.rotary import rope_inv_freq

    if scaling is None:
        inv_freq, factor = rope_inv_freq(head_dim, base).double(), 1.0
    else:
        seq_len = max_distance + 1 if seq_len is None else seq_len
        inv_freq = scaling.inv_freq(head_dim, base, seq_len=seq_len).double().cpu()
        factor = float(scaling.attention_factor)
    distance = torch.arange(max_distance + 1, dtype=torch.float64)
    angles = distance[:, None] * inv_freq
    score = 2 * factor**2 * torch.cos(angles).sum(-1) / head_dim
    partial = torch.cumsum(torch.polar(torch.ones_like(angles), angles), dim=-1)
    bound = partial.abs().mean(-1)
    return {"distance": distance, "score": score, "bound": bound / bound[0]}


def plot_rope_decay(
    head_dim: int = 128,
    bases: Sequence[float] = (10000.0, 500000.0),
    max_distance: int = 2048,
    scalings: Mapping[str, Scaling | Mapping[str, Any]] | None = None,
) -> Figure:
    """RoPE's long-term decay: score and RoFormer's bound against relative distance.

    One curve per base; with ``scalings`` (label -> scaling), one more curve per scaling,
    applied at ``bases[0]`` with ``seq_len = max_distance + 1``.
    """
    fig = new_figure(figsize=(12, 4.2) if scalings else (9, 3.8), layout="constrained")
    score_ax, bound_ax = fig.subplots(1, 2)
    curves = [(f"base {b:g}", rope_decay_curves(head_dim, b, max_distance)) for b in bases]
    if scalings:
        for label, scaling in _resolve_scalings(scalings, head_dim, 1, 1.0).items():
            data = rope_decay_curves(head_dim, bases[0], max_distance, scaling=scaling)
            curves.append((label, data))
    for label, data in curves:
        score_ax.plot(data["distance"], data["score"], lw=0.8, label=label)
        bound_ax.plot(data["distance"], data["bound"], lw=1.0, label=label)
    score_ax.set(xlabel="relative distance m − n", ylabel="q·k / d  (q = k = 1)")
    score_ax.set_title("RoPE score against distance")
    bound_ax.set(xlabel="relative distance m − n", ylabel="bound / bound(0)")
    set_log_ticks(bound_ax, "x", log_ticks(1, max_distance))  # 1, 10, 100 (not 10⁰, 10¹)
    bound_ax.set_title("RoFormer long-term decay bound")
    if scalings:  # one legend beside both panels
        fig.legend(*bound_ax.get_legend_handles_labels(), loc="outside right upper")
    else:
        for ax in (score_ax, bound_ax):
            ax.legend(fontsize="small")
    return fig


def plot_rope_decay_scalings(
    head_dim: int = 128,
    base: float = 10000.0,
    original_length: int = 4096,
    factor: float = 8.0,
    scalings: Mapping[str, Scaling | Mapping[str, Any]] | None = None,
) -> Figure:
    """:func:`plot_rope_decay` up to ``factor · original_length`` under every scaling."""
    resolved = _resolve_scalings(scalings, head_dim, original_length, factor)
    max_distance = round(factor * original_length)
    return plot_rope_decay(head_dim, (base,), max_distance, resolved)


def rope_wavelengths(
    head_dim: int = 128,
    base: float = 10000.0,
    original_length: int = 4096,
    factor: float = 8.0,
    scalings: Mapping[str, Scaling | Mapping[str, Any]] | None = None,
) -> dict[str, torch.Tensor]:
    """Per-pair wavelengths ``λ_i = 2π / θ_i`` (float64) of plain RoPE and each scaling.

    Keys: ``"plain RoPE"`` then the scaling labels. Frequencies are taken at
    ``seq_len = factor · original_length`` (long LongRoPE factors, grown dynamic NTK); a pair
    that does not rotate (``θ_i = 0``, proportional) has ``λ_i = inf``.
    """
    from posenc.rotary import rope_inv_freq

    resolved = _resolve_scalings(scalings, head_dim, original_length, factor)
    seq_len = round(factor * original_length)
    waves = {"plain RoPE": 2 * math.pi / rope_inv_freq(head_dim, base)}
    for label, scaling in resolved.items():
        inv_freq = scaling.inv_freq(head_dim, base, seq_len=seq_len).double().cpu()
        waves[label] = 2 * math.pi / inv_freq
    return waves


def plot_wavelengths(
    head_dim: int = 128,
    base: float = 10000.0,
    original_length: int = 4096,
    factor: float = 8.0,
    scalings: Mapping[str, Scaling | Mapping[str, Any]] | None = None,
) -> Figure:
    """Wavelength ``2π/θ_i`` (log) against pair index for plain RoPE and each scaling.

    Horizontal lines mark the original context ``L0 = original_length`` and the target
    ``s·L0``. Pairs whose wavelength is far below ``L0`` turn many times within the trained
    context (YaRN and Llama-3 keep them); pairs above ``L0`` never completed a turn in
    training (PI divides all of them; YaRN and Llama-3 only these, with a ramp between).
    """
    waves = rope_wavelengths(head_dim, base, original_length, factor, scalings)
    fig = new_figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    index = torch.arange(head_dim // 2)
    for label, wave in waves.items():
        style = {"color": "black", "lw": 2.0} if label == "plain RoPE" else {"lw": 1.0}
        ax.plot(index, wave, label=label, **style)
    ax.axhline(original_length, color="gray", ls="--", lw=1.0, label=f"L0 = {original_length}")
    target = factor * original_length
    ax.axhline(target, color="gray", ls=":", lw=1.0, label=f"s·L0 = {target:g}")
    finite = [float(w) for wave in waves.values() for w in wave if math.isfinite(w)]
    set_log_ticks(ax, "y", log_ticks(min(finite), max([*finite, target])))
    ax.set(
        xlabel="pair index i (channels 2i, 2i+1 interleaved; i, i+d/2 half)",
        ylabel="wavelength 2π/θ_i (positions)",
        title=f"RoPE wavelengths (d={head_dim}, base={base:g}, s={factor:g})",
    )
    ax.legend(fontsize="small", ncol=2)
    return fig


def plot_rope_scaling_scores(
    head_dim: int = 128,
    base: float = 10000.0,
    original_length: int = 4096,
    factor: float = 8.0,
    scalings: Mapping[str, Scaling | Mapping[str, Any]] | None = None,
) -> Figure:
    """Score against relative distance up to ``factor · L0``, before and after each scaling.

    One panel per scaling; each shows plain RoPE (gray) and the scaled RoPE, where the score
    is q·k/d for q = k = all-ones: ``2 A² Σ_i cos(r θ'_i) / head_dim`` (``A`` the scaling's
    attention factor; see :func:`rope_decay_curves`). A dashed line marks ``L0``.
    """
    resolved = _resolve_scalings(scalings, head_dim, original_length, factor)
    max_distance = round(factor * original_length)
    plain = rope_decay_curves(head_dim, base, max_distance)
    columns = min(4, max(len(resolved), 1))
    rows = max(math.ceil(len(resolved) / columns), 1)
    fig = new_figure(figsize=(3.6 * columns, 2.8 * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=True).flatten()
    for ax, (label, scaling) in zip(axes, resolved.items(), strict=False):
        scaled = rope_decay_curves(head_dim, base, max_distance, scaling=scaling)
        ax.plot(plain["distance"], plain["score"], color="gray", lw=0.5, label="plain RoPE")
        ax.plot(scaled["distance"], scaled["score"], color="tab:blue", lw=0.5, label=label)
        ax.axvline(original_length, color="black", ls="--", lw=0.8)
        ax.set_title(label, fontsize="medium")
        ax.set(xlabel="relative distance m − n")
    for ax in axes[len(resolved) :]:
        ax.set_axis_off()
    # ticks at L0 (the dashed line), s·L0 / 2 and s·L0 only: the default's five 5-digit
    # labels collided on panels 3.6 in wide
    ticks = sorted({original_length, max_distance // 2, max_distance})
    for ax in axes[: len(resolved)]:
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    axes[0].set(ylabel="q·k / d  (q = k = 1)")
    fig.suptitle(f"RoPE score before (gray) and after scaling (d={head_dim}, s={factor:g})")
    return fig


def plot_xpos(
    head_dim: int = 128, base: float = 10000.0, scale_base: float = 512.0, max_distance: int = 4096
) -> Figure:
    """xPos against RoPE: score for q = k = ones against distance n − m ≥ 0 (causal).

    xPos score: ``2 Σ_i cos(r θ_i) ζ_i^{r/B} / head_dim``; the envelope is
    ``2 Σ_i ζ_i^{r/B} / head_dim``.
    """
    from posenc.rotary import rope_inv_freq
    from posenc.rotary.xpos import xpos_zeta

    distance = torch.arange(max_distance + 1, dtype=torch.float64)
    decay = xpos_zeta(head_dim) ** (distance[:, None] / scale_base)
    cos = torch.cos(distance[:, None] * rope_inv_freq(head_dim, base))
    fig = new_figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(distance, 2 * cos.sum(-1) / head_dim, color="gray", lw=0.6, label="RoPE")
    ax.plot(distance, 2 * (cos * decay).sum(-1) / head_dim, lw=0.8, label="xPos")
    ax.plot(distance, 2 * decay.sum(-1) / head_dim, ls="--", lw=1.0, label="xPos envelope")
    ax.set(xlabel="distance n − m (key behind query)", ylabel="q·k / d  (q = k = 1)")
    ax.set_title(f"xPos decay (d={head_dim}, B={scale_base:g})")
    ax.legend()
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
    method of ``posenc list`` draws its figure (:data:`posenc.viz_graph.METHOD_FIGURES`).
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
    if spec.family == "segments":  # where each pair lies (viz_segments)
        from posenc.segments import ILLUSTRATIVE
        from posenc.viz_segments import plot_segments

        settings = {**ILLUSTRATIVE.get(name, {}), **kwargs}
        return plot_segments(build_encoding(name, dims, settings), title=f"{name} {settings}")
    encoding = build_encoding(name, dims, kwargs)
    bind = getattr(encoding, "bind_projections", None)
    if callable(bind):  # DeBERTa's shared keys: a layer's (random) projections
        width = dims.num_heads * dims.resolved_head_dim
        bind(*(torch.nn.Linear(dims.dim, width, bias=False) for _ in range(2)))
    if callable(getattr(encoding, "embed_tokens", None)):
        return _plot_token_embedding(name, encoding, dims.max_seq_len)
    if callable(getattr(encoding, "transform_scores", None)):
        return _plot_scores_reader(name, encoding, dims)
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

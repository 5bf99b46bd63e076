"""Figures of what each encoding does; every function returns a matplotlib ``Figure``.

matplotlib is an optional dependency (``pip install posenc[plot]``); importing this module
without it raises an ``ImportError`` that says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from posenc.base import (
    AdditiveEncoding,
    BiasEncoding,
    ContextualEncoding,
    PositionalEncoding,
)
from posenc.registry import ModelDims, build_encoding, encoding_spec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "plot_bias",
    "plot_encoding",
    "plot_equivariance",
    "plot_rope_decay",
    "plot_sinusoidal",
    "rope_decay_curves",
]


def _figure(**kwargs: Any) -> Figure:
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("plotting needs matplotlib: pip install 'posenc[plot]'") from error
    return Figure(**kwargs)


def plot_sinusoidal(dim: int = 64, length: int = 128, base: float = 10000.0) -> Figure:
    """Heatmap of the sinusoidal encoding: positions down, channels across."""
    from posenc.additive import sinusoidal_encoding

    table = sinusoidal_encoding(torch.arange(length), dim, base=base)
    fig = _figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set(xlabel="channel", ylabel="position", title=f"sinusoidal PE (d={dim}, base={base:g})")
    fig.colorbar(image, ax=ax)
    return fig


def rope_decay_curves(
    head_dim: int = 128, base: float = 10000.0, max_distance: int = 2048
) -> dict[str, torch.Tensor]:
    """RoPE score against relative distance r = m − n, in float64.

    Returns ``distance``, ``score`` (q = k = all-ones, so score(r) = 2 Σ_i cos(r θ_i),
    normalised by head_dim) and ``bound`` (RoFormer §3.4.3: the long-term decay bound
    (1/(d/2)) Σ_j |S_j| with S_j = Σ_{i<j} e^{i r θ_i}, normalised by its value at r = 0).
    """
    from posenc.rotary import rope_inv_freq

    inv_freq = rope_inv_freq(head_dim, base).double()
    distance = torch.arange(max_distance + 1, dtype=torch.float64)
    angles = distance[:, None] * inv_freq
    score = 2 * torch.cos(angles).sum(-1) / head_dim
    partial = torch.cumsum(torch.polar(torch.ones_like(angles), angles), dim=-1)
    bound = partial.abs().mean(-1)
    return {"distance": distance, "score": score, "bound": bound / bound[0]}


def plot_rope_decay(
    head_dim: int = 128, bases: Sequence[float] = (10000.0, 500000.0), max_distance: int = 2048
) -> Figure:
    """RoPE's long-term decay: score and RoFormer's bound against relative distance."""
    fig = _figure(figsize=(9, 3.8), layout="constrained")
    score_ax, bound_ax = fig.subplots(1, 2)
    for base in bases:
        curves = rope_decay_curves(head_dim, base, max_distance)
        score_ax.plot(curves["distance"], curves["score"], lw=0.8, label=f"base {base:g}")
        bound_ax.plot(curves["distance"], curves["bound"], lw=1.0, label=f"base {base:g}")
    score_ax.set(xlabel="relative distance m − n", ylabel="q·k / d  (q = k = 1)")
    score_ax.set_title("RoPE score against distance")
    bound_ax.set(xlabel="relative distance m − n", ylabel="bound / bound(0)", xscale="log")
    bound_ax.set_title("RoFormer long-term decay bound")
    for ax in (score_ax, bound_ax):
        ax.legend()
    return fig


def plot_bias(encoding: PositionalEncoding, length: int = 64, heads: int = 4) -> Figure:
    """Heatmaps of a bias encoding's ``bias(i, j)`` for the first ``heads`` heads."""
    if not isinstance(encoding, BiasEncoding):
        raise ValueError(f"encoding must be a bias-family encoding, got family {encoding.family!r}")
    positions = torch.arange(length)
    with torch.no_grad():
        bias = encoding.bias(positions, positions).float()
    shown = min(heads, bias.shape[0])
    fig = _figure(figsize=(3.2 * shown, 3.2), layout="constrained")
    axes = fig.subplots(1, shown, squeeze=False)[0]
    for head, ax in enumerate(axes):
        image = ax.imshow(bias[head].numpy(), cmap="viridis")
        ax.set(title=f"head {head}", xlabel="key j", ylabel="query i")
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(f"{type(encoding).__name__}: bias(i, j)")
    return fig


def plot_equivariance(gaps: Mapping[str, float]) -> Figure:
    """Bar chart of ``max |f(Px) − P f(x)|`` per encoding (log scale)."""
    fig = _figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.add_subplot()
    names = list(gaps)
    values = [max(gaps[n], 1e-18) for n in names]
    ax.bar(names, values, color=["tab:gray" if n == "nope" else "tab:blue" for n in names])
    ax.set(yscale="log", ylabel="max |f(Px) − P f(x)|")
    ax.set_title("bidirectional encoder: permutation equivariance broken by each encoding")
    ax.tick_params(axis="x", rotation=30)
    return fig


def plot_encoding(name: str, **kwargs: Any) -> Figure:
    """The figure that shows encoding ``name`` (what ``posenc plot NAME`` writes).

    Additive: the encoding as a heatmap; rotary: score and decay bound against distance;
    bias: bias matrices per head; contextual: the positional logit term for random q, k.
    """
    spec = encoding_spec(name)
    dims = ModelDims(dim=64, num_heads=4, max_seq_len=128)
    if name == "sinusoidal":
        return plot_sinusoidal(**kwargs)
    if name == "rope":
        return plot_rope_decay(**kwargs)
    encoding = build_encoding(name, dims, kwargs)
    if isinstance(encoding, BiasEncoding):
        return plot_bias(encoding)
    if isinstance(encoding, AdditiveEncoding):
        with torch.no_grad():
            table = encoding(torch.arange(dims.max_seq_len)).float()
        fig = _figure(figsize=(7, 4.5), layout="constrained")
        ax = fig.add_subplot()
        image = ax.imshow(table.numpy(), aspect="auto", cmap="RdBu_r")
        ax.set(xlabel="channel", ylabel="position", title=f"{name} (untrained init)")
        fig.colorbar(image, ax=ax)
        return fig
    if isinstance(encoding, ContextualEncoding):
        length, head_dim = 48, dims.resolved_head_dim
        generator = torch.Generator().manual_seed(0)
        q = torch.randn(1, dims.num_heads, length, head_dim, generator=generator)
        k = torch.randn(1, dims.num_heads, length, head_dim, generator=generator)
        positions = torch.arange(length)
        with torch.no_grad():
            term = encoding.logits(q, k, positions, positions, head_dim**-0.5)
        fig = _figure(figsize=(4.5, 4), layout="constrained")
        ax = fig.add_subplot()
        image = ax.imshow(term[0, 0].numpy(), cmap="viridis")
        ax.set(xlabel="key j", ylabel="query i", title=f"{name}: positional logit term, head 0")
        fig.colorbar(image, ax=ax)
        return fig
    raise ValueError(f"there is nothing to plot for {name!r} (family {spec.family!r})")

"""RoPE figures: wavelengths, the long-term decay bound, what a context-extension scaling does
to the scores, and xPos against RoPE; every function returns a matplotlib ``Figure``.

Context-extension figures (``posenc plot wavelengths|rope-decay|rope-scaling``, see
:data:`posenc.viz.FIGURES`) take scalings from :mod:`posenc.rotary.scaling` as a mapping
``label -> Scaling`` (or posenc's dict form ``{"type": "yarn", ...}``); ``None`` draws
:func:`default_scalings`. :mod:`posenc.viz` re-exports every name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from posenc.viz.base import log_ticks, new_figure, set_log_ticks

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from posenc.rotary.scaling import Scaling

__all__ = [
    "default_scalings",
    "plot_hope_decay",
    "plot_rope_decay",
    "plot_rope_decay_scalings",
    "plot_rope_scaling_scores",
    "plot_wavelengths",
    "plot_xpos",
    "rope_decay_curves",
    "rope_wavelengths",
]


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


def plot_hope_decay(
    train_length: int = 2048,
    head_dim: int = 128,
    base: float = 10000.0,
    max_distance: int | None = None,
) -> Figure:
    """HoPE beside RoPE: score and decay bound against distance (:func:`plot_rope_decay`),
    HoPE's pairs slower than ``train_length`` kept still; ``max_distance`` default 4 L."""
    from posenc.rotary.hope import HighFrequencyOnly

    scaling = {f"HoPE, L = {train_length}": HighFrequencyOnly(train_length)}
    reach = 4 * train_length if max_distance is None else max_distance
    return plot_rope_decay(head_dim, (base,), reach, scalings=scaling)


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

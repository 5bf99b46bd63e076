"""Figures of the softmax wrappers: soft-capping's map of the logits, the sinks' share."""

from __future__ import annotations

from typing import Any

import torch
from matplotlib.figure import Figure

from posenc.viz.base import new_figure

__all__ = ["plot_softmax_wrapper"]


def plot_softmax_wrapper(name: str, encoding: Any) -> Figure:
    """Soft-capping (``map_scores``): ``c·tanh(s/c)`` against the logit ``s``, beside the
    identity. Learned sinks (``sink_logits``): the probability a row gives its sink,
    ``σ(σ_h − LSE)``, against the log-sum-exp of its real logits, one line per head (the
    untrained sinks; ``init_std`` sets their spread)."""
    fig = new_figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    if callable(getattr(encoding, "map_scores", None)):
        cap = float(encoding.cap)
        s = torch.linspace(-3 * cap, 3 * cap, 601, dtype=torch.float64)
        with torch.no_grad():
            capped = encoding.map_scores(s)
        ax.plot(s.numpy(), s.numpy(), color="#7f7f7f", linestyle="--", label="no cap")
        ax.plot(s.numpy(), capped.numpy(), color="#d62728", label=f"c·tanh(s/c), c = {cap:g}")
        ax.set(xlabel="logit s", ylabel="capped logit", title=f"{name}: the logits' map")
    else:
        lse = torch.linspace(-6.0, 8.0, 281, dtype=torch.float64)
        with torch.no_grad():
            sinks = encoding.sink_logits(torch.float64, torch.device("cpu"))
        for head, sink in enumerate(sinks.tolist()):
            share = torch.sigmoid(sink - lse)
            ax.plot(lse.numpy(), share.numpy(), label=f"head {head}: σ_h = {sink:.2f}")
        ax.set(
            xlabel="log-sum-exp of a row's logits",
            ylabel="probability given to the sink",
            title=f"{name}: the sink's share of a row",
        )
    ax.legend(fontsize=8)
    return fig

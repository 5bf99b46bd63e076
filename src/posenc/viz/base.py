"""What every figure module shares: a new matplotlib ``Figure`` on the Agg backend, one colour
per encoding name, and readable log axes.

The one place that checks for matplotlib, an optional dependency (the ``plot`` extra: ``pip
install -e '.[plot]'`` in a clone of posenc): without it :func:`new_figure` raises an
``ImportError`` that names the extra. :mod:`posenc.viz`, :mod:`posenc.viz.grids`,
:mod:`posenc.viz.segments`, :mod:`posenc.viz.graph` and the lab's figures draw on it.

Colours: :func:`encoding_color` gives an encoding (or context-extension method) the same
colour on every figure of every page, so ``rope`` in the perplexity plot and ``rope`` in the
training curves are the same line colour. Names that are drawn together (the encodings of one
experiment) have different colours (``tests/test_viz_base.py`` checks the groups).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "ENCODING_COLORS",
    "encoding_color",
    "label_line_ends",
    "linear_ticks",
    "log_ticks",
    "new_figure",
    "set_log_ticks",
]

#: One colour per name: the sequence encodings of the registry in its order (tab10's ten, then
#: tab20's lighter ten, then Dark2 for the segment methods, ReRoPE a navy apart from ALiBi's
#: purple), the grid encodings (tab10 again: they are never drawn beside the 1D ones; Fourier
#: features, which are, take tab20b), then the context-extension methods of the lab, each a
#: colour of its own (``pi`` shares ``linear``'s: the same method).
ENCODING_COLORS: dict[str, str] = {
    "nope": "#7f7f7f",
    "sinusoidal": "#1f77b4",
    "scaled_sinusoidal": "#17becf",
    "learned": "#2ca02c",
    "complex_order": "#bcbd22",
    "rope": "#d62728",
    "xpos": "#e377c2",
    "alibi": "#9467bd",
    "t5": "#ff7f0e",
    "kerple": "#8c564b",
    "sandwich": "#aec7e8",
    "fire": "#98df8a",
    "dynamic": "#ff9896",
    "shaw": "#c5b0d5",
    "xl": "#ffbb78",
    "deberta": "#c49c94",
    "cope": "#f7b6d2",
    "dape": "#dbdb8d",
    "self_extend": "#1b9e77",
    "dual_chunk": "#e6ab02",
    "rerope": "#1a1a6e",
    "leaky_rerope": "#b3b0e0",
    "lm_infinite": "#e7298a",
    "sinks": "#000000",
    "softcap": "#b5cf6b",
    "learned_sinks": "#ce6dbd",
    "hope": "#e7969c",
    "cape": "#6baed6",
    "fox": "#a55194",
    "path": "#9e9ac8",
    "carope": "#4a1486",
    "pope": "#8ca252",
    "fope": "#637939",
    "stick_breaking": "#bd9e39",
    "sinusoidal_2d": "#1f77b4",
    "sinusoidal_grid": "#17becf",
    "learned_2d": "#2ca02c",
    "learned_factorized": "#bcbd22",
    "fourier": "#5254a3",
    "learnable_fourier": "#9c9ede",
    "rope_axial": "#d62728",
    "rope_mixed": "#e377c2",
    "rope_2d": "#9467bd",
    "mrope": "#843c39",
    "videorope": "#d6616b",
    "v2pe": "#fd8d3c",
    "liere": "#e6550d",
    "comrope_ap": "#31a354",
    "comrope_ld": "#3182bd",
    "mhrope": "#7b4173",
    "mmrope": "#393b79",
    "ilrope": "#8c6d31",
    "omnirope": "#ad494a",
    "circlerope": "#756bb1",
    "tm_rope": "#636363",
    "msrope": "#de9ed6",
    "grape": "#6b6ecf",
    "grape_additive": "#e7cb94",
    "grape_gated": "#cedb9c",
    # context extension (posenc.lab.experiments.extend / longctx), beside "rope" and the
    # segment methods: colours no sequence encoding has, so that a colour means one thing on
    # every figure of a page that draws both (the demo's)
    "linear": "#a6761d",
    "pi": "#a6761d",
    "ntk": "#00a6a6",
    "dynamic_ntk": "#8b0a50",
    "yarn": "#f781bf",
    "llama3": "#b15928",
    "longrope": "#80b1d3",
    "proportional": "#8dd3c7",
    # the lab's ViT, graph and temporal-link encodings (posenc.lab.experiments.vit,
    # graph_models.GRAPH_ENCODINGS, temporal_links.ENCODINGS): no encoding is nope's grey
    "none": "#7f7f7f",
    "learned_1d": "#2ca02c",
    "lap": "#1f77b4",
    "lap_flip": "#aec7e8",
    "signnet": "#2ca02c",
    "rwse": "#ff7f0e",
    "spd": "#9467bd",
    "static_laplacian": "#1f77b4",
    "lstep": "#d62728",
}

#: Colours for names without one in :data:`ENCODING_COLORS`, picked by a stable hash.
_FALLBACK = (
    "#393b79", "#637939", "#8c6d31", "#ad494a", "#7b4173",
    "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363",
)  # fmt: skip


def encoding_color(name: str) -> str:
    """The colour of encoding (or method) ``name`` on every figure, as a hex string.

    Names of :data:`ENCODING_COLORS` get theirs; any other name a colour of a fixed list
    chosen by its CRC-32, so it too is the same on every figure and in every process.

    Example::

        >>> encoding_color("rope")
        '#d62728'
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, got {name!r}")
    if name in ENCODING_COLORS:
        return ENCODING_COLORS[name]
    return _FALLBACK[zlib.crc32(name.encode()) % len(_FALLBACK)]


def log_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """Round values for the ticks of a log axis from ``low`` to ``high``: at most ``most``.

    Tries 1…9 × 10^k, then 1, 2, 3, 5, then 1, 2, 5, then 1 and every other decade, and keeps
    the first choice with at most ``most`` ticks inside ``[low, high]`` (and at least two when
    any choice has two). A range less than a decade wide where none of these choices puts
    four ticks inside (perplexities 17.01 to 17.06, say) gets :func:`linear_ticks` instead:
    evenly spaced round values, several of them, not only the range's two ends.

    Example::

        >>> log_ticks(6.5, 29.0)
        [7.0, 8.0, 9.0, 10.0, 20.0]
        >>> log_ticks(17.01, 17.06)
        [17.01, 17.02, 17.03, 17.04, 17.05, 17.06]
        >>> log_ticks(8.0, 12.0)
        [8.0, 9.0, 10.0, 11.0, 12.0]
    """
    if not (0 < low <= high and math.isfinite(high)):
        raise ValueError(f"low and high must satisfy 0 < low <= high < inf, got {low}, {high}")
    if most < 2:
        raise ValueError(f"most must be at least 2, got {most}")
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    choices: list[tuple[tuple[int, ...], int]] = [
        ((1, 2, 3, 4, 5, 6, 7, 8, 9), 1),
        ((1, 2, 3, 5), 1),
        ((1, 2, 5), 1),
        ((1,), 1),
        ((1,), 2),
        ((1,), 5),
    ]
    fallback: list[float] = []
    for subs, every in choices:
        values = [
            float(f"{sub * 10.0**power:.6g}")
            for power in range(first, last + 1)
            if (power - first) % every == 0
            for sub in subs
        ]
        inside = [value for value in values if low * (1 - 1e-9) <= value <= high * (1 + 1e-9)]
        if len(inside) <= most:
            if len(inside) >= 4 or (len(inside) >= 2 and high >= 10 * low):
                return inside
            fallback = fallback or inside
    if high > low:
        return linear_ticks(low, high, most)
    return fallback or [low, high]


def linear_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """Evenly spaced round values inside ``[low, high]`` (``low < high``): the widest step of
    1, 2, 2.5 or 5 × 10^k that puts at least four ticks inside, at most ``most``.

    Example::

        >>> linear_ticks(16.93, 17.2)
        [16.95, 17.0, 17.05, 17.1, 17.15, 17.2]
    """
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"low and high must be finite with low < high, got {low}, {high}")
    if most < 4:
        raise ValueError(f"most must be at least 4, got {most}")
    power = math.floor(math.log10(high - low))
    best: list[float] = []
    for exponent in range(power, power - 3, -1):
        for mantissa in (5.0, 2.5, 2.0, 1.0):
            step = mantissa * 10.0**exponent
            decimals = max(0, 1 - exponent)  # 2.5 × 10^k needs one digit more than 10^k
            start, stop = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
            ticks = [round(k * step, decimals) for k in range(start, stop + 1)]
            if len(ticks) > most:
                return best or ticks[:: math.ceil(len(ticks) / most)]
            best = ticks
            if len(ticks) >= 4:
                return ticks
    return best


def _plain(value: float) -> str:
    """``0.5``, ``8``, ``20``, ``1000000`` (no ``2×10⁰``, no ``1e+06`` below 10⁹)."""
    if float(value).is_integer() and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.10g}" if 1e-4 <= abs(value) < 1e6 else f"{value:.0e}"


def set_log_ticks(
    ax: Axes,
    axis: str,
    values: Sequence[float] | None = None,
    labels: Callable[[float], str] | Sequence[str] | None = None,
) -> None:
    """Log-scale ``axis`` (``"x"`` or ``"y"``) of ``ax`` with ticks only at ``values`` and
    plain labels (``"8"``, not ``"8×10⁰"``); no minor tick labels.

    Args:
        values: where to tick (the evaluated lengths, say); ``None``: :func:`log_ticks` over
            the data's range.
        labels: a label per value, or a function of the value; ``None``: ``"%g"``.
    """
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    if values is None:
        ax.relim()
        ax.autoscale_view()
        low, high = ax.dataLim.intervalx if axis == "x" else ax.dataLim.intervaly
        positive = [v for v in (low, high) if math.isfinite(v) and v > 0]
        values = log_ticks(min(positive), max(positive)) if len(positive) == 2 else []
    ticks = sorted({float(v) for v in values})
    if callable(labels):
        texts = [labels(v) for v in ticks]
    elif labels is not None:
        if len(labels) != len(ticks):
            raise ValueError(f"labels must give one text per tick: {len(ticks)}, got {len(labels)}")
        texts = list(labels)
    else:
        texts = [_plain(v) for v in ticks]
    target.set_major_locator(FixedLocator(ticks))
    target.set_ticks(ticks, texts)
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


def label_line_ends(ax: Axes, *, fontsize: float = 8.0) -> list[Any]:
    """Name each labelled line of ``ax`` at its right end, in its colour, instead of a legend.

    Only lines that reach the largest x of the axes get a label there (beside the axes, in
    the right margin); the labels are pushed apart vertically so none overlaps another. The
    lines that end earlier keep a legend. Call it after the axes' scales and limits are set.

    Returns:
        the label ``Text`` artists, top to bottom.
    """
    import numpy as np

    lines = [line for line in ax.get_lines() if not str(line.get_label()).startswith("_")]
    ends = []
    for line in lines:
        xs = np.asarray(line.get_xdata(), dtype=float).tolist()
        ys = np.asarray(line.get_ydata(), dtype=float).tolist()
        finite = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
        if finite:
            ends.append((line, *max(finite)))
    if not ends:
        return []
    right = max(x for _, x, _ in ends)
    at_end = [(line, y) for line, x, y in ends if x == right]
    earlier = [line for line, x, _ in ends if x != right]
    ax.get_xlim(), ax.get_ylim()  # settle the pending autoscaling before reading positions
    # heights in axes fractions: the axes' transform maps data y to [0, 1] whatever the scale
    to_axes = ax.transData + ax.transAxes.inverted()
    placed = sorted(
        ((float(to_axes.transform((right, y))[1]), line) for line, y in at_end),
        key=lambda item: item[0],
    )
    figure_height = ax.get_figure().get_size_inches()[1]  # type: ignore[union-attr]
    step = 1.3 * fontsize / 72 / (0.75 * figure_height)  # one text line, axes ~3/4 of the height
    heights = [y for y, _ in placed]
    for index in range(1, len(heights)):  # push up, then shift back down if past the top
        heights[index] = max(heights[index], heights[index - 1] + step)
    overflow = heights[-1] - 1.0
    if overflow > 0:
        heights = [h - overflow for h in heights]
        for index in range(len(heights) - 2, -1, -1):
            heights[index] = min(heights[index], heights[index + 1] - step)
    texts = [
        ax.annotate(
            str(line.get_label()),
            xy=(1.0, height),
            xycoords="axes fraction",
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=fontsize,
            color=line.get_color(),
            annotation_clip=False,
        )
        for height, (_, line) in zip(heights, placed, strict=True)
    ]
    if earlier:
        ax.legend(handles=earlier, fontsize=fontsize, loc="upper left")
    return texts[::-1]


def new_figure(**kwargs: Any) -> Figure:
    """``matplotlib.figure.Figure(**kwargs)``, drawn off-screen (Agg), not managed by pyplot.

    Example::

        >>> fig = new_figure(figsize=(4, 3))
        >>> ax = fig.subplots()
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "plotting needs matplotlib: pip install -e '.[plot]' in a clone of posenc "
            "(or pip install matplotlib)"
        ) from error
    figure = Figure(**kwargs)
    FigureCanvasAgg(figure)  # a canvas that draws: canvas.draw(), get_renderer() for text boxes
    return figure

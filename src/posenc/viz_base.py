"""What every figure module shares: a new matplotlib ``Figure`` on the Agg backend.

The one place that checks for matplotlib, an optional dependency (``pip install
'posenc[plot]'``): without it :func:`new_figure` raises an ``ImportError`` that names the
extra. :mod:`posenc.viz`, :mod:`posenc.viz_grids`, :mod:`posenc.viz_segments`,
:mod:`posenc.viz_graph` and the lab's figures draw on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["new_figure"]


def new_figure(**kwargs: Any) -> Figure:
    """``matplotlib.figure.Figure(**kwargs)``, drawn off-screen (Agg), not managed by pyplot.

    Example::

        >>> fig = new_figure(figsize=(4, 3))
        >>> ax = fig.subplots()
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("plotting needs matplotlib: pip install 'posenc[plot]'") from error
    return Figure(**kwargs)

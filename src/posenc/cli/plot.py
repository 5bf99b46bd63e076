"""``posenc plot``: a PNG of an encoding or a figure, its arguments checked before drawing."""

from __future__ import annotations

import argparse
import inspect
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FIGURE_NAMES", "add_plot_parser", "check_plot_arguments", "plot_path"]

#: The figures of ``posenc plot`` besides the encodings (keys of ``posenc.viz.FIGURES``; a
#: test checks the two agree), named here so that ``--help`` needs no plotting import.
FIGURE_NAMES = (
    "wavelengths",
    "rope-decay",
    "rope-scaling",
    "mrope-ids",
    "graph-laplacian",
    "graph-spd-bias",
    "lstep",
)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    kwargs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        kwargs[key] = _parse_value(value)
    return kwargs


def _plot_function(name: str) -> Callable[..., Any] | None:
    """The plotting function ``plot_encoding(name, **kwargs)`` hands its keyword arguments to,
    for the encodings drawn by a dedicated function; None where ``build_encoding`` (or a
    figure) receives them and checks them itself."""
    from posenc import viz

    functions: dict[str, Callable[..., Any]] = {
        "sinusoidal": viz.plot_sinusoidal,
        "rope": viz.plot_rope_decay,
        "hope": viz.plot_hope_decay,
        "xpos": viz.plot_xpos,
    }
    return functions.get(name)


def check_plot_arguments(name: str, kwargs: dict[str, Any]) -> None:
    """Refuse an unknown ``posenc plot`` name or keyword argument before drawing anything.

    Raises:
        ValueError: naming ``METHOD`` and listing the figures and the encodings, or naming the
            unknown ``--set`` keys and listing the allowed ones.
    """
    from posenc.graph.catalogue import list_graph_methods
    from posenc.registry import list_encodings

    encodings = [spec.name for spec in list_encodings()]
    graph = [method.name for method in list_graph_methods()]
    if name not in (*FIGURE_NAMES, *encodings, *graph):
        raise ValueError(
            f"METHOD: unknown name {name!r}; figures: {', '.join(FIGURE_NAMES)}; encodings: "
            f"{', '.join(encodings)}; graph methods: {', '.join(graph)} (see `posenc list`)"
        )
    function = _plot_function(name)
    if function is None:
        return
    allowed = set(inspect.signature(function).parameters)
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(
            f"--set: unknown argument(s) {', '.join(unknown)} for plot {name!r}; "
            f"allowed: {', '.join(sorted(allowed)) or 'none'}"
        )


def plot_path(out: str | None, method: str) -> Path:
    """The file ``posenc plot METHOD --out OUT`` writes, checked before anything is drawn.

    ``OUT`` as given when it names an image file (``rope.svg``); ``OUT.png`` when it has no
    suffix (the file matplotlib would write; the message names it); ``OUT/METHOD.png`` when
    ``OUT`` is an existing folder or ends with ``/``; ``METHOD.png`` without ``--out``.

    Raises:
        ValueError: naming ``--out`` when its suffix is no image format matplotlib writes,
            when a part of its folder is a file, or when that folder is not writable.
    """
    from matplotlib.figure import Figure

    from posenc.lab.run import check_writable_folder

    if out is None:
        path = Path(f"{method}.png")
    elif out.endswith(("/", os.sep)) or Path(out).is_dir():
        path = Path(out) / f"{method}.png"
    else:
        path = Path(out)
        if not path.suffix:
            path = path.with_name(path.name + ".png")
    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise ValueError(
            f"--out: {str(path)!r} has suffix {path.suffix!r}, which is no image format; "
            f"use one of {', '.join(sorted(formats))} (or no suffix: .png)"
        )
    check_writable_folder("--out", path.parent)
    return path


def _cmd_plot(args: argparse.Namespace) -> int:
    kwargs = _parse_kwargs(args.set)
    check_plot_arguments(args.method, kwargs)
    out = plot_path(args.out, args.method)
    from posenc.viz import plot_encoding, plot_figure

    if args.method in FIGURE_NAMES:
        figure = plot_figure(args.method, **kwargs)
    else:
        figure = plot_encoding(args.method, **kwargs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=110)
    except OSError as error:  # what the check cannot foresee: a full disk, a race
        raise ValueError(f"--out: cannot write {out}: {error.strerror or error}") from None
    print(f"wrote {out}")
    return 0


def add_plot_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc plot`` to the subcommands ``sub``."""
    p = sub.add_parser("plot", help="write a PNG that shows an encoding or a figure")
    p.add_argument(
        "method",
        metavar="METHOD",
        help="an encoding or graph method (the names of 'posenc list'), or a figure: "
        f"{', '.join(FIGURE_NAMES)}",
    )
    p.add_argument(
        "--out",
        help="output file (default METHOD.png; no suffix: .png added; a folder: METHOD.png in it)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="encoding or figure keyword argument (JSON values), repeatable; e.g. "
        '--set factor=16 --set \'scalings={"yarn": {"type": "yarn", ...}}\'',
    )
    p.set_defaults(func=_cmd_plot)

"""``posenc`` command line: list, plot, check, demo, lab, report, bench, verify.

Each subcommand calls a public function. Start-up stays cheap: this module imports only the
standard library at the top, and each subcommand imports what it needs when it runs (``posenc
--help`` loads neither the lab nor the benchmarks nor matplotlib).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main", "plain_help", "plot_path", "positive_int"]

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

#: The suites of ``posenc bench`` (a test checks them against ``posenc.bench``).
BENCH_SUITES = {
    "attention": (
        "forward",
        "module",
        "memory",
        "train-memory",
        "lm",
        "decode",
        "relative",
        "longctx",
        "longctx-memory",
        "longctx-decode",
        "linear",
    ),
    "rope": ("forward", "backward", "gpu"),
}

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_help(text: str) -> str:
    """``text`` without Sphinx markup: ``:class:`~a.b.C``` becomes ``C``, ``:data:`x``` becomes
    ``x``, a double-backquoted literal its content; lines of a boxed help table keep their
    width (the removed characters are padded back before the closing border)."""

    def strip(line: str) -> str:
        line = _ROLE.sub(
            lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0) else m.group(1), line
        )
        # a literal that the help's line wrapping split keeps no stray delimiters either
        return _LITERAL.sub(r"\1", line).replace("``", "")

    lines = []
    for line in text.splitlines():
        if len(line) >= 2 and line[0] == "│" and line[-1] == "│":
            inner = line[1:-1]
            line = "│" + strip(inner).ljust(len(inner)) + "│"
        else:
            line = strip(line)
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def positive_int(text: str) -> int:
    """An argparse ``type``: ``text`` as an integer >= 1 (argparse names the option and exits
    with status 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (>= 1), got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (>= 1), got {value}")
    return value


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


def _cmd_list(args: argparse.Namespace) -> int:
    from posenc.graph.catalogue import list_graph_methods
    from posenc.registry import list_encodings

    # two catalogues, one table: the sequence encodings (built from a model's shape, which
    # fills their required arguments), then the graph methods (computed from a graph)
    rows: list[dict[str, Any]] = [
        {
            "name": spec.name,
            "family": spec.family,
            "paper": spec.paper,
            "summary": spec.summary,
            "required": [],
            "parameters": spec.parameters(),
        }
        for spec in list_encodings()
    ]
    rows += [
        {
            "name": method.name,
            "family": method.family,
            "paper": method.paper,
            "summary": method.summary,
            "required": list(method.required()),
            "parameters": method.parameters(),
        }
        for method in list_graph_methods()
    ]
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    width = max(18, *(len(row["name"]) + 1 for row in rows))
    for row in rows:
        settings = [*row["required"], *(f"{k}={v!r}" for k, v in row["parameters"].items())]
        print(f"{row['name']:<{width}} {row['family']:<11} {row['summary']}")
        print(f"{'':<{width}} paper: {row['paper']}")
        print(f"{'':<{width}} parameters: {', '.join(settings) or '-'}")
    return 0


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


def _cmd_check(args: argparse.Namespace) -> int:
    from posenc.checks import run_checks

    def show(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    # each row as it is measured (the whole run takes a while); --json keeps stdout for JSON
    results = run_checks(progress=show)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return 0 if all(r.passed for r in results) else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from posenc.lab.demo import run_demo
    from posenc.lab.run import check_writable_folder

    check_writable_folder("--out", args.out)

    summary = run_demo(args.out)
    return 0 if not summary["failed"] else 1


def lab_overview() -> str:
    """``posenc lab --help``: the usage and every registered experiment with its summary."""
    from posenc.lab.experiments import EXPERIMENTS

    width = max(len(name) for name in EXPERIMENTS) + 2
    rows = "\n".join(
        f"  {name:<{width}}{plain_help(experiment.summary)}"
        for name, experiment in sorted(EXPERIMENTS.items())
    )
    return (
        "usage: posenc lab EXPERIMENT [--out DIR] [--FIELD VALUE ...]\n\n"
        "Run a lab experiment into a run folder (default runs/EXPERIMENT); a second call "
        "resumes it.\n`posenc lab EXPERIMENT --help` lists the experiment's config fields.\n\n"
        f"experiments:\n{rows}\n"
    )


def _cmd_lab(args: argparse.Namespace) -> int:
    options = list(args.options)
    asks_help = any(option in ("-h", "--help") for option in options)
    if args.experiment is None or args.experiment in ("-h", "--help"):
        if asks_help or args.experiment is not None:
            print(lab_overview(), end="")
            return 0
        raise ValueError(f"EXPERIMENT is required\n{lab_overview()}")
    from posenc.lab.command import run_with_options
    from posenc.lab.experiments import get_experiment

    experiment = get_experiment(args.experiment)
    if not asks_help:
        if args.out is not None:
            from posenc.lab.run import check_writable_folder

            check_writable_folder("--out", args.out)
        run_with_options(experiment, options, args.out)
        return 0
    # tyro renders the config's field docstrings; print them without their Sphinx markup
    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            run_with_options(experiment, options, args.out)
    except SystemExit as done:
        print(plain_help(text.getvalue()), end="")
        if done.code not in (0, None):
            raise
        return 0
    print(plain_help(text.getvalue()), end="")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from posenc.lab.experiments import EXPERIMENTS
    from posenc.lab.report import write_report
    from posenc.lab.run import check_writable_folder

    check_writable_folder("RUN_DIR", args.run_dir)  # where report.html is written
    experiments = tuple(EXPERIMENTS.values())
    try:
        path = write_report(args.run_dir, runs=args.runs, experiments=experiments)
    except KeyError as error:  # a section read a column: refused naming the file lacking it
        from posenc.lab.gather import gather, missing_column

        found = missing_column(gather(args.run_dir, args.runs), error.args[0])
        if found is None:
            raise
        raise found from None
    print(f"wrote {path}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    suites = BENCH_SUITES[args.target]
    unknown = sorted(set(args.only or ()) - set(suites))
    if unknown:
        raise ValueError(
            f"--only: unknown suite(s) {', '.join(unknown)} for {args.target}; "
            f"choose from {', '.join(suites)}"
        )
    from posenc.bench.targets import TARGETS, evaluate

    if args.target == "rope":
        from posenc.bench import rope

        result = rope.run(args.only or None)
        text = rope.format_result(result)
    else:
        from posenc.bench import attention

        result = attention.run(args.only or None, threads=args.threads)
        text = attention.format_result(result)
    if args.json:  # the figures with a target, each with its goal and whether it is met
        text = json.dumps(
            {**result, "targets": evaluate(result, args.target, TARGETS)}, indent=2, default=str
        )
    print(text)
    return 0


def _verify_config(text: str) -> Any:
    """A ``config.json`` path, or an HF model type (transformers' defaults for it)."""
    path = Path(text)
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"CONFIG {text!r} is not valid JSON: {error}") from None
    if path.suffix == ".json" or os.sep in text:
        raise ValueError(f"CONFIG {text!r}: no such file")
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ValueError(
            f"CONFIG {text!r} is no file; reading it as an HF model type needs transformers"
        ) from None
    try:
        return AutoConfig.for_model(text)
    except ValueError:
        raise ValueError(f"CONFIG {text!r} is neither a file nor an HF model type") from None


def _verify_positions(text: str) -> Any:
    """``--positions START:STOP[:STEP]`` as an integer range."""
    import torch

    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3) or numbers[0] < 0 or numbers[1] <= numbers[0]:
        raise ValueError(
            f"--positions must be START:STOP[:STEP] with 0 <= START < STOP, got {text!r}"
        )
    if len(numbers) == 3 and numbers[2] < 1:
        raise ValueError(f"--positions STEP must be >= 1, got {text!r}")
    return torch.arange(*numbers)


def _cmd_verify(args: argparse.Namespace) -> int:
    from posenc.verify import load_arrays, reference_arrays, save_arrays, verify

    if args.arrays is None and args.write_reference is None:
        raise ValueError("give --arrays FILE to check, or --write-reference OUT (or both)")
    config = _verify_config(args.config)
    arrays = load_arrays(args.arrays) if args.arrays is not None else {}
    positions = _verify_positions(args.positions) if args.positions is not None else None
    if args.positions_from is not None:
        if args.positions_from not in arrays:
            raise ValueError(
                f"--positions-from {args.positions_from!r}: the arrays have {sorted(arrays)}"
            )
        positions = arrays.pop(args.positions_from)
    options = {"layer_type": args.layer_type, "component": args.component}
    if args.write_reference is not None:
        if positions is None:
            positions = arrays.get("positions")
        if positions is None:
            raise ValueError("--write-reference needs --positions or --positions-from")
        reference = reference_arrays(config, positions, layout=args.layout, **options)
        save_arrays(reference, args.write_reference)
        print(f"wrote {args.write_reference}: {', '.join(sorted(reference))}", file=sys.stderr)
    if args.arrays is None:
        return 0
    report = verify(
        config,
        arrays,
        positions=positions,
        layout=args.layout,
        arithmetic=args.arithmetic,
        **options,
    )
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``posenc`` (standard library only: building it imports nothing
    heavy)."""
    parser = argparse.ArgumentParser(
        prog="posenc",
        description="Positional encodings for transformers: list the methods, plot them, run "
        "their property checks, the demo, lab experiments, reports and benchmarks; verify a "
        "port's RoPE against posenc's reference.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="every method with its family, paper and parameters")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list)
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
    p = sub.add_parser(
        "check", help="run the property checks, printing each measured number as it comes"
    )
    p.add_argument(
        "--json", action="store_true", help="machine-readable output (progress on stderr)"
    )
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("demo", help="the main job: property checks, then train short / test long")
    p.add_argument("--out", default="out/demo", help="output folder (default out/demo)")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser(
        "lab",
        help="run a lab experiment into a run folder (resumable); 'posenc lab --help' lists "
        "the experiments, 'posenc lab EXPERIMENT --help' an experiment's options",
        add_help=False,  # --help goes to the experiment's options (tyro), or lists experiments
    )
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT", help="which experiment")
    p.add_argument("--out", help="run folder (default runs/EXPERIMENT)")
    p.set_defaults(func=_cmd_lab)
    p = sub.add_parser(
        "bench", help="side-by-side benchmarks: one thread, interleaved rounds, median ratios"
    )
    p.add_argument("target", choices=sorted(BENCH_SUITES), help="what to measure")
    p.add_argument(
        "--only",
        action="append",
        metavar="SUITE",
        help="run only this suite (repeatable); "
        + "; ".join(f"{target}: {', '.join(s)}" for target, s in BENCH_SUITES.items()),
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="torch threads for attention, >= 1 (default 1); rope runs at 1 and at all cores",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser(
        "report",
        help="write RUN_DIR/report.html from the runs it holds (RUN_DIR and each sub-folder "
        "with a results.csv)",
    )
    p.add_argument("run_dir", help="a run folder (where report.html is written)")
    p.add_argument(
        "--runs",
        nargs="+",
        metavar="RUN",
        help="gather these run folders instead (e.g. runs/audio runs/video runs/vla: one page, "
        "every claim, table and figure)",
    )
    p.set_defaults(func=_cmd_report)
    p = sub.add_parser(
        "verify",
        help="check a port's RoPE arrays (cos/sin, rotated q/k, M-RoPE ids) against posenc's "
        "float64 reference for a model config, and name the likely bug; exit 0 equal, 1 "
        "mismatch, 2 bad input",
    )
    p.add_argument("config", metavar="CONFIG", help="a config.json, or an HF model type name")
    p.add_argument(
        "--arrays",
        metavar="FILE",
        help=".npz, .safetensors or .npy with any of cos, sin, q, k, q_rotated, k_rotated, "
        "positions, position_ids, token_types, image_grid_thw, video_grid_thw",
    )
    p.add_argument("--layer-type", help="per-layer-type entry (full_attention, main, ...)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--positions", metavar="START:STOP[:STEP]", help="the arrays' positions")
    where.add_argument("--positions-from", metavar="KEY", help="the array holding the positions")
    p.add_argument(
        "--layout",
        choices=("half", "interleaved", "pairs"),
        help="the tables' column order (default: the config's)",
    )
    p.add_argument(
        "--component",
        choices=("attention", "indexer"),
        default="attention",
        help="the DSA indexer has its own layout (default attention)",
    )
    p.add_argument(
        "--arithmetic",
        choices=("float32", "float64"),
        default="float32",
        help="the angle arithmetic a correct port may use (default float32, HF's; float64: "
        "phases in float64 rounded once)",
    )
    p.add_argument(
        "--write-reference", metavar="OUT", help="write the float64 reference arrays to OUT"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``posenc`` with ``argv`` (default ``sys.argv[1:]``); the exit status (2 with the
    message on stderr for bad input)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command == "lab":
        args.options = unknown  # the experiment's config options, parsed by tyro
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.func(args))
    except ValueError as error:
        print(f"posenc: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

"""``posenc`` command line: list, plot, check, demo. Each subcommand calls a public function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]


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
            raise SystemExit(f"posenc: --set takes KEY=VALUE, got {pair!r}")
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


def _cmd_plot(args: argparse.Namespace) -> int:
    from posenc.viz import FIGURES, plot_encoding, plot_figure

    kwargs = _parse_kwargs(args.set)
    if args.method in FIGURES:
        figure = plot_figure(args.method, **kwargs)
    else:
        figure = plot_encoding(args.method, **kwargs)
    out = Path(args.out or f"{args.method}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from posenc.checks import format_result, run_checks

    results = run_checks()
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        for result in results:
            print(format_result(result))
    return 0 if all(r.passed for r in results) else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from posenc.demo import run_demo

    summary = run_demo(args.out)
    return 0 if not summary["failed"] else 1


def _cmd_lab(args: argparse.Namespace) -> int:
    from posenc.lab.command import run_with_options
    from posenc.lab.experiments import get_experiment

    run_with_options(get_experiment(args.experiment), args.options, args.out)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from posenc.lab.report import write_report

    print(f"wrote {write_report(args.run_dir)}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.target == "rope":
        from posenc.bench import rope

        result = rope.run(args.only or None)
        text = rope.format_result(result)
    else:
        from posenc.bench import attention

        result = attention.run(args.only or None, threads=args.threads)
        text = attention.format_result(result)
    print(json.dumps(result, indent=2, default=str) if args.json else text)
    return 0


def _check_pairs(pairs: Sequence[str]) -> list[str]:
    for pair in pairs:
        key, sep, _ = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
    return list(pairs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc", description="Positional encodings for transformers: list, plot, check."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="every method with its family, paper and parameters")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("plot", help="write a PNG that shows an encoding or a figure")
    p.add_argument(
        "method",
        help="a name from `posenc list`, or a figure: wavelengths, rope-decay, rope-scaling, "
        "mrope-ids, graph-laplacian, graph-spd-bias, lstep",
    )
    p.add_argument("--out", help="output file (default METHOD.png)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="encoding or figure keyword argument (JSON values), repeatable; e.g. "
        '--set factor=16 --set \'scalings={"yarn": {"type": "yarn", ...}}\'',
    )
    p.set_defaults(func=_cmd_plot)
    p = sub.add_parser("check", help="run the property checks and print measured numbers")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser(
        "demo", help="the main job: property checks, then train short / test long (~2 min)"
    )
    p.add_argument("--out", default="out/demo", help="output folder (default out/demo)")
    p.set_defaults(func=_cmd_demo)
    from posenc.lab.experiments import EXPERIMENTS

    p = sub.add_parser(
        "lab",
        help="run a lab experiment into a run folder (resumable); "
        "`posenc lab EXPERIMENT --help` lists its options",
        add_help=False,
    )
    p.add_argument("experiment", choices=sorted(EXPERIMENTS), help="which experiment")
    p.add_argument("--out", help="run folder (default runs/EXPERIMENT)")
    p.set_defaults(func=_cmd_lab)
    from posenc.bench import attention, rope

    p = sub.add_parser(
        "bench", help="side-by-side benchmarks: one thread, interleaved rounds, median ratios"
    )
    p.add_argument("target", choices=["attention", "rope"], help="what to measure")
    p.add_argument(
        "--only",
        action="append",
        choices=sorted({*attention.SUITES, *rope.SUITES}),
        help="run only this suite (repeatable); attention: "
        f"{', '.join(attention.SUITES)}; rope: {', '.join(rope.SUITES)}",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for attention (default 1); rope runs at 1 and at all cores",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser("report", help="write RUN_DIR/report.html from RUN_DIR/results.csv")
    p.add_argument("run_dir", help="a run folder")
    p.set_defaults(func=_cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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

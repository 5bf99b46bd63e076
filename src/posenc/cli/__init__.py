"""``posenc`` command line: list, plot, check, demo, lab, report, bench, verify.

Each subcommand calls a public function. Start-up stays cheap: this package imports only the
standard library at the top, and each subcommand imports what it needs when it runs (``posenc
--help`` loads neither the lab nor the benchmarks nor matplotlib). One module per command
group adds its subcommands and handles their arguments: :mod:`~posenc.cli.methods` (list,
check), :mod:`~posenc.cli.plot`, :mod:`~posenc.cli.lab` (demo, lab, report),
:mod:`~posenc.cli.bench` and :mod:`~posenc.cli.verify`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from posenc.cli._common import plain_help, positive_int
from posenc.cli.bench import BENCH_SUITES, add_bench_parser
from posenc.cli.lab import add_demo_parser, add_lab_parser, add_report_parser, lab_overview
from posenc.cli.methods import add_check_parser, add_list_parser
from posenc.cli.plot import FIGURE_NAMES, add_plot_parser, check_plot_arguments, plot_path
from posenc.cli.verify import add_verify_parser

__all__ = [
    "BENCH_SUITES",
    "FIGURE_NAMES",
    "build_parser",
    "check_plot_arguments",
    "lab_overview",
    "main",
    "plain_help",
    "plot_path",
    "positive_int",
]


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
    add_list_parser(sub)
    add_plot_parser(sub)
    add_check_parser(sub)
    add_demo_parser(sub)
    add_lab_parser(sub)
    add_bench_parser(sub)
    add_report_parser(sub)
    add_verify_parser(sub)
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

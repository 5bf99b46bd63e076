"""``posenc bench``: the side-by-side benchmarks of :mod:`posenc.bench`."""

from __future__ import annotations

import argparse
import json

from posenc.cli._common import positive_int

__all__ = ["BENCH_SUITES", "add_bench_parser"]

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


def add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc bench`` to the subcommands ``sub``."""
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

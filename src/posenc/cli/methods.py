"""``posenc list`` and ``posenc check``: the catalogue of methods and their property checks."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_check_parser", "add_list_parser"]


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


def add_list_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc list`` to the subcommands ``sub``."""
    p = sub.add_parser("list", help="every method with its family, paper and parameters")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list)


def _cmd_check(args: argparse.Namespace) -> int:
    from posenc.checks import run_checks

    def show(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    # each row as it is measured (the whole run takes a while); --json keeps stdout for JSON
    results = run_checks(progress=show)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return 0 if all(r.passed for r in results) else 1


def add_check_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc check`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "check", help="run the property checks, printing each measured number as it comes"
    )
    p.add_argument(
        "--json", action="store_true", help="machine-readable output (progress on stderr)"
    )
    p.set_defaults(func=_cmd_check)

"""Applying RoPE against the memory floor: ``python benchmarks/rope.py [SUITE ...]``.

The same as ``posenc bench rope [--only SUITE] [--json]``; see :mod:`posenc.bench.rope` for
what each suite measures.
"""

from __future__ import annotations

import argparse
import json

from posenc.bench.rope import SUITES, format_result, run

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("suites", nargs="*", choices=[*SUITES, []], help="default: all")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.suites or None)
    print(json.dumps(result, indent=2, default=str) if args.json else format_result(result))

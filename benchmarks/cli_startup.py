"""How long the ``posenc`` command takes to start, and ``posenc check`` to run.

``python benchmarks/cli_startup.py``: each round runs every command below once in a fresh
process, in turn (interleaved, so that a busy spell of a shared machine hits all of them
alike); the table gives each command's median wall time over the rounds:

- ``python``: the interpreter alone (``python -c pass``), the floor of any command;
- ``import torch``: what any command that touches a tensor pays;
- ``posenc --help``: the parser alone (the subcommands import their modules when they run);
- ``posenc lab --help``: the list of experiments (imports the lab's experiment registry);
- ``cli, no package init``: ``posenc --help`` with ``posenc/__init__.py`` skipped (the
  package's eager re-exports import torch): what a lazy package ``__init__`` would give;
- ``posenc check``: the whole command, start-up and every property check (its goal: under
  5 s). Besides torch it imports numba (the CPU rotation kernel, which the norm check
  reaches) and sympy (torch imports it to build a module on the meta device, as
  ``skip_init`` does for SignNet's layers).

Add ``--rounds N`` (default 7) and ``--json`` for machine-readable output. The figure in
docs/performance.md comes from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_WITHOUT_INIT = (
    "import importlib.util, sys, types; "
    "package = types.ModuleType('posenc'); "
    "package.__path__ = list(importlib.util.find_spec('posenc').submodule_search_locations); "
    "sys.modules['posenc'] = package; "
    "from posenc.cli import main; "
    "sys.argv = ['posenc', '--help']; "
    "main()"
)

#: name -> the command line (argv after the interpreter)
COMMANDS: dict[str, list[str]] = {
    "python": ["-c", "pass"],
    "import torch": ["-c", "import torch"],
    "posenc --help": ["-m", "posenc.cli", "--help"],
    "posenc lab --help": ["-m", "posenc.cli", "lab", "--help"],
    "cli, no package init": ["-c", _WITHOUT_INIT],
    "posenc check": ["-m", "posenc.cli", "check"],
}


def measure(rounds: int = 7, commands: dict[str, list[str]] | None = None) -> dict[str, float]:
    """Median wall seconds of each command over ``rounds`` interleaved rounds.

    Raises:
        ValueError: naming ``rounds`` unless it is an integer >= 1; a command that exits
            with a non-zero status raises ``subprocess.CalledProcessError``.
    """
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    commands = COMMANDS if commands is None else commands
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, *argv], check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def format_result(medians: dict[str, float], rounds: int) -> str:
    """A table of the medians, with the machine it ran on."""
    lines = [f"median wall time over {rounds} interleaved rounds ({os.cpu_count()} CPUs)"]
    lines += [f"  {name:<22} {seconds:6.3f} s" for name, seconds in medians.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    medians = measure(args.rounds)
    print(json.dumps(medians, indent=2) if args.json else format_result(medians, args.rounds))

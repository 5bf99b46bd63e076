"""An experiment run from command-line options: ``posenc lab NAME [--out DIR] OPTIONS`` and
``python -m posenc.lab.experiments NAME ...`` (what ``torchrun`` starts).

Every option is a field of the experiment's config dataclass, parsed by tyro: a field of one
of its sections (:mod:`posenc.lab.config`) as ``--model.dim`` or by its own name alone
(``--dim``); dict-valued fields take one JSON object. The run goes into ``--out`` (default
``runs/NAME``) and resumes there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posenc.lab.config import expand_flat_options
from posenc.lab.results import Row
from posenc.lab.run import check_writable_folder
from posenc.lab.runner import Experiment, run_experiment

__all__ = ["experiment_main", "json_dicts", "run_with_options"]


def run_with_options(
    experiment: Experiment[Any], options: Sequence[str], out: str | Path | None = None
) -> list[Row]:
    """Parse ``options`` into ``experiment``'s config (``--help`` lists its fields) and run it
    (or resume it) in ``out``; return its rows."""
    import tyro

    config = tyro.cli(
        experiment.config,
        args=expand_flat_options(experiment.config, options),
        prog=f"posenc lab {experiment.name} [--out DIR]",
        description=f"{experiment.summary}. Every option is a field of "
        f"{experiment.config.__name__}; a section's field (--model.dim) may be named alone "
        "(--dim); the run resumes in its out folder.",
        registry=json_dicts(),
    )
    return run_experiment(experiment, config, out or f"runs/{experiment.name}")


def experiment_main(experiment: Experiment[Any], argv: Sequence[str] | None = None) -> int:
    """``[--out DIR] OPTIONS`` for one experiment, as ``posenc lab NAME`` takes them: the
    exit status (2 with the message on stderr for a ``ValueError``)."""
    parser = argparse.ArgumentParser(prog=f"posenc lab {experiment.name}", add_help=False)
    parser.add_argument("--out", help="run folder (default runs/NAME)")
    args, options = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.out is not None:
            check_writable_folder("--out", args.out)
        run_with_options(experiment, options, args.out)
    except ValueError as error:
        print(f"posenc: error: {error}", file=sys.stderr)
        return 2
    return 0


def json_dicts() -> Any:
    """A tyro registry reading dict-valued config fields (``pos_kwargs``: keyword arguments
    per encoding) as one JSON object, e.g. ``--pos-kwargs '{"rope": {"base": 500}}'``."""
    from tyro import constructors

    registry = constructors.ConstructorRegistry()

    def read(texts: list[str]) -> dict[str, Any]:
        value = json.loads(texts[0])
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {texts[0]!r}")
        return value

    @registry.primitive_rule
    def json_object(info: constructors.PrimitiveTypeInfo) -> Any:
        if info.type_origin is not dict:
            return None
        return constructors.PrimitiveConstructorSpec(
            nargs=1,
            metavar="JSON",
            instance_from_str=read,
            is_instance=lambda value: isinstance(value, dict),
            str_from_instance=lambda value: [json.dumps(value)],
        )

    return registry

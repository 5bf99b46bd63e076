"""``posenc demo``, ``posenc lab`` and ``posenc report``: the lab's runs and their report."""

from __future__ import annotations

import argparse
import contextlib
import io

from posenc.cli._common import plain_help

__all__ = ["add_demo_parser", "add_lab_parser", "add_report_parser", "lab_overview"]


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


def add_demo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc demo`` to the subcommands ``sub``."""
    p = sub.add_parser("demo", help="the main job: property checks, then train short / test long")
    p.add_argument("--out", default="out/demo", help="output folder (default out/demo)")
    p.set_defaults(func=_cmd_demo)


def add_lab_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc lab`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "lab",
        help="run a lab experiment into a run folder (resumable); 'posenc lab --help' lists "
        "the experiments, 'posenc lab EXPERIMENT --help' an experiment's options",
        add_help=False,  # --help goes to the experiment's options (tyro), or lists experiments
    )
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT", help="which experiment")
    p.add_argument("--out", help="run folder (default runs/EXPERIMENT)")
    p.set_defaults(func=_cmd_lab)


def add_report_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``posenc report`` to the subcommands ``sub``."""
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

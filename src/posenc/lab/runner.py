"""One runner for every lab experiment: an experiment is data, the runner does the rest.

An :class:`Experiment` says what is particular to it — its config dataclass, how it plans
its runs (:class:`Run`: a folder name and what the run varies), how it trains and evaluates
one run in its folder, and how its rows print as a table. :func:`run_experiment` does what
every experiment shares:

1. the start, before anything is written: the config was validated when it was built (its
   ``__post_init__``: every field, each encoding built once on the meta device with its
   ``pos_kwargs``, :func:`check_pos_kwargs`), the out folder is compared (one whose runs hold
   results of another configuration is refused, naming the field), the config's ``device``
   is tried, and the experiment's ``prepare`` checks what needs files or time (the corpus, a
   base run, every method's model at every length); only then is the folder
   created, locked against a second writer and its ``config.json`` written, so a failed start
   leaves the folder as it was;
2. skipping finished runs: a run is finished when ``runs/<name>/eval.json`` exists (written
   atomically after its evaluation; one that is no valid JSON, or holds no rows for a run
   that yields them, is refused naming it: :func:`finished_rows`), so the same command
   resumes a killed experiment and reproduces the uninterrupted one (training itself resumes
   from its checkpoint);
3. executing the pending runs stage by stage (a later stage may read an earlier one's
   folder, e.g. fine-tuning from a trained base), serially or in a pool of spawned processes
   (``workers`` > 1, or ``isolate``: a fresh process per run, so peak memory is the run's
   own), each with ``threads`` torch threads;
4. ``results.csv`` (rows in plan order), ``claims.json`` (the verdicts of the experiment's
   seed claims on those rows), ``report.html`` and the printed table and verdicts.

Under ``torchrun`` (an initialized process group) every rank runs the same command: rank 0
alone creates and writes the folder, every rank executes every pending run together
(serially; the trainer shares the batch across ranks), and rank 0 writes the results.

The runner reads the config's ``runner`` section (:class:`~posenc.lab.config.RunnerArgs`:
``workers``, ``isolate``, ``threads``, ``progress``, the last turned off in parallel
workers, whose progress bars would overwrite each other; a config without one runs serially)
and its ``device`` when it has one (checked usable at the start, :func:`check_device`).

An experiment also carries what the page says of its rows (:class:`Section`: a heading, its
tables and figures; defined with the page, :mod:`posenc.lab.report`, and re-exported here) and
the claims its rows test, so that adding an experiment is one module defining
``EXPERIMENT = Experiment(...)`` plus its line in :mod:`posenc.lab.experiments` (see
docs/lab.md). The runner's page shows its experiment's sections; ``posenc report`` passes
every section of the registry.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
import torch.distributed

from posenc.lab.claims import Claim, applicable, format_verdicts, judge_all, verdict_record
from posenc.lab.config import ModelArgs, check_seeds, runner_args
from posenc.lab.distributed import rank_and_world
from posenc.lab.report import Section, write_report
from posenc.lab.results import Row, check_out_dir, prepare_out_dir, write_results_csv
from posenc.lab.run import atomic_write_text, read_json, torch_threads

__all__ = [
    "Experiment",
    "Run",
    "Section",
    "check_builds",
    "check_device",
    "check_encoding_names",
    "check_pos_kwargs",
    "check_pos_kwargs_names",
    "check_seeds",
    "execute_run",
    "finished_rows",
    "record_claims",
    "run_experiment",
    "trial_build",
]

C = TypeVar("C")


@dataclass(frozen=True)
class Run:
    """One unit of work of an experiment.

    Attributes:
        name: its folder under ``runs/`` (may contain ``/``), unique within the experiment.
        params: what this run varies (``{"encoding": "rope", "seed": 0}``), for ``execute``.
        stage: runs execute in increasing stage; within one stage, in any order.
        rows: whether the run yields result rows (``False`` for one that only prepares a
            later stage, a base model or a figure); a run that should and returns none, or
            whose ``eval.json`` holds none, is refused rather than counted finished and empty.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    stage: int = 0
    rows: bool = True


@dataclass(frozen=True)
class Experiment(Generic[C]):
    """What is particular to one experiment; the functions must be module-level (they are
    sent to worker processes by reference).

    Attributes:
        name: the CLI name (``posenc lab NAME``) and the ``experiment`` of its out folder.
        summary: one line for ``posenc lab --help``.
        title: the report's title.
        config: the frozen config dataclass.
        plan: the runs of a config, in the order their rows are reported.
        execute: trains and evaluates one run in its folder (created), returning its rows;
            called with ``threads`` torch threads.
        table: the rows as the table the terminal prints.
        prepare: optional early check of a config in the parent (e.g. load the corpus), so a
            bad config fails before the out folder is written and any run starts.
        claims: the published findings its rows test (:class:`~posenc.lab.claims.Claim`),
            judged after every run into ``claims.json``, printed after the table and leading
            the report.
        sections: what the report shows of its rows (:class:`Section`), in order.
    """

    name: str
    summary: str
    title: str
    config: type[C]
    plan: Callable[[C], Sequence[Run]]
    execute: Callable[[C, Run, Path], list[Row]]
    table: Callable[[Sequence[Row]], str]
    prepare: Callable[[C], object] | None = None
    claims: tuple[Claim, ...] = ()
    sections: tuple[Section, ...] = ()

    def section_rows(self) -> dict[str, Section]:
        """Each section by the ``experiment`` column of the rows it shows."""
        return {section.rows or self.name: section for section in self.sections}


def check_encoding_names(encodings: Sequence[str]) -> tuple[str, ...]:
    """``encodings`` as a tuple (JSON gives lists); ``ValueError`` naming ``encodings`` when it
    is empty or repeats a name."""
    names = tuple(encodings)
    if not names:
        raise ValueError("encodings must name at least one encoding ('none' for none)")
    if len(set(names)) != len(names):
        raise ValueError(f"encodings must not repeat a name, got {names}")
    return names


def check_pos_kwargs_names(pos_kwargs: object, encodings: Sequence[str]) -> None:
    """``ValueError`` naming ``pos_kwargs`` unless it maps names of ``encodings`` to dicts."""
    if not isinstance(pos_kwargs, dict) or not all(
        isinstance(kwargs, dict) for kwargs in pos_kwargs.values()
    ):
        raise ValueError(f"pos_kwargs must map encoding names to dicts, got {pos_kwargs}")
    unused = sorted(set(pos_kwargs) - set(encodings))
    if unused:
        raise ValueError(f"pos_kwargs names encodings not in encodings: {', '.join(unused)}")


def check_pos_kwargs(
    pos_kwargs: Mapping[str, Any], encodings: Sequence[str], build: Callable[[str], object]
) -> None:
    """Check every encoding's constructor arguments when the config is built, not in its run.

    ``pos_kwargs`` maps encoding names to keyword arguments (one JSON object on the command
    line). Each of its names must be one of ``encodings`` (a misspelt name would otherwise be
    ignored) and map to an object; then ``build(encoding)``, the experiment's model of each
    encoding, runs once on the meta device (:func:`trial_build`), so the registry and every
    constructor judge the arguments before anything trains, not after the other encodings
    have: about a second in all, most of it torch's one-off import behind its meta kernels.

    Raises:
        ValueError: naming ``pos_kwargs`` for a malformed mapping or a name not in
            ``encodings``; naming ``pos_kwargs[<encoding>]`` and the reason when the
            encoding's constructor refuses its arguments (the registry names an unknown
            keyword and lists the allowed ones), or ``encodings`` when it refuses this model
            without any.
    """
    if not isinstance(pos_kwargs, Mapping) or not all(
        isinstance(kwargs, Mapping) for kwargs in pos_kwargs.values()
    ):
        raise ValueError(
            "pos_kwargs must map encoding names to objects of keyword arguments, e.g. "
            f'{{"rope": {{"base": 500}}}}; got {pos_kwargs!r}'
        )
    unused = sorted(set(pos_kwargs) - set(encodings))
    if unused:
        raise ValueError(
            f"pos_kwargs names {', '.join(map(repr, unused))}, which are not in encodings "
            f"({', '.join(encodings)})"
        )
    check_builds(
        (
            f"{f'pos_kwargs[{encoding!r}]' if encoding in pos_kwargs else 'encodings'}: "
            f"{encoding!r} cannot be built",
            functools.partial(build, encoding),
        )
        for encoding in encodings
    )


def check_builds(builds: Iterable[tuple[str, Callable[[], object]]]) -> None:
    """:func:`trial_build` each ``(where, build)``: what an experiment's runs will construct
    (each method's model at each length), judged at the start rather than mid-experiment.

    Raises:
        ValueError: ``"<where>: <reason>"`` for the first build whose constructors raise
            ``ValueError`` or ``TypeError``; ``where`` names the field (``methods: 'yarn' at
            s = 4``).
    """
    for where, build in builds:
        try:
            trial_build(build)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{where}: {error}") from None


def check_device(config: object) -> None:
    """``ValueError`` naming ``device`` when the config has one that cannot hold a tensor on
    this machine (``cuda`` without a GPU, a missing ordinal): found at the start rather than
    by the first run, after it has written its folder."""
    device = getattr(config, "device", None)
    if device is None:
        return
    try:
        torch.empty(0, device=device)
    except Exception as error:  # torch raises AssertionError, RuntimeError, ... by backend
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"device {device!r} is not usable on this machine: {reason}") from None


def trial_build(build: Callable[[], object]) -> None:
    """Run ``build()`` on the meta device: every constructor checks its arguments, yet no
    memory is allocated and the global random state is left as it was.

    A constructor that cannot run on the meta device (one mixing a CPU constant into a meta
    tensor) is built again on the CPU, so that only the arguments decide: a ``ValueError`` or
    ``TypeError`` of the meta build is the verdict.
    """
    with torch.random.fork_rng(devices=[]):
        try:
            with torch.device("meta"):
                build()
        except (ValueError, TypeError):
            raise
        except Exception:  # not the arguments: the meta device itself; judge on the CPU
            build()


def record_claims(folder: Path, claims: Sequence[Claim], rows: Sequence[Row]) -> list[Row]:
    """Judge the ``claims`` the rows bear on (:func:`~posenc.lab.claims.applicable`: a run
    without KERPLE does not test KERPLE's claim); write the verdicts to
    ``folder/claims.json`` (what the report leads with) and return them."""
    claims = [claim for claim in claims if applicable(claim, rows)]
    verdicts = judge_all(claims, rows)
    records = [verdict_record(c, v) for c, v in zip(claims, verdicts, strict=True)]
    atomic_write_text(folder / "claims.json", json.dumps(records, indent=2))
    return records


def _check_rows(rows: object, run: Run, source: str) -> list[Row]:
    """``rows`` as a run's list of rows: a list of objects, not empty when ``run.rows``;
    ``ValueError`` naming ``source`` otherwise."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{source} must hold a list of row objects, got {rows!r:.80}")
    if run.rows and not rows:
        raise ValueError(
            f"{source} holds no rows, but run {run.name!r} yields rows (a run that yields "
            "none is planned with Run(..., rows=False))"
        )
    return rows


def finished_rows(run: Run, path: Path) -> list[Row]:
    """The rows of a finished run from its ``eval.json`` (``path``): the list
    :func:`execute_run` wrote, or one row object as some runs wrote it.

    Raises:
        ValueError: naming the file when it is no valid JSON, holds something other than
            rows, or holds no rows for a run that yields them (``[]`` written by hand would
            otherwise count as a finished run without seeds); delete it to run again.
    """
    stored = read_json(path)
    if isinstance(stored, dict):  # a one-row run
        return [stored]
    try:
        return _check_rows(stored, run, str(path))
    except ValueError as error:
        raise ValueError(f"{error}; delete it to run {run.name!r} again") from None


def execute_run(experiment: Experiment[Any], config: Any, run: Run, run_dir: Path) -> list[Row]:
    """Execute one run with the config's threads and record it finished (``eval.json``,
    written by rank 0 under ``torchrun``).

    Each row gets the config's model identity: a ``schedule`` column naming its per-layer
    options (:meth:`~posenc.lab.config.ModelArgs.row_fields`) when it has any, so the rows of
    a windowed or gated model stay apart from a plain one's wherever rows are pooled.

    Raises:
        ValueError: when the experiment returns no rows for a run that yields them
            (:attr:`Run.rows`), or something other than a list of row objects.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    with torch_threads(runner_args(config).threads):
        rows = experiment.execute(config, run, run_dir)
    _check_rows(rows, run, f"{experiment.name}: what run {run.name!r} returned")
    model = getattr(config, "model", None)
    if isinstance(model, ModelArgs) and model.layered:
        rows = [{**row, **model.row_fields()} for row in rows]
    if rank_and_world()[0] == 0:
        atomic_write_text(run_dir / "eval.json", json.dumps(rows, indent=2))
    return rows


def run_experiment(
    experiment: Experiment[C],
    config: C,
    out: str | Path,
    *,
    echo: Callable[[str], None] | None = print,
) -> list[Row]:
    """Run (or resume) ``experiment`` with ``config`` in folder ``out``; return its rows.

    Writes ``out/config.json``, one folder per run under ``out/runs/``, ``out/results.csv``
    and ``out/report.html``, and echoes progress and the table (``echo=None``: silent).
    ``config.json`` is written only once the plan, the folder and the experiment's
    ``prepare`` passed: a start that fails leaves ``out`` as it was.

    Raises:
        ValueError: naming the field when ``out`` holds a run of another configuration, or
            when another process is running in ``out``; whatever ``prepare`` raises.
    """
    runs = list(experiment.plan(config))
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"{experiment.name}: plan gives two runs one folder: {names}")
    rank, world_size = rank_and_world()
    say = (echo or (lambda text: None)) if rank == 0 else (lambda text: None)
    check_out_dir(out, experiment.name, config)  # the cheap refusals first, writing nothing
    check_device(config)
    if experiment.prepare is not None:
        experiment.prepare(config)
    if world_size > 1:  # torchrun: rank 0 owns the folder; the others wait until it is ready
        if rank == 0:
            prepare_out_dir(out, experiment.name, config)
        torch.distributed.barrier()
        folder = Path(out)
    else:
        folder = prepare_out_dir(out, experiment.name, config)
    done: dict[str, list[Row]] = {}
    pending = []
    for run in runs:
        finished = folder / "runs" / run.name / "eval.json"
        if finished.is_file():
            done[run.name] = finished_rows(run, finished)
        else:
            pending.append(run)
    start = time.perf_counter()
    for stage in sorted({run.stage for run in pending}):
        batch = [run for run in pending if run.stage == stage]
        if world_size > 1:  # every rank trains every run together (DDP); serially
            for run in batch:
                done[run.name] = execute_run(experiment, config, run, folder / "runs" / run.name)
            continue
        done.update(_execute(experiment, config, batch, folder, say, start))
    if pending:
        say(f"[{experiment.name}] {len(pending)} run(s) in {time.perf_counter() - start:.0f} s")
    rows = [row for run in runs for row in done[run.name]]
    if rank != 0:
        return rows
    write_results_csv(rows, folder / "results.csv")
    records = record_claims(folder, experiment.claims, rows)
    write_report(folder, title=experiment.title, experiments=(experiment,))
    say(experiment.table(rows))
    if records:
        say(format_verdicts(records))
    return rows


def _execute(
    experiment: Experiment[Any],
    config: Any,
    runs: list[Run],
    folder: Path,
    say: Callable[[str], None],
    start: float,
) -> dict[str, list[Row]]:
    runner = runner_args(config)
    workers = min(runner.workers, len(runs))
    isolate = runner.isolate
    results: dict[str, list[Row]] = {}
    if workers <= 1 and not isolate:
        for index, run in enumerate(runs):
            say(f"[{experiment.name}] {index + 1}/{len(runs)} {run.name} ...")
            results[run.name] = execute_run(experiment, config, run, folder / "runs" / run.name)
            say(f"[{experiment.name}] {run.name} done ({time.perf_counter() - start:.0f} s)")
        return results
    say(f"[{experiment.name}] {len(runs)} run(s) on {max(1, workers)} worker process(es)")
    if workers > 1 and runner.progress and hasattr(config, "runner"):
        config = dataclasses.replace(config, runner=dataclasses.replace(runner, progress=False))
    context = multiprocessing.get_context("spawn")
    if isolate and sys.version_info >= (3, 11):  # a fresh process per run
        pool = ProcessPoolExecutor(max(1, workers), context, max_tasks_per_child=1)
    else:
        pool = ProcessPoolExecutor(max(1, workers), context)
    with pool:
        futures: dict[Future[list[Row]], Run] = {
            pool.submit(execute_run, experiment, config, run, folder / "runs" / run.name): run
            for run in runs
        }
        for future in as_completed(futures):
            run = futures[future]
            results[run.name] = future.result()
            say(f"[{experiment.name}] {run.name} done ({time.perf_counter() - start:.0f} s)")
    return results

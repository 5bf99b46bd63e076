"""The runner section of a lab config: how the runs execute (nothing in it changes a result)."""

from __future__ import annotations

from dataclasses import dataclass

from posenc._validate import check_positive_int

__all__ = ["RunnerArgs", "runner_args"]


@dataclass(frozen=True)
class RunnerArgs:
    """How the runner executes the runs (:func:`posenc.lab.runner.run_experiment`); nothing
    here changes a result.

    Args:
        workers: runs at once in spawned processes (1 = in this process).
        threads: torch intra-op threads per run (``None`` = torch's default; 1 is fastest for
            these small models on a shared 2-core machine).
        isolate: a fresh process per run, so its peak memory is its own.
        progress: progress bars where the experiment draws them (off in parallel workers,
            whose bars would overwrite each other).
    """

    workers: int = 1
    threads: int | None = 1
    isolate: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "workers", check_positive_int("workers", self.workers))
        if self.threads is not None:
            object.__setattr__(self, "threads", check_positive_int("threads", self.threads))
        for name in ("isolate", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")


#: The runner's settings of a config without a ``runner`` section: serial, threads as they are.
_NO_RUNNER = RunnerArgs(threads=None)


def runner_args(config: object) -> RunnerArgs:
    """``config.runner``, or the runner's defaults (serial, threads left alone) for a config
    without that section."""
    runner = getattr(config, "runner", None)
    return runner if isinstance(runner, RunnerArgs) else _NO_RUNNER

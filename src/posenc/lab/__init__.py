"""The lab: train short, test long.

Data sources for length-generalization experiments: the byte-level corpus (the Python standard
library by default) in :mod:`posenc.lab.data`, seeded synthetic tasks in
:mod:`posenc.lab.tasks`, and the :class:`Batch` they yield (:mod:`posenc.lab.batch`); the
training loop with resumable run folders and DDP in :mod:`posenc.lab.train`; the experiments
(:mod:`posenc.lab.extrapolate`, :mod:`~posenc.lab.extend`, :mod:`~posenc.lab.generalize`,
:mod:`~posenc.lab.vit`), listed by name in :mod:`posenc.lab.experiments`, and their reports
(:mod:`posenc.lab.report`).
"""

from __future__ import annotations

from posenc.lab.batch import Batch, BatchSource, derive_seed, shard_slice
from posenc.lab.data import CorpusSplits, LMSource, eval_windows, load_corpus, stdlib_files
from posenc.lab.tasks import TASKS, Example, TaskSource, TaskSpec, accuracy, make_task
from posenc.lab.train import TrainConfig, TrainResult, lm_loss, lr_at, train

__all__ = [
    "TASKS",
    "Batch",
    "BatchSource",
    "CorpusSplits",
    "Example",
    "LMSource",
    "TaskSource",
    "TaskSpec",
    "TrainConfig",
    "TrainResult",
    "accuracy",
    "derive_seed",
    "eval_windows",
    "lm_loss",
    "load_corpus",
    "lr_at",
    "make_task",
    "shard_slice",
    "stdlib_files",
    "train",
]

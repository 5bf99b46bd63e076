"""The lab: train short, test long.

Data sources for length-generalization experiments: the byte-level corpus (the Python standard
library by default) in :mod:`posenc.lab.data`, seeded synthetic tasks in
:mod:`posenc.lab.tasks`, and the :class:`Batch` they yield (:mod:`posenc.lab.batch`).
"""

from __future__ import annotations

from posenc.lab.batch import Batch, BatchSource, derive_seed, shard_slice
from posenc.lab.data import CorpusSplits, LMSource, eval_windows, load_corpus, stdlib_files
from posenc.lab.tasks import TASKS, Example, TaskSource, TaskSpec, accuracy, make_task

__all__ = [
    "TASKS",
    "Batch",
    "BatchSource",
    "CorpusSplits",
    "Example",
    "LMSource",
    "TaskSource",
    "TaskSpec",
    "accuracy",
    "derive_seed",
    "eval_windows",
    "load_corpus",
    "make_task",
    "shard_slice",
    "stdlib_files",
]

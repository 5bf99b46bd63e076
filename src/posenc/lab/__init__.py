"""The lab: train short, test long.

What is measured: one file (or package) per experiment in :mod:`posenc.lab.experiments`
(``extrapolate``, ``extend``, ``bases``, ``longctx``, ``tasks``, ``vit``, ``resolution``,
``lm``, ...), each with its config, runs, report sections, figures and claims; the
package's ``__init__`` is the registry ``posenc lab NAME`` dispatches on. On what: one file
per data source or task generator in :mod:`posenc.lab.data` (the byte-level corpus, the
Python standard library by default, in :mod:`~posenc.lab.data.corpus`; seeded synthetic
tasks in :mod:`~posenc.lab.data.tasks`; passkey retrieval; sklearn's digits). The machinery
stays here, keyed by no experiment's name: the :class:`Batch` every source yields
(:mod:`posenc.lab.batch`), the config sections experiments compose (:mod:`posenc.lab.config`),
the training loop with resumable run folders and DDP (:mod:`posenc.lab.train`), the runner
(:mod:`posenc.lab.runner`), claims, tables, figures and reports (:mod:`posenc.lab.report`).
"""

from __future__ import annotations

from posenc.lab.batch import Batch, BatchSource, derive_seed, shard_slice
from posenc.lab.data.corpus import CorpusSplits, LMSource, eval_windows, load_corpus, stdlib_files
from posenc.lab.data.tasks import TASKS, Example, TaskSource, TaskSpec, accuracy, make_task
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

"""The sections a lab experiment's config is composed of, each validated once.

An experiment's config is a frozen dataclass holding the sections it needs plus its own
fields, the layout of lingua's ``TrainArgs`` (https://github.com/facebookresearch/lingua,
``apps/main/train.py``):

* :class:`ModelArgs` (``model``): the transformer's shape, ``dim``, ``depth``, ``num_heads``;
* :class:`TrainArgs` (``train``): the seeds and the optimizer's schedule, ``steps``,
  ``batch_size``, ``lr``, ``warmup_steps``;
* :class:`EpochArgs` (``train`` of the experiments that train in passes over a fixed set,
  the image, signal and graph ones): the seeds, ``epochs``, ``batch_size``, ``lr``,
  ``weight_decay``, ``warmup_steps``;
* :class:`DataArgs` (``data``): the byte corpus, its split and the training length;
* :class:`RunnerArgs` (``runner``): how the runs execute, ``workers``, ``threads``,
  ``isolate``, ``progress``; nothing in it changes a result, so a folder's configuration
  guard ignores it (:func:`posenc.lab.results.check_out_dir`).

Each section checks its own fields in its ``__post_init__`` (``ValueError`` naming the
field); the experiment's config checks what ties them together (an evaluation length
against ``data.train_len``, an encoding against ``model.dim``) and its own fields.

On the command line (``posenc lab NAME``, tyro) a section's field is ``--model.dim``,
``--train.steps``, ``--runner.no-progress``; its own name alone (``--dim``, ``--steps``,
``--no-progress``) works as well (:func:`expand_flat_options`). :func:`replace_fields` is
:func:`dataclasses.replace` taking a section's field by its own name too, and
:func:`flat_record` reads a ``config.json`` of either layout as ``{"model.dim": ...}``
(:func:`from_record` builds the config back).

One module per concept: :mod:`~posenc.lab.config.model`, :mod:`~posenc.lab.config.training`,
:mod:`~posenc.lab.config.data` and :mod:`~posenc.lab.config.runner` hold the sections,
:mod:`~posenc.lab.config.fields` the functions that name their fields.

Example::

    >>> config = replace_fields(ExtrapolateConfig(), steps=100, dim=64)
    >>> config.train.steps, config.model.dim
    (100, 64)
"""

from __future__ import annotations

from posenc.lab.config.data import DataArgs
from posenc.lab.config.fields import (
    expand_flat_options,
    field_paths,
    flat_record,
    from_record,
    replace_fields,
    sections,
)
from posenc.lab.config.model import LAYER_OPTIONS, ModelArgs, QueryScaleName, Schedule
from posenc.lab.config.runner import RunnerArgs, runner_args
from posenc.lab.config.training import EpochArgs, TrainArgs, check_seeds

__all__ = [
    "LAYER_OPTIONS",
    "DataArgs",
    "EpochArgs",
    "ModelArgs",
    "QueryScaleName",
    "RunnerArgs",
    "Schedule",
    "TrainArgs",
    "check_seeds",
    "expand_flat_options",
    "field_paths",
    "flat_record",
    "from_record",
    "replace_fields",
    "runner_args",
    "sections",
]

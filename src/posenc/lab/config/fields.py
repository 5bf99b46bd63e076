"""A config's fields across its sections: a section's field named alone (``dim`` for
``model.dim``) in :func:`replace_fields`, on the command line (:func:`expand_flat_options`)
and in a ``config.json`` of either layout (:func:`flat_record`, :func:`from_record`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

__all__ = [
    "expand_flat_options",
    "field_paths",
    "flat_record",
    "from_record",
    "replace_fields",
    "sections",
]

C = TypeVar("C")


def sections(cls: type) -> dict[str, type]:
    """The sections of config class ``cls``: each field whose type is a dataclass, by name."""
    hints = _field_types(cls)
    return {
        name: kind for name, kind in hints.items() if isinstance(kind, type) and is_dataclass(kind)
    }


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


@functools.cache
def field_paths(cls: type) -> dict[str, str]:
    """Each field of config class ``cls`` by its own name: ``{"dim": "model.dim", ...,
    "encodings": "encodings"}`` (a section's fields, then ``cls``'s own; a name that is a
    field of ``cls`` itself keeps its own meaning).

    Raises:
        TypeError: when two sections share a field name (it would name neither).
    """
    paths: dict[str, str] = {}
    for section, kind in sections(cls).items():
        for f in fields(kind):
            if f.name in paths:
                raise TypeError(
                    f"{cls.__name__}: {f.name!r} is a field of both {paths[f.name]} and "
                    f"{section}.{f.name}"
                )
            paths[f.name] = f"{section}.{f.name}"
    for f in fields(cls):
        paths[f.name] = f.name
    return paths


def replace_fields(config: C, **changes: Any) -> C:
    """:func:`dataclasses.replace` of ``config`` where a field of one of its sections may be
    named alone: ``replace_fields(config, steps=10, dim=64)`` sets ``config.train.steps`` and
    ``config.model.dim`` (each changed section is validated again, then the config).

    Raises:
        TypeError: naming a change that is no field of the config or its sections.
    """
    cls: type = type(config)
    paths = field_paths(cls)
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        if name not in paths:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        section, _, leaf = paths[name].rpartition(".")
        if section:
            nested.setdefault(section, {})[leaf] = value
        else:
            own[name] = value
    for section, values in nested.items():
        base = own.get(section, getattr(config, section))
        own[section] = dataclasses.replace(base, **values)
    return dataclasses.replace(config, **own)  # type: ignore[type-var]


def flat_record(cls: type, record: Mapping[str, Any]) -> dict[str, Any]:
    """A config's JSON record (``config.json``) with each section's fields as ``"model.dim"``
    keys; a record written before the sections (flat: ``"dim"``) reads the same, its fields
    placed by :func:`field_paths`. Other keys (``"experiment"``) stay as they are.

    Raises:
        ValueError: naming the key when a section's name holds no object (a record written
            when that name was a field of another kind: triangles' ``train`` graphs).
    """
    paths = field_paths(cls)
    names = sections(cls)
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if key in names:
            if not isinstance(value, Mapping):
                raise ValueError(
                    f"{key!r} is the {key} section of {cls.__name__} (an object of "
                    f"{names[key].__name__}'s fields), got {value!r}"
                )
            flat.update({f"{key}.{leaf}": item for leaf, item in value.items()})
        else:
            flat[paths.get(key, key)] = value
    return flat


def from_record(cls: type[C], record: Mapping[str, Any]) -> C:
    """A config of class ``cls`` from its JSON record (``dataclasses.asdict`` of one, or a
    ``config.json`` without its ``"experiment"`` key): each section built from its object, or,
    in a flat record, from its fields named alone (:func:`flat_record`).

    Raises:
        TypeError: naming a key that is no field of ``cls`` or its sections.
    """
    kinds = sections(cls)
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in flat_record(cls, record).items():
        section, _, leaf = key.rpartition(".")
        if section in kinds:
            nested.setdefault(section, {})[leaf] = value
        else:
            own[key] = value
    for name, values in nested.items():
        own[name] = kinds[name](**values)
    return cls(**own)


def expand_flat_options(cls: type, options: Sequence[str]) -> list[str]:
    """Command-line options with a section's field named alone (``--steps 10``,
    ``--no-progress``, ``--dim=64``) written as tyro names it (``--train.steps 10``,
    ``--runner.no-progress``, ``--model.dim=64``); everything else unchanged."""
    paths = field_paths(cls)
    expanded = []
    for option in options:
        if not option.startswith("--") or "." in option.partition("=")[0]:
            expanded.append(option)
            continue
        flag, sep, value = option[2:].partition("=")
        name = flag.replace("-", "_")
        negated = name.startswith("no_") and name not in paths and name[3:] in paths
        path = paths.get(name[3:] if negated else name, name)
        section, _, leaf = path.rpartition(".")
        if not section:
            expanded.append(option)
            continue
        leaf = leaf.replace("_", "-")
        expanded.append(f"--{section}.{'no-' if negated else ''}{leaf}{sep}{value}")
    return expanded

"""The scalings' dict form: conversion both ways, validation, the table of types."""

from __future__ import annotations

import json

import pytest

from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import (
    Linear,
    LongRoPE,
    Scaling,
    YaRN,
    scaling_from_dict,
    scaling_to_dict,
)
from tests.rotary.scaling.cases import every_scaling


@pytest.mark.parametrize(
    ("d", "name"),
    [
        ({"factor": 2.0}, "type"),
        ({"type": "ntk_by_parts", "factor": 2.0}, "ntk_by_parts"),
        ({"type": "linear"}, "factor"),
        ({"type": "linear", "factor": 2.0, "scale": 3}, "scale"),
        ({"type": "yarn", "factor": 2.0, "attention_factor": 1.0}, "attention_factor"),
        ({"type": "yarn", "factor": 2.0}, "original_max_position_embeddings"),
        ({"type": "default", "factor": 2.0}, "factor"),
        ({"type": "linear", "factor": 0}, "factor"),
        (["linear", 2.0], "mapping"),
    ],
)
def test_scaling_from_dict_rejects(d, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        scaling_from_dict(d)


def test_scaling_from_dict_default_is_plain_rope() -> None:
    assert scaling_from_dict(None) is None
    assert scaling_from_dict({"type": "default"}) is None
    assert scaling_to_dict(None) == {"type": "default"}


@pytest.mark.parametrize("scaling", [s for s, _ in every_scaling(8)], ids=repr)
def test_dict_round_trip(scaling: Scaling) -> None:
    as_dict = scaling_to_dict(scaling)
    assert as_dict["type"] == scaling.type_name
    assert scaling_from_dict(as_dict) == scaling
    assert scaling_from_dict(json.loads(json.dumps(as_dict))) == scaling  # JSON-safe


def test_dict_form_normalises_numbers_and_lists() -> None:
    scaling = scaling_from_dict(
        {
            "type": "longrope",
            "short_factor": [1, 2],
            "long_factor": [3, 4],
            "factor": 2,
            "original_max_position_embeddings": 64,
        }
    )
    assert scaling == LongRoPE((1.0, 2.0), (3.0, 4.0), 64, factor=2.0)
    assert hash(scaling) == hash(LongRoPE((1.0, 2.0), (3.0, 4.0), 64, factor=2.0))
    assert "2 values" in repr(scaling)


def test_registry_converts_the_dict_form_once() -> None:
    from posenc.registry import ModelDims, build_encoding

    dims = ModelDims(dim=64, num_heads=4)
    spec = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
    rope = build_encoding("rope", dims, {"scaling": spec})
    assert isinstance(rope, RotaryEmbedding) and rope.scaling == YaRN(4.0, 128)
    assert rope.attention_factor == YaRN(4.0, 128).attention_factor
    assert build_encoding("rope", dims, scaling=Linear(2.0)).scaling == Linear(2.0)
    assert build_encoding("rope", dims, scaling=None).scaling is None
    with pytest.raises(ValueError, match="beta"):
        build_encoding("rope", dims, {"scaling": {**spec, "beta": 3}})


def test_scaling_types_is_the_table_the_conversion_reads() -> None:
    from posenc.rotary.scaling import Scaling, scaling_from_dict, scaling_types

    types = scaling_types()
    assert {"linear", "dynamic", "yarn", "llama3", "longrope"} <= set(types)
    for name, cls in types.items():
        assert issubclass(cls, Scaling) and cls.type_name == name
    types.clear()  # a copy: the conversion's table is untouched
    assert isinstance(scaling_from_dict({"type": "linear", "factor": 2.0}), Scaling)


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

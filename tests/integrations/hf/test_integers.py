"""Integer keys of an HF config: a numpy integer (a config built from arrays) or a 0-d integer
tensor is read as the Python int it holds; bool and floats get the shared message of
:func:`posenc._validate.check_int`, naming the key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from posenc.integrations.hf import (
    frequencies_from_config,
    layer_schedule_from_config,
    mrope_from_config,
)
from posenc.integrations.hf.rope_parameters import read_rope_parameters

SHARED = r"must be .*: an int, numpy integer or 0-d integer tensor; got"


def _read(n: Any) -> tuple[Any, ...]:
    rope = read_rope_parameters(
        {"hidden_size": 8 * n, "num_attention_heads": n, "rope_theta": 100.0}
    )
    return rope.head_dim, rope.rotary_dim


def _yarn(n: Any) -> tuple[Any, ...]:
    config = {
        "head_dim": 8,
        "max_position_embeddings": n,
        "rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 100.0},
    }
    scaling = read_rope_parameters(config).scaling
    assert scaling is not None
    return (scaling.original_max_position_embeddings,)  # type: ignore[attr-defined]


def _logn(n: Any) -> tuple[Any, ...]:
    layers = layer_schedule_from_config(
        {"use_logn_attn": True, "seq_length": 16 * n, "num_hidden_layers": n}
    )
    scale = layers[0].query_scale
    assert scale is not None
    return len(layers), scale.length


def _mrope(n: Any) -> tuple[Any, ...]:
    rope = read_rope_parameters(
        {"head_dim": 16, "rope_parameters": {"rope_theta": 1e6, "mrope_section": [n, 3, 2]}}
    )
    assert rope.mrope is not None
    return rope.mrope[0]


READS = [("head_dim from hidden_size", _read), ("max_position_embeddings", _yarn)]
READS += [("seq_length with use_logn_attn", _logn), ("mrope_section", _mrope)]


@pytest.mark.parametrize("value", [np.int64(3), torch.tensor(3)], ids=["np.int64", "tensor"])
@pytest.mark.parametrize(("what", "call"), READS, ids=[w for w, _ in READS])
def test_integer_keys_read_integral_scalars_as_ints(
    what: str, call: Callable[[Any], tuple[Any, ...]], value: object
) -> None:
    expected, got = call(3), call(value)
    assert got == expected
    assert all(type(x) is int for x in got), got


@pytest.mark.parametrize("value", [True, 2.5], ids=["bool", "float"])
@pytest.mark.parametrize(("what", "call"), READS, ids=[w for w, _ in READS])
def test_integer_keys_refuse_bool_and_float_with_the_shared_message(
    what: str, call: Callable[[Any], tuple[Any, ...]], value: object
) -> None:
    with pytest.raises(ValueError, match=SHARED):
        call(value)


@pytest.mark.parametrize("value", [np.int64(64), torch.tensor(64)], ids=["np.int64", "tensor"])
def test_frequencies_read_an_integral_seq_len(value: object) -> None:
    config = {
        "head_dim": 8,
        "max_position_embeddings": 32,
        "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 100.0},
    }
    inv_freq, factor = frequencies_from_config(config, seq_len=value)  # type: ignore[arg-type]
    want_freq, want_factor = frequencies_from_config(config, seq_len=64)
    assert_close(inv_freq, want_freq, rtol=0, atol=0)
    assert factor == want_factor


@pytest.mark.parametrize("value", [True, 2.5], ids=["bool", "float"])
def test_frequencies_refuse_bool_and_float_seq_len(value: object) -> None:
    with pytest.raises(ValueError, match=r"^seq_len " + SHARED):
        frequencies_from_config({"head_dim": 8}, seq_len=value)  # type: ignore[arg-type]


def test_mrope_from_config_reads_numpy_sections() -> None:
    config = {"head_dim": 16, "rope_parameters": {"rope_theta": 1e6, "mrope_section": [2, 3, 3]}}
    numpy_config = {
        "head_dim": np.int64(16),
        "rope_parameters": {"rope_theta": 1e6, "mrope_section": list(np.array([2, 3, 3]))},
    }
    positions = torch.arange(30).reshape(3, 10)  # (t/h/w, seq)
    want = mrope_from_config(config).angles(positions)
    got = mrope_from_config(numpy_config).angles(positions)
    assert_close(got, want, rtol=0, atol=0)

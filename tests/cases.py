"""Encoding configurations every cross-cutting test runs over (name, kwargs, id)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from posenc.positions import grid_positions
from posenc.registry import ModelDims, build_encoding, encoding_spec, list_encodings

# Every registered encoding, plus the variants whose code paths differ.
ALL_CASES: list[tuple[str, dict[str, Any]]] = [
    ("nope", {}),
    ("sinusoidal", {}),
    ("scaled_sinusoidal", {}),
    ("learned", {}),
    ("complex_order", {}),
    ("rope", {}),
    ("rope", {"layout": "interleaved", "rotary_dim": 8}),
    ("xpos", {}),
    ("alibi", {}),
    ("alibi", {"mode": "symmetric", "num_biased_heads": 2}),
    ("t5", {}),
    ("t5", {"num_buckets": 8, "max_distance": 20}),
    ("kerple", {}),
    ("kerple", {"kernel": "power"}),
    ("sandwich", {}),
    ("fire", {}),
    ("dynamic", {}),
    ("shaw", {"max_distance": 3}),
    ("shaw", {"max_distance": 3, "values": False}),
    ("xl", {}),
    ("deberta", {}),
    ("deberta", {"share_att_key": False, "position_buckets": 0, "max_relative_positions": 6}),
    ("cope", {}),
    ("dape", {}),
    ("dape", {"inner": "kerple"}),
    # segment methods, with windows the tests' 8-16 tokens cross (causal only)
    ("self_extend", {"window": 4, "group": 2}),
    ("dual_chunk", {"chunk_size": 6, "local_window": 2}),
    ("rerope", {"window": 3}),
    ("rerope", {"window": 3, "leak": 2.0}),
    ("lm_infinite", {"local_window": 4, "global_tokens": 2}),
    ("sinks", {"sinks": 2, "window": 3}),
    # softmax wrappers around an inner encoding; HoPE; CAPE with its augmentation on
    ("softcap", {"cap": 2.0}),
    ("softcap", {"inner": "alibi", "cap": 2.0}),
    ("learned_sinks", {"inner": "t5", "init_std": 1.0}),
    ("hope", {"train_length": 8}),
    ("cape", {"max_global_shift": 3.0, "max_local_shift": 0.5, "max_global_scaling": 1.2}),
]

#: Encodings defined for causal attention only (an encoder refuses them): the registry's
#: ``causal_only`` (xPos, CoPE, the segment methods).
CAUSAL_ONLY = {"xpos", "cope", "self_extend", "dual_chunk", "rerope", "lm_infinite", "sinks"}


def case_id(name: str, kwargs: dict[str, Any]) -> str:
    return name + "".join(f"-{k}={v}" for k, v in kwargs.items())


def all_cases() -> list[Any]:
    return [pytest.param(n, kw, id=case_id(n, kw)) for n, kw in ALL_CASES]


def attention_side_cases() -> list[Any]:
    """Cases that act inside attention (rotary, bias, contextual)."""
    side = {"rope", "xpos", "alibi", "t5", "shaw", "xl"}
    return [pytest.param(n, kw, id=case_id(n, kw)) for n, kw in ALL_CASES if n in side]


#: Model shapes the registered-encoding helpers build for: a sequence model, and an image
#: model on a 3 × 4 patch grid (12 tokens, bidirectional) for the grid encodings.
SEQUENCE_DIMS = ModelDims(dim=32, num_heads=4, max_seq_len=64, vocab_size=50)
IMAGE_DIMS = ModelDims(dim=32, num_heads=4, max_seq_len=12, causal=False, grid=(3, 4))
SEQ = 12


def registered_cases() -> list[Any]:
    """ALL_CASES, plus every registered encoding they leave out (the grid encodings, Fourier
    features), with its defaults: one case per code path of every registered encoding."""
    named = {n for n, _ in ALL_CASES}
    cases = list(ALL_CASES) + [(s.name, {}) for s in list_encodings() if s.name not in named]
    return [pytest.param(n, kw, id=case_id(n, kw)) for n, kw in cases]


def build_case(name: str, kwargs: dict[str, Any], **dims: Any) -> Any:
    """Encoding ``name`` for the sequence model (the image model for a grid encoding)."""
    base = IMAGE_DIMS if encoding_spec(name).needs_grid else SEQUENCE_DIMS
    return build_encoding(name, dataclasses.replace(base, **dims), kwargs)


def case_positions(encoding: Any, seq: int = SEQ) -> Any:
    """Positions of ``seq`` tokens an encoding takes: ``arange`` on each of its axes (the
    image grid's rows and columns for a two-axis encoding of the 3 × 4 grid)."""
    axes = encoding.num_axes
    if axes == 1:
        return torch.arange(seq)
    if axes == 2 and seq == 12:
        return grid_positions(3, 4)
    return torch.arange(seq).expand(axes, seq)

"""The runnable examples run and show what they claim (on their returned numbers)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kv_reuse_moves_a_cached_document_exactly_and_shows_the_rag_gap() -> None:
    pytest.importorskip("transformers")
    results = load("kv_reuse").run()
    scale = results["logit scale: max |logits|"]
    exact = results["exact: max |Δlogits|"]
    # float32 rounding: the moved keys differ from fresh ones by ≤ (6 + √2)·2⁻²⁴ of a pair's
    # norm (tests/rotary/test_rerotation.py); through 4 layers a few float32 ulps of the logits
    assert exact <= 64 * 2.0**-24 * scale
    assert results["exact, not moved: max |Δlogits|"] > 100 * exact  # the move matters
    # RAG: layer 0's keys are exact, deeper ones are not. The bound of test_rerotation,
    # (6 + √2)·2⁻²⁴ of a pair's norm, is at most √2 times that of the largest key element
    first, *deeper = results["rag: key deviation per layer"]
    assert first <= (6 + math.sqrt(2)) * math.sqrt(2) * 2.0**-24
    assert all(d > 1e-2 for d in deeper)
    assert results["rag: max |Δlogits|"] > 1000 * exact
    assert all(math.isfinite(v) for v in (exact, results["rag, not moved: max |Δlogits|"]))

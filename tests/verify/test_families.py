"""Correct ports of each major family pass ``verify``: HF transformers' own rotary modules
(where installed) and posenc's production modules in float32, and their bfloat16 tables."""

from __future__ import annotations

import pytest
import torch

from posenc.verify import rope_spec, verify
from tools.verify_cases import FAMILIES, hf_arrays, hf_available, posenc_arrays, positions_of

CASES = [(fam, layer_type) for fam in FAMILIES for layer_type in fam.layer_types]


def _id(case) -> str:  # type: ignore[no-untyped-def]
    fam, layer_type = case
    return f"{fam.name.split(' (')[0]}-{layer_type or 'all'}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_posenc_float32_and_bfloat16_tables_pass(case) -> None:  # type: ignore[no-untyped-def]
    fam, layer_type = case
    positions = positions_of(fam)
    tables = posenc_arrays(fam, layer_type, positions)
    for dtype in (torch.float32, torch.bfloat16):
        arrays = {k: v.to(dtype) for k, v in tables.items()}
        report = verify(
            fam.config, {**arrays, "positions": positions}, layer_type=layer_type, layout="pairs"
        )
        assert report.ok, report.summary()


@pytest.mark.skipif(not hf_available(), reason="transformers is not installed")
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_hf_rotary_modules_pass_with_their_rotated_q_and_k(case) -> None:  # type: ignore[no-untyped-def]
    fam, layer_type = case
    positions = positions_of(fam)
    arrays = hf_arrays(fam, layer_type, positions)
    assert {"cos", "sin", "q_rotated", "k_rotated"} <= set(arrays)
    pairs = rope_spec(fam.config, layer_type).rotary_dim // 2
    layout = "pairs" if arrays["cos"].shape[-1] == pairs else "half"
    report = verify(
        fam.config, {**arrays, "positions": positions}, layer_type=layer_type, layout=layout
    )  # type: ignore[arg-type]
    assert report.ok, report.summary()
    low = hf_arrays(fam, layer_type, positions, torch.bfloat16)
    assert low["cos"].dtype == torch.bfloat16
    report = verify(
        fam.config, {**low, "positions": positions}, layer_type=layer_type, layout=layout
    )  # type: ignore[arg-type]
    assert report.ok, report.summary()

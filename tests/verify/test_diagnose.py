"""verify(): the tolerance rule, where a mismatch is, hints, the report forms, bad input."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.verify import bug_class, reference_arrays, verify
from tools.verify_cases import DEEPSEEK_V3, LLAMA31, QWEN35

CONFIG = {"head_dim": 64, "rope_theta": 10000.0}
POSITIONS = torch.arange(0, 2048, 8)


def _tables(config=CONFIG, positions=POSITIONS, dtype=torch.float32):  # type: ignore[no-untyped-def]
    ref = reference_arrays(config, positions)
    return {"cos": ref["cos"].to(dtype), "sin": ref["sin"].to(dtype), "positions": positions}


def test_one_entry_off_by_more_than_the_tolerance_is_located() -> None:
    arrays = _tables()
    arrays["sin"][3, 40] += 1e-4  # row 3 = position 24, channel 40 = pair 8 (half layout)
    report = verify(CONFIG, arrays)
    assert not report.ok and report.cause is None
    sin = next(r for r in report.keys if r.key == "sin")
    assert (sin.mismatches, sin.first_row, sin.first_position, sin.channels) == (
        1,
        3,
        (24.0,),
        (40,),
    )
    assert next(r for r in report.keys if r.key == "cos").ok
    assert "pairs 8-8" in (report.hint or "")


def test_float32_arithmetic_passes_but_bfloat16_arithmetic_does_not() -> None:
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))  # HF's way
    angles = POSITIONS.float()[:, None] * inv_freq
    half = torch.cat((angles, angles), -1)
    assert verify(CONFIG, {"cos": half.cos(), "sin": half.sin(), "positions": POSITIONS}).ok
    low = half.to(torch.bfloat16).float()
    report = verify(CONFIG, {"cos": low.cos(), "sin": low.sin(), "positions": POSITIONS})
    assert report.cause is not None and report.cause.name == "tables_in_bf16"


def test_a_mismatch_in_low_frequencies_only_is_hinted_as_scaling() -> None:
    arrays = _tables()
    ref = reference_arrays({**CONFIG, "rope_theta": 10100.0}, POSITIONS)  # base slightly off
    for key in ("cos", "sin"):
        arrays[key][:, 24:32] = ref[key][:, 24:32].float()
        arrays[key][:, 56:64] = ref[key][:, 56:64].float()
    report = verify(CONFIG, arrays)
    assert report.cause is None and "low-frequency pairs" in (report.hint or "")


def test_hf_deepseek_order_of_rotated_q_and_k_is_equivalent_but_half_rotation_is_not() -> None:
    positions = torch.arange(0, 512, 4)
    q = torch.randn(1, 2, positions.numel(), 64)
    ref = reference_arrays(DEEPSEEK_V3, positions, q=q)
    order = [*range(0, 64, 2), *range(1, 64, 2)]
    permuted = {"q": q, "q_rotated": ref["q_rotated"][..., order].float(), "positions": positions}
    report = verify(DEEPSEEK_V3, permuted)
    assert report.ok and "de-interleaved" in (report.hint or "")
    buggy = bug_class("layout_swapped").build(DEEPSEEK_V3, positions, q=q)
    report = verify(
        DEEPSEEK_V3, {"q": q, "q_rotated": buggy["q_rotated"].float(), "positions": positions}
    )
    assert report.cause is not None and report.cause.name == "layout_swapped"


def test_report_forms_are_json_and_text_even_for_a_width_bug() -> None:
    positions = torch.arange(0, 256, 2)
    buggy = bug_class("partial_factor_ignored").build(QWEN35, positions)
    report = verify(QWEN35, {"cos": buggy["cos"], "sin": buggy["sin"], "positions": positions})
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["cause"] == "partial_factor_ignored" and data["sources"]
    assert data["arrays"][0]["shape"] == [128, 256] and data["arrays"][0]["reference_shape"] == [
        128,
        64,
    ]
    assert "shape differs" in report.summary() and "sources:" in report.summary()


def test_hf_shaped_tables_and_default_positions_are_read() -> None:
    ref = reference_arrays(LLAMA31, torch.arange(16))
    arrays = {"cos": ref["cos"][None].float(), "sin": ref["sin"][None].float()}  # (1, seq, d)
    assert verify(LLAMA31, arrays).ok  # positions default to 0 … seq-1


@pytest.mark.parametrize(
    ("arrays", "kwargs", "message"),
    [
        ({"cos": torch.zeros(4, 64), "extra": torch.zeros(1)}, {}, r"unknown key\(s\) \['extra'\]"),
        ({"positions": torch.arange(4)}, {}, r"at least one of \['cos'"),
        ({"q_rotated": torch.zeros(4, 64)}, {}, r"needs the unrotated input arrays\['q'\]"),
        (
            {"cos": torch.zeros(5, 64), "positions": torch.arange(4)},
            {},
            r"arrays\['cos'\] must be \(seq=4",
        ),
        ({"cos": torch.full((4, 64), float("nan"))}, {}, r"arrays\['cos'\] must be finite"),
        (
            {"cos": torch.zeros(4, 64)},
            {"layer_type": "full_attention"},
            r"layer_type must be one of",
        ),
        ({"cos": torch.zeros(4, 64)}, {"layout": "diagonal"}, r"layout must be one of"),
        ({"cos": torch.zeros(4, 64)}, {"component": "mlp"}, r"component must be one of"),
        (
            {"cos": torch.zeros(4, 64), "positions": -torch.arange(4)},
            {},
            r"positions must be non-negative",
        ),
        ({"cos": torch.zeros(4, 64), "positions": torch.zeros(3, 4)}, {}, r"no M-RoPE sections"),
        ({"cos": torch.zeros(4, 48)}, {}, r"arrays\['cos'\] has shape \(4, 48\); the reference"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(arrays, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        verify(CONFIG, arrays, **kwargs)


def test_a_config_that_is_not_a_config_is_an_error() -> None:
    with pytest.raises(ValueError, match="config must be"):
        verify(["not", "a", "config"], {"cos": torch.zeros(4, 64)})


def test_mrope_position_ids_from_token_types_are_checked_exactly() -> None:
    types = torch.tensor([0] * 3 + [1] * 6 + [0] * 4)
    grid = torch.tensor([[1, 4, 6]])  # merged 2×3 = 6 image tokens
    ref = reference_arrays(QWEN35, token_types=types, image_grid_thw=grid)
    arrays = {"token_types": types, "image_grid_thw": grid, "position_ids": ref["position_ids"]}
    assert verify(QWEN35, arrays).ok
    sequential = torch.arange(13).expand(3, -1)
    report = verify(QWEN35, {**arrays, "position_ids": sequential})
    assert report.cause is not None and report.cause.name == "mrope_sequential_ids"
    ids = next(r for r in report.keys if r.key == "position_ids")
    assert ids.first_row == 4  # the second image token: h or w differs from the index


def test_float64_arithmetic_refuses_float32_angles_and_says_so() -> None:
    positions = torch.arange(0, 65536, 61)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
    angles = positions.float()[:, None] * inv_freq
    half = torch.cat((angles, angles), -1)
    hf_way = {"cos": half.cos(), "sin": half.sin(), "positions": positions}
    assert verify(CONFIG, hf_way).ok
    report = verify(CONFIG, hf_way, arithmetic="float64")
    assert not report.ok and report.cause is None
    assert "computed in float32" in (report.hint or "")
    exact = _tables(positions=positions)
    assert verify(CONFIG, exact, arithmetic="float64").ok  # float64 phases rounded once
    with pytest.raises(ValueError, match="arithmetic must be one of"):
        verify(CONFIG, exact, arithmetic="float16")  # type: ignore[arg-type]

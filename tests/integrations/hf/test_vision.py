"""posenc's axial RoPE in place of HF's vision rotaries (posenc.integrations.hf.vision).

Parity per HF class: the adapter's whole cos/sin tables equal HF's (float32, HF's default
config) at a grid of coordinates with every axis distinct, or, for the classes that derive
their grid from an image, at the images' grids. Parity per model: tiny random vision models
(tools/hf_sweep/tiny.py, the sweep's builder) give HF's output after
``patch_rotary(model, vision=True)`` (≤ 5e-6) with every vision rotary replaced and run.
Properties: opt-in, unpatch, state_dict; refusals name what they refuse."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from torch import nn

from posenc.integrations.hf import patch_rotary, rotary_modules, unpatch_rotary
from posenc.integrations.hf.vision import (
    VISION_CONVENTIONS,
    VisionConvention,
    VisionRotaryAdapter,
    vision_adapter,
)

transformers = pytest.importorskip("transformers")
from tools.hf_sweep.sweep import TOLERANCE, output_and_rotary_calls  # noqa: E402
from tools.hf_sweep.tiny import build_tiny  # noqa: E402

#: HF class → (model folder, config class) in transformers 5.23.0.
HF_CLASSES: dict[str, tuple[str, str]] = {
    "CohereCompassVisionRotaryEmbedding": ("cohere_compass", "CohereCompassVisionConfig"),
    "Dots3NoteVisionRotaryEmbedding": ("dots3_note", "Dots3NoteVisionConfig"),
    "Ernie4_5_VLMoeVisionRotaryEmbedding": ("ernie4_5_vl_moe", "Ernie4_5_VLMoeVisionConfig"),
    "Exaone4_5_VisionRotaryEmbedding": ("exaone4_5", "Exaone4_5_VisionConfig"),
    "Glm4vVisionRotaryEmbedding": ("glm4v", "Glm4vVisionConfig"),
    "Glm4vMoeVisionRotaryEmbedding": ("glm4v_moe", "Glm4vMoeVisionConfig"),
    "Glm5NextVisionRotaryEmbedding": ("glm5_next", "Glm5NextVisionConfig"),
    "GlmOcrVisionRotaryEmbedding": ("glm_ocr", "GlmOcrVisionConfig"),
    "Lfm3VlVisionRotaryEmbedding": ("lfm3_vl", "Lfm3VlVisionConfig"),
    "MLCDRotaryEmbedding": ("mlcd", "MLCDVisionConfig"),
    "PaddleOCRVisionRotaryEmbedding": ("paddleocr_vl", "PaddleOCRVisionConfig"),
    "Qwen2_5OmniVisionRotaryEmbedding": ("qwen2_5_omni", "Qwen2_5OmniVisionEncoderConfig"),
    "Qwen2_5_VLVisionRotaryEmbedding": ("qwen2_5_vl", "Qwen2_5_VLVisionConfig"),
    "Qwen2VLVisionRotaryEmbedding": ("qwen2_vl", "Qwen2VLVisionConfig"),
    "Qwen3_5VisionRotaryEmbedding": ("qwen3_5", "Qwen3_5VisionConfig"),
    "Qwen3_5MoeVisionRotaryEmbedding": ("qwen3_5_moe", "Qwen3_5MoeVisionConfig"),
    "Qwen3OmniMoeVisionRotaryEmbedding": ("qwen3_omni_moe", "Qwen3OmniMoeVisionEncoderConfig"),
    "Qwen3VLVisionRotaryEmbedding": ("qwen3_vl", "Qwen3VLVisionConfig"),
    "Qwen3VLMoeVisionRotaryEmbedding": ("qwen3_vl_moe", "Qwen3VLMoeVisionConfig"),
    "Qwen4ExpVisionRotaryEmbedding": ("qwen4_exp", "Qwen4ExpVisionConfig"),
    "VideoLlama3VisionRotaryEmbedding": ("video_llama_3", "VideoLlama3VisionConfig"),
    "MuseGlimmerVisionRotaryEmbedding": ("muse_glimmer", "MuseGlimmerVisionConfig"),
    "MuseSparkVisionRotaryEmbedding": ("muse_spark", "MuseSparkVisionConfig"),
    "Sam3ViTRotaryEmbedding": ("sam3", "Sam3ViTConfig"),
    "Sam2VideoVisionRotaryEmbedding": ("sam2_video", "Sam2VideoConfig"),
    "Sam3TrackerVideoVisionRotaryEmbedding": ("sam3_tracker_video", "Sam3TrackerVideoConfig"),
    "EdgeTamVideoVisionRotaryEmbedding": ("edgetam_video", "EdgeTamVideoConfig"),
    "Inkling2VisionRotaryEmbedding": ("inkling2", "Inkling2VisionConfig"),
    "Step3p7VisionRotaryEmbedding": ("step3p7", "Step3p7VisionConfig"),
    "Kimi_K25VisionRotaryEmbedding": ("kimi_k25", "Kimi_K25VisionConfig"),
    "MiniMaxM3VLVisionRotaryEmbedding": ("minimax_m3_vl", "MiniMaxM3VLVisionConfig"),
    "PixtralVisionRotaryEmbedding": ("pixtral", "PixtralVisionConfig"),
    "Gemma4VisionRotaryEmbedding": ("gemma4", "Gemma4VisionConfig"),
    "EomtDinov3RotaryEmbedding": ("eomt_dinov3", "EomtDinov3Config"),
    "EfficientLoFTRRotaryEmbedding": ("efficientloftr", "EfficientLoFTRConfig"),
}


def _hf_module(name: str) -> nn.Module:
    """HF's rotary ``name`` built from its config class's defaults."""
    folder, config_name = HF_CLASSES[name]
    module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    config = getattr(transformers, config_name)()
    hf: nn.Module = getattr(module, name)(config)
    return hf.eval()


def _coordinates(convention: VisionConvention) -> torch.Tensor:
    """A 7 × 5 (× 3) grid of coordinates, each axis on its own scale (rows 0…18, columns
    0…8, time 0…4), so that a swapped axis, frequency or layout changes the tables."""
    steps = [torch.arange(7) * 3, torch.arange(5) * 2, torch.arange(3) * 2][: convention.num_axes]
    grid = torch.stack(torch.meshgrid(*steps, indexing="ij"), dim=-1)
    positions = grid.reshape(-1, convention.num_axes)  # (N, axes)
    return positions[None] if convention.batched else positions


def test_every_convention_is_a_tested_hf_class() -> None:
    assert set(VISION_CONVENTIONS) == set(HF_CLASSES)


@pytest.mark.parametrize("name", sorted(HF_CLASSES))
def test_tables_equal_hf(name: str) -> None:
    hf = _hf_module(name)
    adapter = vision_adapter(hf)
    convention = VISION_CONVENTIONS[name]
    if convention.positions == "given":
        positions = _coordinates(convention)
        x = torch.zeros(1)
        expected, got = hf(x, positions), adapter(x, positions)
        # float coordinates too (SAM 3 rescales its windows' positions)
        floats = positions * 0.75
        pairs = [(expected, got), (hf(x, floats), adapter(x, floats))]
    else:  # the grid comes from an image / feature map (DINOv3: 3 × 4 patches of 16)
        image = torch.zeros(1, 3, 48, 64) if name.startswith("Eomt") else torch.zeros(1, 1, 28, 20)
        pairs = [(hf(image), adapter(image))]
    for hf_tables, tables in pairs:
        for ours, theirs in zip(tables, hf_tables, strict=True):
            assert ours.dtype == theirs.dtype
            torch.testing.assert_close(ours, theirs)


def test_tables_follow_the_input_dtype_only_where_hf_casts() -> None:
    """Pixtral casts to x.dtype; Qwen2-VL keeps float32 whatever x is."""
    positions = _coordinates(VisionConvention())
    x = torch.zeros(1, dtype=torch.bfloat16)
    pixtral = vision_adapter(_hf_module("PixtralVisionRotaryEmbedding"))
    qwen = vision_adapter(_hf_module("Qwen2VLVisionRotaryEmbedding"))
    assert pixtral(x, positions)[0].dtype == torch.bfloat16
    assert qwen(x, positions)[0].dtype == torch.float32


@pytest.mark.parametrize(
    ("family", "convention"),
    [
        ("pixtral", "alternating frequencies, rows then columns, half"),
        ("mlcd", "shared frequencies, rows then columns, half"),
        ("glm5_next", "shared frequencies, rows then columns, half (Qwen2-VL's)"),
        ("sam3", "rows then columns, interleaved, (1, N, width), rescaled windows"),
        ("inkling2", "columns then rows, interleaved"),
        ("eomt_dinov3", "patch centres in [-1, 1], 2π"),
        ("efficientloftr", "feature-map grid, frequency-major, interleaved"),
    ],
)
def test_vision_model_output_equals_hf(family: str, convention: str) -> None:
    built = build_tiny(family)
    assert not isinstance(built, str), built
    model, inputs, _ = built
    hf_vision = [n for n, m in rotary_modules(model) if type(m).__name__ in VISION_CONVENTIONS]
    assert hf_vision, convention
    expected, hf_called = output_and_rotary_calls(model, inputs)
    patch_rotary(model, keep_non_text=True, vision=True)
    adapters = [n for n, m in model.named_modules() if isinstance(m, VisionRotaryAdapter)]
    assert sorted(adapters) == sorted(hf_vision)
    got, called = output_and_rotary_calls(model, inputs)
    assert called == hf_called and set(adapters) <= called
    assert (got - expected).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize(
    ("family", "model_type", "convention"),
    [
        ("kimi_k25", "kimi_k25_vision", "per frequency a column then a row pair, half"),
        ("step3p7", "step3p5_vision", "columns then rows, half"),
        ("minimax_m3_vl", "minimax_m3_vl_vision", "t, rows, columns; partial, half"),
        ("gemma4", "gemma4_vision", "(batch, N, 2) positions, half per axis"),
    ],
)
def test_vl_vision_tower_output_equals_hf(family: str, model_type: str, convention: str) -> None:
    """The conventions no sweep row runs: the VL family's vision tower, built tiny on its own.
    Compared at float32's own tolerance (assert_close): Gemma 4's pooled features are of
    order 60, where one float32 rounding is 7.6e-6."""
    built = build_tiny(family, model_type=model_type)
    assert not isinstance(built, str), built
    model, inputs, _ = built
    expected, hf_called = output_and_rotary_calls(model, inputs)
    patch_rotary(model, vision=True)
    adapters = [n for n, m in model.named_modules() if isinstance(m, VisionRotaryAdapter)]
    got, called = output_and_rotary_calls(model, inputs)
    assert adapters and called == hf_called == set(adapters), convention
    torch.testing.assert_close(got.float(), expected.float())  # outputs are float32 models'


def _qwen2_vl() -> nn.Module:
    built = build_tiny("qwen2_vl")
    assert not isinstance(built, str)
    return built[0]


def test_vision_rotaries_are_opt_in() -> None:
    """Without vision=True, Qwen2-VL's vision rotary is refused (the message says how to opt
    in) or, with keep_non_text, left to HF; with it, replaced."""
    model = _qwen2_vl()
    with pytest.raises(ValueError, match=r"model\.visual\.rotary_pos_emb.*vision=True"):
        patch_rotary(model)
    patch_rotary(model, keep_non_text=True)
    assert type(model.get_submodule("model.visual.rotary_pos_emb")).__name__ == (
        "Qwen2VLVisionRotaryEmbedding"
    )
    unpatch_rotary(model)
    patch_rotary(model, vision=True)
    assert isinstance(model.get_submodule("model.visual.rotary_pos_emb"), VisionRotaryAdapter)


def test_unpatch_restores_hf_modules_and_state_dict_is_unchanged() -> None:
    model = _qwen2_vl()
    before = dict(model.named_modules())
    keys = set(model.state_dict())
    patch_rotary(model, vision=True)
    assert set(model.state_dict()) == keys
    unpatch_rotary(model)
    after = dict(model.named_modules())
    assert after.keys() == before.keys()
    assert all(after[name] is module for name, module in before.items())


def test_vision_flag_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="vision must be True or False, got 'yes'"):
        patch_rotary(_qwen2_vl(), vision="yes")  # type: ignore[arg-type]


def test_a_module_that_breaks_its_convention_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that changed a class's layout: the patch-time check refuses it."""
    name = "Qwen2VLVisionRotaryEmbedding"
    monkeypatch.setitem(VISION_CONVENTIONS, name, VisionConvention(axis_order=(1, 0)))
    with pytest.raises(ValueError, match=f"{name}'s tables differ from its convention"):
        vision_adapter(_hf_module(name))


def test_a_class_without_convention_is_refused() -> None:
    class OtherVisionRotaryEmbedding(nn.Module):
        pass

    with pytest.raises(ValueError, match="OtherVisionRotaryEmbedding has no vision convention"):
        vision_adapter(OtherVisionRotaryEmbedding())


def test_dinov3_rotary_refuses_training_mode() -> None:
    """HF jitters DINOv3's patch centres in training; the adapter does not, so it refuses."""
    adapter = vision_adapter(_hf_module("EomtDinov3RotaryEmbedding"))
    adapter.train()
    with pytest.raises(ValueError, match=r"jitters its patch centres in training.*eval\(\)"):
        adapter(torch.zeros(1, 3, 48, 64))
    hf = _hf_module("EomtDinov3RotaryEmbedding").train()
    with pytest.raises(ValueError, match="jitters its patch centres"):
        vision_adapter(hf)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"axis_order": (0, 2)}, r"axis_order must be a permutation of 0\.\.N-1, got \(0, 2\)"),
        ({"axis_order": (0, 1, 2), "split": "alternating"}, "split 'alternating' needs 2 axes"),
    ],
)
def test_convention_validates(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VisionConvention(**kwargs)

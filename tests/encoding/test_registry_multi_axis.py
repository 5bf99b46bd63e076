"""The multi-axis RoPEs by name (``rope_axial``, ``rope_mixed``, ``mrope``): built from a
model's shape as their presets, and fed the positions they need."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import hooks_of
from posenc.models import DecoderLM, ModelConfig
from posenc.positions.multimodal import IMAGE, TEXT, mrope_position_ids
from posenc.registry import ModelDims, build_encoding, list_encodings
from posenc.rotary import MultiAxisRotary


def test_the_readme_rotary_methods_are_registered() -> None:
    names = {spec.name for spec in list_encodings()}
    assert {"rope", "xpos", "rope_axial", "rope_mixed", "rope_2d", "mrope"} <= names


@pytest.mark.parametrize(
    ("head_dim", "sections"), [(128, (16, 24, 24)), (64, (8, 12, 12)), (16, (2, 3, 3))]
)
def test_mrope_splits_the_pairs_as_qwen2_vl(head_dim: int, sections: tuple[int, ...]) -> None:
    built = build_encoding("mrope", ModelDims(dim=4 * head_dim, num_heads=4))
    want = MultiAxisRotary.mrope(head_dim, sections)
    assert built.num_axes == 3
    assert torch.equal(built.frequencies, want.frequencies)
    interleaved = build_encoding("mrope", ModelDims(dim=128, num_heads=1), interleaved=True)
    assert torch.equal(
        interleaved.frequencies, MultiAxisRotary.mrope(128, interleaved=True).frequencies
    )


def test_mrope_refuses_a_head_too_narrow_for_three_axes() -> None:
    with pytest.raises(ValueError, match="mrope needs head_dim >= 6"):
        build_encoding("mrope", ModelDims(dim=8, num_heads=2))


def _model(pos: str, **pos_kwargs: object) -> DecoderLM:
    torch.manual_seed(0)
    config = ModelConfig(dim=32, depth=2, num_heads=2, pos=pos, pos_kwargs=pos_kwargs)
    return DecoderLM(config).eval()


def test_mrope_model_on_text_is_the_rope_model() -> None:
    """Text numbers all three axes alike, so M-RoPE's rotation is 1D RoPE's (base 1e6)."""
    tokens = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        rope = _model("rope", base=1_000_000.0)(tokens)
        mrope = _model("mrope")(tokens)
        explicit = _model("mrope")(tokens, positions=torch.arange(12).expand(3, 2, 12))
    assert_close(mrope, rope, rtol=0, atol=1e-6)
    assert torch.equal(explicit, mrope)


def test_mrope_model_reads_image_positions_and_decodes_after_them() -> None:
    types = torch.tensor([[TEXT] * 2 + [IMAGE] * 4 + [TEXT] * 2])
    positions, _ = mrope_position_ids(types, image_grid_thw=[[1, 4, 4]])
    model = _model("mrope")
    tokens = torch.randint(0, 256, (1, 9))
    with torch.no_grad():
        full = model(tokens, positions=torch.cat([positions, positions[:, :, -1:] + 1], -1))
        text_only = model(tokens[:, :8])
        cache = model.new_cache()
        model(tokens[:, :8], positions=positions, cache=cache)
        step = model(tokens[:, 8:], cache=cache)  # continues at max + 1 on every axis
    assert not torch.allclose(full[:, :8], text_only)  # the image's grid positions count
    assert_close(step, full[:, 8:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["sinusoidal_grid", "rope_axial", "learned_factorized"])
def test_grid_encodings_read_one_axis_per_entry_of_a_video_grid(name: str) -> None:
    """A (time, height, width) grid gives the N-axis grid encodings three position axes."""
    encoding = build_encoding(name, ModelDims(dim=48, num_heads=4, grid=(2, 3, 4), causal=False))
    assert hooks_of(encoding).num_axes == 3


@pytest.mark.parametrize("name", ["sinusoidal_2d", "rope_2d", "rope_mixed", "learned_2d"])
def test_two_dimensional_encodings_refuse_a_video_grid_naming_it(name: str) -> None:
    dims = ModelDims(dim=48, num_heads=4, grid=(2, 3, 4), causal=False)
    with pytest.raises(ValueError, match=r"grid must be \(height, width\) for this 2D encoding"):
        build_encoding(name, dims)

"""Image (and video) models by name: ``ModelConfig(grid=..., patch_size=...)``.

Every encoding defined on a grid builds, runs and trains in ``EncoderClassifier`` from its name;
the default positions are the grid's, row-major; the patch embedding is ViT's convolution;
a missing or inconsistent grid raises naming the field.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.testing import assert_close

from posenc.models import DecoderLM, EncoderClassifier, ModelConfig
from posenc.models.patches import patchify
from posenc.positions import grid_positions
from posenc.registry import list_encodings

#: every registered encoding defined on a grid, and those reading a grid's coordinates
GRID_ENCODINGS = [spec.name for spec in list_encodings() if spec.needs_grid]
IMAGE_ENCODINGS = [*GRID_ENCODINGS, "fourier", "learnable_fourier"]


def _config(pos: str, **changes: object) -> ModelConfig:
    fields: dict[str, object] = {
        "dim": 32,
        "depth": 2,
        "num_heads": 2,
        "pos": pos,
        "grid": (4, 4),
        "patch_size": 2,
        **changes,
    }
    return ModelConfig(**fields)  # type: ignore[arg-type]


def _unpatchify(patches: Tensor, grid: tuple[int, int], patch: int, channels: int) -> Tensor:
    """(batch, rows·cols, channels·p·p) → (batch, channels, rows·p, cols·p)."""
    rows, cols = grid
    blocks = patches.reshape(-1, rows, cols, channels, patch, patch).permute(0, 3, 1, 4, 2, 5)
    return blocks.reshape(-1, channels, rows * patch, cols * patch)


def _default_positions(model: EncoderClassifier, grid: tuple[int, ...]) -> Tensor:
    """The grid's positions as the model should number its tokens: (row, column[, ...]) for
    an encoding reading one axis per grid axis, the row-major index for one reading one."""
    axes = model.trunk.position_hooks.num_axes
    return (
        grid_positions(*grid) if axes == len(grid) and axes > 1 else torch.arange(math.prod(grid))
    )


@pytest.mark.parametrize("pos", IMAGE_ENCODINGS)
def test_every_grid_encoding_builds_runs_and_trains_by_name(pos: str) -> None:
    torch.manual_seed(0)
    model = EncoderClassifier(_config(pos), num_classes=10)
    for parameter in model.encoding.parameters():  # type: ignore[union-attr]
        torch.nn.init.normal_(parameter, std=0.5)  # tiny inits: make the encoding count
    images = torch.randn(3, 3, 8, 8)
    logits = model(images)
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
    with torch.no_grad():
        # the default positions are the grid's, row-major
        positions = _default_positions(model, (4, 4))
        assert torch.equal(model(images, positions), logits.detach())
        # moving each patch with its position leaves the logits; without it, they change
        perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
        permuted = _unpatchify(patchify(images, 2)[:, perm], (4, 4), 2, 3)
        assert_close(model(permuted, positions[..., perm]), logits, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(model(permuted), logits, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("pos", GRID_ENCODINGS)
def test_the_encoding_takes_its_sizes_from_the_grid(pos: str) -> None:
    model = EncoderClassifier(_config(pos, grid=(2, 4), patch_size=4), num_classes=10)
    encoding: Any = model.encoding
    if hasattr(encoding, "height"):
        assert (encoding.height, encoding.width) == (2, 4)
    elif hasattr(encoding, "size"):
        assert tuple(encoding.size) == (2, 4)
    else:
        assert encoding.num_axes == 2
    assert model(torch.randn(1, 3, 8, 16)).shape == (1, 10)


@pytest.mark.parametrize("pos", ["rope_axial", "learned_factorized", "liere", "mrope"])
def test_a_video_grid_of_token_ids(pos: str) -> None:
    """(frames, height, width) in token mode: positions (t, row, column) by default."""
    grid = (2, 3, 4)
    torch.manual_seed(0)
    model = EncoderClassifier(_config(pos, dim=48, grid=grid, patch_size=None), num_classes=5)
    tokens = torch.randint(0, 256, (2, 24))
    logits = model(tokens)
    assert logits.shape == (2, 5)
    assert model.trunk.position_hooks.num_axes == 3
    assert torch.equal(model(tokens, grid_positions(*grid)), logits)


def test_the_patch_embedding_is_vits_convolution() -> None:
    """patchify + Linear is Conv2d(kernel = stride = patch) with the same weights."""
    torch.manual_seed(0)
    model = EncoderClassifier(_config("rope_axial", in_channels=3), num_classes=10)
    linear = model.trunk.patch_embed
    assert linear is not None
    images = torch.randn(2, 3, 8, 8)
    conv = F.conv2d(images, linear.weight.reshape(32, 3, 2, 2), linear.bias, stride=2)
    expected = conv.flatten(2).transpose(1, 2)  # (batch, rows·cols, dim), row-major
    assert_close(linear(patchify(images, 2)), expected, rtol=1e-5, atol=1e-6)


def test_patchify_is_row_major_channel_major() -> None:
    image = torch.arange(32.0).reshape(1, 2, 4, 4)
    patches = patchify(image, 2)
    assert patches.shape == (1, 4, 8)
    assert_close(patches[0, 1], torch.tensor([2.0, 3, 6, 7, 18, 19, 22, 23]))
    assert_close(_unpatchify(patches, (2, 2), 2, 2), image)
    with pytest.raises(ValueError, match="patch_size=3"):
        patchify(image, 3)
    with pytest.raises(ValueError, match="patch_size"):
        patchify(image, 0)


def test_another_grid_through_positions() -> None:
    """Positions place images of another size (12×12: a 6×6 grid) as a model built for it."""
    torch.manual_seed(0)
    trained = EncoderClassifier(_config("rope_axial"), num_classes=10)
    torch.manual_seed(0)
    larger = EncoderClassifier(_config("rope_axial", grid=(6, 6)), num_classes=10)
    images = torch.randn(2, 3, 12, 12)
    assert torch.equal(trained(images, grid_positions(6, 6)), larger(images))


@pytest.mark.parametrize("pos", ["learned_2d", "rope_mixed", "liere"])
def test_meta_build_then_reset_parameters_is_the_constructor(pos: str) -> None:
    config = _config(pos)
    torch.manual_seed(0)
    built = EncoderClassifier(config, num_classes=10)
    with torch.device("meta"):
        meta = EncoderClassifier(config, num_classes=10)
    meta.to_empty(device="cpu")
    torch.manual_seed(0)
    meta.reset_parameters()
    expected = built.state_dict()
    for key, value in meta.state_dict().items():
        assert torch.equal(value, expected[key]), key


# ---- errors naming the field -----------------------------------------------------------


@pytest.mark.parametrize("pos", GRID_ENCODINGS)
def test_a_grid_encoding_without_grid_names_grid(pos: str) -> None:
    with pytest.raises(ValueError, match=rf"grid is required: encoding '{pos}'"):
        ModelConfig(pos=pos)
    with pytest.raises(ValueError, match="grid is required"):
        EncoderClassifier(ModelConfig(pos=pos), num_classes=10)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"grid": (0, 4)}, r"grid\[0\] must be a positive integer"),
        ({"grid": (4, 2.5)}, r"grid\[1\] must be a positive integer"),
        ({"grid": (1, 2, 3, 4)}, "grid must be None or 1 to 3 axis sizes"),
        ({"grid": "8x8"}, "grid must be None or 1 to 3 axis sizes"),
        ({"grid": (64, 64)}, r"grid \(64, 64\) holds 4096 tokens, more than max_seq_len=1024"),
        ({"grid": None}, "grid must be \\(height, width\\) in patches when patch_size is set"),
        ({"grid": (2, 4, 4)}, "grid must be \\(height, width\\) in patches when patch_size"),
        ({"patch_size": 0}, "patch_size must be a positive integer"),
        ({"in_channels": 0}, "in_channels must be a positive integer"),
    ],
)
def test_config_errors_name_the_field(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _config("nope", **changes)


def test_a_grid_from_json_lists_is_a_tuple() -> None:
    assert _config("rope_axial", grid=[4, 4]).grid == (4, 4)


def test_inputs_that_do_not_fit_the_grid_name_it() -> None:
    model = EncoderClassifier(_config("rope_axial", grid=(8, 8), patch_size=4), num_classes=10)
    with pytest.raises(ValueError, match=r"images do not fit grid=\(8, 8\).*32×28 images"):
        model(torch.randn(2, 3, 32, 28))
    tokens = EncoderClassifier(_config("rope_axial", grid=(8, 8), patch_size=None), 10)
    with pytest.raises(ValueError, match=r"tokens do not fit grid=\(8, 8\).*60 tokens"):
        tokens(torch.randint(0, 256, (2, 60)))


@pytest.mark.parametrize(
    ("images", "match"),
    [
        (torch.randn(2, 1, 8, 8), r"images must be a floating tensor \(batch, in_channels=3"),
        (torch.randn(2, 8, 8), "images must be a floating tensor"),
        (torch.zeros(2, 3, 8, 8, dtype=torch.long), "images must be a floating tensor"),
        (torch.randn(2, 3, 8, 7), "positive multiples of patch_size=2"),
        (torch.full((2, 3, 8, 8), float("nan")), "images must be finite"),
    ],
)
def test_bad_images_name_images(images: Tensor, match: str) -> None:
    model = EncoderClassifier(_config("rope_axial"), num_classes=10)
    with pytest.raises(ValueError, match=match):
        model(images)


def test_encodings_that_cannot_serve_the_grid_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="pos 'mrope' reads 3 position axes; grid \\(4, 4\\)"):
        EncoderClassifier(_config("mrope"), num_classes=10)
    with pytest.raises(ValueError, match="pos: 'complex_order' embeds token ids"):
        EncoderClassifier(_config("complex_order"), num_classes=10)
    with pytest.raises(ValueError, match="grid must be \\(height, width\\) for this 2D"):
        EncoderClassifier(_config("rope_2d", grid=(2, 4, 4), patch_size=None), 10)
    with pytest.raises(ValueError, match="causal"):
        EncoderClassifier(_config("xpos"), num_classes=10)


def test_the_decoder_refuses_a_grid() -> None:
    with pytest.raises(ValueError, match="grid and patch_size are for EncoderClassifier"):
        DecoderLM(_config("rope_axial", patch_size=None))

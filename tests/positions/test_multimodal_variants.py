"""The multimodal RoPE study's position layouts: parity with JJJYmmm/Multimodal-RoPEs (its
committed golden, transformers 4.57.1, and outputs of its code at cd413b9 for the knobs the
golden leaves at one value; tests/data/multimodal_ropes/README.md), properties, errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from posenc.positions.multimodal import IMAGE, TEXT, VIDEO, mrope_position_ids
from posenc.positions.multimodal_variants import (
    CircleProjection,
    circlerope_position_ids,
    mmrope_position_ids,
    spatial_reset_position_ids,
)

safetensors = pytest.importorskip("safetensors.torch")
GOLDEN = safetensors.load_file(
    str(Path(__file__).parents[1] / "data" / "multimodal_ropes" / "golden.safetensors")
)

# The library's canonical Qwen3-VL sequence: 5 text + <vision_start>, an image (1, 4, 4) → 4
# tokens, <vision_end> + 3 text + <vision_start>, a video (2, 4, 4) as two frames of 4 tokens
# separated by <vision_end> <t> <t> <vision_start>, <vision_end> + 1 text.
CANONICAL = {
    "token_types": torch.tensor([[TEXT] * 6 + [IMAGE] * 4 + [TEXT] * 5 + [VIDEO] * 4
                                 + [TEXT] * 4 + [VIDEO] * 4 + [TEXT] * 2]),
    "image_grid_thw": [[1, 4, 4]],
    "video_grid_thw": [[2, 4, 4]],
}  # fmt: skip
# A left-padded batch: [pad pad, 3 text, image (2, 6, 4) → 12 tokens, 3 text] and
# [5 text, image (1, 4, 8) → 8 tokens, 7 text].
MASK = torch.tensor([[0, 0] + [1] * 18, [1] * 20])
PADDED = {
    "token_types": torch.tensor([[TEXT] * 5 + [IMAGE] * 12 + [TEXT] * 3,
                                 [TEXT] * 5 + [IMAGE] * 8 + [TEXT] * 7]),
    "image_grid_thw": [[2, 6, 4], [1, 4, 8]],
    "attention_mask": MASK,
}  # fmt: skip


@pytest.mark.parametrize("name", ["mhrope", "ilrope", "omnirope", "mrope-interleave"])
def test_spatial_reset_equals_the_library_golden(name):
    ids, delta = spatial_reset_position_ids(**CANONICAL)
    if name == "mrope-interleave":  # the golden's MRoPE-I is without reset: MM-RoPE at σ = 1
        ids, delta = mmrope_position_ids(**CANONICAL)
    torch.testing.assert_close(ids[:, 0], GOLDEN[f"{name}.position_ids"], rtol=0, atol=0)
    torch.testing.assert_close(delta[0], GOLDEN[f"{name}.rope_deltas"], rtol=0, atol=0)


def test_mmrope_equals_the_library_golden():
    ids, delta = mmrope_position_ids(**CANONICAL, position_scale=(4.0, 8.0, 8.0))
    torch.testing.assert_close(ids[:, 0], GOLDEN["mmrope.position_ids"], rtol=0, atol=0)
    torch.testing.assert_close(delta[0], GOLDEN["mmrope.rope_deltas"], rtol=0, atol=0)


def test_circlerope_equals_the_library_golden():
    # the golden's dff_rate=True is mix 1: the plain plane projection (radius and alpha unused)
    circle = CircleProjection(radius=10, alpha=0.5, move_to_origin=True, mix=1.0)
    ids, delta = circlerope_position_ids(**CANONICAL, projection=circle)
    # the library computes in float32: compare at float32
    torch.testing.assert_close(ids[:, 0].float(), GOLDEN["circlerope.position_ids"].float())
    torch.testing.assert_close(delta[0].float(), GOLDEN["circlerope.rope_deltas"].float())


def test_videorope_and_v2pe_ids_equal_the_library_golden():
    """posenc's existing layouts (positions.multimodal_layouts) on the library's sequence:
    VideoRoPE (δ = 2, frames split as Qwen3-VL) and V2PE (visual_stride 16 over 4 tokens: δ = 4)."""
    from posenc.positions.multimodal_layouts import v2pe_position_ids, videorope_position_ids

    frames = [[1, 4, 4], [1, 4, 4]]  # the video's two frames, one run each
    ids, delta = videorope_position_ids(
        CANONICAL["token_types"], CANONICAL["image_grid_thw"], frames, temporal_spacing=2.0
    )
    torch.testing.assert_close(ids[:, 0], GOLDEN["videorope.position_ids"], rtol=0, atol=0)
    torch.testing.assert_close(delta[0], GOLDEN["videorope.rope_deltas"], rtol=0, atol=0)
    v2pe = v2pe_position_ids(CANONICAL["token_types"][0], 16.0 / 4)
    torch.testing.assert_close(v2pe.expand(3, -1), GOLDEN["v2pe.position_ids"], rtol=0, atol=0)


CASES = {
    "circle_ring": (circlerope_position_ids, CANONICAL,
                    {"projection": CircleProjection(radius=10, alpha=0.5, move_to_origin=True)}),
    "circle_auto": (circlerope_position_ids, CANONICAL,
                    {"projection": CircleProjection(radius="auto-2", move_to_positive=1.0),
                     "temporal_stride": 2.0}),
    "circle_plain": (circlerope_position_ids, CANONICAL,
                     {"projection": CircleProjection(method="no_circle", move_to_positive=0.0)}),
    "circle_mix": (circlerope_position_ids, CANONICAL,
                   {"projection": CircleProjection(radius="auto", alpha=1.0, move_to_origin=True,
                                                   mix=0.25)}),
    "circle_two_frames": (circlerope_position_ids, PADDED,
                          {"projection": CircleProjection(radius=3, alpha=0.0)}),
    "mmrope_scaled": (mmrope_position_ids, PADDED,
                      {"position_scale": (2.0, 3.0, 0.5), "temporal_stride": 2.0}),
    "reset_stride": (spatial_reset_position_ids, PADDED, {"temporal_stride": 2.0}),
    "omnirope_stride": (spatial_reset_position_ids, PADDED, {"temporal_stride": 2.0}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_the_library_code(case):
    """Outputs of the library's code: ids of real tokens equal; its delta counts the padding
    (``len`` of the padded row, transformers 4.x), posenc's the real tokens (5.x)."""
    function, inputs, kwargs = CASES[case]
    ids, delta = function(**inputs, **kwargs)
    expected = GOLDEN[f"{case}.position_ids"]
    real = inputs.get("attention_mask", torch.ones(expected.shape[1:])).bool()
    padding = (~real).sum(-1).double()
    if case.startswith("circle"):  # float32 in the library
        torch.testing.assert_close(ids[:, real].float(), expected[:, real].float())
        torch.testing.assert_close((delta[:, 0] - padding).float(),
                                   GOLDEN[f"{case}.rope_deltas"].float())  # fmt: skip
    else:
        torch.testing.assert_close(ids[:, real], expected[:, real], rtol=0, atol=0)
        torch.testing.assert_close(delta[:, 0] - padding, GOLDEN[f"{case}.rope_deltas"])
    assert bool((ids[:, ~real] == 0).all())


LAYOUTS = [
    (spatial_reset_position_ids, {}),
    (mmrope_position_ids, {"position_scale": (2.0, 3.0, 4.0)}),
    (circlerope_position_ids, {"projection": CircleProjection(radius=2.0, alpha=0.5)}),
]


@pytest.mark.parametrize(("function", "kwargs"), LAYOUTS)
def test_text_only_is_one_axis_rope(function, kwargs):
    ids, delta = function(torch.zeros(2, 7, dtype=torch.long), **kwargs)
    torch.testing.assert_close(ids, torch.arange(7.0, dtype=torch.float64).expand(3, 2, 7))
    torch.testing.assert_close(delta, torch.zeros(2, 1, dtype=torch.float64))


@pytest.mark.parametrize(("function", "kwargs"), LAYOUTS)
def test_one_sequence_equals_its_batch_row(function, kwargs):
    ids, delta = function(**CANONICAL, **kwargs)
    one, one_delta = function(CANONICAL["token_types"][0], CANONICAL["image_grid_thw"],
                              CANONICAL["video_grid_thw"], **kwargs)  # fmt: skip
    torch.testing.assert_close(one, ids[:, 0], rtol=0, atol=0)
    torch.testing.assert_close(one_delta, delta[0], rtol=0, atol=0)


def test_mmrope_at_unit_scale_is_qwen3_vl_mrope():
    """σ = 1 is M-RoPE's layout: posenc's parity-tested Qwen3-VL ids (frames per run)."""
    ids, delta = mmrope_position_ids(**CANONICAL)
    expected, expected_delta = mrope_position_ids(
        CANONICAL["token_types"], CANONICAL["image_grid_thw"], CANONICAL["video_grid_thw"],
        version="qwen3_vl",
    )  # fmt: skip
    torch.testing.assert_close(ids, expected.double(), rtol=0, atol=0)
    torch.testing.assert_close(delta, expected_delta.double(), rtol=0, atol=0)


@pytest.mark.parametrize("lead", [1, 4, 9])
def test_spatial_reset_keeps_rows_and_columns_and_shifts_time(lead):
    """Spatial reset: an image's (h, w) ids are its (row, column) wherever it sits; t moves
    with the text before it; the next text follows the image's extent."""
    types = torch.tensor([TEXT] * lead + [IMAGE] * 6 + [TEXT] * 2)
    ids, _ = spatial_reset_position_ids(types, [[1, 4, 6]])  # 2 × 3 tokens at merge 2
    vision = ids[:, lead : lead + 6]
    torch.testing.assert_close(vision[0], torch.full((6,), float(lead), dtype=torch.float64))
    torch.testing.assert_close(vision[1], torch.tensor([0.0, 0, 0, 1, 1, 1], dtype=torch.float64))
    torch.testing.assert_close(vision[2], torch.tensor([0.0, 1, 2, 0, 1, 2], dtype=torch.float64))
    torch.testing.assert_close(ids[:, lead + 6], torch.full((3,), lead + 3.0, dtype=torch.float64))


def test_circle_ring_lies_orthogonal_to_the_text_diagonal_at_the_radius():
    """A ring's points sit in the plane through (p + s f)·(1, 1, 1) orthogonal to the
    diagonal, at distance R from it: equally far from every text position."""
    radius, lead = 2.5, 4
    types = torch.tensor([TEXT] * lead + [IMAGE] * 12 + [TEXT])
    circle = CircleProjection(radius=radius, alpha=0.5, move_to_origin=True)
    ids, _ = circlerope_position_ids(types, [[1, 6, 8]], projection=circle)
    points = ids[:, lead : lead + 12]
    centre = torch.full((12,), float(lead), dtype=torch.float64)
    torch.testing.assert_close(points.mean(0), centre)
    torch.testing.assert_close((points - centre).norm(dim=0), torch.full((12,), radius).double())


def test_circle_frames_stack_along_time():
    """Frame f is frame 0's ring shifted by s·f on every axis."""
    circle = CircleProjection(radius=1.5, alpha=0.0)
    ids, _ = circlerope_position_ids(torch.tensor([IMAGE] * 8), [[2, 4, 4]], projection=circle,
                                     temporal_stride=3.0)  # fmt: skip
    torch.testing.assert_close(ids[:, 4:], ids[:, :4] + 3.0)


def test_circle_index_angles_are_uniform():
    """alpha = 0: the angles are the row-major index spread over 2π."""
    circle = CircleProjection(radius=1.0, alpha=0.0, method="circle")
    offsets = circle.project(1, 2, 3, 1.0)
    u = torch.tensor([-1.0, 1.0, 0.0], dtype=torch.float64) / math.sqrt(2)  # (w, h, t) axes
    n = torch.ones(3, dtype=torch.float64) / math.sqrt(3)
    v = torch.linalg.cross(n, u)
    theta = torch.arange(6, dtype=torch.float64) / 6 * 2 * math.pi
    expected = theta.cos()[None] * u[:, None] + theta.sin()[None] * v[:, None]  # (w, h, t)
    torch.testing.assert_close(offsets, expected.flip(0))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: spatial_reset_position_ids(**CANONICAL, temporal_stride=0), "temporal_stride"),
        (lambda: mmrope_position_ids(**CANONICAL, position_scale=(1.0, 2.0)), "position_scale"),
        (lambda: mmrope_position_ids(**CANONICAL, position_scale=(1.0, -1.0, 1.0)),
         r"position_scale\[1\]"),
        (lambda: CircleProjection(method="spiral"), "method"),
        (lambda: CircleProjection(alpha=2.0), "alpha"),
        (lambda: CircleProjection(mix=1.5), "mix"),
        (lambda: CircleProjection(radius="big"), "radius"),
        (lambda: CircleProjection(radius=float("nan")), "radius"),
        (lambda: circlerope_position_ids(**CANONICAL, projection="circle"), "projection"),
        (lambda: spatial_reset_position_ids(torch.zeros(3, 4)), "integer"),
        (lambda: spatial_reset_position_ids(torch.tensor([0, 3])), "token_types"),
        (lambda: spatial_reset_position_ids(torch.tensor([1, 1, 1]), [[1, 4, 4]]), "run of 3"),
        (lambda: spatial_reset_position_ids(torch.tensor([1] * 4)), "fewer grids"),
        (lambda: spatial_reset_position_ids(torch.tensor([0]), [[1, 4, 4]]), "left over"),
        (lambda: spatial_reset_position_ids(torch.tensor([1] * 4), [[1, 3, 4]]),
         "spatial_merge_size"),
        (lambda: spatial_reset_position_ids(torch.tensor([0, 0]),
                                            attention_mask=torch.tensor([1, 2])),
         "attention_mask"),
    ],
)  # fmt: skip
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()

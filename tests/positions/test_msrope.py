"""Qwen-Image's MSRoPE: ids and rotation against diffusers' ``QwenEmbedRope`` (skipped without
diffusers), the layout's rules, errors."""

from __future__ import annotations

import pytest
import torch

from posenc.positions.msrope import msrope_position_ids
from posenc.rotary import qwen_image_rotary

SIZES = [
    [(1, 6, 4)],  # text-to-image, portrait
    [(1, 5, 7)],  # odd sides
    [(1, 4, 4), (1, 6, 2)],  # editing: target and a reference image
    [(2, 3, 3)],  # two frames
]


def _diffusers():
    return pytest.importorskip("diffusers.models.transformers.transformer_qwenimage")


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("centred", [True, False])
def test_tables_equal_diffusers(sizes, centred):
    """cos + i sin of posenc's ids and frequencies is diffusers' complex ``freqs`` (float32),
    for the image and the text tokens."""
    qwen = _diffusers()
    reference = qwen.QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=centred)
    image_freqs, text_freqs = reference([list(sizes)], device=torch.device("cpu"),
                                        max_txt_seq_len=9)  # fmt: skip
    image, text = msrope_position_ids(sizes, 9, centred=centred)
    rope = qwen_image_rotary()
    for ids, freqs in ((image, image_freqs), (text, text_freqs)):
        cos, sin = rope.rotary_tables(ids, torch.float32)
        torch.testing.assert_close(cos, freqs.real)
        torch.testing.assert_close(sin, freqs.imag)


def test_rotation_equals_diffusers():
    """posenc's rotation (float64 angles) against diffusers' ``apply_rotary_emb_qwen`` with
    complex frequencies built from posenc's float64 tables: same layout (adjacent pairs)."""
    qwen = _diffusers()
    image, text = msrope_position_ids([(1, 4, 6)], 5)
    ids = torch.cat((text, image), dim=1)  # Qwen-Image's joint order: text, then image
    rope = qwen_image_rotary()
    q = torch.randn(2, 3, ids.shape[1], 128, dtype=torch.float64)
    cos, sin = rope.rotary_tables(ids, torch.float64)
    freqs = torch.complex(cos, sin)
    # diffusers takes (batch, seq, heads, head_dim) and computes in complex64: compare there
    want = qwen.apply_rotary_emb_qwen(q.transpose(1, 2).float(), freqs.to(torch.complex64),
                                      use_real=False).transpose(1, 2)  # fmt: skip
    got, _ = rope(q.float(), q.float(), ids, ids)
    torch.testing.assert_close(got, want)


def test_text_is_one_axis_rope_after_the_image():
    """Text ids are equal on all axes and start past the largest half side (centred)."""
    image, text = msrope_position_ids([(1, 6, 10), (1, 12, 4)], 4)
    torch.testing.assert_close(text, (torch.arange(4) + 6).expand(3, 4))
    assert int(image[1:].max()) < int(text.min())
    torch.testing.assert_close(image[0, :60], torch.zeros(60, dtype=torch.long))
    torch.testing.assert_close(image[0, 60:], torch.ones(48, dtype=torch.long))


@pytest.mark.parametrize("side", [1, 2, 7, 8])
def test_centred_rows_span_zero(side):
    image, _ = msrope_position_ids([(1, side, 1)], 0)
    torch.testing.assert_close(image[1], torch.arange(side) - (side - side // 2))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: msrope_position_ids([], 3), "image_sizes"),
        (lambda: msrope_position_ids([(1, 4)], 3), r"image_sizes\[0\]"),
        (lambda: msrope_position_ids([(1, 0, 4)], 3), r"image_sizes\[0\]\[1\]"),
        (lambda: msrope_position_ids([(1, 4, 4)], -1), "text_length"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()

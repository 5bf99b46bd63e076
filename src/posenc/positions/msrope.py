"""Qwen-Image's MSRoPE position ids: image patches on a centred grid, text on the diagonal.

MSRoPE (Multimodal Scalable RoPE; Wu et al. 2025, Qwen-Image technical report,
https://arxiv.org/abs/2508.02324, §2.3; reference diffusers ``QwenEmbedRope`` in
``diffusers/models/transformers/transformer_qwenimage.py``) gives every token of the
diffusion transformer's joint image–text sequence ``(frame, row, column)`` ids for
:func:`posenc.rotary.qwen_image_rotary`:

* image ``n`` (0-based, in the order given) of ``F × H × W`` patches: patch ``(f, r, c)``
  gets ``(n + f, r − ⌈H/2⌉, c − ⌈W/2⌉)`` when ``centred`` (diffusers' ``scale_rope=True``,
  Qwen-Image's setting: rows ``−⌈H/2⌉ … ⌊H/2⌋ − 1``), else ``(n + f, r, c)``;
* text token ``k``: ``(m + k, m + k, m + k)`` on all three axes — the diagonal, so the text
  reads as 1D RoPE and starts past every image, with ``m = max_n max(⌊H_n/2⌋, ⌊W_n/2⌋)``
  when centred (``max_n max(H_n, W_n)`` otherwise).

Centring keeps an image's ids the same span around 0 at any resolution, so the text's
position does not move with the aspect ratio, and the text never collides with image ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int

__all__ = ["msrope_position_ids"]


def msrope_position_ids(
    image_sizes: Sequence[Sequence[int]],
    text_length: int,
    *,
    centred: bool = True,
) -> tuple[Tensor, Tensor]:
    """MSRoPE ids of the image tokens ``(3, Σ F·H·W)`` and text tokens ``(3, text_length)``,
    int64 ``(frame, row, column)``.

    Args:
        image_sizes: ``(F, H, W)`` of each image, in patches after packing (diffusers'
            ``img_shapes`` of one sample; one image for text-to-image, more for editing).
        text_length: text tokens (diffusers' ``max_txt_seq_len``), ≥ 0.
        centred: rows and columns centred on 0 (diffusers' ``scale_rope``; Qwen-Image: True).

    Example::

        >>> image, text = msrope_position_ids([(1, 2, 3)], 2)
        >>> image[1].tolist(), image[2].tolist()
        ([-1, -1, -1, 0, 0, 0], [-2, -1, 0, -2, -1, 0])
        >>> text.tolist()
        [[1, 2], [1, 2], [1, 2]]
    """
    text_length = check_non_negative_int("text_length", text_length)
    if len(image_sizes) < 1:
        raise ValueError("image_sizes must give at least one (frames, height, width)")
    pieces, text_start = [], 0
    for index, size in enumerate(image_sizes):
        if len(size) != 3:
            raise ValueError(f"image_sizes[{index}] must be (frames, height, width), got {size!r}")
        frames, height, width = (
            check_positive_int(f"image_sizes[{index}][{axis}]", n) for axis, n in enumerate(size)
        )
        rows, cols = torch.arange(height), torch.arange(width)
        if centred:
            rows, cols = rows - (height - height // 2), cols - (width - width // 2)
            text_start = max(text_start, height // 2, width // 2)
        else:
            text_start = max(text_start, height, width)
        grid = torch.meshgrid(torch.arange(frames) + index, rows, cols, indexing="ij")
        pieces.append(torch.stack(grid).reshape(3, -1))
    text = (torch.arange(text_length) + text_start).expand(3, text_length)
    return torch.cat(pieces, dim=1), text

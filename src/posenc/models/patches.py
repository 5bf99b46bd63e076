"""Images into patch tokens: the input of an image model (:class:`~posenc.models.EncoderClassifier`
with ``ModelConfig(patch_size=...)``).

An image ``(channels, H, W)`` is cut into non-overlapping ``p × p`` patches, read row-major over
the ``(H/p) × (W/p)`` grid (token ``t`` at row ``t // (W/p)``, column ``t % (W/p)``, the layout
of ``ModelConfig.grid`` and :func:`~posenc.positions.grid_positions`); each patch is flattened
channel-major, then row-major inside the patch: the order of ViT's patch convolution weights
``(dim, channels, p, p)`` (Dosovitskiy et al. 2020, https://arxiv.org/abs/2010.11929), so a
linear layer on the patches is that convolution.
"""

from __future__ import annotations

from torch import Tensor

from posenc._validate import check_positive_int

__all__ = ["check_images", "patchify"]


def check_images(images: object, in_channels: int, patch_size: int) -> Tensor:
    """Raise ``ValueError`` naming ``images`` unless they are a floating tensor ``(batch,
    in_channels, H, W)`` with ``H`` and ``W`` multiples of ``patch_size``; return them."""
    if (
        not isinstance(images, Tensor)
        or images.dim() != 4
        or not images.is_floating_point()
        or images.shape[1] != in_channels
    ):
        got = (
            f"{images.dtype} {tuple(images.shape)}"
            if isinstance(images, Tensor)
            else type(images).__name__
        )
        raise ValueError(
            f"images must be a floating tensor (batch, in_channels={in_channels}, height, width) "
            f"(the model has patch_size={patch_size}); got {got}"
        )
    height, width = images.shape[-2:]
    if height % patch_size or width % patch_size or height == 0 or width == 0:
        raise ValueError(
            f"images must have a height and width that are positive multiples of patch_size="
            f"{patch_size}; got {height}×{width}"
        )
    return images


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into non-overlapping square patches, row-major over the patch grid.

    Shape:
        images ``(batch, channels, H, W)`` → ``(batch, (H/p)·(W/p), channels·p·p)``.

    Raises:
        ValueError: naming ``patch_size`` unless it is an int >= 1, or ``images`` unless they
            are 4-D with ``H`` and ``W`` divisible by ``patch_size``.

    Example::

        >>> import torch
        >>> patchify(torch.arange(16.0).reshape(1, 1, 4, 4), 2)[0, 1]
        tensor([2., 3., 6., 7.])
    """
    check_positive_int("patch_size", patch_size)
    if not isinstance(images, Tensor) or images.dim() != 4:
        got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be (batch, channels, height, width); got {got}")
    batch, channels, height, width = images.shape
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"images must have a height and width divisible by patch_size={patch_size}; got "
            f"{height}×{width}"
        )
    rows, cols = height // patch_size, width // patch_size
    blocks = images.reshape(batch, channels, rows, patch_size, cols, patch_size)
    # (batch, rows, cols, channels, p, p): grid row-major, then channel, then pixel row-major
    blocks = blocks.permute(0, 2, 4, 1, 3, 5)
    return blocks.reshape(batch, rows * cols, channels * patch_size * patch_size)

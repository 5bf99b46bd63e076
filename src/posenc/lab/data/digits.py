"""sklearn's handwritten digits as a data source: 1797 images of 8×8 pixels, ten classes.

The images of ``sklearn.datasets.load_digits`` (bundled with scikit-learn, no download;
Alpaydin & Kaynak 1998, the UCI optical recognition of handwritten digits test set) as
integer pixel intensities 0..16, row-major. :func:`load_digits_splits` splits them at random
(seeded) into train and test images; :class:`DigitsSource` yields the training images as
:class:`~posenc.lab.batch.Batch` rows for :func:`posenc.lab.train.train`: ``tokens`` are the
64 pixels and the label is the target of the first column only (``loss_mask``), so the
generic loop trains a classifier. The vit and resolution experiments
(:mod:`posenc.lab.experiments.vit`, :mod:`~posenc.lab.experiments.resolution`) train on them.

Example::

    >>> data = load_digits_splits(500, seed=0)
    >>> data.train_pixels.shape, data.test_pixels.shape
    (torch.Size([1297, 64]), torch.Size([500, 64]))
    >>> DigitsSource(data.train_pixels, data.train_labels).batch(0, 32).tokens.shape
    torch.Size([32, 64])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.lab.batch import Batch, derive_seed

__all__ = [
    "IMAGE_SIZE",
    "LEVELS",
    "NUM_CLASSES",
    "NUM_IMAGES",
    "DigitsSource",
    "DigitsSplits",
    "load_digits_splits",
]

IMAGE_SIZE = 8  # sklearn digits are 8×8
LEVELS = 17  # pixel intensities 0..16
NUM_CLASSES = 10
NUM_IMAGES = 1797


@dataclass(frozen=True)
class DigitsSplits:
    """Pixels ``(N, 64)`` int64 (0..16) and labels ``(N,)`` of the train and test images."""

    train_pixels: Tensor
    train_labels: Tensor
    test_pixels: Tensor
    test_labels: Tensor


def load_digits_splits(test_size: int = 500, *, seed: int = 0) -> DigitsSplits:
    """sklearn's 1797 digits, split at random (seeded) into train and ``test_size`` test images.

    Raises:
        ImportError: with an install hint when scikit-learn is missing.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the digits images come bundled with scikit-learn: "
            "pip install -e '.[lab]' in a clone of posenc (or pip install scikit-learn)"
        ) from error
    digits = load_digits()
    pixels = torch.as_tensor(digits.data).round().to(torch.long)  # (1797, 64), values 0..16
    labels = torch.as_tensor(digits.target).to(torch.long)
    if not 1 <= test_size < pixels.shape[0]:
        raise ValueError(f"test_size must be in [1, {pixels.shape[0]}), got {test_size}")
    order = torch.randperm(
        pixels.shape[0], generator=torch.Generator().manual_seed(derive_seed("digits", seed))
    )
    test, rest = order[:test_size], order[test_size:]
    return DigitsSplits(pixels[rest], labels[rest], pixels[test], labels[test])


class DigitsSource:
    """Batches of training images for :func:`~posenc.lab.train.train`, epoch by epoch.

    Step ``s`` of batch size ``B`` is slice ``s mod E`` of the seeded permutation of epoch
    ``⌊s / E⌋``, ``E = ⌊N / B⌋`` steps per epoch (the last partial batch is dropped).
    ``tokens`` are the pixels, ``targets`` the label in every column, ``loss_mask`` column 0.
    """

    vocab_size = LEVELS

    def __init__(self, pixels: Tensor, labels: Tensor, seed: int = 0) -> None:
        self.pixels, self.labels, self.seed = pixels, labels, seed
        self._perm: tuple[int, Tensor] | None = None

    def steps_per_epoch(self, batch_size: int) -> int:
        return self.pixels.shape[0] // batch_size

    def batch(self, step: int, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Batch:
        step = check_non_negative_int("step", step)
        per_epoch = self.steps_per_epoch(check_positive_int("batch_size", batch_size))
        if per_epoch == 0:
            raise ValueError(
                f"batch_size must be <= the {self.pixels.shape[0]} training images, "
                f"got {batch_size}"
            )
        epoch, index = divmod(step, per_epoch)
        if self._perm is None or self._perm[0] != epoch:
            generator = torch.Generator().manual_seed(derive_seed("digits", self.seed, epoch))
            self._perm = (epoch, torch.randperm(self.pixels.shape[0], generator=generator))
        rows = self._perm[1][index * batch_size : (index + 1) * batch_size]
        tokens = self.pixels[rows]
        targets = self.labels[rows][:, None].expand_as(tokens).contiguous()
        loss_mask = torch.zeros_like(tokens, dtype=torch.bool)
        loss_mask[:, 0] = True
        return Batch(tokens, targets, loss_mask).shard(rank, world_size)

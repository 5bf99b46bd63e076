"""A small vision transformer on sklearn's digits: does a patch grid need a position encoding?

The in-distribution check of ViT's Appendix D.4 (Dosovitskiy et al. 2020,
https://arxiv.org/abs/2010.11929, Table 8: ImageNet 5-shot linear accuracy 0.614 without a
position embedding, 0.640–0.642 with 1-D, 2-D or relative ones: "having a PE matters, which
kind matters little") at CPU scale. The 1797 8×8 images of ``sklearn.datasets.load_digits``
(bundled with scikit-learn, no download) are cut into 2×2 patches, a 4×4 grid of 16 tokens of
4 pixels; a linear patch embedding, a few bidirectional pre-norm blocks
(:class:`posenc.model.Block`), mean pooling and a 10-way linear head classify them. Encodings:

* ``"none"``: no position at all; the model sees a bag of patches (it is exactly invariant
  to permuting the patches);
* ``"learned_1d"``: :class:`~posenc.additive.LearnedPositionalEmbedding` over the 16 tokens;
* ``"sinusoidal_2d"``: :class:`~posenc.additive.Sinusoidal2D` (MAE layout);
* ``"rope_2d"``: :class:`~posenc.rotary.AxialRotary2D` (RoPE-ViT axial, base 100).

Images enter :func:`posenc.lab.train.train` as token rows: ``tokens`` are the 64 pixel
intensities (integers 0..16, row-major) and the label is the target of the first column only
(``loss_mask``), so the generic loop (AdamW, cosine schedule, resumable run folders, DDP)
trains a classifier. One run folder per (encoding, seed) under ``out/runs/``.

Example::

    rows = run_vit(VitConfig(epochs=2, seeds=(0,)), "runs/vit")
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import check_non_negative_int, check_positive_float, check_positive_int
from posenc.additive import LearnedPositionalEmbedding, Sinusoidal2D
from posenc.attention import build_context, hooks_of
from posenc.base import PositionalEncoding
from posenc.lab.batch import Batch, derive_seed
from posenc.lab.runner import Experiment, Run, check_seeds, run_experiment
from posenc.lab.train import TrainConfig, train
from posenc.model import Block, ModelConfig
from posenc.positions import grid_coordinates
from posenc.rotary import AxialRotary2D

__all__ = [
    "ENCODINGS",
    "EXPERIMENT",
    "DigitsSource",
    "DigitsSplits",
    "DigitsViT",
    "DigitsViTConfig",
    "VitConfig",
    "format_vit_table",
    "load_digits_splits",
    "patchify",
    "run_vit",
]

Row = dict[str, Any]
ENCODINGS = ("none", "learned_1d", "sinusoidal_2d", "rope_2d")
IMAGE_SIZE = 8  # sklearn digits are 8×8
LEVELS = 17  # pixel intensities 0..16
NUM_CLASSES = 10
NUM_IMAGES = 1797


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut square images into non-overlapping patches, row-major over the grid and inside.

    Shape:
        images ``(batch, H, W)`` or ``(batch, H·W)`` (row-major, square) →
        ``(batch, (H/p)·(W/p), p·p)``.
    """
    batch = images.shape[0]
    side = math.isqrt(images[0].numel())
    if side * side != images[0].numel() or side % patch_size:
        raise ValueError(
            f"images must be square with a side divisible by patch_size={patch_size}; "
            f"got {tuple(images.shape)}"
        )
    grid = side // patch_size
    blocks = images.reshape(batch, grid, patch_size, grid, patch_size)
    return blocks.permute(0, 1, 3, 2, 4).reshape(batch, grid * grid, patch_size * patch_size)


@dataclass(frozen=True)
class DigitsViTConfig:
    """Shape of :class:`DigitsViT` (saved in each run folder's ``config.json``)."""

    encoding: str = "rope_2d"
    patch_size: int = 2
    dim: int = 64
    depth: int = 2
    num_heads: int = 4
    mlp_ratio: float = 4.0
    rope_base: float = 100.0

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        for name in ("patch_size", "dim", "depth", "num_heads"):
            check_positive_int(name, getattr(self, name))
        if IMAGE_SIZE % self.patch_size:
            raise ValueError(f"patch_size must divide {IMAGE_SIZE}, got {self.patch_size}")
        if self.dim % self.num_heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by num_heads ({self.num_heads})")
        if self.encoding == "sinusoidal_2d" and self.dim % 4:
            raise ValueError(f"dim must be divisible by 4 for sinusoidal_2d, got {self.dim}")
        if self.encoding == "rope_2d" and (self.dim // self.num_heads) % 4:
            raise ValueError(
                f"dim / num_heads (head_dim) must be divisible by 4 for rope_2d, got "
                f"{self.dim // self.num_heads}"
            )
        check_positive_float("mlp_ratio", self.mlp_ratio)
        check_positive_float("rope_base", self.rope_base)

    @property
    def grid(self) -> int:
        return IMAGE_SIZE // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid * self.grid


class DigitsViT(nn.Module):
    """Patch embedding, a positional encoding, bidirectional blocks, mean pooling, linear head.

    Shape:
        tokens ``(batch, 64)`` pixel intensities 0..16 (row-major 8×8 image), positions of
        the patches ``(num_patches,)`` or ``(batch, num_patches)`` (default ``arange``) →
        logits ``(batch, 10)``.
    """

    def __init__(self, config: DigitsViTConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = nn.Linear(config.patch_size**2, config.dim)
        grid, dim = config.grid, config.dim
        self.additive: PositionalEncoding | None = None
        if config.encoding == "learned_1d":
            self.additive = LearnedPositionalEmbedding(config.num_patches, dim)
        elif config.encoding == "sinusoidal_2d":
            self.additive = Sinusoidal2D(grid, grid, dim)
        # Block reads only the shape fields of ModelConfig; the encoding object is passed in.
        shape = ModelConfig(
            vocab_size=LEVELS,
            dim=dim,
            depth=config.depth,
            num_heads=config.num_heads,
            mlp_ratio=config.mlp_ratio,
            max_seq_len=config.num_patches,
            pos="none",
        )
        head_dim = dim // config.num_heads
        # One parameter-free rotary encoding for all blocks: its tables are built once per
        # forward (the context), as in posenc.model.
        rotary = None
        if config.encoding == "rope_2d":
            rotary = AxialRotary2D(head_dim, grid, grid, base=config.rope_base)
        self.blocks = nn.ModuleList(Block(shape, rotary, causal=False) for _ in range(config.depth))
        self.hooks = hooks_of(rotary)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, NUM_CLASSES)

    def embed(self, tokens: Tensor) -> Tensor:
        """Pixel intensities ``(batch, 64)`` → patch embeddings ``(batch, num_patches, dim)``."""
        if tokens.dim() != 2 or tokens.shape[1] != IMAGE_SIZE**2:
            raise ValueError(
                f"tokens must be (batch, {IMAGE_SIZE**2}) pixel intensities, got "
                f"{tuple(tokens.shape)}"
            )
        pixels = tokens.to(self.patch_embed.weight.dtype) * (2.0 / (LEVELS - 1)) - 1.0  # [-1, 1]
        return self.patch_embed(patchify(pixels, self.config.patch_size))

    def classify(self, patches: Tensor, positions: Tensor | None = None) -> Tensor:
        """Logits ``(batch, 10)`` of patch embeddings ``(batch, num_patches, dim)``."""
        if positions is None:
            positions = torch.arange(patches.shape[1], device=patches.device)
        grid_coordinates(positions, self.config.grid, self.config.grid)  # range check, once
        batch, seq, _ = patches.shape
        context = build_context(
            batch=batch,
            seq=seq,
            device=patches.device,
            causal=False,
            hooks=self.hooks,
            positions=positions,
        )
        x = patches
        if self.additive is not None:
            x = x + self.additive(positions).to(x.dtype)
        for block in self.blocks:
            x = block(x, context=context)
        return self.head(self.norm(x).mean(dim=1))

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        if key_padding_mask is not None:
            raise ValueError("key_padding_mask must be None: every digit has all its patches")
        return self.classify(self.embed(tokens), positions)


class _PerTokenLogits(nn.Module):
    """Shows the classifier to :func:`~posenc.lab.train.train` as a sequence model.

    The class logits are repeated at every pixel column; only column 0 carries a target
    (``loss_mask``), so the loss is the mean cross-entropy over images.
    """

    def __init__(self, vit: DigitsViT) -> None:
        super().__init__()
        self.vit = vit
        self.config = vit.config

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        if positions is not None:
            raise ValueError("positions must be None: the ViT numbers its patches itself")
        logits = self.vit(tokens)  # (batch, 10)
        return logits[:, None, :].expand(-1, tokens.shape[1], -1)


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
            "the vit experiment needs scikit-learn for its bundled digits images: "
            "pip install 'posenc[lab]' (or pip install scikit-learn)"
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
        check_non_negative_int("step", step)
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


@dataclass(frozen=True)
class VitConfig:
    """The digits ViT experiment (defaults: the documented full setting, ~1–3 min on 2 cores).

    Args:
        encodings: any of ``"none", "learned_1d", "sinusoidal_2d", "rope_2d"``.
        seeds: one run per seed and encoding (model init and batch order); the split is fixed.
        patch_size: patch side in pixels (2×2 patches of the 8×8 digits: 16 tokens).
        dim: the transformer's width.
        depth: its layers.
        num_heads: attention heads per layer.
        mlp_ratio: MLP hidden width as a multiple of ``dim``.
        rope_base: base of the axial RoPE (100 in RoPE-ViT).
        test_size: held-out images (the rest train).
        split_seed: seed of the train/test split.
        epochs: passes over the training images (AdamW with warmup then cosine decay).
        batch_size: images per step.
        lr: peak learning rate.
        weight_decay: AdamW's weight decay.
        warmup_steps: linear warmup steps.
        device: torch device of training and evaluation.
        threads: torch intra-op threads while running (``None`` = leave as is).
        progress: progress bars.
    """

    encodings: tuple[str, ...] = ENCODINGS
    seeds: tuple[int, ...] = (0, 1, 2)
    patch_size: int = 2
    dim: int = 64
    depth: int = 2
    num_heads: int = 4
    mlp_ratio: float = 4.0
    rope_base: float = 100.0
    test_size: int = 500
    split_seed: int = 0
    epochs: int = 20
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.05
    warmup_steps: int = 40
    device: str = "cpu"
    threads: int | None = 1
    progress: bool = True

    def __post_init__(self) -> None:
        # JSON (CLI --set, config.json) gives lists; keep the tuples hashable and comparable.
        object.__setattr__(self, "encodings", tuple(self.encodings))
        if not self.encodings or any(e not in ENCODINGS for e in self.encodings):
            raise ValueError(f"encodings must be a non-empty subset of {ENCODINGS}")
        if len(set(self.encodings)) != len(self.encodings):
            raise ValueError(f"encodings must not repeat a name, got {self.encodings}")
        object.__setattr__(self, "seeds", check_seeds(self.seeds))
        for name in ("epochs", "batch_size", "test_size"):
            check_positive_int(name, getattr(self, name))
        check_non_negative_int("split_seed", self.split_seed)
        check_non_negative_int("warmup_steps", self.warmup_steps)
        if self.test_size + self.batch_size > NUM_IMAGES:
            raise ValueError(
                f"test_size + batch_size must be <= {NUM_IMAGES} images, got "
                f"{self.test_size} + {self.batch_size}"
            )
        if self.threads is not None:
            check_positive_int("threads", self.threads)
        for encoding in self.encodings:
            self.model_config(encoding)  # validates the model fields, naming them
        self.train_config(0)  # validates lr, weight_decay, device

    @property
    def steps(self) -> int:
        """Optimizer steps per run: ``epochs · ⌊(1797 - test_size) / batch_size⌋``."""
        return self.epochs * ((NUM_IMAGES - self.test_size) // self.batch_size)

    def model_config(self, encoding: str) -> DigitsViTConfig:
        return DigitsViTConfig(
            encoding=encoding,
            patch_size=self.patch_size,
            dim=self.dim,
            depth=self.depth,
            num_heads=self.num_heads,
            mlp_ratio=self.mlp_ratio,
            rope_base=self.rope_base,
        )

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig.for_steps(
            self.steps,
            warmup_steps=self.warmup_steps,
            eval_every=max(1, self.steps // 5),
            batch_size=self.batch_size,
            lr=self.lr,
            weight_decay=self.weight_decay,
            seed=seed,
            device=self.device,
            progress=self.progress,
        )


def _accuracy(vit: DigitsViT, pixels: Tensor, labels: Tensor, batch_size: int = 512) -> float:
    device = next(vit.parameters()).device
    was_training = vit.training
    vit.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, pixels.shape[0], batch_size):
            logits = vit(pixels[start : start + batch_size].to(device))
            correct += int((logits.argmax(-1).cpu() == labels[start : start + batch_size]).sum())
    vit.train(was_training)
    return correct / pixels.shape[0]


@functools.cache
def _data(test_size: int, split_seed: int) -> DigitsSplits:
    """The digits splits, loaded once per process."""
    return load_digits_splits(test_size, seed=split_seed)


def _plan(config: VitConfig) -> list[Run]:
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for encoding in config.encodings
        for seed in config.seeds
    ]


def _prepare(config: VitConfig) -> None:
    _data(config.test_size, config.split_seed)  # scikit-learn missing: fail before training


def _execute(config: VitConfig, run: Run, run_dir: Path) -> list[Row]:
    encoding, seed = run.params["encoding"], run.params["seed"]
    data = _data(config.test_size, config.split_seed)
    torch.manual_seed(derive_seed("vit-init", seed))
    model = _PerTokenLogits(DigitsViT(config.model_config(encoding)))
    source = DigitsSource(data.train_pixels, data.train_labels, seed=seed)

    def evaluate(module: nn.Module, step: int) -> dict[str, float]:
        return {"test_accuracy": _accuracy(model.vit, data.test_pixels, data.test_labels)}

    result = train(model, source, config.train_config(seed), run_dir, evaluate=evaluate)
    row: Row = {
        "experiment": "vit",
        "encoding": encoding,
        "seed": seed,
        "accuracy": _accuracy(model.vit, data.test_pixels, data.test_labels),
        "train_accuracy": _accuracy(model.vit, data.train_pixels, data.train_labels),
        "final_loss": result.final_loss,
        "params": sum(p.numel() for p in model.parameters()),
        "steps": result.steps,
        "train_seconds": result.seconds,
    }
    return [row]


def run_vit(
    config: VitConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the digits ViT experiment in folder ``out``; return its result rows.

    Writes ``out/config.json``, a run folder per (encoding, seed) under
    ``out/runs/<encoding>/seed<seed>/`` (skipped when its ``eval.json`` exists),
    ``out/results.csv`` (columns ``experiment, encoding, seed, accuracy, train_accuracy,
    final_loss, params, steps, train_seconds``) and ``out/report.html``.

    Raises:
        ValueError: naming the differing field when ``out`` holds another configuration.
        ImportError: when scikit-learn is missing.
    """
    return run_experiment(EXPERIMENT, config, out, echo=echo)


def format_vit_table(rows: Sequence[Row]) -> str:
    """Accuracy table: one line per encoding, mean ± sample std (min–max) over seeds."""
    selected = [r for r in rows if r.get("experiment") == "vit"]
    header = (
        f"{'encoding':<15}{'seeds':>6}{'test acc':>18}{'min–max':>15}{'train acc':>11}{'params':>9}"
    )
    lines = ["ViT on sklearn digits (8×8, 2×2 patches, 4×4 grid): test accuracy", header]
    for name in dict.fromkeys(r["encoding"] for r in selected):
        mine = [r for r in selected if r["encoding"] == name]
        accs = [float(r["accuracy"]) for r in mine]
        spread = statistics.stdev(accs) if len(accs) > 1 else 0.0
        train_acc = statistics.fmean(float(r["train_accuracy"]) for r in mine)
        lines.append(
            f"{name:<15}{len(mine):>6}{statistics.fmean(accs):>11.4f} ± {spread:.4f}"
            f"{min(accs):>8.4f}–{max(accs):.4f}{train_acc:>11.4f}{mine[0]['params']:>9}"
        )
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="vit",
    summary="digits ViT: no encoding, 1D learned, 2D sinusoidal, 2D axial RoPE",
    title="posenc: ViT on sklearn digits",
    config=VitConfig,
    plan=_plan,
    execute=_execute,
    table=format_vit_table,
    prepare=_prepare,
)

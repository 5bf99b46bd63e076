"""The digits ViT: the public image classifier of :mod:`posenc.models` on 8×8 digits.

The model of :mod:`posenc.lab.experiments.vit` (and of the resolution experiment) is
``EncoderClassifier(ModelConfig(pos=..., grid=(4, 4), patch_size=2, in_channels=1), 10)``
(:meth:`DigitsViTConfig.model_config`): an 8×8 digit cut into square patches, a linear patch
embedding, the encoding added to the embeddings or inside every block's attention, pre-norm
blocks, mean pooling and a 10-way linear head. :class:`DigitsViT` scales the pixel
intensities 0..16 to ``[-1, 1]`` and numbers the patches (row-major indices, or their (row,
column) for an encoding reading two axes). :class:`DigitsViTConfig` says which encoding,
built by name from :mod:`posenc.registry` for the patch grid, and refuses one that cannot
serve it (causal-only, token-id embeddings, a number of position axes other than 1 or 2,
arguments rejected at this size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import check_positive_float, check_positive_int
from posenc.attention import hooks_of
from posenc.encoding import PositionalEncoding
from posenc.encoding.resolve import Hooks
from posenc.lab.data.digits import IMAGE_SIZE, LEVELS, NUM_CLASSES
from posenc.models import EncoderClassifier, ModelConfig
from posenc.positions import grid_coordinates
from posenc.registry import ModelDims, build_encoding, encoding_spec

__all__ = ["ALIASES", "NONE", "DigitsViT", "DigitsViTConfig", "patchify"]

#: No positional encoding at all (not a registry name: the ViT then holds no encoding module).
NONE = "none"
#: Names of the experiment's first results, kept working: name -> registry name.
ALIASES = {"learned_1d": "learned"}


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
    """Shape of :class:`DigitsViT` (saved in each run folder's ``config.json``).

    Args:
        encoding: ``"none"``, a registered encoding (``posenc list``) or an alias of one
            (:data:`ALIASES`).
        patch_size: patch side in pixels (divides 8).
        dim, depth, num_heads: width, layers and heads.
        mlp_ratio: MLP hidden width as a multiple of ``dim``.
        pos_kwargs: keyword arguments of the encoding's constructor (e.g. ``{"base": 50}``);
            the model fills ``dim``, ``num_heads``, ``head_dim``, ``max_seq_len`` and the grid.

    Raises:
        ValueError: naming the field; naming ``encoding`` with the reason when the encoding
            cannot serve this ViT (see the module docstring).
    """

    encoding: str = "rope_2d"
    patch_size: int = 2
    dim: int = 64
    depth: int = 2
    num_heads: int = 4
    mlp_ratio: float = 4.0
    pos_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("patch_size", "dim", "depth", "num_heads"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if IMAGE_SIZE % self.patch_size:
            raise ValueError(f"patch_size must divide {IMAGE_SIZE}, got {self.patch_size}")
        if self.dim % self.num_heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by num_heads ({self.num_heads})")
        check_positive_float("mlp_ratio", self.mlp_ratio)
        if not isinstance(self.pos_kwargs, dict):
            raise ValueError(f"pos_kwargs must be a dict, got {type(self.pos_kwargs).__name__}")
        if not isinstance(self.encoding, str):
            raise ValueError(f"encoding must be a name (str), got {self.encoding!r}")
        reason = _refusal(self)
        if reason is not None:
            raise ValueError(
                f"encoding {self.encoding!r} cannot serve the digits ViT "
                f"({self.grid[0]}×{self.grid[1]} patch grid, bidirectional attention): {reason}"
            )

    @property
    def grid(self) -> tuple[int, int]:
        """The patch grid ``(height, width)``."""
        side = IMAGE_SIZE // self.patch_size
        return side, side

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def registry_name(self) -> str | None:
        """The encoding's name in :mod:`posenc.registry` (None for ``"none"``)."""
        return None if self.encoding == NONE else ALIASES.get(self.encoding, self.encoding)

    def model_config(self) -> ModelConfig:
        """The public model's configuration: :class:`DigitsViT` is
        ``EncoderClassifier(config.model_config(), 10)`` on scaled pixels; ``"none"`` is
        the registry's ``"nope"`` (no encoding module)."""
        return ModelConfig(
            vocab_size=LEVELS,  # unused: the model reads images
            dim=self.dim,
            depth=self.depth,
            num_heads=self.num_heads,
            mlp_ratio=self.mlp_ratio,
            max_seq_len=self.num_patches,
            pos=self.registry_name or "nope",
            pos_kwargs=dict(self.pos_kwargs),
            grid=self.grid,
            patch_size=self.patch_size,
            in_channels=1,
        )

    def dims(self) -> ModelDims:
        """What the registry fills the encoding's arguments from (the model's)."""
        return self.model_config().dims(causal=False)

    def build_encoding(self) -> PositionalEncoding | None:
        """A new encoding module for this ViT (None for ``"none"``)."""
        name = self.registry_name
        return None if name is None else build_encoding(name, self.dims(), self.pos_kwargs)


def _refusal(config: DigitsViTConfig) -> str | None:
    """Why ``config.encoding`` cannot serve the ViT, or None when it can."""
    name = config.registry_name
    if name is None:
        return "'none' takes no pos_kwargs" if config.pos_kwargs else None
    try:
        spec = encoding_spec(name)
    except ValueError as error:
        return f"{error} (or 'none', or an alias: {', '.join(ALIASES)})"
    if spec.causal_only:
        return "it is defined for causal (decoder) attention only (registry: causal_only)"
    if callable(getattr(spec.cls, "embed_tokens", None)):
        return "it embeds token ids in place of the token embedding; a ViT embeds pixel patches"
    try:
        with torch.random.fork_rng(devices=[]):  # a trial build leaves the global RNG alone
            axes = hooks_of(config.build_encoding()).num_axes
    except ValueError as error:  # arguments the encoding rejects at this size
        return str(error)
    if axes not in (1, 2):
        return (
            f"it reads {axes} position axes; a patch grid gives 1 (the row-major patch index) "
            "or 2 (row, column)"
        )
    return None


#: ``state_dict`` keys of the ViT before it was the public model: old prefix -> new.
_KEYS_BEFORE_PUBLIC_MODEL = {
    "patch_embed.": "model.trunk.patch_embed.",
    "additive.": "model.trunk.additive.",
    "blocks.": "model.trunk.blocks.",
    "norm.": "model.trunk.norm.",
    "head.": "model.head.",
}


def _rename_old_keys(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """Read weights saved before the ViT was :class:`~posenc.models.EncoderClassifier` (run
    folders of earlier versions): same parameters, in the same order, under older names."""
    for key in list(state_dict):
        rest = key[len(prefix) :] if key.startswith(prefix) else None
        if rest is None or rest.startswith("model."):
            continue
        for old, new in _KEYS_BEFORE_PUBLIC_MODEL.items():
            if rest.startswith(old):
                state_dict[prefix + new + rest[len(old) :]] = state_dict.pop(key)
                break


class DigitsViT(nn.Module):
    """The public image classifier (:attr:`model`, an :class:`~posenc.models.EncoderClassifier`
    built from :meth:`DigitsViTConfig.model_config`) on digit pixel intensities.

    Shape:
        tokens ``(batch, 64)`` pixel intensities 0..16 (row-major 8×8 image), positions of
        the patches ``(num_patches,)`` or ``(batch, num_patches)`` (default ``arange``) →
        logits ``(batch, 10)``.
    """

    def __init__(self, config: DigitsViTConfig) -> None:
        super().__init__()
        self.config = config
        self.model = EncoderClassifier(config.model_config(), NUM_CLASSES)
        self.register_load_state_dict_pre_hook(_rename_old_keys)

    @property
    def encoding(self) -> nn.Module | None:
        """The (first layer's) positional encoding module, or None."""
        return self.model.encoding

    @property
    def additive(self) -> nn.Module | None:
        """The encoding when it adds to the patch embeddings, else None."""
        return self.model.trunk.additive

    @property
    def hooks(self) -> Hooks:
        """The hooks the model's positions follow (their number of axes)."""
        return self.model.trunk.position_hooks

    def pixels(self, tokens: Tensor) -> Tensor:
        """Pixel intensities ``(batch, 64)`` → images ``(batch, 1, 8, 8)`` in ``[-1, 1]``."""
        if tokens.dim() != 2 or tokens.shape[1] != IMAGE_SIZE**2:
            raise ValueError(
                f"tokens must be (batch, {IMAGE_SIZE**2}) pixel intensities, got "
                f"{tuple(tokens.shape)}"
            )
        dtype = self.model.head.weight.dtype
        pixels = tokens.to(dtype) * (2.0 / (LEVELS - 1)) - 1.0  # [-1, 1]
        return pixels.reshape(-1, 1, IMAGE_SIZE, IMAGE_SIZE)

    def classify(
        self,
        images: Tensor,
        positions: Tensor | None = None,
        *,
        grid: tuple[int, int] | None = None,
        coords: Tensor | None = None,
    ) -> Tensor:
        """Logits ``(batch, 10)`` of images ``(batch, 1, H, W)`` in ``[-1, 1]``.

        ``positions`` are the patches' row-major indices into ``grid`` (default the training
        grid), ``(num_patches,)`` or ``(batch, num_patches)`` (default ``arange``); an encoding
        reading two position axes gets their (row, column) instead, or ``coords`` when given
        (``(2, num_patches)``, e.g. fractional positions rescaled to the training grid).
        """
        if positions is None:
            patch = self.config.patch_size
            count = (images.shape[-2] // patch) * (images.shape[-1] // patch)
            positions = torch.arange(count, device=images.device)
        rows, cols = grid_coordinates(positions, *(grid or self.config.grid))  # range check
        if self.hooks.num_axes == 2:
            positions = torch.stack((rows, cols)) if coords is None else coords
        return self.model(images, positions)

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        if key_padding_mask is not None:
            raise ValueError("key_padding_mask must be None: every digit has all its patches")
        return self.classify(self.pixels(tokens), positions)

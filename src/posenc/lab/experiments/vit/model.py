"""The digits ViT: patch embedding, a positional encoding, bidirectional blocks, mean pooling.

The model of :mod:`posenc.lab.experiments.vit` (and of the resolution experiment): an 8×8
digit cut into square patches (:func:`patchify`), a linear patch embedding, the encoding
added to the embeddings or inside every block's attention as :mod:`posenc.models` lays it out,
pre-norm blocks (:class:`posenc.models.Block`), mean pooling and a 10-way linear head.
:class:`DigitsViTConfig` says which encoding, built by name from :mod:`posenc.registry` for
the patch grid, and refuses one that cannot serve it (causal-only, token-id embeddings, a
number of position axes other than 1 or 2, arguments rejected at this size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import check_positive_float, check_positive_int
from posenc.attention import build_context, hooks_of
from posenc.encoding import PositionalEncoding
from posenc.lab.data.digits import IMAGE_SIZE, LEVELS, NUM_CLASSES
from posenc.models import Block, ModelConfig, layer_encodings
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
            check_positive_int(name, getattr(self, name))
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

    def dims(self) -> ModelDims:
        """What the registry fills the encoding's arguments from."""
        return ModelDims(
            dim=self.dim,
            num_heads=self.num_heads,
            max_seq_len=self.num_patches,
            causal=False,
            grid=self.grid,
        )

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
        # Added to the patch embeddings, or in every block's attention, as posenc.models does.
        laid = layer_encodings(config.build_encoding, config.depth)
        self.additive = laid.additive
        # Block reads only the shape fields of ModelConfig; the encoding object is passed in.
        shape = ModelConfig(
            vocab_size=LEVELS,
            dim=config.dim,
            depth=config.depth,
            num_heads=config.num_heads,
            mlp_ratio=config.mlp_ratio,
            max_seq_len=config.num_patches,
            pos="none",
        )
        self.blocks = nn.ModuleList(Block(shape, pos, causal=False) for pos in laid.layers)
        self.hooks = laid.hooks
        self.norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, NUM_CLASSES)

    @property
    def encoding(self) -> nn.Module | None:
        """The (first layer's) positional encoding module, or None."""
        if self.additive is not None:
            return self.additive
        first_block: Block = self.blocks[0]  # type: ignore[assignment]
        return first_block.attn.pos

    def embed(self, tokens: Tensor) -> Tensor:
        """Pixel intensities ``(batch, 64)`` → patch embeddings ``(batch, num_patches, dim)``."""
        if tokens.dim() != 2 or tokens.shape[1] != IMAGE_SIZE**2:
            raise ValueError(
                f"tokens must be (batch, {IMAGE_SIZE**2}) pixel intensities, got "
                f"{tuple(tokens.shape)}"
            )
        pixels = tokens.to(self.patch_embed.weight.dtype) * (2.0 / (LEVELS - 1)) - 1.0  # [-1, 1]
        return self.patch_embed(patchify(pixels, self.config.patch_size))

    def classify(
        self,
        patches: Tensor,
        positions: Tensor | None = None,
        *,
        grid: tuple[int, int] | None = None,
        coords: Tensor | None = None,
    ) -> Tensor:
        """Logits ``(batch, 10)`` of patch embeddings ``(batch, num_patches, dim)``.

        ``positions`` are the patches' row-major indices into ``grid`` (default the training
        grid), ``(num_patches,)`` or ``(batch, num_patches)`` (default ``arange``); an encoding
        reading two position axes gets their (row, column) instead, or ``coords`` when given
        (``(2, num_patches)``, e.g. fractional positions rescaled to the training grid).
        """
        if positions is None:
            positions = torch.arange(patches.shape[1], device=patches.device)
        rows, cols = grid_coordinates(positions, *(grid or self.config.grid))  # range check
        if self.hooks.num_axes == 2:
            positions = torch.stack((rows, cols)) if coords is None else coords
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
            additive: Any = self.additive  # implements the additive hook
            x = x + additive.position_embedding(context.q_pos).to(x.dtype)
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

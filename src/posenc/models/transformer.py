"""Small transformers built from :class:`posenc.attention.Attention`, encoding chosen by name.

* :class:`DecoderLM`: pre-norm decoder-only language model with a KV cache.
* :class:`EncoderClassifier`: bidirectional pre-norm encoder with mean pooling.

Both take a :class:`ModelConfig`; ``pos`` and ``pos_kwargs`` select the encoding through
:mod:`posenc.registry`, so an experiment can sweep encodings by name. Llama-4's iRoPE
layout is three more fields: ``nope_layers`` (layers without the encoding), ``chunk_size``
(chunked local attention on the other layers) and ``query_scale`` (a query temperature on
the NoPE layers); see :meth:`ModelConfig.layer_attention`. An image classifier is three
more: ``grid`` (the patch grid, which grid encodings such as ``rope_axial`` read),
``patch_size`` and ``in_channels`` (images in place of token ids).

Example::

    >>> model = DecoderLM(ModelConfig(vocab_size=256, dim=64, depth=2, num_heads=4, pos="alibi"))
    >>> model(torch.randint(0, 256, (2, 16))).shape
    torch.Size([2, 16, 256])
    >>> vit = EncoderClassifier(
    ...     ModelConfig(dim=64, num_heads=4, pos="rope_axial", grid=(8, 8), patch_size=4), 10
    ... )
    >>> vit(torch.randn(2, 3, 32, 32)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import check_finite, check_positive_int
from posenc.attention import (
    DeltaState,
    KVCache,
    MaskMod,
    build_context,
)
from posenc.encoding.base import PositionalEncoding
from posenc.encoding.protocols import TokenEmbedding
from posenc.encoding.resolve import Hooks
from posenc.models.block import Block
from posenc.models.config import LayerAttention, ModelConfig
from posenc.models.layout import LayerEncodings, check_tokens, layer_encodings
from posenc.models.patches import check_images, patchify
from posenc.positions import grid_positions
from posenc.registry import build_encoding, encoding_spec

__all__ = [
    "Block",
    "DecoderLM",
    "EncoderClassifier",
    "LayerAttention",
    "LayerEncodings",
    "ModelConfig",
    "layer_encodings",
]


def _check_token_embedding(encoding: TokenEmbedding, config: ModelConfig) -> None:
    """An encoding replacing the token embedding must cover the vocabulary and the width."""
    vocab_size = encoding.vocab_size
    if vocab_size < config.vocab_size:
        raise ValueError(
            f"pos_kwargs: {type(encoding).__name__} embeds {vocab_size} token ids but the model's "
            f"vocab_size is {config.vocab_size}; its vocab_size must be >= the model's"
        )
    dim = encoding.dim
    if dim != config.dim:
        raise ValueError(
            f"pos_kwargs: {type(encoding).__name__} has dim {dim} but the model's dim is "
            f"{config.dim}; the token embedding must have the model's width"
        )


def _refuse_token_embedding(pos: str) -> None:
    raise ValueError(
        f"pos: {pos!r} embeds token ids in place of the token embedding; a model reading "
        "images (patch_size set) embeds pixel patches"
    )


def _init_embedding(weight: Tensor, dim: int) -> None:
    """The token table's draws in :class:`_Trunk`'s constructor: ``nn.Embedding``'s own
    ``N(0, 1)``, then ``N(0, 1/dim)`` (both kept, so that a seed gives the model it always
    gave)."""
    with torch.no_grad():
        nn.init.normal_(weight)
        nn.init.normal_(weight, std=dim**-0.5)


class _Trunk(nn.Module):
    """Embedding, additive encoding, blocks and final norm, shared by both models.

    An encoding with the token-embedding hook (``embed_tokens``) replaces the embedding. With
    ``config.patch_size`` the input is images and a linear patch embedding (ViT's) replaces
    the token table (built first, as the table would be; no ``sqrt(dim)`` scale).

    The per-forward :class:`~posenc.attention.AttentionContext` (positions, mask, the
    tables of a shared encoding) is built and validated once here and handed to every layer.
    """

    def __init__(self, config: ModelConfig, *, causal: bool) -> None:
        super().__init__()
        self.config = config
        self.causal = causal
        if causal and (config.grid is not None or config.images):
            raise ValueError(
                "grid and patch_size are for EncoderClassifier (images, bidirectional); "
                f"DecoderLM is a sequence model: got grid={config.grid!r}, "
                f"patch_size={config.patch_size!r}"
            )
        if config.images and callable(getattr(encoding_spec(config.pos).cls, "embed_tokens", None)):
            _refuse_token_embedding(config.pos)  # before building: it needs a vocabulary
        self.embed: nn.Embedding | None = None
        self.patch_embed: nn.Linear | None = None
        if config.images:
            assert config.patch_size is not None
            width = config.in_channels * config.patch_size**2
            self.patch_embed = nn.Linear(width, config.dim)
        else:
            embed = nn.Embedding(config.vocab_size, config.dim)  # draws N(0, 1) (kept: seeds)
            # Token vectors enter at unit scale (init std dim^-1/2, times sqrt(dim)) so that an
            # additive encoding of unit amplitude neither drowns them nor is drowned (fairseq).
            nn.init.normal_(embed.weight, std=config.dim**-0.5)
            self.embed = embed
        self.embed_scale = math.sqrt(config.dim)
        dims = config.dims(causal=causal)
        plans = [config.layer_attention(index) for index in range(config.depth)]
        laid = layer_encodings(
            lambda: build_encoding(config.pos, dims, config.pos_kwargs),
            config.depth,
            nope_layers=config.nope_layers,
            recurrent_layers=tuple(i for i, a in enumerate(plans) if a.mixer != "softmax"),
        )
        self.additive = laid.additive
        self.token_embedding = laid.token_embedding
        if laid.hooks.token_embedding is not None and config.images:
            _refuse_token_embedding(config.pos)  # a wrapper around one
        if laid.hooks.token_embedding is not None:
            _check_token_embedding(laid.hooks.token_embedding, config)
            # The encoding is the token embedding: no table of our own. (It is still drawn
            # above, first, so that every other encoding's initialization is unchanged.)
            self.embed = None
        self.blocks = nn.ModuleList(
            Block(
                config,
                p,
                causal=causal,
                chunk_size=a.chunk_size,
                query_scale=a.query_scale,
                window=a.window,
                mixer=a.mixer,
            )
            for p, a in zip(laid.layers, plans, strict=True)
        )
        self.norm = nn.LayerNorm(config.dim)
        self.position_hooks: Hooks = laid.hooks
        # every layer NoPE (or recurrent): the encoding was built (drawn) for its position
        # hooks, and neither a layer nor the embeddings took it
        self.unplaced = (
            not any(a.encoded for a in plans)
            and laid.additive is None
            and laid.token_embedding is None
        )
        if config.query_scale is not None and laid.hooks.num_axes != 1:
            raise ValueError(
                f"query_scale reads one position per query; pos {config.pos!r} reads "
                f"{laid.hooks.num_axes} position axes"
            )
        self.grid_positions = False  # default positions: the grid's axes (else the index)
        if config.grid is not None and (laid.hooks.encoding is not None):
            axes = laid.hooks.num_axes
            if axes not in (1, len(config.grid)):
                raise ValueError(
                    f"pos {config.pos!r} reads {axes} position axes; grid {config.grid} gives "
                    f"{len(config.grid)} (one per grid axis) or 1 (the row-major token index)"
                )
            self.grid_positions = axes == len(config.grid) and axes > 1

    def encodings(self) -> list[PositionalEncoding]:
        """The encoding modules, each once, in the order the constructor built them (the
        token embedding or additive one, else the first layer's, then later layers' own)."""
        layers: list[Any] = [block.attn.pos for block in self.blocks]  # type: ignore[union-attr]
        # (a GatedDeltaNet's pos is None: it takes no encoding)
        candidates = [self.token_embedding, self.additive, *layers]
        found: dict[int, PositionalEncoding] = {}
        for module in candidates:
            if module is not None and id(module) not in found:
                found[id(module)] = module
        return list(found.values())

    def reset_parameters(self) -> None:
        """Re-draw every parameter as the constructor does, in its order: the embedding,
        the encodings, the blocks, the final norm. See :meth:`DecoderLM.reset_parameters`."""
        config = self.config
        if self.patch_embed is not None:
            self.patch_embed.reset_parameters()
        elif self.embed is not None:
            _init_embedding(self.embed.weight, config.dim)
        else:  # the constructor drew a table the encoding then replaced: draw it again
            device = self.norm.weight.device
            _init_embedding(torch.empty(config.vocab_size, config.dim, device=device), config.dim)
        for encoding in self.encodings():
            encoding.reset_parameters()
        if self.unplaced:  # draw the encoding no layer took again, as the constructor did
            with torch.device(self.norm.weight.device):
                build_encoding(config.pos, config.dims(causal=self.causal), config.pos_kwargs)
        for block in self.blocks:
            block.reset_parameters()  # type: ignore[operator]
        self.norm.reset_parameters()

    @property
    def encoding(self) -> nn.Module | None:
        """The (first encoded layer's) positional encoding module, or None for NoPE."""
        if self.token_embedding is not None:
            return self.token_embedding
        if self.additive is not None:
            return self.additive
        for block in self.blocks:
            if block.attn.pos is not None:  # type: ignore[union-attr]
                pos: nn.Module = block.attn.pos  # type: ignore[union-attr,assignment]
                return pos
        return None

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None,
        *,
        key_padding_mask: Tensor | None,
        document_ids: Tensor | None,
        attn_mask: Tensor | MaskMod | None,
        cache: list[KVCache | DeltaState] | None,
    ) -> Tensor:
        device = self.norm.weight.device
        config = self.config
        name = "images" if config.images else "tokens"
        if isinstance(tokens, Tensor) and tokens.device != device:  # before reading values
            raise ValueError(
                f"{name} must be on {device} (the model's device); got a tensor on "
                f"{tokens.device}: move it with .to({str(device)!r})"
            )
        if config.images:
            assert config.patch_size is not None and self.patch_embed is not None
            images = check_images(tokens, config.in_channels, config.patch_size)
            check_finite("images", images)
            height, width = images.shape[-2:]
            patches = patchify(images, config.patch_size)
            batch, seq = patches.shape[:2]
            size = (height // config.patch_size, width // config.patch_size)
            misfit = f"{height}×{width} images give a {size[0]}×{size[1]} patch grid"
            fits = size == config.grid
        else:
            check_tokens(tokens, config.vocab_size)
            batch, seq = tokens.shape
            misfit = f"{seq} tokens per row"
            fits = seq == config.num_tokens
        if config.grid is not None and positions is None:
            if not fits:  # positions given: the caller places the tokens (another grid)
                raise ValueError(
                    f"{name} do not fit grid={config.grid} (patch_size={config.patch_size}, "
                    f"{config.num_tokens} tokens, row-major): {misfit}; give {name} of the "
                    "grid's size, or positions for another layout"
                )
            if self.grid_positions:
                positions = grid_positions(*config.grid, device=device)
        if cache is not None and (
            not isinstance(cache, (list, tuple)) or len(cache) != len(self.blocks)
        ):
            raise ValueError(f"cache must hold one KVCache per layer ({len(self.blocks)})")
        kv_caches = [c for c in cache or () if not isinstance(c, DeltaState)]
        kv_cache = kv_caches[0] if kv_caches else None  # positions continue from its keys
        if cache is not None and kv_cache is None and positions is None:
            seen = next(c.length for c in cache if isinstance(c, DeltaState))  # no KV cache
            positions = torch.arange(seen, seen + seq, device=tokens.device)
        context = build_context(
            batch=batch,
            seq=seq,
            device=tokens.device,
            causal=self.causal,
            hooks=self.position_hooks,
            positions=positions,
            key_padding_mask=key_padding_mask,
            document_ids=document_ids,
            attn_mask=attn_mask,
            cache=kv_cache,
        )
        hooks = self.position_hooks
        if self.patch_embed is not None:
            x = self.patch_embed(patches.to(self.patch_embed.weight.dtype))
        elif hooks.token_embedding is not None:
            x = hooks.token_embedding.embed_tokens(tokens, context.q_pos)
        else:
            assert self.embed is not None
            x = self.embed(tokens) * self.embed_scale
        if hooks.additive is not None:
            x = x + hooks.additive.position_embedding(context.q_pos).to(x.dtype)
        for index, block in enumerate(self.blocks):
            x = block(x, cache=None if cache is None else cache[index], context=context)
        return self.norm(x)


class DecoderLM(nn.Module):
    """Pre-norm decoder-only language model.

    Shape:
        tokens ``(batch, seq)`` → logits ``(batch, seq, vocab_size)``. With ``cache`` (from
        :meth:`new_cache`), each call appends to the cache and positions continue from it.

    Building on the ``meta`` device (FSDP, large-model loading): construct under ``with
    torch.device("meta")``, materialize with ``to_empty(device=...)``, then either load a
    state dict or call :meth:`reset_parameters`. No encoding keeps a constant (frequencies,
    slopes) in a buffer, so nothing else needs restoring.

    Example::

        >>> with torch.device("meta"):
        ...     lm = DecoderLM(ModelConfig(vocab_size=256, dim=64, depth=2, num_heads=4))
        >>> _ = lm.to_empty(device="cpu")
        >>> lm.reset_parameters()
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.trunk = _Trunk(config, causal=True)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)

    @property
    def encoding(self) -> nn.Module | None:
        return self.trunk.encoding

    def reset_parameters(self) -> None:
        """Initialize every parameter as the constructor does, drawing the same random
        numbers in the same order: ``torch.manual_seed(s)`` then this gives the model that
        ``torch.manual_seed(s)`` then ``DecoderLM(config)`` gives (each encoding's
        ``reset_parameters`` draws what its constructor draws)."""
        self.trunk.reset_parameters()
        self.head.reset_parameters()

    def new_cache(self) -> list[KVCache | DeltaState]:
        """An empty cache, one entry per layer: a :class:`~posenc.attention.KVCache` for an
        attention layer, a :class:`~posenc.attention.delta_rule.DeltaState` for a delta one."""
        config = self.config
        return [
            DeltaState() if config.mixer(i) == "delta" else KVCache() for i in range(config.depth)
        ]

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
        attn_mask: Tensor | MaskMod | None = None,
        cache: list[KVCache | DeltaState] | None = None,
    ) -> Tensor:
        """Logits ``(batch, seq, vocab_size)``; see :class:`~posenc.attention.Attention` for
        the masks (``key_padding_mask`` and ``document_ids`` of the new tokens)."""
        hidden = self.trunk(
            tokens,
            positions,
            key_padding_mask=key_padding_mask,
            document_ids=document_ids,
            attn_mask=attn_mask,
            cache=cache,
        )
        return self.head(hidden)


class EncoderClassifier(nn.Module):
    """Bidirectional pre-norm encoder with masked mean pooling and a linear classifier.

    Causal-only encodings (``causal_only``: xPos, CoPE, the segment methods) are refused
    (``ValueError`` naming ``pos``). Meta-device construction as :class:`DecoderLM`.

    An image classifier (ViT) by name: ``ModelConfig(grid=(h, w), patch_size=p)`` reads
    images ``(batch, in_channels, h·p, w·p)`` through a linear patch embedding; grid encodings
    (``rope_axial``, ``sinusoidal_2d``, ...) take the grid, and the default positions are the
    grid's, row-major (:class:`ModelConfig`). Images or token rows that do not fit the grid
    raise ``ValueError`` naming ``grid`` unless ``positions`` place them.

    Shape:
        tokens ``(batch, seq)`` (or images ``(batch, in_channels, H, W)`` with
        ``patch_size``: ``seq = (H/p)·(W/p)`` patches) → logits ``(batch, num_classes)``;
        :meth:`encode` returns the per-token states ``(batch, seq, dim)``.

    Example::

        >>> config = ModelConfig(dim=64, num_heads=4, pos="rope_mixed", grid=(8, 8), patch_size=4)
        >>> EncoderClassifier(config, num_classes=10)(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    def __init__(self, config: ModelConfig, num_classes: int) -> None:
        super().__init__()
        num_classes = check_positive_int("num_classes", num_classes)
        self.config = config
        self.trunk = _Trunk(config, causal=False)
        self.head = nn.Linear(config.dim, num_classes)

    @property
    def encoding(self) -> nn.Module | None:
        return self.trunk.encoding

    def reset_parameters(self) -> None:
        """Initialize every parameter as the constructor does (see
        :meth:`DecoderLM.reset_parameters`): after ``to_empty`` on a ``meta``-built model."""
        self.trunk.reset_parameters()
        self.head.reset_parameters()

    def encode(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        return self.trunk(
            tokens,
            positions,
            key_padding_mask=key_padding_mask,
            document_ids=None,
            attn_mask=None,
            cache=None,
        )

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        hidden = self.encode(tokens, positions, key_padding_mask=key_padding_mask)
        if key_padding_mask is None:
            pooled = hidden.mean(dim=1)
        else:
            weights = key_padding_mask.to(hidden.dtype).unsqueeze(-1)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled)

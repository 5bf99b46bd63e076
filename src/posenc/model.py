"""Small transformers built from :class:`posenc.attention.Attention`, encoding chosen by name.

* :class:`DecoderLM`: pre-norm decoder-only language model with a KV cache.
* :class:`EncoderClassifier`: bidirectional pre-norm encoder with mean pooling.

Both take a :class:`ModelConfig`; ``pos`` and ``pos_kwargs`` select the encoding through
:mod:`posenc.registry`, so an experiment can sweep encodings by name.

Example::

    >>> model = DecoderLM(ModelConfig(vocab_size=256, dim=64, depth=2, num_heads=4, pos="alibi"))
    >>> model(torch.randint(0, 256, (2, 16))).shape
    torch.Size([2, 16, 256])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from posenc._validate import check_positive_int
from posenc.attention import Attention, KVCache
from posenc.base import PositionalEncoding
from posenc.positions import check_positions, positions_from_length
from posenc.registry import ModelDims, build_encoding

__all__ = ["Block", "DecoderLM", "EncoderClassifier", "ModelConfig"]


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a small transformer and its positional encoding.

    Args:
        vocab_size: token vocabulary (256 for bytes).
        dim, depth, num_heads: width, layers and query heads.
        num_kv_heads: key/value heads for grouped-query attention (default ``num_heads``).
        mlp_ratio: hidden width of the MLP relative to ``dim``.
        max_seq_len: only used by encodings with a finite table (learned absolute).
        pos: registered encoding name (see ``posenc list``).
        pos_kwargs: keyword arguments for the encoding's constructor.
        dropout: dropout on attention probabilities and residual branches.
    """

    vocab_size: int = 256
    dim: int = 128
    depth: int = 2
    num_heads: int = 4
    num_kv_heads: int | None = None
    mlp_ratio: float = 4.0
    max_seq_len: int = 1024
    pos: str = "rope"
    pos_kwargs: dict[str, Any] = field(default_factory=dict)
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "depth", "num_heads", "max_seq_len"):
            check_positive_int(name, getattr(self, name))
        if self.dim % self.num_heads != 0:
            raise ValueError(f"dim ({self.dim}) must be divisible by num_heads ({self.num_heads})")
        if self.mlp_ratio <= 0:
            raise ValueError(f"mlp_ratio must be > 0, got {self.mlp_ratio}")

    def dims(self, *, causal: bool) -> ModelDims:
        return ModelDims(
            dim=self.dim, num_heads=self.num_heads, max_seq_len=self.max_seq_len, causal=causal
        )


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(
        self, config: ModelConfig, pos: PositionalEncoding | None, *, causal: bool
    ) -> None:
        super().__init__()
        hidden = int(config.mlp_ratio * config.dim)
        self.attn_norm = nn.LayerNorm(config.dim)
        self.attn = Attention(
            config.dim,
            config.num_heads,
            num_kv_heads=config.num_kv_heads,
            pos=pos,
            causal=causal,
            dropout=config.dropout,
        )
        self.mlp_norm = nn.LayerNorm(config.dim)
        self.mlp = nn.Sequential(
            nn.Linear(config.dim, hidden), nn.GELU(), nn.Linear(hidden, config.dim)
        )
        self.drop = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        attended = self.attn(
            self.attn_norm(x),
            positions,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            cache=cache,
        )
        x = x + self.drop(attended)
        return x + self.drop(self.mlp(self.mlp_norm(x)))


class _Trunk(nn.Module):
    """Embedding, additive encoding, blocks and final norm, shared by both models."""

    def __init__(self, config: ModelConfig, *, causal: bool) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        # Token vectors enter at unit scale (init std dim^-1/2, times sqrt(dim)) so that an
        # additive encoding of unit amplitude neither drowns them nor is drowned (fairseq).
        nn.init.normal_(self.embed.weight, std=config.dim**-0.5)
        self.embed_scale = math.sqrt(config.dim)
        dims = config.dims(causal=causal)
        first = build_encoding(config.pos, dims, config.pos_kwargs)
        self.additive = first if first.family == "additive" else None
        # One attention-side encoding per layer, unless the method shares one (T5).
        layer_pos: list[PositionalEncoding | None] = []
        for index in range(config.depth):
            if first.family in ("additive", "none"):
                layer_pos.append(None)
            elif index == 0 or first.shared_across_layers:
                layer_pos.append(first)
            else:
                layer_pos.append(build_encoding(config.pos, dims, config.pos_kwargs))
        self.blocks = nn.ModuleList(Block(config, p, causal=causal) for p in layer_pos)
        self.norm = nn.LayerNorm(config.dim)

    @property
    def encoding(self) -> PositionalEncoding | None:
        """The (first layer's) positional encoding module, or None for NoPE."""
        if self.additive is not None:
            return self.additive
        first_block: Block = self.blocks[0]  # type: ignore[assignment]
        return first_block.attn.pos

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None,
        *,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        cache: list[KVCache] | None,
    ) -> Tensor:
        if tokens.dim() != 2 or tokens.is_floating_point():
            raise ValueError(
                f"tokens must be an integer tensor (batch, seq); got {tokens.dtype} "
                f"{tuple(tokens.shape)}"
            )
        seq = tokens.shape[1]
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"cache must hold one KVCache per layer ({len(self.blocks)})")
        if positions is None:
            offset = 0 if cache is None else cache[0].length
            positions = positions_from_length(seq, offset, device=tokens.device)
        check_positions(positions, "positions")
        x = self.embed(tokens) * self.embed_scale
        if self.additive is not None:
            x = x + self.additive(positions).to(x.dtype)
        for index, block in enumerate(self.blocks):
            x = block(
                x,
                positions,
                key_padding_mask=key_padding_mask,
                attn_mask=attn_mask,
                cache=None if cache is None else cache[index],
            )
        return self.norm(x)


class DecoderLM(nn.Module):
    """Pre-norm decoder-only language model.

    Shape:
        tokens ``(batch, seq)`` → logits ``(batch, seq, vocab_size)``. With ``cache`` (from
        :meth:`new_cache`), each call appends to the cache and positions continue from it.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.trunk = _Trunk(config, causal=True)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)

    @property
    def encoding(self) -> PositionalEncoding | None:
        return self.trunk.encoding

    def new_cache(self) -> list[KVCache]:
        """An empty KV cache, one entry per layer."""
        return [KVCache() for _ in range(self.config.depth)]

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: list[KVCache] | None = None,
    ) -> Tensor:
        hidden = self.trunk(
            tokens,
            positions,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            cache=cache,
        )
        return self.head(hidden)


class EncoderClassifier(nn.Module):
    """Bidirectional pre-norm encoder with masked mean pooling and a linear classifier.

    Shape:
        tokens ``(batch, seq)`` → logits ``(batch, num_classes)``; :meth:`encode` returns
        the per-token states ``(batch, seq, dim)``.
    """

    def __init__(self, config: ModelConfig, num_classes: int) -> None:
        super().__init__()
        check_positive_int("num_classes", num_classes)
        self.config = config
        self.trunk = _Trunk(config, causal=False)
        self.head = nn.Linear(config.dim, num_classes)

    @property
    def encoding(self) -> PositionalEncoding | None:
        return self.trunk.encoding

    def encode(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        return self.trunk(
            tokens, positions, key_padding_mask=key_padding_mask, attn_mask=None, cache=None
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

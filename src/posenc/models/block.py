"""The pre-norm transformer block both models stack (:mod:`posenc.models.transformer`):
attention (or a linear or delta-rule mixer) and an MLP, each behind a LayerNorm."""

from __future__ import annotations

from torch import Tensor, nn

from posenc.attention import (
    Attention,
    AttentionContext,
    DeltaState,
    GatedDeltaNet,
    KVCache,
    MaskMod,
    QueryScale,
)
from posenc.models.config import Mixer, ModelConfig

__all__ = ["Block"]


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

    ``chunk_size``, ``query_scale``, ``window`` and ``config.output_gate`` go to the block's
    :class:`~posenc.attention.Attention`; ``mixer`` ``"linear"`` makes it linear attention
    (the ``linear`` backend) and ``"delta"`` a
    :class:`~posenc.attention.delta_rule.GatedDeltaNet` (``attn`` either way).
    """

    def __init__(
        self,
        config: ModelConfig,
        pos: nn.Module | None,
        *,
        causal: bool,
        chunk_size: int | None = None,
        query_scale: QueryScale | None = None,
        window: int | None = None,
        mixer: Mixer = "softmax",
    ) -> None:
        super().__init__()
        hidden = int(config.mlp_ratio * config.dim)
        self.attn_norm = nn.LayerNorm(config.dim)
        self.attn: Attention | GatedDeltaNet
        if mixer == "delta":
            if not causal:
                raise ValueError(
                    "mixers: a 'delta' layer is causal (a recurrence); an encoder takes "
                    "'softmax' or 'linear' layers"
                )
            self.attn = GatedDeltaNet(config.dim, config.num_heads)
        else:
            self.attn = Attention(
                config.dim,
                config.num_heads,
                num_kv_heads=config.num_kv_heads,
                pos=pos,
                causal=causal,
                dropout=config.dropout,
                backend="linear" if mixer == "linear" else config.backend,
                chunk_size=chunk_size,
                query_scale=query_scale,
                window=window,
                output_gate=config.output_gate and mixer == "softmax",
            )
        self.mlp_norm = nn.LayerNorm(config.dim)
        self.mlp = nn.Sequential(
            nn.Linear(config.dim, hidden), nn.GELU(), nn.Linear(hidden, config.dim)
        )
        self.drop = nn.Dropout(config.dropout)

    def reset_parameters(self) -> None:
        """Re-draw the block's parameters in the constructor's order (norm, attention
        projections, norm, MLP); its encoding is the model's to initialize."""
        self.attn_norm.reset_parameters()
        self.attn.reset_parameters()
        self.mlp_norm.reset_parameters()
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | MaskMod | None = None,
        cache: KVCache | DeltaState | None = None,
        context: AttentionContext | None = None,
    ) -> Tensor:
        if isinstance(self.attn, GatedDeltaNet):
            if attn_mask is not None:
                raise ValueError("attn_mask: a 'delta' layer has no pairs to mask")
            if cache is not None and not isinstance(cache, DeltaState):
                raise ValueError(
                    f"cache: a 'delta' layer keeps a DeltaState (model.new_cache()), got "
                    f"{type(cache).__name__}"
                )
            attended = self.attn(
                self.attn_norm(x),
                key_padding_mask=key_padding_mask,
                cache=cache,
                context=context,
            )
        else:
            if cache is not None and not isinstance(cache, KVCache):
                raise ValueError(
                    f"cache: an attention layer keeps a KVCache (model.new_cache()), got "
                    f"{type(cache).__name__}"
                )
            attended = self.attn(
                self.attn_norm(x),
                positions,
                key_padding_mask=key_padding_mask,
                attn_mask=attn_mask,
                cache=cache,
                context=context,
            )
        x = x + self.drop(attended)
        return x + self.drop(self.mlp(self.mlp_norm(x)))

"""The contracts of the four places a positional encoding can enter attention.

A positional encoding is a :class:`torch.nn.Module` whose class attribute ``family`` says
where it acts; :class:`posenc.attention.Attention` and :mod:`posenc.model` dispatch on it.

* ``"additive"``: :class:`AdditiveEncoding`, ``forward(positions) -> (..., seq, dim)``;
  the model adds it to the token embeddings.
* ``"rotary"``: :class:`RotaryEncoding`, ``forward(q, k, q_pos, k_pos) -> (q, k)``;
  q and k may have different lengths (KV cache).
* ``"bias"``: :class:`BiasEncoding`, ``bias(q_pos, k_pos) -> (heads, q_len, k_len)`` or
  ``(batch, heads, q_len, k_len)`` for batched positions; added to the scaled logits.
* ``"contextual"``: :class:`ContextualEncoding`, a logit term that depends on q or k as
  well as on positions (Shaw, Transformer-XL), and optionally a term added to the output.
* ``"none"``: :class:`NoPE`, no positional information at all.

Shapes follow :func:`torch.nn.functional.scaled_dot_product_attention`: q, k, v are
``(batch, heads, seq, head_dim)``; positions are ``(seq,)`` or ``(batch, seq)``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from torch import Tensor, nn

__all__ = [
    "AdditiveEncoding",
    "BiasEncoding",
    "ContextualEncoding",
    "Family",
    "NoPE",
    "PositionalEncoding",
    "RotaryEncoding",
]

Family = Literal["none", "additive", "rotary", "bias", "contextual"]


class PositionalEncoding(nn.Module):
    """Base of every encoding; ``family`` tells attention where the encoding acts."""

    family: ClassVar[Family]
    #: True when one instance is meant to be shared by all layers (T5 shares its table).
    shared_across_layers: ClassVar[bool] = False


class NoPE(PositionalEncoding):
    """No positional encoding (Kazemnejad et al. 2023, https://arxiv.org/abs/2305.19466).

    Only meaningful with a causal mask: bidirectional attention without positions is
    permutation-equivariant.
    """

    family: ClassVar[Family] = "none"


class AdditiveEncoding(PositionalEncoding):
    """``x + P(positions)``: ``forward(positions) -> (..., seq, dim)``."""

    family: ClassVar[Family] = "additive"
    dim: int


class RotaryEncoding(PositionalEncoding):
    """Rotates q and k by their positions: ``forward(q, k, q_pos, k_pos) -> (q, k)``."""

    family: ClassVar[Family] = "rotary"

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError


class BiasEncoding(PositionalEncoding):
    """Adds ``bias(q_pos, k_pos)`` to the scaled attention logits.

    ``bias`` returns ``(heads, q_len, k_len)`` for 1-D positions and
    ``(batch, heads, q_len, k_len)`` when either position tensor is ``(batch, seq)``.
    """

    family: ClassVar[Family] = "bias"
    num_heads: int

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.bias(q_pos, k_pos)


class ContextualEncoding(PositionalEncoding):
    """A logit term that reads q or k as well as positions (Shaw, Transformer-XL).

    ``logits(q, k, q_pos, k_pos, scale)`` returns ``(batch, heads, q_len, k_len)``, added
    to ``scale * q @ k.T``; the encoding applies ``scale`` itself where its formula does.
    ``values(probs, q_pos, k_pos)`` returns ``(batch, heads, q_len, head_dim)`` added to
    the attention output, or ``None`` (the default) when the method has no value term.
    """

    family: ClassVar[Family] = "contextual"
    #: True when :meth:`values` contributes; attention then needs the probabilities.
    uses_values: bool = False

    def logits(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float) -> Tensor:
        raise NotImplementedError

    def values(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None

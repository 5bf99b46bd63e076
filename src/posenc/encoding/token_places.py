"""The token-level places: states and transforms of each token, and the positions themselves.

Attention hands these the layer's input ``x`` of the new tokens (or their positions) before
anything reads q and k; the KV cache keeps what the next tokens continue (each key's state,
the transforms' inputs). :mod:`posenc.encoding.protocols` has the table of all places; the
token-phase place lives in :mod:`~posenc.encoding.token_phases`.
"""

from __future__ import annotations

from torch import Tensor

from posenc.encoding._common import required
from posenc.encoding.base import PositionalEncoding

__all__ = ["PositionTransform", "TokenStateEncoding", "TokenTransformEncoding"]


class TokenStateEncoding(PositionalEncoding):
    """A bias from per-token states of the layer's input (FoX's forget gates).

    Attention hands it the layer's input ``x`` of the new tokens; the KV cache keeps every
    key's state.
    """

    dim: int
    num_heads: int

    def token_state(self, x: Tensor, previous: Tensor | None, real: Tensor | None) -> Tensor:
        """``(batch, heads, seq)`` states of the new tokens, continuing ``previous`` (the last
        cached key's state); ``real`` marks the non-padding tokens."""
        raise required(self, "token_state")

    def state_bias(self, q_state: Tensor, k_state: Tensor) -> Tensor:
        """The bias between queries and keys of those states (broadcastable)."""
        raise required(self, "state_bias")


class PositionTransform(PositionalEncoding):
    """Changes positions before anything reads them (randomized positions, CAPE's training
    augmentation)."""

    @property
    def randomizing(self) -> bool:
        """True while the transform changes positions (a training draw); attention then
        knows positions are no longer ``arange``."""
        return False

    def transform_positions(
        self,
        positions: Tensor,
        *,
        batch: int,
        continuing: bool = False,
        real: Tensor | None = None,
    ) -> Tensor:
        """New positions of ``batch`` rows; ``continuing``: the call extends a KV cache;
        ``real``: ``(batch, seq)`` bool, True for the real tokens (None: all are). A real
        token's new position must not depend on the padding (how much, on which side): a
        transform reading several tokens (CAPE's mean) reads no padding, and a random one
        draws so that a padded row's real tokens get what they get unpadded."""
        raise required(self, "transform_positions")


class TokenTransformEncoding(PositionalEncoding):
    """Per-token transforms of the layer's input, accumulated between key and query (PaTH).

    The logit of query ``i`` and key ``j ≤ i`` is ``q_iᵀ H_i ⋯ H_{j+1} k_j`` with
    ``H_s = I − β_s w_s w_sᵀ``: not a term added to ``q·k`` but a transform of the key by
    every token between, so attention runs its own blockwise algorithm
    (:func:`posenc.token_state.path.path_attention`) and the KV cache keeps each key carried
    to its newest token. Served by the ``sdpa`` and ``chunked`` backends.
    """

    dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    #: True when :meth:`gate_states` gives forget gates (the KV cache then keeps them).
    has_gates: bool = False
    #: Earlier tokens each token's transform reads besides its own (a short convolution's
    #: ``K − 1``; 0 when each reads its own input alone).
    history: int = 0

    def transform_inputs(self, x: Tensor, real: Tensor | None) -> Tensor:
        """What the transforms read of each new token, ``(batch, seq, channels)`` from the
        layer's input ``x`` ``(batch, seq, dim)``; zeros where ``real`` is False. A KV cache
        keeps them for the next tokens' :attr:`history`."""
        raise required(self, "transform_inputs")

    def token_transforms(
        self, inputs: Tensor, real: Tensor | None, same_document: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """``(w, beta)`` of the last ``seq`` tokens of ``inputs`` ``(batch, history + seq,
        channels)`` (the :attr:`history` tokens before them first, zeros before the
        sequence): ``(batch, kv_heads, seq, head_dim)`` and ``(batch, kv_heads, seq)``.
        ``real`` ``(batch, seq)``: ``β = 0`` where False; ``same_document`` ``(batch, seq,
        history + 1)``: which window tokens share each new token's document (None: all)."""
        raise required(self, "token_transforms")

    def gate_states(self, x: Tensor, previous: Tensor | None, real: Tensor | None) -> Tensor | None:
        """Cumulative log forget gates ``(batch, heads, seq)`` continuing ``previous`` (the
        last cached key's), or None when the method has none."""
        return None

"""The token-phase place: q and k rotated by phases accumulated from the layer's input.

An encoding at this place (CARoPE, :class:`posenc.rotary.ContextAwareRoPE`) reads the layer's
input ``x`` of the new tokens, not their positions, and gives each token and key head a phase
per channel pair, accumulated over the tokens:

.. math::

    φ_h(n) = \\sum_{t ≤ n} ω_h(x_t), \\qquad q_n' = R(φ_{g(h)}(n))\\, q_n, \\quad
    k_n' = R(φ_h(n))\\, k_n,

so the logit of query ``i`` and key ``j`` reads ``φ(i) − φ(j) = Σ_{j<t≤i} ω(x_t)``. Attention
rotates q and the new k before it stores them (the KV cache keeps rotated keys and every key's
phases, so decoding continues the last one), and any backend that takes plain q and k serves
it. The rules attention follows:

* **heads**: one set of phases per *key* head (``num_heads`` of the encoding is the
  attention's ``num_kv_heads``); query head ``h`` of a grouped-query layer uses the phases
  of its key head ``h // (num_heads / num_kv_heads)``, the only choice that keeps each logit
  a function of ``φ(i) − φ(j)`` (multi-head attention, the paper's case, has one each);
* **padding** (``real`` False) adds no phase: a padded token carries the phase of the last
  real token before it, so the real tokens of a padded row (left or right) get exactly the
  phases they get unpadded;
* **packed documents** (``starts`` True at a document's first token): the phases restart
  there, as if each document were its own sequence.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from posenc.encoding._common import required
from posenc.encoding.base import PositionalEncoding

__all__ = ["TokenPhaseEncoding"]


class TokenPhaseEncoding(PositionalEncoding):
    """Rotates q and k by per-token, per-key-head phases accumulated from the layer's input
    (CARoPE); see the module for the rules of heads, padding and documents.

    Subclasses implement the two methods attention calls; they do no value checks.
    """

    #: The width of the layer input the phases read.
    dim: int
    #: Key heads: one set of phases each.
    num_heads: int
    #: Channels per head (all rotated, in pairs).
    head_dim: int
    #: The phases accumulate over the tokens before each one: defined for decoders.
    causal_only: ClassVar[bool] = True

    def token_phases(
        self,
        x: Tensor,
        previous: Tensor | None,
        real: Tensor | None,
        starts: Tensor | None,
    ) -> Tensor:
        """Phases of the new tokens ``(batch, num_heads, seq, head_dim / 2)``, float64.

        Args:
            x: the layer's input ``(batch, seq, dim)`` of the new tokens.
            previous: the phases of the last cached token ``(batch, num_heads, 1, head_dim /
                2)``, which the new ones continue; None at a sequence's start.
            real: ``(batch, seq)`` bool, False for padding (it adds no phase), or None.
            starts: ``(batch | 1, seq)`` bool, True at the first token of a document (the
                phases restart from its own there, ``previous`` and earlier tokens
                forgotten), or None.
        """
        raise required(self, "token_phases")

    def rotate_by_phases(self, q: Tensor, k: Tensor, phases: Tensor) -> tuple[Tensor, Tensor]:
        """q ``(batch, heads, seq, head_dim)`` and k ``(batch, num_heads, seq, head_dim)``
        rotated by ``phases`` (from :meth:`token_phases`): key head ``h`` by its own, query
        head ``h`` by those of key head ``h // (heads / num_heads)``."""
        raise required(self, "rotate_by_phases")

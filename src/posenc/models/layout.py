"""How a model lays its encoding over its layers, and the check of its token ids.

:func:`layer_encodings` decides, for :mod:`posenc.models` and the lab's models, where an
encoding acts: added to the embeddings, replacing the token embedding, or in each layer's
attention (one shared instance, or one per layer; none on NoPE layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import validating_values
from posenc.encoding.base import PositionalEncoding
from posenc.encoding.resolve import Hooks, hooks_of

__all__ = ["LayerEncodings", "check_tokens", "layer_encodings"]


def check_tokens(tokens: object, vocab_size: int) -> Tensor:
    """Raise ``ValueError`` naming ``tokens`` unless they are integer ids in ``[0, vocab_size)``."""
    if (
        not isinstance(tokens, Tensor)
        or tokens.dim() != 2
        or tokens.is_floating_point()
        or tokens.dtype == torch.bool
    ):
        got = (
            f"{tokens.dtype} {tuple(tokens.shape)}"
            if isinstance(tokens, Tensor)
            else type(tokens).__name__
        )
        raise ValueError(f"tokens must be an integer tensor (batch, seq); got {got}")
    if validating_values() and tokens.numel() > 0:
        low, high = torch.stack(torch.aminmax(tokens)).tolist()  # one host sync per forward
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"tokens must be ids in [0, vocab_size) = [0, {vocab_size}); got values from "
                f"{low} to {high}"
            )
    return tokens


@dataclass(frozen=True)
class LayerEncodings:
    """An encoding laid out over a model's layers (:func:`layer_encodings`).

    Attributes:
        additive: the encoding when it adds to the token embeddings, else None.
        layers: per layer, the encoding its attention takes, or None.
        hooks: the hooks positions follow (their number of axes, the encoding's checks);
            no encoding's when it uses no positions.
        token_embedding: the encoding when it replaces the token embedding (it reads the
            token ids: ``embed_tokens``), else None.
    """

    additive: PositionalEncoding | None
    layers: list[PositionalEncoding | None]
    hooks: Hooks
    token_embedding: PositionalEncoding | None = None


def layer_encodings(
    build: Callable[[], PositionalEncoding | None],
    depth: int,
    *,
    nope_layers: tuple[int, ...] = (),
    recurrent_layers: tuple[int, ...] = (),
) -> LayerEncodings:
    """Lay the encoding ``build()`` makes over ``depth`` layers: an additive one goes to the
    embeddings, one reading token ids (``embed_tokens``) replaces the token embedding; one
    acting in attention goes to every layer but the ``nope_layers`` (which get None), as one
    shared instance (RoPE, T5: its tables are built once per forward) or one built per layer
    (Shaw, XL; one with ``new_layer()`` makes the later layers' itself, sharing what the
    method shares: DeBERTa's relative embeddings), the first one built going to the first
    encoded layer; ``build`` may give None (no encoding). The ``recurrent_layers`` (linear
    or delta-rule mixers) take no encoding whatever it is: an additive one still enters
    through the embeddings."""
    first = build()
    hooks = hooks_of(first)
    acts_in_attention = hooks.rotary or hooks.logit_terms or hooks.token_phases
    if nope_layers and first is not None and not acts_in_attention:
        raise ValueError(
            f"nope_layers: {type(first).__name__} does not act in attention (it adds to or "
            "replaces the embeddings), so no layer can go without it; give an encoding that "
            "acts in attention (rope, alibi, ...)"
        )
    layers: list[PositionalEncoding | None] = []
    placed = False  # the first encoded layer takes `first`
    for index in range(depth):
        if first is None or not acts_in_attention or index in (*nope_layers, *recurrent_layers):
            layers.append(None)
        elif not placed or first.shared_across_layers:
            placed = True
            layers.append(first)
        elif (made := first.new_layer()) is not None:
            # per-layer parts, shared ones kept (DeBERTa's relative embeddings: one table)
            layers.append(made)
        else:
            layers.append(build())
    uses_positions = acts_in_attention or hooks.additive or hooks.token_embedding
    positions = hooks if uses_positions else hooks_of(None)
    # the encoding as built (a wrapper's outer module: its parameters and settings), where
    # it adds to or replaces the embeddings; the model calls the hooks' typed objects
    return LayerEncodings(
        first if hooks.additive else None,
        layers,
        positions,
        first if hooks.token_embedding else None,
    )

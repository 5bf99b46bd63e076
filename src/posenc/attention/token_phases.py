"""Serving a token-phase encoding (CARoPE): q and k rotated by phases of the layer's input.

:class:`~posenc.encoding.TokenPhaseEncoding` gives each new token and key head its phases,
accumulated over the tokens (:mod:`posenc.encoding.token_phases` has the rules of heads,
padding and documents). :func:`rotate_by_token_phases` reads what they continue from the KV
cache (the last cached token's phases) and the context (padding, document starts), rotates
q and the new k, and appends the phases to the cache, which keeps the keys rotated; the
backend then sees plain q and k, so ``sdpa``, ``chunked``, ``flex`` and ``auto`` serve it and
a cached decode equals the full forward. ``linear`` refuses it (it rotates the feature-mapped
q and k by positions), as do :func:`~posenc.attention.attend` and context parallelism (they
get no layer input).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.attention.cache import KVCache
from posenc.attention.context import AttentionContext
from posenc.encoding.protocols import TokenPhaseEncoding
from posenc.encoding.resolve import Hooks

__all__ = ["check_phases_fit", "rotate_by_token_phases"]


def rotate_by_token_phases(
    q: Tensor,
    k: Tensor,
    x: Tensor,
    *,
    encoding: TokenPhaseEncoding,
    context: AttentionContext,
    cache: KVCache | None,
) -> tuple[Tensor, Tensor]:
    """q and the new k rotated by the phases of ``x``, continuing the cache's last phases.

    Args:
        q: ``(batch, heads, seq, head_dim)``; k ``(batch, kv_heads, seq, head_dim)`` of the
            new tokens.
        x: the layer's input ``(batch, seq, dim)``.
        context: the forward's mask (the new tokens' padding, every key's document ids).
        cache: gives the phases the new ones continue and takes the new ones (before the
            new keys are stored).

    Returns:
        ``(q, k)`` rotated.
    """
    seq = x.shape[1]
    padding = context.mask.key_padding
    real = None if padding is None else padding[:, padding.shape[1] - seq :]
    cached = cache is not None and cache.length > 0
    previous = cache.token_phases[..., -1:, :] if cache is not None and cached else None
    starts = _document_starts(context.mask.k_documents, seq, cached)
    phases = encoding.token_phases(x, previous, real, starts)
    if cache is not None:
        cache.store_phases(phases)
    return encoding.rotate_by_phases(q, k, phases)


def check_phases_fit(hooks: Hooks, *, dim: int, num_kv_heads: int) -> None:
    """Raise ``ValueError`` naming ``pos`` unless its token phases read inputs of width
    ``dim`` and come one set per key head (``num_heads == num_kv_heads``: query heads share
    their key head's), without another rotation of q and k (a rotary by positions, a token
    transform)."""
    encoding = hooks.token_phases
    assert encoding is not None
    name = hooks.name
    if encoding.dim != dim:
        raise ValueError(f"pos: {name} has dim={encoding.dim} but this attention has {dim}")
    if encoding.num_heads != num_kv_heads:
        raise ValueError(
            f"pos: {name} has num_heads={encoding.num_heads} but this attention has "
            f"num_kv_heads={num_kv_heads}: its phases are the key heads' (one set each, shared "
            f"by the query heads of a group); build it with num_heads={num_kv_heads}"
        )
    others = {"a rotary by positions": hooks.rotary, "a token transform": hooks.token_transform}
    present = [what for what, part in others.items() if part is not None]
    if present:
        raise ValueError(
            f"pos: {name} rotates q and k by phases of the tokens (token_phases), which takes "
            f"no other transform of q and k; it also has {', '.join(present)}"
        )


def _document_starts(documents: Tensor | None, seq: int, cached: bool) -> Tensor | None:
    """``(batch | 1, seq)``: True where a new token's document differs from the token's
    before it (the first token of a call without cached keys starts one); None without
    documents."""
    if documents is None:
        return None
    docs = documents if documents.dim() == 2 else documents[None]
    length = docs.shape[1]
    new = docs[:, length - seq :]
    changes = new[:, 1:] != new[:, :-1]
    if cached:  # the first new token against the last cached one
        first = new[:, :1] != docs[:, length - seq - 1 : length - seq]
    else:  # nothing before the first token: it starts one
        first = torch.ones_like(new[:, :1], dtype=torch.bool)
    return torch.cat((first, changes), dim=1)

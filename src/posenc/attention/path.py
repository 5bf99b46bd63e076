"""Serving a token-transform encoding (PaTH): its blockwise attention and its KV cache.

The logits are not ``q·k`` plus a term: each key passes through the transforms of every token
between it and the query (:mod:`posenc.token_state.path`). So attention hands q, k, v and the
layer's input to :func:`path_self_attention`, which runs
:func:`~posenc.token_state.path.path_attention` under the context's mask, and keeps in the
KV cache every key carried to the newest token: a new token ``t`` applies ``H_t`` to each
cached key (fla's ``rank_one_update`` when decoding), so the next queries meet them with one
product. Backends ``sdpa`` and ``chunked`` serve it; ``flex`` and ``linear`` refuse it at
construction.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.attention.cache import KVCache
from posenc.attention.context import AttentionContext
from posenc.encoding.protocols import TokenTransformEncoding
from posenc.encoding.resolve import Hooks
from posenc.token_state.path import path_attention, path_carried_keys, path_carry_keys

__all__ = ["check_transform_fits", "path_self_attention"]


def path_self_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    x: Tensor,
    *,
    encoding: TokenTransformEncoding,
    context: AttentionContext,
    cache: KVCache | None,
    scale: float,
    dropout_p: float,
) -> Tensor:
    """Causal attention of the new tokens under ``encoding``'s transforms (and the cache).

    Args:
        q: ``(batch, heads, seq, d)``; k, v ``(batch, kv_heads, seq, ·)`` of the new tokens.
        x: the layer's input ``(batch, seq, dim)``.
        cache: takes the new keys (carried) and values; its cached keys are carried through
            the new tokens' transforms.

    Returns:
        ``(batch, heads, seq, v_dim)``.
    """
    seq = x.shape[1]
    mask = context.mask
    padding = mask.key_padding
    real = None if padding is None else padding[:, padding.shape[1] - seq :]
    inputs = encoding.transform_inputs(x, real)
    history = encoding.history
    window = _window(inputs, history, cache)
    w, beta = encoding.token_transforms(window, real, _same_document(context, seq, history))
    if cache is not None:
        cache.store_inputs(inputs)
    cdt = w.dtype
    previous_states = None
    prefix = None
    if cache is not None and cache.length:
        prefix = cache.k
        if encoding.has_gates:  # PaTH-FoX: the gates continue the last cached key's
            previous_states = cache.token_states[..., -1:]
    q_states = encoding.gate_states(x, previous_states, real)
    k_states = q_states
    if cache is not None and q_states is not None:
        k_states = cache.store_states(q_states)
    heads = q.shape[1]

    def visible(q_start: int, q_end: int, k_start: int, k_end: int) -> Tensor | None:
        return mask.block(q_start, q_end, k_start, k_end, heads=heads)

    block = encoding.block_size
    values = v.to(cdt)
    if cache is not None:
        old_values = cache.v
        if old_values is not None:
            values = torch.cat([old_values.to(cdt), values], dim=-2)
    out = path_attention(
        q.to(cdt),
        k.to(cdt),
        values,
        w,
        beta,
        scale=scale,
        prefix_keys=None if prefix is None else prefix.to(cdt),
        visible=None if mask.key_padding is None and not mask.has_pairwise else visible,
        q_states=q_states,
        k_states=k_states,
        dropout_p=dropout_p,
        block_size=block,
    )
    if cache is not None:
        carried = path_carried_keys(k.to(cdt), w, beta, block_size=block).to(k.dtype)
        if prefix is not None:
            cache.replace_keys(path_carry_keys(prefix.to(cdt), w, beta, block_size=block))
        cache.store(carried, v, context)
    return out.to(q.dtype)


def check_transform_fits(hooks: Hooks, *, dim: int, num_heads: int, num_kv_heads: int) -> None:
    """Raise ``ValueError`` naming ``pos`` unless its token transform reads inputs of width
    ``dim``, has this attention's query and key heads, and comes without another place
    acting on the logits (its blockwise attention takes none: a rotary, a bias, a score map,
    sinks ...)."""
    encoding = hooks.token_transform
    assert encoding is not None
    name = type(hooks.encoding).__name__
    for field, want in (("dim", dim), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        got = getattr(encoding, field)
        if got != want:
            raise ValueError(f"pos: {name} has {field}={got} but this attention has {want}")
    others = {
        "a rotary": hooks.rotary,
        "a bias": hooks.bias,
        "a contextual term": hooks.contextual,
        "a scores reader": hooks.scores,
        "a score map": hooks.score_map,
        "sink logits": hooks.sinks,
        "a token-state bias": hooks.token_state,
        "weights in place of the softmax": hooks.weights,
    }
    present = [what for what, part in others.items() if part is not None]
    if present:
        raise ValueError(
            f"pos: {name} transforms keys between key and query (PaTH's blockwise attention), "
            f"which takes no other logit terms; it also has {', '.join(present)}"
        )


def _window(inputs: Tensor, history: int, cache: KVCache | None) -> Tensor:
    """The new tokens' inputs after the ``history`` tokens before them: the cache's last
    ones, zeros before the sequence."""
    if history == 0:
        return inputs
    before = None if cache is None or not cache.length else cache.transform_inputs(history)
    window = inputs if before is None else torch.cat([before.to(inputs.dtype), inputs], dim=1)
    return F.pad(window, (0, 0, history + inputs.shape[1] - window.shape[1], 0))


def _same_document(context: AttentionContext, seq: int, history: int) -> Tensor | None:
    """``(batch | 1, seq, history + 1)``: which tokens of each new token's window share its
    document (None without documents or history)."""
    docs = context.mask.k_documents
    if docs is None or history == 0:
        return None
    docs = docs if docs.dim() == 2 else docs[None]
    start = docs.shape[-1] - seq - history
    if start < 0:  # before the sequence: no document (the inputs there are zeros)
        docs = F.pad(docs, (-start, 0), value=-1)
        start = 0
    windows = docs[:, start:].unfold(-1, history + 1, 1)  # (batch, seq, history + 1)
    return windows == windows[..., -1:]

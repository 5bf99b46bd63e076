"""``attend``: attention of given q, k, v with an encoding's logit terms (the functional form)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._validate import check_floating_tensor, validating_values
from posenc.attention.backends import Backend, resolve_backend, run_backend
from posenc.attention.context import (
    AttentionContext,
    check_document_ids,
    check_key_padding_mask,
    mask_predicate,
)
from posenc.attention.mask import AttentionMask, MaskMod
from posenc.attention.segmented import segmented_attention
from posenc.encoding.resolve import Hooks, hooks_of
from posenc.positions import check_positions, position_batch

__all__ = ["attend", "check_encoding_fits", "check_heads_match", "check_qkv"]


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise ``ValueError`` naming the argument unless q, k, v fit one attention call.

    q ``(batch, heads, q_len, head_dim)``, k ``(batch, kv_heads, k_len, head_dim)``, v
    ``(batch, kv_heads, k_len, v_dim)``; one floating dtype and device; ``heads`` a
    multiple of ``kv_heads``.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_floating_tensor(name, x, ("batch", "heads", "seq", "head_dim"))
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must share dtype and device; got {q.dtype}/{q.device}, "
            f"{k.dtype}/{k.device}, {v.dtype}/{v.device}"
        )
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(
            f"q, k and v must have one batch size; got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length; got k_len={k.shape[-2]} and v_len={v.shape[-2]}"
        )
    if k.shape[1] != v.shape[1]:
        raise ValueError(
            f"k and v must have the same number of heads; got {k.shape[1]} and {v.shape[1]}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same head_dim; got {q.shape[-1]} and {k.shape[-1]}"
        )
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(
            f"number of query heads ({q.shape[1]}) must be a multiple of key/value heads "
            f"({k.shape[1]})"
        )


def check_heads_match(hooks: Hooks, num_heads: int) -> None:
    """An encoding with per-head parts (a bias, a contextual term, sinks, stick-breaking's
    weights) must have as many heads as the attention's queries."""
    heads = hooks.num_heads
    per_head = hooks.bias or hooks.contextual or hooks.sinks or hooks.weights
    if per_head is not None and heads is not None and heads != num_heads:
        raise ValueError(
            f"pos: the encoding has num_heads={heads} but attention has num_heads={num_heads}; "
            "they must match"
        )


def check_encoding_fits(hooks: Hooks, *, num_heads: int, head_dim: int, causal: bool) -> None:
    """Raise ``ValueError`` naming ``pos`` unless the encoding fits this attention.

    * its ``num_heads`` (a bias or contextual term) equals the attention's query heads;
    * its ``head_dim`` (an encoding that reads q or k channels: rotary, segment methods,
      contextual terms, scores readers) equals the attention's per-head width: a smaller one
      would rotate part of each head only, a larger one cannot be applied;
    * a causal-only encoding (``causal_only``: xPos, CoPE, the segment methods) gets
      ``causal=True``.
    """
    check_heads_match(hooks, num_heads)
    if hooks.encoding is None:
        return
    name = hooks.name
    width = hooks.head_dim
    heads = hooks.num_heads
    # per-head parameters (PoPE's δ, LearnedRotation's generators): one per query head, or
    # one set (num_heads=1) that broadcasts over them
    if hooks.rotary and heads is not None and heads not in (1, num_heads):
        raise ValueError(
            f"pos: {name} has num_heads={heads} but the attention has num_heads={num_heads} "
            "(per-head parameters need one set per query head, or num_heads=1 for one shared set)"
        )
    if hooks.weights and (hooks.score_map or hooks.sinks):
        raise ValueError(
            f"pos: {name} wraps stick-breaking attention, which has no softmax for a score "
            "map or sink logits to act on"
        )
    if width is not None and width != head_dim:
        raise ValueError(
            f"pos: {name} has head_dim={width} but the attention's head_dim is {head_dim} "
            f"(dim // num_heads unless given); build the encoding with head_dim={head_dim} "
            "(a model fills it in: leave head_dim out of pos_kwargs)"
        )
    if not causal and hooks.encoding.causal_only:
        raise ValueError(
            f"pos: {name} is defined for causal attention only (its positions or its decay "
            "read only keys before each query); use causal=True, or another encoding for a "
            "bidirectional model"
        )


def _check_position_arg(
    name: str, positions: Tensor, length: int, batch: int, num_axes: int, device: torch.device
) -> Tensor:
    check_positions(positions, name, num_axes=num_axes, device=device)
    if positions.shape[-1] != length or position_batch(positions, num_axes) not in (None, batch):
        raise ValueError(
            f"{name} must have {length} positions in its last axis and a batch of {batch} (or "
            f"none); got shape {tuple(positions.shape)}"
        )
    return positions


def _call_context(
    hooks: Hooks,
    q: Tensor,
    k: Tensor,
    *,
    q_pos: Tensor | None,
    k_pos: Tensor | None,
    causal: bool,
    key_padding_mask: Tensor | None,
    document_ids: Tensor | None,
    attn_mask: Tensor | MaskMod | None,
) -> AttentionContext:
    """The validated positions and mask of one :func:`attend` call (default positions: the
    queries are the last ``q_len`` of the ``k_len`` keys)."""
    batch, q_len, k_len = q.shape[0], q.shape[-2], k.shape[-2]
    if q_len > k_len and (causal or document_ids is not None):
        raise ValueError(
            f"q_len ({q_len}) must be <= k_len ({k_len}): the queries are the last keys"
        )
    index_positions = q_pos is None and k_pos is None
    if q_pos is None:
        q_pos = torch.arange(k_len - q_len, k_len, device=q.device)
        if hooks.num_axes > 1:
            q_pos = q_pos.expand(hooks.num_axes, q_len)
    if k_pos is None:
        k_pos = torch.arange(k_len, device=q.device)
        if hooks.num_axes > 1:
            k_pos = k_pos.expand(hooks.num_axes, k_len)
    q_pos = _check_position_arg("q_pos", q_pos, q_len, batch, hooks.num_axes, q.device)
    k_pos = _check_position_arg("k_pos", k_pos, k_len, batch, hooks.num_axes, q.device)
    if validating_values():
        hooks.validate_positions(q_pos, "q_pos")
        hooks.validate_positions(k_pos, "k_pos")
    padding = None
    if key_padding_mask is not None:
        padding = check_key_padding_mask(key_padding_mask, batch, k_len, device=q.device)
    k_docs = (
        None
        if document_ids is None
        else check_document_ids(document_ids, batch, k_len, device=q.device)
    )
    dense, predicate = mask_predicate(attn_mask, batch, q_len, k_len, q.device)
    mask = AttentionMask(
        batch=batch,
        q_len=q_len,
        k_len=k_len,
        device=q.device,
        causal=causal,
        key_padding=padding,
        q_documents=None if k_docs is None else k_docs[..., k_len - q_len :],
        k_documents=k_docs,
        predicate=predicate,
        dense=dense,
    )
    return AttentionContext(q_pos, k_pos, mask, index_positions)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    pos: nn.Module | None = None,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    causal: bool,
    key_padding_mask: Tensor | None = None,
    document_ids: Tensor | None = None,
    attn_mask: Tensor | MaskMod | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: str | Backend = "sdpa",
) -> Tensor:
    """Scaled dot-product attention with a positional encoding's logit terms.

    q, k, v are ``(batch, heads, seq, head_dim)``; k and v may have fewer heads than q
    (grouped-query attention). Rotary encodings must already have been applied to q and k
    (:class:`~posenc.attention.Attention` does it before caching keys); additive ones act on
    the token embeddings. A segment method (:mod:`posenc.segments`) is the exception: it
    rotates q and k per segment itself, so they come *unrotated* (what a patched Hugging Face
    attention passes, :func:`posenc.integrations.hf.segments.patch_segments`). A
    :class:`~posenc.encoding.ValueRotation` (DeepSeek-V4) takes v rotated as k is (its
    ``rotate_values`` at the keys' positions; DeepSeek-V4's v *is* its k) and ``attend``
    rotates the output back by ``q_pos``. Queries are the
    last ``q_len`` of the ``k_len`` keys for the causal order and the default positions.

    Args:
        pos: the encoding whose bias, contextual term or scores reader enters the logits.
        q_pos, k_pos: positions of queries and keys (default ``arange(k_len − q_len, k_len)``
            and ``arange(k_len)``).
        causal: hide keys after each query (bottom-right aligned).
        key_padding_mask: ``(batch, k_len)``, True (or 1) for real keys.
        document_ids: ``(k_len,)`` or ``(batch, k_len)`` document of each key; the queries
            are the last ``q_len`` keys and see their own document only.
        attn_mask: a bool tensor ``(q_len, k_len)`` / ``(batch, q_len, k_len)``, True where
            attention is allowed, or a ``mask_mod(b, h, q_idx, kv_idx)`` callable.
        scale: logit scale (default: the encoding's ``logit_scale`` or ``head_dim ** -0.5``).
        dropout_p: dropout on the attention probabilities.
        backend: ``"sdpa"`` (default, the reference), ``"flex"``, ``"chunked"``, ``"auto"``
            or a :class:`~posenc.attention.Backend`.

    Returns:
        ``(batch, heads, q_len, v_dim)``. Queries that see no key get zeros.

    Raises:
        ValueError: naming the argument: q, k, v (shape, dtype, device); positions and masks
            of another shape, batch, dtype or device than q's; ``pos`` not fitting (heads,
            ``head_dim``, causal only with ``causal=False``).
    """
    check_qkv(q, k, v)
    hooks = hooks_of(pos)
    check_encoding_fits(hooks, num_heads=q.shape[1], head_dim=q.shape[-1], causal=causal)
    if hooks.token_state is not None:
        raise ValueError(
            f"pos: {type(pos).__name__} reads the layer's hidden states (token_state), which "
            "attend does not get; use posenc.attention.Attention"
        )
    if hooks.token_transform is not None:
        raise ValueError(
            f"pos: {type(pos).__name__} reads the layer's hidden states (token_transforms), "
            "which attend does not get; use posenc.attention.Attention"
        )
    if hooks.token_phases is not None:
        raise ValueError(
            f"pos: {type(pos).__name__} rotates q and k by phases of the layer's hidden states "
            "(token_phases), which attend does not get; use posenc.attention.Attention"
        )
    if hooks.value_rotation is not None and v.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"v must have k's head_dim ({k.shape[-1]}) for {hooks.name}, whose values carry "
            f"the keys' rotation (ValueRotation); got v_dim={v.shape[-1]}"
        )
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    context = _call_context(
        hooks,
        q,
        k,
        q_pos=q_pos,
        k_pos=k_pos,
        causal=causal,
        key_padding_mask=key_padding_mask,
        document_ids=document_ids,
        attn_mask=attn_mask,
    )
    chosen = resolve_backend(backend)
    chosen.check(hooks, dropout=dropout_p)
    scale = hooks.scale(q.shape[-1]) if scale is None else float(scale)
    if hooks.segments:
        if not causal:
            raise ValueError(
                f"pos: {type(pos).__name__} positions (query, key) pairs of causal attention "
                "only; use causal=True"
            )
        return segmented_attention(
            chosen.name,
            q,
            k,
            v,
            hooks=hooks,
            context=context,
            scale=scale,
            dropout_p=dropout_p,
            block_size=chosen.block_size,
            structured=chosen.structured,
            compile=chosen.compile,
        )
    out = run_backend(
        chosen, q, k, v, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p
    )
    if hooks.value_rotation is not None:  # v came rotated like k: rotate the output back
        tables = hooks.value_rotation.rotary_tables(context.q_pos, q.dtype, update=False)
        out = hooks.value_rotation.derotate_output(out, tables)
    return out

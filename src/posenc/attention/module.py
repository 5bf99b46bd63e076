"""Multi-head attention that takes any positional encoding as one object."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._validate import check_positive_int, validating_values
from posenc.attention.backends import Backend, resolve_backend, run_backend
from posenc.attention.cache import KVCache
from posenc.attention.context import (
    AttentionContext,
    build_context,
    check_chunk_cache,
    with_chunks,
    with_token_bias,
)
from posenc.attention.functional import check_encoding_fits
from posenc.attention.gate import OutputGate
from posenc.attention.linear import linear_self_attention
from posenc.attention.mask import MaskMod
from posenc.attention.path import check_transform_fits, path_self_attention
from posenc.attention.segmented import rotate_keys_on_read, segmented_attention
from posenc.attention.token_phases import check_phases_fit, rotate_by_token_phases
from posenc.attention.window import banded_attention, banded_serves, with_window
from posenc.encoding.resolve import hooks_of
from posenc.softmax.query_scale import QueryScale, check_chunk_and_scale
from posenc.token_state.token_bias import check_token_bias_fits

__all__ = ["Attention"]


class Attention(nn.Module):
    """Multi-head (or grouped-query) self-attention with a pluggable positional encoding.

    The encoding acts through its hooks (:mod:`posenc.encoding.base`): a rotary encoding rotates q
    and the new k before they are cached (a :class:`~posenc.encoding.ValueRotation` also the new
    v, and rotates the output back by the queries' positions), a token-phase encoding (CARoPE)
    by phases of the layer's input (:mod:`posenc.attention.token_phases`); a bias, contextual
    term or scores reader enters the logits in the backend; an additive encoding is the
    model's business (ignored here).

    Args:
        dim: model width.
        num_heads: query heads.
        num_kv_heads: key/value heads (grouped-query attention); must divide ``num_heads``.
            Default ``num_heads``.
        head_dim: per-head width, default ``dim // num_heads``.
        pos: the positional encoding module (``None`` or :class:`posenc.encoding.base.NoPE` for
          none).
            One with ``bind_projections(q_proj, k_proj)`` is handed this layer's q and k
            projections at construction (DeBERTa's shared position keys). Checked here
            (``ValueError`` naming ``pos``): its ``num_heads`` (a bias or contextual term),
            its ``head_dim`` (an encoding that reads q or k channels) and ``causal_only``.
        causal: decoder (True) or bidirectional encoder (False) attention.
        dropout: attention-probability dropout in training, in ``[0, 1)``.
        backend: ``"auto"`` (default), ``"sdpa"``, ``"flex"``, ``"chunked"``, ``"linear"``
            (linear attention, :mod:`posenc.attention.linear`) or a
            :class:`~posenc.attention.Backend`; checked against the encoding here, so a
            backend that cannot serve it raises at construction.
        chunk_size: chunked local attention (Llama-4's ``attention_chunk_size``), ≥ 1, or
            None: query ``i`` sees only keys ``j`` with ``⌊j / C⌋ = ⌊i / C⌋`` (key indices
            from the sequence's start, after its left padding; see
            :func:`~posenc.attention.context.with_chunks`), on top of the other masks. A
            structural mask piece: every backend serves it, a KV cache stays exact.
        query_scale: a :class:`~posenc.attention.QueryScale` multiplying each query by a
            factor of its position (Llama-4's temperature, Qwen-1's log-n), or None.
            Applied to q before any encoding, so a KV cache stays exact.
        window: sliding-window attention of ``window`` keys (Mistral, Gemma, Cohere's
            RNoPE-SWA: :mod:`posenc.attention.window`), ≥ 1, or None; not with
            ``chunk_size`` nor the ``linear`` backend.
        output_gate: a sigmoid gate on each head's output from the layer input, ``o ⊙
            σ(x W_g)`` (gated attention, Qwen3-Next: :mod:`posenc.attention.gate`).

    Shape:
        x ``(batch, seq, dim)`` → ``(batch, seq, dim)``. Positions ``(seq,)`` or ``(batch,
        seq)`` (``(axes, …)`` for a multi-axis encoding), default: continuing the cache at
        ``max + 1``, or ``arange(seq)``.

    Example::

        >>> from posenc.bias import AlibiBias
        >>> attn = Attention(dim=64, num_heads=4, pos=AlibiBias(num_heads=4))
        >>> attn(torch.randn(2, 10, 64)).shape
        torch.Size([2, 10, 64])
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        pos: nn.Module | None = None,
        causal: bool = True,
        dropout: float = 0.0,
        backend: str | Backend = "auto",
        chunk_size: int | None = None,
        query_scale: QueryScale | None = None,
        window: int | None = None,
        output_gate: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dim = check_positive_int("dim", dim)
        num_heads = check_positive_int("num_heads", num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
            )
        if head_dim is None:
            if dim % num_heads != 0:
                raise ValueError(
                    f"dim ({dim}) must be divisible by num_heads ({num_heads}), "
                    "or give head_dim explicitly"
                )
            head_dim = dim // num_heads
        head_dim = check_positive_int("head_dim", head_dim)
        if (
            not isinstance(dropout, (int, float))
            or isinstance(dropout, bool)
            or not 0.0 <= dropout < 1.0
        ):
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        self.hooks = hooks_of(pos)
        if self.hooks.token_embedding:
            raise ValueError(
                f"pos: {type(pos).__name__} replaces the token embedding (embed_tokens); give it "
                "to a model (DecoderLM, EncoderClassifier), which embeds tokens, not to Attention"
            )
        check_encoding_fits(self.hooks, num_heads=num_heads, head_dim=head_dim, causal=causal)
        if self.hooks.token_state is not None:
            check_token_bias_fits(self.hooks.token_state, dim=dim, num_heads=num_heads)
        if self.hooks.token_transform is not None:
            check_transform_fits(
                self.hooks, dim=dim, num_heads=num_heads, num_kv_heads=num_kv_heads
            )
        if self.hooks.token_phases is not None:
            check_phases_fit(self.hooks, dim=dim, num_kv_heads=num_kv_heads)
        self.backend = resolve_backend(backend)
        self.backend.check(self.hooks, dropout=float(dropout))
        self.chunk_size, self.query_scale = check_chunk_and_scale(
            chunk_size, query_scale, self.hooks.num_axes, self.backend.name
        )
        self.window = _check_window(window, self.chunk_size, self.backend.name)
        if not isinstance(output_gate, bool):
            raise ValueError(f"output_gate must be True or False, got {output_gate!r}")
        self.dim, self.num_heads, self.num_kv_heads = dim, num_heads, num_kv_heads
        self.head_dim, self.causal, self.dropout = head_dim, bool(causal), float(dropout)
        self.pos = pos
        self.scale = self.hooks.scale(head_dim)
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(dim, num_heads * head_dim, bias=False, **factory)
        self.k_proj = nn.Linear(dim, num_kv_heads * head_dim, bias=False, **factory)
        self.v_proj = nn.Linear(dim, num_kv_heads * head_dim, bias=False, **factory)
        self.out_proj = nn.Linear(num_heads * head_dim, dim, bias=False, **factory)
        self.gate: OutputGate | None = None
        if output_gate:  # drawn last: an ungated layer's draws are unchanged
            self.gate = OutputGate(dim, num_heads, head_dim, device=device, dtype=dtype)
        if self.hooks.encoding is not None:
            # An encoding that applies this layer's content projections to its own table
            # (DeBERTa's share_att_key) keeps references to them, never registers them.
            self.hooks.encoding.bind_projections(self.q_proj, self.k_proj)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
        attn_mask: Tensor | MaskMod | None = None,
        cache: KVCache | None = None,
        context: AttentionContext | None = None,
    ) -> Tensor:
        """Attend over ``x`` (and the cache).

        Args:
            x: ``(batch, seq, dim)``.
            positions: of the new tokens (see the class docstring).
            key_padding_mask: ``(batch, seq)`` for the new tokens, True/1 = real token
                (stored in the cache for later calls).
            document_ids: ``(seq,)`` or ``(batch, seq)`` packed-document id of each new
                token; tokens attend within their document only.
            attn_mask: a bool ``(seq, k_len)`` / ``(batch, seq, k_len)`` tensor over all keys
                (True = may attend) or a ``mask_mod(b, h, q_idx, kv_idx)`` callable.
            cache: a :class:`KVCache` to append to and attend over.
            context: the per-forward :class:`AttentionContext` a model built for all its
                layers (then positions and masks come from it and must not be given).

        Raises:
            ValueError: naming the argument: ``x`` not ``(batch, seq, dim)`` in the
                projections' dtype and device; positions or masks of another shape, dtype,
                batch or device, or positions outside ``[-2**62, 2**62)``
                (:func:`~posenc.attention.build_context`); ``cache`` not a
                :class:`KVCache`, or holding another layer's keys (heads, head width, batch,
                position axes, dtype, device), or one that dropped keys under ``chunk_size``.
        """
        self._check_x(x)
        batch, seq, _ = x.shape
        if cache is not None:
            self._check_cache(cache, x)
        if context is None:
            context = build_context(
                batch=batch,
                seq=seq,
                device=x.device,
                causal=self.causal,
                hooks=self.hooks,
                positions=positions,
                key_padding_mask=key_padding_mask,
                document_ids=document_ids,
                attn_mask=attn_mask,
                cache=cache,
                chunk_size=self.chunk_size,
            )
        elif (
            positions is not None
            or key_padding_mask is not None
            or document_ids is not None
            or attn_mask is not None
        ):
            raise ValueError("give either context or positions and masks, not both")
        elif self.chunk_size is not None:  # this layer's chunks on the model's context
            check_chunk_cache(self.chunk_size, cache)
            context = with_chunks(context, self.chunk_size)
        banded = self.window is not None and banded_serves(context.mask)
        if self.window is not None:
            context = with_window(context, self.window, cache)
        q = self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        if self.query_scale is not None:  # by query position: cached keys never change
            q = self.query_scale.apply(q, context.q_pos)
        k = self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        hooks = self.hooks
        if self.backend.name == "linear":  # φ before rotation (RoFormer §3.4.3)
            out = linear_self_attention(
                q,
                k,
                v,
                hooks=hooks,
                context=context,
                cache=cache,
                owner=self,
                kind=self.backend.feature_map,
                block_size=self.backend.block_size,
            )
            return self._project_out(out, x)
        if hooks.token_transform is not None:  # PaTH: keys carried through each token's H
            if cache is not None:
                self._bind(cache)
            out = path_self_attention(
                q,
                k,
                v,
                x,
                encoding=hooks.token_transform,
                context=context,
                cache=cache,
                scale=self.scale,
                dropout_p=self.dropout if self.training else 0.0,
            )
            return self._project_out(out, x)
        rotated_cache = cache is None or self._bind(cache)
        if hooks.value_rotation is not None and not rotated_cache:
            raise ValueError(
                f"cache: {hooks.name} stores values rotated with their keys (ValueRotation), "
                "so its KVCache must keep keys rotated: use KVCache(keys='rotated') or KVCache()"
            )
        if hooks.token_phases is not None and not rotated_cache:
            raise ValueError(
                f"cache: {hooks.name} rotates keys by the phases of their tokens (token_phases), "
                "kept once when stored: use KVCache(keys='rotated') or KVCache()"
            )
        if hooks.rotary and (hooks.segments or hooks.per_query_lengths or not rotated_cache):
            return self._rotate_on_read(q, k, v, context, cache, x)
        tables = None
        if hooks.rotary is not None:
            pos = hooks.rotary
            key = (id(pos), "rotary", q.dtype, q.device)
            tables = context.cached(key, lambda: pos.rotary_tables(context.q_pos, q.dtype))
            if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):
                # q and k are this call's fresh projections: overwrite them (inference).
                q, k = pos.rotate_qk(q, k, tables, tables, inplace=True)
            else:
                q, k = pos.rotate_qk(q, k, tables, tables)
        if hooks.token_phases is not None:  # CARoPE: phases from this layer's input
            q, k = rotate_by_token_phases(
                q, k, x, encoding=hooks.token_phases, context=context, cache=cache
            )
        if hooks.value_rotation is not None:  # R(j) v_j, cached as rotated as the keys
            v = hooks.value_rotation.rotate_values(v, tables)
        layer = context
        if hooks.token_state is not None:  # FoX: gates from this layer's input, with the cache
            layer = with_token_bias(context, hooks.token_state, x, cache)
        if cache is not None:
            k, v = cache.store(k, v, layer)
        dropout_p = self.dropout if self.training else 0.0
        if banded and not hooks.logit_terms and self.backend.name in ("auto", "sdpa", "chunked"):
            assert self.window is not None  # a band of keys per block of queries: O(L · W)
            out = banded_attention(
                q, k, v, window=self.window, scale=self.scale, dropout_p=dropout_p
            )
        else:
            out = run_backend(
                self.backend,
                q,
                k,
                v,
                hooks=self.hooks,
                context=layer,
                scale=self.scale,
                dropout_p=dropout_p,
            )
        if hooks.value_rotation is not None:  # R(-i) o_i: each value as a function of j - i
            out = hooks.value_rotation.derotate_output(out, tables)
        return self._project_out(out, x)

    def reset_parameters(self) -> None:
        """Re-draw the projections as the constructor does (``nn.Linear``'s initialization,
        q, k, v then out): after ``to_empty`` on a model built on the ``meta`` device. The
        encoding is its owner's to initialize (a model resets the encodings it built)."""
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            proj.reset_parameters()
        if self.gate is not None:
            self.gate.reset_parameters()

    def _check_x(self, x: object) -> None:
        """``x`` must be ``(batch, seq, dim)`` in the projections' dtype (any floating dtype
        under autocast), on their device."""
        weight = self.q_proj.weight
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.dim:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (batch, seq, {self.dim}); got {got}")
        if x.device != weight.device or (x.dtype != weight.dtype and not _autocast(x)):
            raise ValueError(
                f"x must be a {weight.dtype} tensor on {weight.device} (this Attention's "
                f"parameters); got {x.dtype} on {x.device}: convert x, or the module with "
                ".to(dtype=..., device=...)"
            )

    def _check_cache(self, cache: object, x: Tensor) -> None:
        """A cache that already holds keys must hold this layer's: its heads, head width,
        dtype (any under autocast: the cache then checks its own) and device, before
        anything is stored."""
        if not isinstance(cache, KVCache):
            raise ValueError(
                f"cache must be a posenc KVCache (one per layer: model.new_cache()), got "
                f"{type(cache).__name__}"
            )
        k, v = cache.k, cache.v
        weight = self.k_proj.weight
        if k is None or v is None:
            return
        # the values' width: keys may be wider once an encoding maps them (PoPE: 2 · head_dim)
        if (k.shape[1], v.shape[-1]) != (self.num_kv_heads, self.head_dim):
            raise ValueError(
                f"cache holds keys of {k.shape[1]} heads of width {v.shape[-1]} but this layer "
                f"has num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}: the cache is "
                "another layer's; give each layer its own (model.new_cache())"
            )
        if k.device != weight.device or (k.dtype != weight.dtype and not _autocast(x)):
            raise ValueError(
                f"cache holds {k.dtype} keys on {k.device} but this layer computes "
                f"{weight.dtype} on {weight.device}; start a new cache"
            )

    def _project_out(self, out: Tensor, x: Tensor) -> Tensor:
        if self.gate is not None:
            out = self.gate(out, x)
        batch, _, seq, _ = out.shape
        return self.out_proj(
            out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)
        )

    def _bind(self, cache: KVCache) -> bool:
        """Fix the cache's key form for this layer; True when it keeps keys rotated."""
        if not isinstance(cache, KVCache):
            raise ValueError(f"cache must be a posenc KVCache, got {type(cache).__name__}")
        hooks = self.hooks
        unrotated = hooks.rotary is not None and (hooks.segments or hooks.length_dependent)
        return cache.bind(
            self, "unrotated" if unrotated else "rotated", needed=hooks.segments is not None
        )

    def _rotate_on_read(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        context: AttentionContext,
        cache: KVCache | None,
        x: Tensor,
    ) -> Tensor:
        """Keys enter the cache unrotated; q and every key are rotated here, with this step's
        positions and frequencies (per segment for a segment method)."""
        hooks = self.hooks
        if cache is not None:
            if cache.evicted and validating_values():
                _check_continues(cache, context.q_pos)
            k, v = cache.store(k, v, context)
        dropout_p = self.dropout if self.training else 0.0
        if hooks.segments or hooks.per_query_lengths:
            out = segmented_attention(
                self.backend.name,
                q,
                k,
                v,
                hooks=hooks,
                context=context,
                scale=self.scale,
                dropout_p=dropout_p,
                cache=cache,
                block_size=self.backend.block_size,
                structured=self.backend.structured,
                compile=self.backend.compile,
            )
            segments = hooks.segments
            if segments is not None and cache is not None and cache.evict:
                positions = cache.positions
                if positions is not None:
                    q_min = positions.amax(dim=-1, keepdim=True) + 1
                    cache.release(segments.keeps(positions, q_min))
        else:
            q, k = rotate_keys_on_read(q, k, hooks=hooks, context=context, cache=cache)
            out = run_backend(
                self.backend,
                q,
                k,
                v,
                hooks=hooks,
                context=context,
                scale=self.scale,
                dropout_p=dropout_p,
            )
        return self._project_out(out, x)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, causal={self.causal}, backend={self.backend.name!r}"
            + ("" if self.chunk_size is None else f", chunk_size={self.chunk_size}")
            + ("" if self.query_scale is None else f", query_scale={self.query_scale}")
            + ("" if self.window is None else f", window={self.window}")
            + ("" if self.gate is None else ", output_gate=True")
        )


def _check_window(window: object, chunk_size: int | None, backend: str) -> int | None:
    """``window`` as an int ≥ 1 or None, on a layer without chunks, softmax backend."""
    if window is None:
        return None
    window = check_positive_int("window", window)
    if chunk_size is not None:
        raise ValueError(
            f"window ({window}) and chunk_size ({chunk_size}) are two local masks; give one"
        )
    if backend == "linear":
        raise ValueError("window needs softmax attention; backend 'linear' has no pairs to mask")
    return window


def _check_continues(cache: KVCache, q_pos: Tensor) -> None:
    """A rolling cache dropped keys that a query before its newest key could still see."""
    assert cache.positions is not None
    newest = cache.positions.amax(dim=-1)
    first = q_pos.amin(dim=-1)
    if bool((first <= newest).any()):
        raise ValueError(
            f"positions: this rolling KVCache dropped {cache.evicted} keys that only queries "
            f"after its newest key ({newest.tolist()}) may skip; new positions must continue "
            f"after it (got from {first.tolist()}); start a new cache, or make it with "
            "KVCache(evict=False)"
        )


def _autocast(x: Tensor) -> bool:
    """True when ``x`` is floating and autocast is on for its device (then the projections
    take any floating dtype)."""
    try:
        return x.is_floating_point() and torch.is_autocast_enabled(x.device.type)
    except RuntimeError:  # a device type autocast does not know (meta)
        return False

"""The KV cache of one attention layer: keys, values and what the mask needs of them.

Keys are kept in one of two forms (:data:`KeyForm`):

* ``"rotated"``: as the rotary encoding left them, rotated once when they were stored. Exact
  while a key's rotation never changes after it was cached: plain RoPE and every static
  scaling, one position per token.
* ``"unrotated"``: before rotation. Attention rotates them when it reads them, with the
  current step's positions and frequencies, so a length-dependent scaling (dynamic NTK,
  LongRoPE, dynamic YaRN) rotates every key with the frequencies of the current length and
  a segment method (Self-Extend, Dual Chunk Attention, ReRoPE, LM-Infinite, attention sinks,
  :mod:`posenc.segments`) rotates each key at each of its segment's positions. The rotated
  keys are memoised per (segment position map, frequency state): a step whose frequencies did
  not change rotates only its new keys.
* ``"auto"`` (default): the attention chooses at the first call: ``"unrotated"`` when its
  encoding has segments or length-dependent frequencies, else ``"rotated"``.

A method whose pairs see only a window of keys (LM-Infinite, attention sinks) makes the cache
*rolling*: keys no later query can see are dropped (in batches, when they outnumber the kept
ones), the kept keys keep their original positions, and the method's position maps renumber
them inside the window. Later queries must come at positions after the cached ones, and
:meth:`KVCache.truncate` rolls back only to the length just after the last eviction.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Literal, Protocol, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_non_negative_int
from posenc.encoding.protocols import RotaryEncoding
from posenc.rotary import rerotate

__all__ = ["KVCache", "KeyForm", "KeysOfForward"]

KeyForm = Literal["auto", "rotated", "unrotated"]
KEY_FORMS: tuple[str, ...] = get_args(KeyForm)


class _KeyMask(Protocol):
    """The key pieces of a mask (an :class:`~posenc.attention.mask.AttentionMask` is one)."""

    @property
    def key_padding(self) -> Tensor | None: ...

    @property
    def k_documents(self) -> Tensor | None: ...


class KeysOfForward(Protocol):
    """What :meth:`KVCache.store` keeps of a forward: every key's positions, padding and
    document ids, and whether key ``j`` sits at position ``j``.

    :class:`~posenc.attention.context.AttentionContext` is one (the context builds on the
    cache, so the cache names only the fields it reads).
    """

    @property
    def k_pos(self) -> Tensor: ...

    @property
    def mask(self) -> _KeyMask: ...

    @property
    def index_positions(self) -> bool: ...


class _Rows:
    """A ``(batch, heads, length, dim)`` tensor grown along ``length``: in place in a buffer
    whose capacity doubles (a decoding step writes one token), or by concatenation while
    gradients flow (autograd needs the earlier tensors intact)."""

    def __init__(self) -> None:
        self.buffer: Tensor | None = None
        self.length = 0

    @property
    def value(self) -> Tensor | None:
        return None if self.buffer is None else self.buffer[:, :, : self.length]

    @property
    def capacity(self) -> int:
        return 0 if self.buffer is None else self.buffer.shape[-2]

    def append(self, x: Tensor) -> Tensor:
        end = self.length + x.shape[-2]
        tracked = torch.is_grad_enabled() and x.requires_grad
        if self.buffer is None:
            self.buffer = x
        elif tracked or self.buffer.requires_grad:
            self.buffer = torch.cat([self.buffer[:, :, : self.length], x], dim=-2)
        else:
            if end > self.capacity:
                grown = self.buffer.new_empty(
                    *self.buffer.shape[:2], max(end, 2 * self.capacity), self.buffer.shape[-1]
                )
                grown[:, :, : self.length] = self.buffer[:, :, : self.length]
                self.buffer = grown
            self.buffer[:, :, self.length : end] = x
        self.length = end
        value = self.value
        assert value is not None
        return value

    def keep(self, index: Tensor) -> None:
        """Keep the rows at ``index`` (sorted), compacted to the front."""
        if self.buffer is not None:
            self.buffer = self.buffer[:, :, : self.length].index_select(2, index)
            self.length = self.buffer.shape[-2]


class KVCache:
    """Keys, values, key positions, padding and document ids of one layer, grown while decoding.

    Keys are stored together with their positions, so that positions continue correctly for
    the next tokens (the next default position is ``max(positions) + 1`` per row, see
    :func:`posenc.positions.next_positions`). ``key_padding_mask`` (True = real token) and
    ``document_ids`` are kept once any call supplied them. ``index_positions`` records that
    every position so far was the default (key ``j`` at position ``j``), which some backends
    exploit. See the module docstring for the two forms of the keys.

    Keys and values live in buffers whose capacity doubles when full, so a decoding step
    writes one token in place instead of copying the whole cache; :attr:`k` and :attr:`v` are
    views of the filled part. When gradients flow into the new keys the cache concatenates
    instead.

    One cache serves one layer: give a model one per layer (``model.new_cache()``).

    Args:
        keys: ``"auto"`` (default), ``"rotated"`` or ``"unrotated"`` (see the module).
        evict: let a windowed segment method drop keys no later query can see (default
            True); False keeps every key.

    Example::

        >>> cache = KVCache()
        >>> cache.length
        0
    """

    def __init__(self, keys: KeyForm = "auto", *, evict: bool = True) -> None:
        check_in_choices("keys", keys, KEY_FORMS)
        if not isinstance(evict, bool):
            raise ValueError(f"evict must be a bool, got {evict!r}")
        self.keys: KeyForm = keys
        self.evict = evict
        self._k = _Rows()
        self._v = _Rows()
        self._memo: dict[Hashable, _Rows] = {}
        self._states = _Rows()  # (batch, heads, length, 1): a token-state encoding's (FoX)
        self._inputs = _Rows()  # (batch, 1, length, channels): a token transform's (PaTH)
        self._phases = _Rows()  # (batch, heads, length, pairs) float64: token phases (CARoPE)
        self._carried = False  # keys carried through later tokens' transforms (PaTH)
        self.positions: Tensor | None = None
        self.key_padding_mask: Tensor | None = None
        self.document_ids: Tensor | None = None
        self.index_positions = True
        #: Keys dropped so far by a rolling (windowed) method.
        self.evicted = 0
        #: The earliest length :meth:`truncate` accepts: the length just after the last
        #: eviction (0 while nothing was dropped).
        self.rollback_floor = 0
        # the layer the cache serves, weakly (an id could be reused by a later layer)
        self._owner: weakref.ref[object] | None = None

    @property
    def length(self) -> int:
        """Number of cached keys."""
        return self._k.length

    @property
    def k(self) -> Tensor | None:
        """Cached keys ``(batch, kv_heads, length, head_dim)`` (in the cache's form), or None."""
        return self._k.value

    @property
    def v(self) -> Tensor | None:
        """Cached values ``(batch, kv_heads, length, v_dim)``, or None."""
        return self._v.value

    @property
    def token_states(self) -> Tensor:
        """Every cached key's state ``(batch, heads, length)`` under a token-state encoding
        (FoX's cumulative log forget gate, :mod:`posenc.token_state.token_bias`)."""
        return self._every_key(self._states, "token states")[..., 0]

    def store_states(self, states: Tensor) -> Tensor:
        """Append the new keys' token states ``(batch, heads, seq)`` (before :meth:`store`
        of their keys); return every key's."""
        return self._append_keys(self._states, states.unsqueeze(-1), "token states")[..., 0]

    @property
    def token_phases(self) -> Tensor:
        """Every cached key's phases ``(batch, heads, length, head_dim / 2)``, float64, under
        a token-phase encoding (CARoPE, :mod:`posenc.attention.token_phases`): the next
        tokens continue the last. Kept for every key, not the last alone, so that
        :meth:`truncate` stays exact."""
        return self._every_key(self._phases, "token phases")

    def store_phases(self, phases: Tensor) -> Tensor:
        """Append the new keys' token phases ``(batch, heads, seq, pairs)`` (before
        :meth:`store` of their keys); return every key's."""
        return self._append_keys(self._phases, phases, "token phases")

    def _every_key(self, rows: _Rows, what: str) -> Tensor:
        """``rows``' value, one entry per cached key; an error naming ``what`` when the cache
        was filled without them."""
        value = rows.value
        if value is None or rows.length != self.length:
            raise ValueError(
                f"cache: this KVCache holds no {what} for its keys (it was filled by a "
                "layer whose encoding has none); start a new cache"
            )
        return value

    def _append_keys(self, rows: _Rows, values: Tensor, what: str) -> Tensor:
        """Append the new keys' ``values`` to ``rows`` (before :meth:`store` of the keys);
        return every key's."""
        if rows.length != self.length:
            raise ValueError(f"cache: this KVCache holds keys without {what}; start a new cache")
        return rows.append(values)

    def transform_inputs(self, count: int) -> Tensor | None:
        """The last ``count`` cached keys' inputs of a token-transform encoding ``(batch,
        ≤ count, channels)`` (PaTH's short convolution), None when none are cached."""
        inputs = self._inputs.value
        if inputs is None or self._inputs.length != self.length:
            return None
        return inputs[:, 0, max(0, self.length - count) :]

    def store_inputs(self, inputs: Tensor) -> None:
        """Append the new keys' token-transform inputs ``(batch, seq, channels)`` (before
        :meth:`store` of their keys)."""
        if self._inputs.length != self.length:
            raise ValueError(
                "cache: this KVCache holds keys without token-transform inputs; start a new cache"
            )
        self._inputs.append(inputs.unsqueeze(1))
        self._carried = True

    @property
    def capacity(self) -> int:
        """Keys the buffers hold before they grow."""
        return self._k.capacity

    @property
    def rotated(self) -> bool | None:
        """True when keys are stored rotated, False when unrotated, None before the first call
        of ``"auto"``."""
        return None if self.keys == "auto" else self.keys == "rotated"

    def bind(self, owner: object, form: Literal["rotated", "unrotated"], *, needed: bool) -> bool:
        """Called by the attention layer that uses this cache, before it stores keys: fixes an
        ``"auto"`` cache's form to ``form``; returns True when keys are stored rotated.

        Raises:
            ValueError: naming ``cache`` when another layer already uses this cache (one
                cache per layer), or when ``needed`` (the encoding can only work on unrotated
                keys) and the cache was made ``"rotated"``.
        """
        if self._owner is not None and self._owner() is not owner:
            raise ValueError(
                "cache: this KVCache already holds another attention layer's keys; give each "
                "layer its own (model.new_cache() makes one per layer)"
            )
        self._owner = weakref.ref(owner)
        if self.keys == "auto":
            self.keys = form
        elif self.keys == "rotated" and needed:
            raise ValueError(
                "cache: this encoding rotates keys when they are read (a segment method, or "
                "frequencies that follow the length), so its KVCache must keep them unrotated: "
                "use KVCache(keys='unrotated') or KVCache()"
            )
        return self.keys == "rotated"

    def store(self, k: Tensor, v: Tensor, context: KeysOfForward) -> tuple[Tensor, Tensor]:
        """Append new keys and values, take the key metadata of ``context``; return all keys
        and values. The context already holds the concatenated positions, padding and ids."""
        old = self._k.buffer
        if old is not None and (old.dtype != k.dtype or old.device != k.device):
            raise ValueError(
                f"cache holds keys of dtype {old.dtype} on {old.device} but the new keys are "
                f"{k.dtype} on {k.device}; start a new cache"
            )
        keys, values = self._k.append(k), self._v.append(v)
        self.positions = context.k_pos
        self.key_padding_mask = context.mask.key_padding
        self.document_ids = context.mask.k_documents
        self.index_positions = context.index_positions and self.evicted == 0
        return keys, values

    def replace_keys(self, keys: Tensor) -> None:
        """Overwrite every cached key with ``keys`` of the same shape (a token-transform
        encoding, PaTH, carries its cached keys through each new token's transform): in
        place in the buffer, or a new tensor while gradients flow."""
        rows = self._k
        old = rows.value
        if old is None or keys.shape != old.shape:
            raise ValueError(
                f"cache: keys to replace must have the cached keys' shape "
                f"{None if old is None else tuple(old.shape)}, got {tuple(keys.shape)}"
            )
        assert rows.buffer is not None
        if (torch.is_grad_enabled() and keys.requires_grad) or rows.buffer.requires_grad:
            rows.buffer = keys
        else:
            old.copy_(keys)

    def rotated_keys(
        self, key: Hashable, rotate: Callable[[int], Tensor], *, memoise: bool = True
    ) -> Tensor:
        """Every cached key rotated, from the memo under ``key`` (an unrotated cache).

        ``rotate(start)`` must return the keys ``start … length − 1`` rotated; only keys not
        yet in the memo are rotated. Entries under other keys of the same position map are
        dropped (the frequencies changed). ``memoise=False`` (gradients flowing) rotates all.
        """
        if not memoise:
            return rotate(0)
        memo = self._memo.get(key)
        if memo is None:
            stale = [other for other in self._memo if _same_map(other, key)]
            for other in stale:
                del self._memo[other]
            memo = self._memo[key] = _Rows()
        if memo.length < self.length:
            memo.append(rotate(memo.length))
        value = memo.value
        assert value is not None
        return value

    def release(self, keeps: Tensor) -> None:
        """Drop the keys ``keeps`` marks False in every row ``(length,)`` or ``(batch,
        length)`` once they are at least as many as the kept ones (a rolling cache)."""
        keep = keeps if keeps.dim() == 1 else keeps.any(dim=0)
        dropped = int(keep.numel() - keep.sum())
        if dropped == 0 or dropped < self.length - dropped:
            return
        index = keep.nonzero().flatten()
        for rows in self._per_key_rows():
            rows.keep(index)
        self._map_key_metadata(lambda value: value.index_select(-1, index.to(value.device)))
        self.evicted += dropped
        self.index_positions = False
        # a query before the newest kept key could have seen a dropped key: no rolling back
        # below the keys kept now
        self.rollback_floor = self.length

    def _per_key_rows(self) -> tuple[_Rows, ...]:
        """Every growing buffer with one entry per key: keys, values and the per-encoding
        stores (states, transform inputs, phases, memos)."""
        return (self._k, self._v, self._states, self._inputs, self._phases, *self._memo.values())

    def _map_key_metadata(self, keep: Callable[[Tensor], Tensor]) -> None:
        """Apply ``keep`` to each per-key tensor the cache holds besides keys and values."""
        if self.positions is not None:
            self.positions = keep(self.positions)
        if self.key_padding_mask is not None:
            self.key_padding_mask = keep(self.key_padding_mask)
        if self.document_ids is not None:
            self.document_ids = keep(self.document_ids)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` keys (speculative decoding, benchmarks, beam resets).

        A rolling cache rolls back only to :attr:`rollback_floor` (the length just after its
        last eviction): below it the next queries would have seen keys it dropped.

        Raises:
            ValueError: naming ``length`` when it is above the cache length or below
                :attr:`rollback_floor`.
        """
        check_non_negative_int("length", length)
        if length > self.length:
            raise ValueError(f"length must be <= the cache length {self.length}, got {length}")
        if self._carried and length < self.length:
            raise ValueError(
                f"length must be {self.length} (the cache length): this KVCache holds keys "
                "carried through every later token's transform (PaTH), which cannot be undone; "
                "start a new cache and run the kept tokens again"
            )
        if length < self.rollback_floor:
            raise ValueError(
                f"length must be >= {self.rollback_floor} (the earliest length this rolling "
                f"KVCache can roll back to), got {length}: it dropped {self.evicted} keys that "
                "queries at the earlier positions would see; start a new cache (KVCache()) to "
                "go back further, or keep every key with KVCache(evict=False)"
            )
        for rows in self._per_key_rows():
            rows.length = min(rows.length, length)
        self._map_key_metadata(lambda value: value[..., :length])

    def rerotate(
        self,
        delta: int | float | Tensor,
        rope: RotaryEncoding,
        *,
        start: int = 0,
        end: int | None = None,
        frequency_length: int | None = None,
    ) -> None:
        """Move the cached keys ``start … end − 1`` by ``delta``: their positions become
        ``p + δ`` (position-independent reuse of a cached block: a document placed at another
        offset, a window rolled back to 0).

        .. math:: k_{p+δ} = R(δ)\\,R(p)\\,k

        Rotated keys are turned in place by :func:`posenc.rotary.rerotate` (float64, one
        rounding: exact to the bound given there); unrotated keys are rotated when read, so
        only their positions change (exact for every encoding, length-dependent ones
        included). Values, padding and document ids stay. Attention continues after the
        largest cached position (``max(p + δ) + 1``); the keys keep their order, which the
        causal mask reads.

        Args:
            delta: the shift, in the forms of :func:`~posenc.rotary.rerotate` for the
                moved block (``seq = end − start``): a number, ``(seq,)``, ``(batch, 1)``,
                ``(batch, seq)``; ``(axes, …)`` for a multi-axis encoding.
            rope: the cache's layer's rotary encoding (its number of position axes; for
                rotated keys, their rotation).
            start, end: the block of cached keys to move, ``0 ≤ start ≤ end ≤ length``
                (``end`` None: to the last key).
            frequency_length: for rotated keys of a length-dependent rotary, as in
                :func:`~posenc.rotary.rerotate`.

        Raises:
            ValueError: naming the argument: an empty cache, a block outside the cache,
                ``delta`` of another shape, or rotated keys whose move is not exact
                (:func:`~posenc.rotary.rerotate`).

        Example::

            >>> attn = Attention(16, 2, pos=RotaryEmbedding(8)).eval()
            >>> cache = KVCache()
            >>> _ = attn(torch.randn(1, 5, 16), cache=cache)
            >>> cache.rerotate(100, attn.pos)
            >>> cache.positions.tolist()
            [100, 101, 102, 103, 104]
        """
        if not isinstance(rope, RotaryEncoding):
            raise ValueError(f"rope must be a rotary encoding, got {type(rope).__name__}")
        if self.length == 0 or self.positions is None or self._k.buffer is None:
            raise ValueError("cache: this KVCache holds no keys; nothing to move")
        end = self.length if end is None else check_non_negative_int("end", end)
        start = check_non_negative_int("start", start)
        if not start <= end <= self.length:
            raise ValueError(
                f"start and end must satisfy 0 <= start <= end <= {self.length} (the cache "
                f"length), got start={start}, end={end}"
            )
        positions = _moved_positions(self.positions, delta, start, end, rope.num_axes)
        if self.keys == "rotated":
            buffer = self._k.buffer
            block = buffer[:, :, start:end]
            if buffer.requires_grad:  # a concatenating cache: autograd keeps the old keys
                moved = rerotate(block, delta, rope, frequency_length=frequency_length)
                self._k.buffer = torch.cat(
                    [buffer[:, :, :start], moved, buffer[:, :, end : self.length]], dim=2
                )
            else:
                rerotate(block, delta, rope, frequency_length=frequency_length, inplace=True)
        # memoised rotations of unrotated keys from ``start`` on are stale now
        for memo in self._memo.values():
            memo.length = min(memo.length, start)
        self.positions = positions
        self.index_positions = False

    def __repr__(self) -> str:
        return f"KVCache(length={self.length}, capacity={self.capacity}, keys={self.keys!r})"


def _moved_positions(
    positions: Tensor, delta: int | float | Tensor, start: int, end: int, num_axes: int
) -> Tensor:
    """``positions`` with ``delta`` added to keys ``start … end − 1`` (a new tensor, rows
    expanded when ``delta`` differs per batch row)."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float, Tensor)):
        raise ValueError(f"delta must be a number or a tensor, got {type(delta).__name__}")
    shift = torch.as_tensor(delta, device=positions.device)
    if shift.dtype == torch.bool or shift.is_complex():
        raise ValueError(f"delta must be a real number or tensor, got {shift.dtype}")
    # (axes, batch|1, seq) positions and (axes, batch|1, block|1) shifts, one axis or several
    grid = positions if num_axes > 1 else positions[None]
    grid = grid if grid.dim() == 3 else grid[:, None]
    shift = shift if num_axes > 1 else shift[None]
    if num_axes > 1 and (shift.dim() == 0 or shift.shape[0] != num_axes):
        raise ValueError(
            f"delta must hold one shift per axis ({num_axes}), got {tuple(shift.shape)}"
        )
    shift = shift.reshape(shift.shape[0], *([1] * (3 - shift.dim())), *shift.shape[1:])
    if shift.dim() != 3 or shift.shape[-1] not in (1, end - start):
        raise ValueError(
            f"delta must broadcast to the moved block (batch, {end - start}), got "
            f"{tuple(torch.as_tensor(delta).shape)}"
        )
    rows = max(grid.shape[1], shift.shape[1])
    if shift.shape[1] not in (1, rows):
        raise ValueError(f"delta has {shift.shape[1]} rows but the cache holds {rows}")
    dtype = torch.promote_types(grid.dtype, shift.dtype)
    moved = grid.to(dtype).expand(num_axes, rows, -1).clone()
    moved[..., start:end] += shift.to(dtype)
    moved = moved if rows > 1 or positions.dim() == (2 if num_axes == 1 else 3) else moved[:, 0]
    return moved if num_axes > 1 else moved[0]


def _same_map(a: Hashable, b: Hashable) -> bool:
    """Memo keys ``(encoding, map, state)`` of one position map under another state."""
    return isinstance(a, tuple) and isinstance(b, tuple) and a[:-1] == b[:-1]

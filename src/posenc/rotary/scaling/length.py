"""How a length-dependent scaling's frequencies follow the sequence length.

Scalings are frozen values; what changes while a model runs (the length the current
frequencies were computed for, HF's ``max_seq_len_cached``, the count of changes) is a
:class:`LengthState`, made by :meth:`Scaling.new_state <posenc.rotary.scaling.Scaling.new_state>`
and owned by one module (:class:`~posenc.rotary.RotaryEmbedding`). Its rule, per scaling:

* plain RoPE and static scalings: :class:`LengthState`, which never changes;
* :class:`~posenc.rotary.scaling.DynamicNTK` (``"hf"`` mode) and dynamic
  :class:`~posenc.rotary.scaling.YaRN`: :class:`GrowAndReset` (HF's
  ``_dynamic_frequency_update``);
* :class:`~posenc.rotary.scaling.LongRoPE`: :class:`LengthSwitch` (HF's
  ``_longrope_frequency_update``);
* any other length-dependent scaling: :class:`FollowLength`, exactly each call's length.

**Length rules** (:data:`LengthRule`): how a forward of several tokens picks its length.

* ``"forward"`` (the default): HF transformers' ``dynamic_rope_update``
  (``transformers/modeling_rope_utils.py``, the decorator on the rotary ``forward`` of every
  model). Each call takes one ``seq_len = max(position_ids) + 1`` over its positions
  (:func:`sequence_length`), advances the module's state with it (:meth:`LengthState.update`)
  and rotates every query and key of the call with the frequencies of the new state. All
  queries of a call share that length, so a prefill of ``n`` tokens and ``n`` decoding steps
  differ once the length passes the scaling's threshold.
* ``"query"``: each query uses the frequencies of its own prefix, ``p + 1`` positions, with
  no history (:meth:`Scaling.frequency_length <posenc.rotary.scaling.Scaling.frequency_length>`):
  what decoding token by token gives, so that cached decoding equals a fresh forward at
  every step. The module's state is left alone; attention groups the queries by their
  frequencies (docs/context-extension.md, "Under a KV cache").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch import Tensor

__all__ = [
    "LENGTH_RULES",
    "FollowLength",
    "GrowAndReset",
    "LengthRule",
    "LengthState",
    "LengthSwitch",
    "sequence_length",
]

#: How a length-dependent scaling picks its length in a forward of several tokens:
#: ``"forward"`` (HF) one length for the forward, ``"query"`` each query its own prefix's.
LengthRule = Literal["forward", "query"]
LENGTH_RULES: tuple[str, ...] = get_args(LengthRule)


def sequence_length(*positions: Tensor) -> int | None:
    """``max(positions) + 1`` over all the tensors (floored, at least 1): HF's
    ``torch.max(position_ids) + 1``. None when every tensor is empty. One host sync.

    Example::

        >>> sequence_length(torch.arange(4), torch.tensor([6.5]))
        7
    """
    maxima = [p.detach().max().to(torch.float64) for p in positions if p.numel() > 0]
    if not maxima:
        return None
    largest = maxima[0]
    for other in maxima[1:]:
        largest = torch.maximum(largest, other.to(largest.device))
    return max(math.floor(float(largest)) + 1, 1)  # the host sync


class LengthState:
    """The length one module's frequencies follow; this base never changes (plain RoPE and
    static scalings). Mutable, and not a tensor: module dtype casts and ``state_dict`` leave
    it alone.

    Attributes:
        length: the ``seq_len`` the current frequencies are computed for
            (``scaling.inv_freq(..., seq_len=length)``); None: the initial ones.
        max_seq_len_cached: HF's attribute, the longest length the frequencies follow
            (:class:`GrowAndReset`); None for the other rules.
        rebuilds: how many times :meth:`update` changed the frequencies.
    """

    def __init__(self) -> None:
        self.length: int | None = None
        self.max_seq_len_cached: int | None = None
        self.rebuilds = 0

    def update(self, seq_len: int) -> bool:
        """Advance to a call of ``seq_len`` positions (an int ≥ 1, checked by the caller);
        True when the frequencies changed, which :attr:`rebuilds` counts."""
        changed = self._advance(seq_len)
        if changed:
            self.rebuilds += 1
        return changed

    def _advance(self, seq_len: int) -> bool:
        return False

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(length={self.length}, "
            f"max_seq_len_cached={self.max_seq_len_cached}, rebuilds={self.rebuilds})"
        )


class GrowAndReset(LengthState):
    """HF's dynamic rule (``_dynamic_frequency_update``): follow the longest length seen, and
    go back to the initial frequencies when a shorter-than-``threshold`` sequence comes after a
    longer one.

    ``seq_len > max_seq_len_cached``: the frequencies of ``seq_len``, and
    ``max_seq_len_cached = seq_len``; else ``seq_len < threshold < max_seq_len_cached``: the
    initial frequencies, and ``max_seq_len_cached = threshold`` (its initial value).

    Args:
        threshold: lengths up to this keep the initial frequencies (DynamicNTK's
            ``max_position_embeddings``, YaRN's ``L0``).
    """

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold
        self.max_seq_len_cached = threshold

    def _advance(self, seq_len: int) -> bool:
        cached = self.max_seq_len_cached
        assert cached is not None
        if seq_len > cached:  # grow: follow the longest length seen
            self.length = self.max_seq_len_cached = seq_len
            return True
        if seq_len < self.threshold < cached:  # reset: back to the initial frequencies
            self.length, self.max_seq_len_cached = None, self.threshold
            return True
        return False


class LengthSwitch(LengthState):
    """The frequencies of ``rule(seq_len)`` at every call, without history: LongRoPE's switch
    between its short and long factors (HF's ``_longrope_frequency_update``), with ``rule`` the
    scaling's :meth:`~posenc.rotary.scaling.Scaling.frequency_length`.

    Args:
        rule: ``seq_len -> length`` the frequencies follow (None: the initial ones).
    """

    def __init__(self, rule: Callable[[int], int | None]) -> None:
        super().__init__()
        self.rule = rule

    def _advance(self, seq_len: int) -> bool:
        target = self.rule(seq_len)
        if target == self.length:
            return False
        self.length = target
        return True


class FollowLength(LengthState):
    """The frequencies of exactly each call's ``seq_len`` (a length-dependent scaling with no
    rule of its own)."""

    def _advance(self, seq_len: int) -> bool:
        if seq_len == self.length:
            return False
        self.length = seq_len
        return True

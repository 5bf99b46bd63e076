"""The :class:`Plan` protocol: a faster exact route for one kind of encoding.

A plan serves the encodings of one kind (:mod:`posenc.encoding.kinds`, or a protocol of
:mod:`posenc.encoding.protocols`): attention asks each plan, in order, whether it applies to
the call (:meth:`Plan.applies`), and runs the first that does; no plan looks at an encoding's
attributes, only at the kind it declares and the call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from posenc.attention.context import AttentionContext
from posenc.encoding.base import PositionalEncoding
from posenc.encoding.resolve import Hooks

__all__ = ["FlashPartsPlan", "Plan", "PlanCall", "PlanRun", "padding_mask", "tracks_grad"]

#: ``run(q, k, v, hooks, context, padding, scale, block_size) -> out``
PlanRun = Callable[
    [Tensor, Tensor, Tensor, Hooks, AttentionContext, "Tensor | None", float, "int | None"],
    Tensor,
]


@dataclass(frozen=True)
class PlanCall:
    """What a plan may look at to decide whether it applies to one call.

    Attributes:
        hooks: the encoding's resolved places.
        context: positions and mask of the call.
        q, k, v: the call's tensors (``(batch, heads, seq, head_dim)``).
        grad: True when autograd will need gradients of q, k, v or the encoding.
        block_size: the query rows per block the caller asked for (None: the plan's own).
    """

    hooks: Hooks
    context: AttentionContext
    q: Tensor
    k: Tensor
    v: Tensor
    grad: bool
    block_size: int | None = None


class Plan(Protocol):
    """One exact route for the encodings of :attr:`kind`."""

    @property
    def name(self) -> str:
        """What the plan is called in messages and benchmarks."""
        ...

    @property
    def kind(self) -> type[PositionalEncoding]:
        """The encodings it serves: the object at the call's place must be one."""
        ...

    def applies(self, call: PlanCall) -> bool:
        """True when the plan serves this call (an encoding of its kind given)."""
        ...

    def run(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        hooks: Hooks,
        context: AttentionContext,
        padding: Tensor | None,
        scale: float,
        block_size: int | None,
    ) -> Tensor:
        """The attention output ``(batch, heads, q_len, v_dim)`` in the compute dtype."""
        ...


@dataclass(frozen=True)
class FlashPartsPlan:
    """A :class:`Plan` on the CPU flash kernel's parts (:mod:`posenc.attention.flash`)."""

    name: str
    kind: type[PositionalEncoding]
    condition: Callable[[PlanCall], bool]
    route: PlanRun

    def applies(self, call: PlanCall) -> bool:
        return self.condition(call)

    def run(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        hooks: Hooks,
        context: AttentionContext,
        padding: Tensor | None,
        scale: float,
        block_size: int | None,
    ) -> Tensor:
        return self.route(q, k, v, hooks, context, padding, scale, block_size)


def tracks_grad(hooks: Hooks, *tensors: Tensor) -> bool:
    """True when autograd needs gradients of ``tensors`` or the encoding's parameters."""
    if not torch.is_grad_enabled():
        return False
    if any(t.requires_grad for t in tensors):
        return True
    encoding = hooks.encoding
    return encoding is not None and any(p.requires_grad for p in encoding.parameters())


def padding_mask(context: AttentionContext, dtype: torch.dtype) -> Tensor | None:
    """The key padding as an additive ``(batch, 1, 1, k_len)`` mask (0 / lowest value)."""
    padding = context.mask.key_padding
    if padding is None:
        return None
    low = torch.finfo(dtype).min
    return torch.zeros((), dtype=dtype).masked_fill(~padding, low)[:, None, None, :]

"""What the modules of :mod:`posenc.integrations.hf.segments` share: the state a patched model's
layers read, and the attribute it hangs on."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from posenc.segments.base import SegmentedRotary

#: The attribute of the patched attention modules and decoder that holds their SegmentState.
STATE = "_posenc_segments"


@dataclass(frozen=True)
class QueryPositions:
    """The queries' positions of one forward, read once by the rotary stand-in
    (:class:`~posenc.integrations.hf.segments.forward.IdentityRotary`)."""

    q_pos: Tensor  # (batch | 1, q_len), int64
    start: int | None  # s when every row is arange(s, s + q_len), else None


@dataclass
class SegmentState:
    """What a patched model's layers share (attached to each attention module and the decoder
    under :data:`STATE`), and what
    :func:`~posenc.integrations.hf.segments.unpatch_segments` puts back."""

    method: SegmentedRotary
    backend: str
    original: nn.Module
    previous_attention: str
    positions: QueryPositions | None = None  # this forward's, set by the rotary stand-in
    modules: list[nn.Module] = field(default_factory=list)
    hook: RemovableHandle | None = None  # the decoder's check_cache pre-hook

"""Self-Extend: neighbor attention at true positions, grouped attention at floor-divided ones.

Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning",
https://arxiv.org/abs/2401.01325; reference datamllab/LongLM ``self_extend_patch/Llama.py``
(``self_extend_forward``, the eager version).
"""

from __future__ import annotations

from typing import Literal

from posenc._validate import check_in_choices, check_positive_int
from posenc.encoding.protocols import RotaryEncoding
from posenc.segments.base import PositionMap, Region, Segment, SegmentedRotary

__all__ = ["SelfExtend"]

Offset = Literal["float", "floor"]


class SelfExtend(SegmentedRotary):
    """Self-Extend (Jin et al. 2024) around a rotary encoding.

    A query at position ``i`` and a key at ``j`` are

    * **neighbors** when ``i − j < W``: rotated at ``i`` and ``j`` (plain RoPE);
    * **grouped** otherwise: the query at ``⌊i/G⌋ + W − W/G``, the key at ``⌊j/G⌋``, so the
      distance ``⌊i/G⌋ − ⌊j/G⌋ + W − W/G`` continues the window's (``W`` at ``i − j = W``
      when ``G`` divides ``W``) and grows ``G`` times slower beyond it.

    One softmax over both (the reference merges the two logit matrices with ``where``). The
    longest context whose distances stay within a pre-training length ``L`` is
    ``(L − W)·G + W`` (LongLM README).

    Optional log-n scale (LongLM's ``scale_base``, off by default): every query times
    ``max(1, ln(i + 1) / ln(log_scale_base))``.

    Differences from the reference: the offset ``W − W/G`` is float division (eager, flash
    prefill and Triton paths of ``Llama.py``); ``offset="floor"`` gives ``W − ⌊W/G⌋`` (its
    flash decode and legacy patches; the two agree when ``G`` divides ``W``). Any number of
    queries against a cache is served (the reference raises for ``1 < q_len < kv_len``); the
    phases are float64 (the reference's tables are float32).

    Args:
        rotary: the model's rotary encoding (RoPE with any scaling: Self-Extend + NTK).
        window: the neighbor window ``W`` ≥ 1 (LongLM's ``group_size_2`` /
            ``window_size``; 1024 for Llama-2 in its README).
        group: the group size ``G`` ≥ 1 (``group_size_1`` / ``group_size``; 8).
        offset: ``"float"`` (default) or ``"floor"``, see above.
        log_scale_base: the pre-training length for the log-n query scale, or None (off).

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> se = SelfExtend(RotaryEmbedding(64), window=4, group=2)
        >>> [s.name for s in se.segments()]
        ['neighbor', 'group']
    """

    def __init__(
        self,
        rotary: RotaryEncoding,
        *,
        window: int = 1024,
        group: int = 8,
        offset: Offset = "float",
        log_scale_base: int | None = None,
    ) -> None:
        super().__init__(rotary, log_scale_base=log_scale_base)
        self.window = check_positive_int("window", window)
        self.group = check_positive_int("group", group)
        if group > window:
            raise ValueError(
                f"group ({group}) must be <= window ({window}): Self-Extend's groups are "
                "narrower than its neighbor window (LongLM: W 512-1536 with G 2-64; a longer "
                "context wants a wider window, not a group wider than it)"
            )
        check_in_choices("offset", offset, ("float", "floor"))
        self.offset: Offset = offset

    def build_segments(self) -> tuple[Segment, ...]:
        w, g = self.window, self.group
        shift = w - (w / g if self.offset == "float" else w // g)
        return (
            Segment("neighbor", Region(hi=w)),
            Segment("group", Region(lo=w), PositionMap(div=g, shift=shift), PositionMap(div=g)),
        )

    def extra_repr(self) -> str:
        text = f"window={self.window}, group={self.group}, offset={self.offset!r}"
        if self.log_scale_base is not None:
            text += f", log_scale_base={self.log_scale_base}"
        return text

"""ReRoPE and Leaky ReRoPE: relative positions capped (or slowed) beyond a window.

Su 2023, "Rectified Rotary Position Embeddings", https://github.com/bojone/rerope (blog
https://kexue.fm/archives/9708); reference ``rerope_patch.py`` and ``leaky_rerope_patch.py``.
"""

from __future__ import annotations

from posenc._validate import check_positive_float, check_positive_int
from posenc.encoding.protocols import RotaryEncoding
from posenc.segments.base import PositionMap, Region, Segment, SegmentedRotary

__all__ = ["ReRoPE"]


class ReRoPE(SegmentedRotary):
    """ReRoPE, or Leaky ReRoPE with ``leak``, around a rotary encoding.

    The distance a pair is rotated by is

    .. math::

        \\text{ReRoPE: } \\min(i - j,\\ w), \\qquad
        \\text{Leaky: } i - j \\text{ if } i - j < w, \\text{ else } w + (i - j - w)/k.

    Inside the window both are plain RoPE. Beyond it ReRoPE rotates the query to ``w`` and
    leaves the key unrotated (the reference's two passes); Leaky ReRoPE rotates the query to
    ``(i + w(k − 1))/k`` and the key to ``j/k`` (fractional positions).

    With ``log_scale_base`` (the reference sets it: 4096, its training length) every query is
    multiplied by ``max(1, ln(i + 1) / ln(log_scale_base))``, in both parts.

    Differences from the reference: none in positions; phases and the log-n factor are
    float64 (the reference's are float32).

    Args:
        rotary: the model's rotary encoding.
        window: ``w`` ≥ 1 (512 in the patches; the README's results use 1024).
        leak: ``k`` > 1 for Leaky ReRoPE (16 in its patch), or None for ReRoPE.
        log_scale_base: the training length for the log-n scale, or None (off).

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> [s.name for s in ReRoPE(RotaryEmbedding(64), window=8).segments()]
        ['near', 'far']
    """

    def __init__(
        self,
        rotary: RotaryEncoding,
        *,
        window: int = 512,
        leak: float | None = None,
        log_scale_base: int | None = None,
    ) -> None:
        super().__init__(rotary, log_scale_base=log_scale_base)
        self.window = check_positive_int("window", window)
        if leak is not None:
            leak = check_positive_float("leak", leak)
            if leak <= 1.0:
                raise ValueError(
                    f"leak must be > 1 (distances beyond w grow 1/leak as fast), got {leak}"
                )
        self.leak = leak

    def build_segments(self) -> tuple[Segment, ...]:
        w, k = self.window, self.leak
        if k is None:
            far = Segment("far", Region(lo=w), PositionMap(const=w), PositionMap(const=0))
        else:
            far = Segment(
                "far",
                Region(lo=w),
                PositionMap(scale=1.0 / k, shift=w - w / k),
                PositionMap(scale=1.0 / k),
            )
        return Segment("near", Region(hi=w)), far

    def extra_repr(self) -> str:
        text = f"window={self.window}"
        if self.leak is not None:
            text += f", leak={self.leak:g}"
        if self.log_scale_base is not None:
            text += f", log_scale_base={self.log_scale_base}"
        return text

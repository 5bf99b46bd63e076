"""Dual Chunk Attention: intra-chunk, successive-chunk and inter-chunk positions.

An et al. 2024, "Training-Free Long-Context Scaling of Large Language Models",
https://arxiv.org/abs/2402.17463; reference HKUNLP/ChunkLlama ``chunkllama_attn_replace.py``
(the same positions and partition as vLLM's ``dual_chunk_rope.py`` and
``DUAL_CHUNK_FLASH_ATTN`` backend, used for Qwen2.5-1M).
"""

from __future__ import annotations

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.encoding.protocols import RotaryEncoding
from posenc.segments.base import PositionMap, Region, Segment, SegmentedRotary

__all__ = ["DualChunk"]


class DualChunk(SegmentedRotary):
    """Dual Chunk Attention (An et al. 2024) around a rotary encoding.

    Tokens are cut into chunks of ``c = chunk_size − local_window`` positions (chunk
    ``⌊p/c⌋``); every key sits at ``j mod c``. A query at ``i`` is rotated

    * at ``i mod c`` for keys of its own chunk (**intra**);
    * at ``min(i mod c + c, chunk_size)`` for keys of the chunk before (**successive**: the
      first ``local_window`` queries of a chunk keep their true distance to it);
    * at ``min(2c − 1, chunk_size)`` for keys of every earlier chunk (**inter**).

    Every distance stays below ``chunk_size``; one softmax over the three.

    Parameters as the reference code and vLLM take them (``chunk_size``, ``local_size`` /
    ``local_window``). The paper's chunk ``s`` and pre-training length ``c`` are
    ``chunk_size = c − 1`` and ``local_window = c − 1 − s`` here (paper: ``s = 3/4 c``; the
    code's default is ``chunk_size = 3/4 c`` and ``local_window = c/8``).

    Differences from the reference: none in positions or partition; the length scalings of
    ChunkLlama (an mscale on the tables) and vLLM (YaRN's temperature on keys) are not part
    of the paper and are not applied; phases are float64.

    Args:
        rotary: the model's rotary encoding.
        chunk_size: the longest distance the method uses, > ``local_window`` (3072 for a
            Llama-2 of 4096 positions in the reference).
        local_window: queries at the start of a chunk that keep exact distances to the chunk
            before, ≥ 0 (512 in the reference; vLLM 1024).

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> dca = DualChunk(RotaryEmbedding(64), chunk_size=6, local_window=2)
        >>> [s.name for s in dca.segments()]
        ['intra', 'successive', 'inter']
    """

    def __init__(
        self, rotary: RotaryEncoding, *, chunk_size: int = 3072, local_window: int = 512
    ) -> None:
        super().__init__(rotary)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        local_window = check_non_negative_int("local_window", local_window)
        if local_window >= self.chunk_size:
            raise ValueError(
                f"local_window ({local_window}) must be < chunk_size ({self.chunk_size}): the "
                "chunk length chunk_size - local_window must be >= 1"
            )
        self.local_window = local_window

    @property
    def chunk_len(self) -> int:
        """``c = chunk_size − local_window``: the chunk length and the keys' modulus."""
        return self.chunk_size - self.local_window

    def build_segments(self) -> tuple[Segment, ...]:
        c, size = self.chunk_len, self.chunk_size
        key = PositionMap(mod=c)
        return (
            Segment("intra", Region(lo=0, hi=1, chunk=c), PositionMap(mod=c), key),
            Segment(
                "successive",
                Region(lo=1, hi=2, chunk=c),
                PositionMap(mod=c, shift=c, cap=size),
                key,
            ),
            Segment("inter", Region(lo=2, chunk=c), PositionMap(const=min(2 * c - 1, size)), key),
        )

    def extra_repr(self) -> str:
        return f"chunk_size={self.chunk_size}, local_window={self.local_window}"

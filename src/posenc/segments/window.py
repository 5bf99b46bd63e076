"""Λ-shaped windows: LM-Infinite and StreamingLLM's attention sinks.

Both let a query see the first tokens and a recent window only; they differ in the positions
of the first tokens. Han et al. 2023, "LM-Infinite: Zero-Shot Extreme Length Generalization
for Large Language Models", https://arxiv.org/abs/2308.16137 (reference
Glaciohound/LM-Infinite ``models/llama.py``, ``models/lambda_attention.py``); Xiao et al.
2023, "Efficient Streaming Language Models with Attention Sinks",
https://arxiv.org/abs/2309.17453 (reference mit-han-lab/streaming-llm
``pos_shift/modify_llama.py``, ``kv_cache.py``, ``examples/eval_long_ppl.py``).
"""

from __future__ import annotations

from posenc._validate import check_positive_int
from posenc.encoding.protocols import RotaryEncoding
from posenc.segments.base import PositionMap, Region, Segment, SegmentedRotary

__all__ = ["AttentionSinks", "LMInfinite"]


class LMInfinite(SegmentedRotary):
    """LM-Infinite (Han et al. 2023) around a rotary encoding: a Λ-shaped mask and a distance
    cap for the first tokens.

    A query at ``i`` sees

    * the **local** branch, keys with ``i − j < n_local`` (itself included), at true
      positions;
    * the **global** branch, the first ``n_global`` keys beyond the local branch, at distance
      ``min(i, limit)``: the query rotated to ``min(i, limit)``, the key unrotated;

    and nothing in between. A KV cache drops the keys in between (rolling).

    Differences from the reference (Λ-mask mode, its HF drop-in): the reference caps the
    global distance at ``min(limit, kv_len − 1)`` with ``kv_len`` the forward's whole key
    length; here it is per query, ``min(limit, i)``, which equals the reference whenever a
    global pair exists with ``limit = n_local`` (its drop-in's setting, the default here)
    and keeps a prefill equal to decoding otherwise. Phases are float64.

    Args:
        rotary: the model's rotary encoding.
        local_window: ``n_local`` ≥ 1, the local branch including the query (the pre-training
            length in the paper: 4096 for Llama-2).
        global_tokens: ``n_global`` ≥ 1 (10-100 in the paper; 10 in its drop-in).
        limit: the distance cap, ≥ ``local_window`` (default ``local_window``).

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> [s.name for s in LMInfinite(RotaryEmbedding(64), local_window=8).segments()]
        ['local', 'global']
    """

    def __init__(
        self,
        rotary: RotaryEncoding,
        *,
        local_window: int = 4096,
        global_tokens: int = 10,
        limit: int | None = None,
    ) -> None:
        super().__init__(rotary)
        self.local_window = check_positive_int("local_window", local_window)
        self.global_tokens = check_positive_int("global_tokens", global_tokens)
        limit = self.local_window if limit is None else check_positive_int("limit", limit)
        if limit < self.local_window:
            raise ValueError(
                f"limit ({limit}) must be >= local_window ({local_window}): global keys lie "
                "beyond the local branch"
            )
        self.limit = limit

    def build_segments(self) -> tuple[Segment, ...]:
        n = self.local_window
        return (
            Segment("local", Region(hi=n)),
            Segment(
                "global",
                Region(lo=n, key_below=self.global_tokens),
                PositionMap(cap=self.limit),
                PositionMap(const=0),
            ),
        )

    def extra_repr(self) -> str:
        return (
            f"local_window={self.local_window}, global_tokens={self.global_tokens}, "
            f"limit={self.limit}"
        )


class AttentionSinks(SegmentedRotary):
    """StreamingLLM's attention sinks (Xiao et al. 2023) with positions inside the cache.

    A query at ``i`` sees the first ``sinks`` tokens, the ``window`` tokens before it and
    itself; the keys in between leave the KV cache (rolling). Positions are those inside the
    cache (StreamingLLM's ``pos_shift``): the sinks at ``0 … sinks − 1``, the window after
    them, the query last, at ``min(i, sinks + window)``. Written on the tokens' own positions,
    the window keeps its true distances ``i − j`` and a sink ``j`` is at distance
    ``min(i, sinks + window) − j``, so no key's rotation ever changes and a rolling cache
    renumbers nothing it stores.

    ``window`` counts the earlier tokens, as StreamingLLM's perplexity evaluation
    (``eval_long_ppl.py``: eviction after the token is processed) and its paper ("4+1020"):
    a query sees ``sinks + window + 1`` keys. Before the cache fills every position is true.

    Args:
        rotary: the model's rotary encoding.
        sinks: first tokens kept, ≥ 1 (4 in the paper).
        window: recent tokens kept besides the query, ≥ 1 (``recent_size``; 1020 in the
            paper's "4+1020").

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> [s.name for s in AttentionSinks(RotaryEmbedding(64), sinks=2, window=3).segments()]
        ['window', 'sinks']
    """

    def __init__(self, rotary: RotaryEncoding, *, sinks: int = 4, window: int = 1020) -> None:
        super().__init__(rotary)
        self.sinks = check_positive_int("sinks", sinks)
        self.window = check_positive_int("window", window)

    def build_segments(self) -> tuple[Segment, ...]:
        span = self.window + 1  # the window and the query
        return (
            Segment("window", Region(hi=span)),
            Segment(
                "sinks",
                Region(lo=span, key_below=self.sinks),
                PositionMap(cap=self.sinks + self.window),
            ),
        )

    def extra_repr(self) -> str:
        return f"sinks={self.sinks}, window={self.window}"

"""Suites of ``posenc bench attention`` for long context without retraining.

* ``longctx``: the :class:`~posenc.attention.Attention` module (dim 512, 8 heads of 64) at
  16,384 tokens, causal, no grad, with each segment method on ``chunked`` at its reference
  setting for a 4k-token model, against the same module with plain RoPE (SDPA's causal
  flash kernel): the issue's target is ≤ 1.3× for Self-Extend and Dual Chunk Attention.
* ``longctx-memory``: peak RSS growth of one forward (no grad, 8 heads × 64, ``chunked``) of
  Self-Extend and DCA at 65,536 tokens, plain RoPE beside them, each in a fresh process
  (target < 1 GiB).
* ``longctx-decode``: one decoding step of 4 layers sharing a per-step context (as
  :class:`~posenc.models.DecoderLM` does) against a 4,096-token cache: RoPE with the cache
  keeping keys unrotated (rotated on read from the memo) against the same step with a rotated
  cache (target ≤ 1.5×); beside them the step when the frequencies changed (dynamic NTK past
  its length: every cached key rotated again) and Self-Extend and DCA.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn

from posenc.attention import Attention, attend
from posenc.attention.cache import KeyForm
from posenc.bench import compare, peak_memory, rss_peak_bytes
from posenc.bench.decoding import prefilled_stack, stack_step
from posenc.encoding.protocols import RotaryEncoding
from posenc.rotary import RotaryEmbedding
from posenc.segments import AttentionSinks, DualChunk, LMInfinite, ReRoPE, SelfExtend

__all__ = ["METHODS", "decode", "forward", "memory"]

GIB = 1024**3


def _self_extend(rope: RotaryEncoding) -> nn.Module:
    return SelfExtend(rope, window=1024, group=8)  # LongLM's Llama defaults


def _dual_chunk(rope: RotaryEncoding) -> nn.Module:
    return DualChunk(rope, chunk_size=3072, local_window=512)  # ChunkLlama's at 4096


#: The methods at their reference settings for a model pre-trained on 4,096 positions.
METHODS: dict[str, Callable[[RotaryEncoding], nn.Module]] = {
    "self_extend": _self_extend,
    "dual_chunk": _dual_chunk,
    "rerope": lambda rope: ReRoPE(rope, window=1024, log_scale_base=4096),
    "lm_infinite": lambda rope: LMInfinite(rope, local_window=4096, global_tokens=10),
    "sinks": lambda rope: AttentionSinks(rope, sinks=4, window=1020),
}


def forward(
    seq: int = 16384,
    heads: int = 8,
    head_dim: int = 64,
    rounds: int = 3,
    methods: tuple[str, ...] = tuple(METHODS),
) -> list[dict[str, Any]]:
    """Each method's Attention module on ``chunked`` × the RoPE module (no grad)."""
    dim = heads * head_dim
    torch.manual_seed(0)
    x = torch.randn(1, seq, dim)
    rope = Attention(dim, heads, pos=RotaryEmbedding(head_dim)).eval()
    candidates: dict[str, Callable[[], object]] = {"rope": lambda: rope(x)}
    for name in methods:
        attn = Attention(
            dim, heads, pos=METHODS[name](RotaryEmbedding(head_dim)), backend="chunked"
        ).eval()
        attn.load_state_dict(rope.state_dict())
        candidates[name] = partial(attn, x)
    with torch.no_grad():
        timings = compare(candidates, "rope", rounds=rounds)
    return [{**t.as_dict(), "seq": seq} for t in timings]


def _forward_peak(name: str, seq: int, heads: int, head_dim: int) -> dict[str, Any]:
    torch.set_num_threads(2)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, head_dim, generator=generator) for _ in range(3))
    rope = RotaryEmbedding(head_dim)
    before = rss_peak_bytes()
    with torch.no_grad():
        if name == "rope":
            positions = torch.arange(seq)
            q, k = rope(q, k, positions, positions)
            attend(q, k, v, causal=True, backend="chunked")
        else:
            attend(q, k, v, pos=METHODS[name](rope), causal=True, backend="chunked")
    return {"name": name, "seq": seq, "peak_gib": (rss_peak_bytes() - before) / GIB}


def memory(
    seq: int = 65536,
    heads: int = 8,
    head_dim: int = 64,
    methods: tuple[str, ...] = ("rope", "self_extend", "dual_chunk"),
) -> list[dict[str, Any]]:
    """Peak RSS growth of one forward per method at ``seq`` tokens, a fresh process each."""
    return [peak_memory(_forward_peak, name, seq, heads, head_dim) for name in methods]


def decode(
    cache_len: int = 4096, heads: int = 8, head_dim: int = 64, layers: int = 4, rounds: int = 20
) -> list[dict[str, Any]]:
    """One decoding step of ``layers`` layers against a ``cache_len`` cache, per layer, × the
    step with a rotated cache."""
    dim = heads * head_dim
    torch.manual_seed(0)
    prompt = torch.randn(1, cache_len, dim)
    step = torch.randn(1, 1, dim)
    template = Attention(dim, heads)

    def stack_of(encoding: nn.Module, keys: KeyForm, forget: bool = False) -> Callable[[], None]:
        stack, caches = prefilled_stack(
            encoding, template, prompt, heads=heads, layers=layers, keys=keys
        )

        def clear() -> None:  # the frequencies changed: every cached key is rotated again
            for cache in caches:
                cache._memo.clear()

        return stack_step(stack, caches, step, before=clear if forget else None)

    rope = RotaryEmbedding(head_dim)
    candidates: dict[str, Callable[[], object]] = {
        "rope, rotated cache": stack_of(rope, "rotated"),
        "rope, unrotated cache": stack_of(rope, "unrotated"),
        "rope, unrotated, frequencies changed": stack_of(rope, "unrotated", forget=True),
        "self_extend": stack_of(_self_extend(RotaryEmbedding(head_dim)), "unrotated"),
        "dual_chunk": stack_of(_dual_chunk(RotaryEmbedding(head_dim)), "unrotated"),
    }
    with torch.no_grad():
        timings = compare(candidates, "rope, rotated cache", rounds=rounds, warmup=3)
    return [{**t.as_dict(), "seconds": t.seconds / layers} for t in timings]

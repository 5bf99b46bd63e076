"""``posenc bench attention --only linear``: the linear-attention backend against softmax.

The :class:`~posenc.attention.Attention` module (dim 512, 8 heads, head dim 64, causal, RoPE)
with ``backend="linear"`` (RoFormer §3.4.3, :mod:`posenc.attention.linear`) against the same
weights on the softmax backends' ``auto`` (SDPA's flash kernel), one forward without
gradients, at several lengths: linear attention is ``O(L · d²)``, softmax ``O(L² · d)``, so
the ratio falls as L grows. Timings interleaved in rounds, medians of per-round ratios.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from posenc.attention import Attention
from posenc.bench import compare
from posenc.rotary import RotaryEmbedding

__all__ = ["forward"]


def forward(
    seqs: tuple[int, ...] = (1024, 4096, 16384), heads: int = 8, head_dim: int = 64, rounds: int = 3
) -> list[dict[str, Any]]:
    """Per length: the linear RoPE module × the softmax RoPE module (no grad)."""
    dim = heads * head_dim
    rows: list[dict[str, Any]] = []
    for seq in seqs:
        torch.manual_seed(0)
        x = torch.randn(1, seq, dim)
        softmax = Attention(dim, heads, pos=RotaryEmbedding(head_dim)).eval()
        linear = Attention(dim, heads, pos=RotaryEmbedding(head_dim), backend="linear").eval()
        linear.load_state_dict(softmax.state_dict())
        with torch.no_grad():
            timings = compare(
                {"softmax rope": partial(softmax, x), "linear rope": partial(linear, x)},
                "softmax rope",
                rounds=rounds,
            )
        rows.extend({**t.as_dict(), "seq": seq} for t in timings)
    return rows

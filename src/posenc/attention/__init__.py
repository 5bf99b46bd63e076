"""Attention that takes any positional encoding: structural masks, three backends, one context.

* :class:`Attention`: the module (projections, rotary hook, KV cache, backend).
* :func:`attend`: the functional form on given q, k, v.
* :class:`AttentionMask`: causal order, key padding, packed documents, predicates and user
  tensors as structure; no backend builds a ``(batch, heads, L, L)`` mask.
* Backends (:class:`Backend`): ``sdpa`` (the reference), ``flex`` (FlexAttention with the
  encoding's ``score_mod``), ``chunked`` (query blocks, O(block · L) memory, every family;
  exact flash-parts plans for ALiBi and T5 on the CPU), ``auto``.
* :class:`AttentionContext`: what every layer of one forward shares, validated once.
* :class:`KVCache`: keys, values and key metadata of one layer.
* :class:`QueryScale`: a query temperature by position (Llama-4, Qwen-1's log-n).
* :class:`ContextParallel`: one sequence over ranks (zigzag shards), attention on global
  positions with keys and values all-gathered.
* Sliding-window attention (``Attention(window=)``, :func:`with_window`) and gated
  attention's output gate (``Attention(output_gate=True)``, :class:`OutputGate`).
* :class:`GatedDeltaNet`: a gated delta-rule token mixer (no positions) for linear : softmax
  hybrids, with :class:`DeltaState` for decoding.

Example::

    >>> from posenc.bias import AlibiBias
    >>> attn = Attention(dim=64, num_heads=4, pos=AlibiBias(num_heads=4), backend="chunked")
    >>> attn(torch.randn(2, 10, 64)).shape
    torch.Size([2, 10, 64])
"""

from __future__ import annotations

from posenc.attention.backends import Backend, BackendName, choose_backend
from posenc.attention.cache import KVCache
from posenc.attention.context import AttentionContext, build_context
from posenc.attention.context_parallel import ContextParallel
from posenc.attention.delta_rule import (
    DeltaState,
    GatedDeltaNet,
    gated_delta_rule,
    gated_delta_rule_recurrent,
)
from posenc.attention.functional import attend
from posenc.attention.gate import OutputGate, output_gate
from posenc.attention.mask import AttentionMask, MaskMod, causal_mask
from posenc.attention.module import Attention
from posenc.attention.window import with_window
from posenc.encoding.resolve import Hooks, hooks_of
from posenc.softmax.query_scale import QueryScale

__all__ = [
    "Attention",
    "AttentionContext",
    "AttentionMask",
    "Backend",
    "BackendName",
    "ContextParallel",
    "DeltaState",
    "GatedDeltaNet",
    "Hooks",
    "KVCache",
    "MaskMod",
    "OutputGate",
    "QueryScale",
    "attend",
    "build_context",
    "causal_mask",
    "choose_backend",
    "gated_delta_rule",
    "gated_delta_rule_recurrent",
    "hooks_of",
    "output_gate",
    "with_window",
]

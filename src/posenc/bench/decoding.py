"""What the decoding suites share: a stack of attention layers prefilled with a KV cache, and
one decoding step through it with one per-step context (as :class:`~posenc.models.DecoderLM`
builds it), the caches rewound so that every round sees the same length."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from posenc.attention import Attention, KVCache, build_context
from posenc.attention.cache import KeyForm

__all__ = ["prefilled_stack", "stack_step"]


def prefilled_stack(
    encoding: nn.Module | None,
    template: nn.Module,
    prompt: Tensor,
    *,
    heads: int,
    layers: int,
    keys: KeyForm = "auto",
) -> tuple[list[Attention], list[KVCache]]:
    """``layers`` attention layers sharing ``encoding``, with ``template``'s projections, each
    with a cache holding ``prompt``'s keys."""
    stack = [Attention(prompt.shape[-1], heads, pos=encoding) for _ in range(layers)]
    caches = [KVCache(keys=keys) for _ in range(layers)]
    for attn, cache in zip(stack, caches, strict=True):
        attn.load_state_dict(template.state_dict(), strict=False)
        with torch.no_grad():
            attn(prompt, cache=cache)
    return stack, caches


def stack_step(
    stack: list[Attention],
    caches: list[KVCache],
    step: Tensor,
    *,
    before: Callable[[], None] | None = None,
) -> Callable[[], None]:
    """One decoding step of the whole stack (``before`` runs first), the caches rewound to
    their prefilled length afterwards."""
    length = caches[0].length

    def run() -> None:
        if before is not None:
            before()
        context = build_context(
            batch=1, seq=1, device=step.device, causal=True, hooks=stack[0].hooks, cache=caches[0]
        )
        for attn, cache in zip(stack, caches, strict=True):
            attn(step, cache=cache, context=context)
        for cache in caches:
            cache.truncate(length)

    return run

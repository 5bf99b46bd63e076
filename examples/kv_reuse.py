"""Reusing a cached document at another position: re-rotating its keys (position-independent
KV reuse), in a tiny random-weight HF Llama patched with posenc's RoPE.

A document is prefilled once, at positions ``0 … n − 1``. To reuse its KV cache where it
sits at ``δ … δ + n − 1`` (after a system prompt, another document, a rolled window), every
layer's cached keys are rotated by ``δ``, since ``R(p + δ) = R(δ)·R(p)``
(:func:`posenc.rotary.rerotate`); values carry no position and stay.

(a) **Exact reuse.** The document alone, moved to ``δ``: equal to a fresh prefill of the
    document at ``δ …`` to float32 rounding, at every layer.
(b) **The RAG case.** The document cached alone, then placed after a prefix it never saw:
    layer 0's keys equal the fresh ones (a token's first-layer key reads only the token), but
    from layer 1 on each document token's hidden state differs (in the fresh prefill it
    attended to the prefix), so its keys and values do too, and no rotation can fix that.
    CacheBlend (Yao et al. 2024, https://arxiv.org/abs/2405.16444) recomputes the few tokens
    whose deeper states deviate most; re-rotation only removes the position error, which is
    what a reuse without it adds on top (printed as "not moved").

Offline, CPU, a few seconds. Run: ``python examples/kv_reuse.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicLayer

from posenc.integrations.hf import HFRotaryAdapter, patch_rotary
from posenc.rotary import RotaryEmbedding, rerotate

DOC, QUESTION, SHIFT, PREFIX = 48, 8, 100, 100


def tiny_llama(seed: int = 0) -> tuple[LlamaForCausalLM, RotaryEmbedding]:
    """A 4-layer random Llama (GQA, head_dim 16) patched with posenc's RoPE, and that rope."""
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    patch_rotary(model)
    adapter = model.model.rotary_emb
    assert isinstance(adapter, HFRotaryAdapter)
    return model, adapter.rope


def layers(cache: DynamicCache) -> list[DynamicLayer]:
    """The cache's layers (a DynamicCache of a Llama: one DynamicLayer each)."""
    found = [layer for layer in cache.layers if isinstance(layer, DynamicLayer)]
    assert len(found) == len(cache.layers)
    return found


def kv(cache: DynamicCache) -> list[tuple[Tensor, Tensor]]:
    """Every layer's cached keys and values ``(batch, kv_heads, seq, head_dim)``."""
    pairs = [(layer.keys, layer.values) for layer in layers(cache)]
    return [(k, v) for k, v in pairs if isinstance(k, Tensor) and isinstance(v, Tensor)]


def prefill(model: LlamaForCausalLM, ids: Tensor, first: int) -> DynamicCache:
    """A cache of ``ids`` at positions ``first …``."""
    cache = DynamicCache()
    positions = torch.arange(first, first + ids.shape[1])[None]
    model(ids, position_ids=positions, past_key_values=cache, use_cache=True)
    return cache


def move(cache: DynamicCache, delta: int, rope: RotaryEmbedding) -> DynamicCache:
    """Every layer's cached keys moved by ``delta`` (in place)."""
    for keys, _ in kv(cache):
        rerotate(keys, delta, rope, inplace=True)
    return cache


def after(prefix: DynamicCache, block: DynamicCache) -> DynamicCache:
    """``block``'s keys and values appended to ``prefix``'s, layer by layer (in place)."""
    for layer, (k, v), (k2, v2) in zip(layers(prefix), kv(prefix), kv(block), strict=True):
        layer.keys, layer.values = torch.cat([k, k2], dim=-2), torch.cat([v, v2], dim=-2)
    return prefix


def answer(model: LlamaForCausalLM, question: Tensor, cache: DynamicCache, first: int) -> Tensor:
    """The question's logits at positions ``first …`` after ``cache``."""
    positions = torch.arange(first, first + question.shape[1])[None]
    logits = model(question, position_ids=positions, past_key_values=cache).logits
    assert logits is not None
    return logits


def run(seed: int = 0) -> dict[str, object]:
    """Both experiments; returns the deviations printed by :func:`main`."""
    model, rope = tiny_llama(seed)
    generator = torch.Generator().manual_seed(seed + 1)
    doc, question, prefix = (
        torch.randint(0, 256, (1, n), generator=generator) for n in (DOC, QUESTION, PREFIX)
    )
    results: dict[str, object] = {}
    with torch.no_grad():
        # (a) the document alone, moved from 0 to SHIFT
        fresh = answer(model, torch.cat([doc, question], 1), DynamicCache(), SHIFT)[:, DOC:]
        moved = answer(model, question, move(prefill(model, doc, 0), SHIFT, rope), SHIFT + DOC)
        kept = answer(model, question, prefill(model, doc, 0), SHIFT + DOC)
        results["exact: max |Δlogits|"] = float((moved - fresh).abs().max())
        results["exact, not moved: max |Δlogits|"] = float((kept - fresh).abs().max())
        results["logit scale: max |logits|"] = float(fresh.abs().max())

        # (b) the document cached alone, reused after a prefix it never saw
        full = prefill(model, torch.cat([prefix, doc], 1), 0)
        reused = after(prefill(model, prefix, 0), move(prefill(model, doc, 0), PREFIX, rope))
        naive = after(prefill(model, prefix, 0), prefill(model, doc, 0))
        # the document's keys per layer against the fresh prefill's, relative to their size
        results["rag: key deviation per layer"] = [
            float((mine[:, :, PREFIX:] - k[:, :, PREFIX:]).abs().max() / k.abs().max())
            for (mine, _), (k, _) in zip(kv(reused), kv(full), strict=True)
        ]
        fresh = answer(model, question, full, PREFIX + DOC)
        for name, cache in (("rag", reused), ("rag, not moved", naive)):
            logits = answer(model, question, cache, PREFIX + DOC)
            results[f"{name}: max |Δlogits|"] = float((logits - fresh).abs().max())
    return results


def main() -> dict[str, object]:
    results = run()
    for name, value in results.items():
        shown = ", ".join(f"{v:.2e}" for v in value) if isinstance(value, list) else f"{value:.3g}"
        print(f"{name:40s} {shown}")
    return results


if __name__ == "__main__":
    main()

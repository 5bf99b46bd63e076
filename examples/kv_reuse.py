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
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from posenc.integrations.hf import patch_rotary
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
    model = patch_rotary(LlamaForCausalLM(config).eval())
    return model, model.model.rotary_emb.rope  # type: ignore[return-value]


def prefill(model: LlamaForCausalLM, ids: torch.Tensor, first: int) -> DynamicCache:
    """A cache of ``ids`` at positions ``first …``."""
    cache = DynamicCache()
    positions = torch.arange(first, first + ids.shape[1])[None]
    model(ids, position_ids=positions, past_key_values=cache, use_cache=True)
    return cache


def move(cache: DynamicCache, delta: int, rope: RotaryEmbedding) -> DynamicCache:
    """Every layer's cached keys moved by ``delta`` (in place)."""
    for layer in cache.layers:
        rerotate(layer.keys, delta, rope, inplace=True)
    return cache


def after(prefix: DynamicCache, block: DynamicCache) -> DynamicCache:
    """``block``'s keys and values appended to ``prefix``'s, layer by layer (in place)."""
    for mine, theirs in zip(prefix.layers, block.layers, strict=True):
        mine.keys = torch.cat([mine.keys, theirs.keys], dim=-2)
        mine.values = torch.cat([mine.values, theirs.values], dim=-2)
    return prefix


def answer(model: LlamaForCausalLM, question: torch.Tensor, cache: DynamicCache, first: int):
    """The question's logits at positions ``first …`` after ``cache``."""
    positions = torch.arange(first, first + question.shape[1])[None]
    return model(question, position_ids=positions, past_key_values=cache).logits


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
        fresh = model(
            torch.cat([doc, question], 1),
            position_ids=torch.arange(SHIFT, SHIFT + DOC + QUESTION)[None],
        ).logits[:, DOC:]
        moved = answer(model, question, move(prefill(model, doc, 0), SHIFT, rope), SHIFT + DOC)
        kept = answer(model, question, prefill(model, doc, 0), SHIFT + DOC)
        results["exact: max |Δlogits|"] = float((moved - fresh).abs().max())
        results["exact, not moved: max |Δlogits|"] = float((kept - fresh).abs().max())
        results["logit scale: max |logits|"] = float(fresh.abs().max())

        # (b) the document cached alone, reused after a prefix it never saw
        full = prefill(model, torch.cat([prefix, doc], 1), 0)
        fresh = answer(model, question, full, PREFIX + DOC)  # appends the question to full
        end = PREFIX + DOC
        reused = after(prefill(model, prefix, 0), move(prefill(model, doc, 0), PREFIX, rope))
        # key deviation of the document's tokens per layer, relative to the keys' size
        results["rag: key deviation per layer"] = [
            float(
                (a.keys[:, :, PREFIX:] - b.keys[:, :, PREFIX:end]).abs().max() / b.keys.abs().max()
            )
            for a, b in zip(reused.layers, full.layers, strict=True)
        ]
        results["rag: max |Δlogits|"] = float(
            (answer(model, question, reused, PREFIX + DOC) - fresh).abs().max()
        )
        naive = after(prefill(model, prefix, 0), prefill(model, doc, 0))
        results["rag, not moved: max |Δlogits|"] = float(
            (answer(model, question, naive, PREFIX + DOC) - fresh).abs().max()
        )
    return results


def main() -> dict[str, object]:
    results = run()
    for name, value in results.items():
        shown = ", ".join(f"{v:.2e}" for v in value) if isinstance(value, list) else f"{value:.3g}"
        print(f"{name:40s} {shown}")
    return results


if __name__ == "__main__":
    main()

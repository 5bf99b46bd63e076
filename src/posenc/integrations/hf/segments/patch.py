"""Patching an HF decoder for a segment method: :func:`patch_segments`, :func:`unpatch_segments`.

Finds the decoder's one shared rotary module and its attention layers, refuses what cannot be
served exactly (checked at patching, before anything changes), picks the method (the given
one, or the model's own RoPE as one segment) and installs the pieces of
:mod:`posenc.integrations.hf.segments.forward`. The registered functions are stateless
(per-model data lives on the patched modules), so registering again is a no-op and nothing
leaks when a model is unpatched.

This module imports without ``transformers``; the functions import it when called.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import check_int
from posenc.encoding.protocols import RotaryEncoding
from posenc.integrations.hf.config import rope_from_config
from posenc.integrations.hf.patch import HFRotaryAdapter
from posenc.integrations.hf.segments._common import STATE, SegmentState
from posenc.integrations.hf.segments.forward import (
    ATTENTION_NAME,
    IdentityRotary,
    check_cache,
    key_padding_mask,
    segment_attention,
)
from posenc.rotary.rope import RotaryEmbedding
from posenc.segments.base import Region, Segment, SegmentedRotary

__all__ = ["BACKENDS", "patch_segments", "unpatch_segments"]

#: ``attend``'s backends a patched model may use.
BACKENDS = ("auto", "sdpa", "chunked", "flex")
# Layer types (HF's config.layer_types) that hold no attention, or full causal attention.
_SERVED_LAYER_TYPES = frozenset(
    {"full_attention", "attention", "hybrid", "conv", "linear_attention", "mamba"}
)
# Families whose attention the structural checks below cannot tell apart (see docs/hf.md).
_REFUSED_MODEL_TYPES = {
    "doge": "its attention consumes a 4-D mask itself",
    "llama4": "its rotary is complex (freqs_cis), with chunked attention layers",
    "timesfm2_5": "it normalizes q and k with weights after the rotation",
}


class _PlainRotary(SegmentedRotary):
    """A rotary encoding as a one-segment method: every pair at its true positions.

    Routes "method off" through the segmented path, so that keys are read unrotated from the
    cache and rotated with the current frequencies (exact dynamic NTK under a cache).
    """

    def build_segments(self) -> tuple[Segment, ...]:
        return (Segment("all", Region()),)


def _find_rotary(model: nn.Module) -> tuple[nn.Module, str, nn.Module]:
    """(parent, attribute, module) of the decoder's single shared rotary module."""
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        inside = any(name.startswith(f"{outer}.") for outer, _ in found)  # patch_rotary's rope
        kinds = (HFRotaryAdapter, IdentityRotary)
        if not inside and (
            type(module).__name__.endswith("RotaryEmbedding") or isinstance(module, kinds)
        ):
            found.append((name, module))
    if len(found) != 1:
        raise ValueError(
            "model: patch_segments needs a decoder with exactly one shared rotary module "
            f"(Llama, Mistral, Qwen2, ...); found {[name for name, _ in found] or 'none'} "
            "(per-layer rotary modules and multimodal towers are not supported)"
        )
    name, module = found[0]
    parent_name, _, attr = name.rpartition(".")
    return model.get_submodule(parent_name), attr, module


def _layout(attention: nn.Module) -> str:
    """The model's rotary layout, from what its ``rotate_half`` does to ``1 … 8``."""
    rotate_half = getattr(sys.modules[type(attention).__module__], "rotate_half", None)
    x = torch.arange(1.0, 9.0)
    got = rotate_half(x) if callable(rotate_half) else None
    expected = {
        "half": torch.cat((-x[4:], x[:4])),
        "interleaved": torch.stack((-x[1::2], x[0::2]), dim=-1).flatten(),
    }
    for layout, rotated in expected.items():
        if isinstance(got, Tensor) and torch.equal(got, rotated):
            return layout
    raise ValueError(
        f"model: {type(attention).__name__} rotates with neither the half nor the interleaved "
        "convention (no usable rotate_half)"
    )


def _refusal(config: Any, attentions: list[nn.Module]) -> str | None:
    """Why the model cannot be served exactly, or None."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    model_type = getattr(config, "model_type", None)
    if model_type in _REFUSED_MODEL_TYPES:
        return f"{model_type} is not supported: {_REFUSED_MODEL_TYPES[model_type]}"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder models are not supported (causal decoders only)"
    for key in ("kv_lora_rank", "qk_rope_head_dim"):
        if getattr(config, key, None) is not None:
            return f"multi-head latent attention ({key}) is not supported"
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return "attention logit soft-capping (attn_logit_softcapping) is not supported"
    if "mrope_section" in (getattr(config, "rope_parameters", None) or {}):
        return "multimodal M-RoPE (mrope_section) is not supported"
    refused = sorted(set(get_layer_types_and_kwargs(config)[0]) - _SERVED_LAYER_TYPES)
    if refused:
        hint = (
            ": a sliding window would cut the keys a long-context method needs. Set "
            "config.sliding_window = None (Mistral, Mixtral, Starcoder2) or build the model "
            "with config.layer_types = ['full_attention'] * n (Qwen2, Gemma2, ...)"
        )
        return f"layer types {refused} are not supported (full attention or no attention only)" + (
            hint if any("sliding" in t for t in refused) else ""
        )
    if not attentions:
        return "no attention layers (modules named *Attention with a layer_idx)"
    for attention in attentions:
        name = f"{type(attention).__name__} (layer {attention.layer_idx})"
        if isinstance(getattr(attention, "sinks", None), Tensor):
            return f"{name} has attention-sink logits (sinks), which are not supported"
        if getattr(attention, "sliding_window", None) is not None:
            return f"{name} has sliding_window={attention.sliding_window}; use full attention"
        if not getattr(attention, "use_rope", True):
            return f"{name} has no RoPE (NoPE layers are not supported)"
    return None


def _method_for(
    method: nn.Module | None, config: Any, original: nn.Module, layout: str
) -> SegmentedRotary:
    """The segment method to run: the given one, or the model's own RoPE as one segment."""
    allowed = (
        "method must be a posenc SegmentedRotary (SelfExtend, DualChunk, ReRoPE, LMInfinite, "
        "AttentionSinks), a one-axis rotary encoding, or None"
    )
    if method is None:
        if isinstance(original, HFRotaryAdapter):  # patch_rotary's rope
            rope = original.rope
        else:
            try:
                rope = rope_from_config(config)
            except ValueError as err:
                raise ValueError(f"method=None reads the RoPE of model.config: {err}") from None
            factor = float(getattr(original, "attention_scaling", rope.attention_factor))
            if abs(factor - rope.attention_factor) > 1e-6 * factor:
                raise ValueError(
                    f"method=None: the config's attention factor {rope.attention_factor} is not "
                    f"the model's {factor}; pass the method explicitly"
                )
        if rope.layout != layout:
            rope = RotaryEmbedding(
                rope.head_dim,
                rotary_dim=rope.rotary_dim,
                base=rope.base,
                layout="interleaved",
                scaling=rope.scaling,
            )
        method = rope
    if isinstance(method, SegmentedRotary):
        return method
    if not isinstance(method, RotaryEncoding):
        raise ValueError(f"{allowed}; got {type(method).__name__}")
    try:
        return _PlainRotary(method)
    except ValueError as err:
        raise ValueError(f"{allowed}; {type(method).__name__}: {err}") from None


def _check_method(method: SegmentedRotary, head_dim: int, rotary_dim: int, layout: str) -> None:
    rotary = method.rotary
    if method.head_dim != head_dim:
        raise ValueError(f"method: head_dim {method.head_dim} != the model's head_dim {head_dim}")
    got = getattr(rotary, "rotary_dim", head_dim)
    if got != rotary_dim:
        raise ValueError(f"method: rotary_dim {got} != the {rotary_dim} channels the model rotates")
    got = getattr(rotary, "layout", "half")
    if got != layout:
        raise ValueError(
            f"method: layout {got!r} != the model's {layout!r} rotary layout; build the rotary "
            f"encoding with layout={layout!r}"
        )


def patch_segments(
    model: nn.Module, method: nn.Module | None = None, *, backend: str = "auto"
) -> nn.Module:
    """Run a training-free long-context method in every attention layer of an HF decoder.

    Each layer's attention becomes :func:`posenc.attention.attend` with ``method`` on the
    layer's unrotated q, all its cached (unrotated) k and v, their positions and the key
    padding (see the module docstring). With ``method=None`` the logits and greedy
    ``generate`` equal the unpatched model's (≤ 1e-5 in float32; tested on Llama, Mistral,
    Qwen2, Qwen3, Gemma, Gemma2, OLMo, OLMo2, Granite, Starcoder2, Mixtral, Phi-3, StableLM,
    GPT-NeoX, Cohere, GLM); with a method, every layer's output equals a float64 evaluation
    of the method's formula (tested). Undo with :func:`unpatch_segments`; do not reuse a KV
    cache across the two (the patched model caches unrotated keys).

    Refused with ValueError, at patching: sliding-window layers (set
    ``config.sliding_window = None`` or full-attention ``layer_types`` first), logit
    soft-capping, attention-sink logits (GPT-OSS), multimodal M-RoPE, per-layer rotary
    modules, multi-head latent attention, NoPE layers, encoder-decoders; at forward time:
    static or sliding-window caches, packed sequences, right-padded generation.

    Args:
        model: an HF causal LM (``LlamaForCausalLM``, ...) whose decoder owns one rotary
            module; patched in place.
        method: a posenc :class:`~posenc.segments.SegmentedRotary` (e.g.
            ``SelfExtend(rope_from_config(model.config), window=1024, group=8)``), a one-axis
            rotary encoding (used plainly, keys rotated on read), or None: the model's own
            RoPE (:func:`~posenc.integrations.hf.rope_from_config`). Its ``head_dim``,
            ``rotary_dim`` and layout must be the model's.
        backend: ``attend``'s backend: ``"auto"`` (default: one materialized call for short
            inputs, the O(block · L) chunked path for long ones), ``"sdpa"``, ``"chunked"``
            or ``"flex"``.

    Returns:
        ``model``, patched. Patching a patched model raises ValueError (unpatch first).

    Example::

        >>> rope = rope_from_config(model.config)  # doctest: +SKIP
        >>> patch_segments(model, SelfExtend(rope, window=1024, group=8))  # doctest: +SKIP
        >>> model.generate(input_ids, max_new_tokens=64)  # doctest: +SKIP
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    config = getattr(model, "config", None)
    if config is None or not callable(getattr(model, "set_attn_implementation", None)):
        raise ValueError(f"model must be an HF PreTrainedModel, got {type(model).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    parent, attr, original = _find_rotary(model)
    if isinstance(original, IdentityRotary):
        raise ValueError(
            "model is already patched by patch_segments; unpatch_segments(model) first"
        )
    attentions = [
        m
        for m in model.modules()
        if type(m).__name__.endswith("Attention") and hasattr(m, "layer_idx")
    ]
    reason = _refusal(config, attentions)
    if reason is not None:
        raise ValueError(f"model: {reason}")
    layout = _layout(attentions[0])
    head_dims = {getattr(a, "head_dim", None) or getattr(a, "head_size", None) for a in attentions}
    head_dim = next(iter(head_dims))
    if len(head_dims) != 1:
        raise ValueError(f"model: attention layers need one integer head_dim, got {head_dims}")
    head_dim = check_int("model: the attention layers' head_dim", head_dim, low=1)
    if isinstance(original, HFRotaryAdapter):
        rotary_dim = original.rope.rotary_dim
    else:
        inv_freq = getattr(original, "inv_freq", None)
        if not isinstance(inv_freq, Tensor):
            raise ValueError(
                f"model: its rotary module {type(original).__name__} has no inv_freq "
                "(per-layer-type rope tables are not supported)"
            )
        rotary_dim = 2 * inv_freq.numel()
    segmented = _method_for(method, config, original, layout)
    _check_method(segmented, head_dim, rotary_dim, layout)

    AttentionInterface.register(ATTENTION_NAME, segment_attention)  # idempotent, stateless
    AttentionMaskInterface.register(ATTENTION_NAME, key_padding_mask)
    previous = config._attn_implementation
    set_attention: Any = model.set_attn_implementation
    set_attention(ATTENTION_NAME)
    if config._attn_implementation != ATTENTION_NAME:  # HF only warns
        raise ValueError(
            f"model: {type(model).__name__} refused set_attn_implementation({ATTENTION_NAME!r}) "
            "(its attention does not dispatch through AttentionInterface)"
        )
    state = SegmentState(segmented, backend, original=original, previous_attention=previous)
    state.modules = [*attentions, parent]
    for module in state.modules:
        module.__dict__[STATE] = state
    state.hook = parent.register_forward_pre_hook(check_cache, with_kwargs=True)
    setattr(parent, attr, IdentityRotary(original, state))
    return model


def unpatch_segments(model: nn.Module) -> nn.Module:
    """Undo :func:`patch_segments` in place: HF's rotary module and the previous attention
    implementation come back (logits bit-identical to before patching). A model that is not
    patched raises ValueError. Caches built while patched hold unrotated keys: drop them."""
    parent, attr, module = _find_rotary(model)
    if not isinstance(module, IdentityRotary):
        if isinstance(module, HFRotaryAdapter):
            raise ValueError(
                "model is not patched by patch_segments; its rotary module is patch_rotary's "
                "(unpatch_rotary(model) undoes that)"
            )
        raise ValueError("model is not patched by patch_segments (nothing to undo)")
    state = module.state
    setattr(parent, attr, state.original)
    if state.hook is not None:
        state.hook.remove()
    for patched in state.modules:
        patched.__dict__.pop(STATE, None)
    set_attention: Any = model.set_attn_implementation
    set_attention(state.previous_attention)
    return model

"""Long context without retraining inside HF ``transformers`` models: :func:`patch_segments`.

A segment method (:mod:`posenc.segments`: Self-Extend, Dual Chunk Attention, ReRoPE,
LM-Infinite, attention sinks) positions each (query, key) pair by the segment it lies in, so
it needs the *unrotated* queries and keys and all the cached keys. :func:`patch_segments`
gives it that in an HF decoder in three moves, all public extension points of
``transformers`` 5.23:

* the decoder's shared rotary module (``model.model.rotary_emb``) is wrapped so that it
  returns identity tables (cos = 1, sin = 0): every layer's ``apply_rotary_pos_emb`` leaves q
  and k alone, bit for bit, and HF's ``DynamicCache`` stores unrotated keys;
* an attention function is registered with ``AttentionInterface`` under
  :data:`ATTENTION_NAME`: it runs :func:`posenc.attention.attend` with the method on the
  layer's q, all its cached k and v, their positions and the key padding;
* a mask builder is registered with ``AttentionMaskInterface`` under the same name: it hands
  the attention function the 2-D key padding (HF drops the padding for a name without one).

Positions: the queries' are the ``position_ids`` the rotary module is called with (once per
forward), the keys' follow from the cache (the last key is the last query):
``k_pos = q_pos[:, -1:] − (k_len − 1) + arange(k_len)``. With ``method=None`` the method is
plain RoPE from the config, so the patched model equals the unpatched one (≤ 1e-5, tested);
keys are rotated when read with the current frequencies, which makes dynamic NTK exact under
a KV cache (HF's cached keys keep stale rotations: transformers issue #25104).

The registered functions are stateless (per-model data lives on the patched modules), so
registering again is a no-op and nothing leaks when a model is unpatched. Design notes and
the family survey: ``docs/hf.md`` ("Long context without retraining in HF models").

The package: :mod:`~posenc.integrations.hf.segments.patch` (patching, refusals, the method),
:mod:`~posenc.integrations.hf.segments.forward` (what runs in each forward: the rotary stand-in,
the registered attention function and mask builder, the cache check). It imports without
``transformers``; the functions import it when called.
"""

from __future__ import annotations

from posenc.integrations.hf.segments.forward import (
    ATTENTION_NAME,
    key_padding_mask,
    segment_attention,
)
from posenc.integrations.hf.segments.patch import BACKENDS, patch_segments, unpatch_segments

__all__ = [
    "ATTENTION_NAME",
    "BACKENDS",
    "key_padding_mask",
    "patch_segments",
    "segment_attention",
    "unpatch_segments",
]

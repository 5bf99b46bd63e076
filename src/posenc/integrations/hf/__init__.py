"""HF ``transformers`` interop: RoPE configs to posenc scalings, and posenc RoPE inside HF models.

* :func:`frequencies_from_config`: ``(inv_freq, attention_factor)`` exactly as ``transformers``
  computes them for a config (object or ``config.json`` dict) and a sequence length.
* :func:`rope_from_config` / :func:`to_rope_parameters`: config ↔ :class:`RotaryEmbedding`;
  :func:`mrope_from_config`: an M-RoPE config → :class:`MultiAxisRotary`;
  :func:`attention_scale_from_config`: Ministral 3's ``llama_4_scaling_beta`` query scale.
* :func:`layer_schedule_from_config` / :func:`model_options_from_config`
  (:mod:`posenc.integrations.hf.layers`): per-layer NoPE, chunked local attention and query
  temperature (Llama-4's iRoPE, Qwen-1's log-n) as ``ModelConfig`` options.
* :func:`mla_rotary_from_config`, :func:`indexer_rotary_from_config`,
  :func:`deepseek_v4_rotary_from_config` (:mod:`posenc.integrations.hf.deepseek`): MLA's
  decoupled RoPE, the DSA indexer's, DeepSeek-V4's (with its value rotation).
* :func:`patch_rotary` / :func:`unpatch_rotary` (:mod:`posenc.integrations.hf.patch`): run
  posenc's RoPE in every text rotary module of an HF model, its sequence rotaries
  (:mod:`~posenc.integrations.hf.sequence`: conformers, CLVP) and, with ``vision=True``, its
  axial vision rotaries (:mod:`~posenc.integrations.hf.vision`: one convention per HF class)
  (``docs/hf.md`` lists the RoPE families of transformers 5.23.0 that give equal outputs, and
  why the others do not).

Nested per-layer-type ``rope_parameters`` are read with ``layer_type=``; which model types'
default RoPE ignores ``partial_rotary_factor`` comes from HF's code
(:mod:`posenc.integrations.hf.conventions`).

Both config forms are read: the current ``rope_parameters`` dict (``rope_type``, ``rope_theta``,
``partial_rotary_factor``, ...) and the legacy one (top-level ``rope_theta`` and
``partial_rotary_factor``, ``rope_scaling = {"type" | "rope_type": ..., ...}``). Validation is
stricter than HF's (which only warns): unknown keys, missing required keys and out-of-range
values raise :class:`ValueError` naming the key. Reference: ``transformers`` 5.23.0
``modeling_rope_utils.py`` (``ROPE_INIT_FUNCTIONS``, ``dynamic_rope_update``); see
``docs/hf.md`` for the accepted keys and the measured logit differences.

The package, one concept per module: ``rope_parameters`` reads and validates a config's RoPE
once; ``config`` converts it (the functions above); ``layers`` reads the per-layer attention;
``patch`` patches the rotary modules (``vision`` and ``sequence`` hold the conventions of the
non-text ones); ``segments`` runs segment methods in HF decoders
(:func:`~posenc.integrations.hf.segments.patch_segments`); ``conventions`` holds HF's
conventions as data. The conformance sweep over every RoPE family of
``transformers`` is tooling, outside the package: ``python -m tools.hf_sweep`` (``docs/hf.md``).

This package imports without ``transformers``; :func:`patch_rotary` and
:func:`unpatch_rotary` do not need it either (they only touch ``torch.nn`` modules).
"""

from __future__ import annotations

from posenc.integrations.hf.config import (
    attention_scale_from_config,
    frequencies_from_config,
    mrope_from_config,
    rope_from_config,
    to_rope_parameters,
)
from posenc.integrations.hf.conventions import DEFAULT_IGNORES_PARTIAL
from posenc.integrations.hf.deepseek import (
    deepseek_v4_rope_parameters,
    deepseek_v4_rope_type,
    deepseek_v4_rotary_from_config,
    indexer_rotary_from_config,
    mla_rotary_from_config,
)
from posenc.integrations.hf.layers import layer_schedule_from_config, model_options_from_config
from posenc.integrations.hf.patch import (
    HFRotaryAdapter,
    patch_rotary,
    rotary_modules,
    unpatch_rotary,
)
from posenc.integrations.hf.sequence import SequenceRotaryAdapter
from posenc.integrations.hf.vision import VisionConvention, VisionRotaryAdapter

__all__ = [
    "DEFAULT_IGNORES_PARTIAL",
    "HFRotaryAdapter",
    "SequenceRotaryAdapter",
    "VisionConvention",
    "VisionRotaryAdapter",
    "attention_scale_from_config",
    "deepseek_v4_rope_parameters",
    "deepseek_v4_rope_type",
    "deepseek_v4_rotary_from_config",
    "frequencies_from_config",
    "indexer_rotary_from_config",
    "layer_schedule_from_config",
    "mla_rotary_from_config",
    "model_options_from_config",
    "mrope_from_config",
    "patch_rotary",
    "rope_from_config",
    "rotary_modules",
    "to_rope_parameters",
    "unpatch_rotary",
]

"""The per-layer schedules production models ship, as :class:`~posenc.models.ModelConfig` options.

Each function returns the options (``nope_layers``, ``window``, ``query_scale``, ``mixers``)
of one published layout for a model of ``depth`` layers; :meth:`ModelConfig.layer_attention`
then says what each layer gets. Layer ``i`` counts from 0; "every ``k``-th" means layers
``k − 1, 2k − 1, …`` as HF builds them (``(i + 1) % k == 0``).

* :func:`nope_every`: a NoPE layer every ``k``-th layer, RoPE elsewhere. SmolLM3 (HF
  ``SmolLM3Config.no_rope_layer_interval = 4``) and Llama 4's iRoPE (with chunked attention
  on the RoPE layers, ``chunk_size``).
* :func:`rnope_swa`: RoPE with a sliding window on three layers of four, a global NoPE
  layer on the fourth. Cohere Command A / Command R7B (the layout of "Rope to Nope and Back
  Again: A New Hybrid Attention Strategy", Cohere 2025, https://arxiv.org/abs/2501.18795;
  HF ``Cohere2Config``: ``sliding_window_pattern = 4``, RoPE only on the
  ``sliding_attention`` layers).
* :func:`swan`: the same interleaving with SWAN-GPT's log-n query scaling on the global NoPE
  layers past the trained length (SWAN-GPT, NVIDIA 2025, https://arxiv.org/abs/2504.08719).
* :func:`hybrid_mixers`: linear : softmax token mixers at ``k − 1 : 1`` (3 : 1 with ``k =
  4``), the softmax layer last in each group. Qwen3-Next (Gated DeltaNet ×3, gated attention
  ×1) and Kimi Linear (https://arxiv.org/abs/2510.26692, KDA ×3, MLA ×1).

Example::

    >>> from posenc.models import ModelConfig
    >>> config = ModelConfig(depth=8, **rnope_swa(8, window=64))
    >>> [(a.encoded, a.window) for a in map(config.layer_attention, range(4))]
    [(True, 64), (True, 64), (True, 64), (False, None)]
    >>> hybrid_mixers(4)
    ('delta', 'delta', 'delta', 'softmax')
"""

from __future__ import annotations

from typing import Any

from posenc._validate import check_int, check_positive_int
from posenc.models.config import Mixer
from posenc.softmax.query_scale import QueryScale

__all__ = ["hybrid_mixers", "nope_every", "rnope_swa", "swan"]


def _every(depth: int, interval: int, name: str) -> tuple[int, ...]:
    depth = check_positive_int("depth", depth)
    interval = check_int(name, interval, low=1)
    return tuple(i for i in range(depth) if (i + 1) % interval == 0)


def nope_every(depth: int, interval: int = 4) -> dict[str, Any]:
    """``nope_layers``: every ``interval``-th layer NoPE (SmolLM3, Llama 4), ``interval ≥ 1``."""
    return {"nope_layers": _every(depth, interval, "interval")}


def rnope_swa(depth: int, window: int, interval: int = 4) -> dict[str, Any]:
    """``nope_layers`` every ``interval``-th layer (global attention, no encoding) and a
    sliding ``window`` on the others (with the model's encoding): RNoPE-SWA."""
    return {
        "nope_layers": _every(depth, interval, "interval"),
        "window": check_positive_int("window", window),
    }


def swan(
    depth: int, window: int, train_len: int | None = None, interval: int = 4
) -> dict[str, Any]:
    """:func:`rnope_swa` plus, with ``train_len``, ``QueryScale.logn(train_len)`` on the NoPE
    layers (``max(1, ln(p + 1) / ln L)``: 1 within the trained length, so training is
    unchanged and it acts at inference past it)."""
    options = rnope_swa(depth, window, interval)
    if train_len is not None:
        options["query_scale"] = QueryScale.logn(check_int("train_len", train_len, low=2))
    return options


def hybrid_mixers(depth: int, interval: int = 4, mixer: Mixer = "delta") -> tuple[Mixer, ...]:
    """``mixers``: softmax every ``interval``-th layer, ``mixer`` (``"delta"`` or
    ``"linear"``) elsewhere; ``interval = 4`` is the 3 : 1 hybrid."""
    if mixer not in ("delta", "linear"):
        raise ValueError(f"mixer must be 'delta' or 'linear', got {mixer!r}")
    softmax = _every(depth, interval, "interval")
    return tuple("softmax" if i in softmax else mixer for i in range(depth))

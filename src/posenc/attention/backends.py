"""Choosing an attention backend: a capability check at construction, ``auto`` per call.

=========  ===============================================================================
backend    serves
=========  ===============================================================================
sdpa       everything; the reference (materializes a bias, a contextual term, a scores
           reader's rows). Without logit terms SDPA's own kernels, no L×L mask.
flex       no logit terms, pointwise biases (``bias_at`` as ``score_mod``), score maps
           (soft-capping), sink logits (an LSE correction) and token-state biases (FoX,
           :mod:`posenc.token_state.token_bias`); forward only on the CPU;
           no attention dropout.
chunked    everything, in O(block · keys) memory, with autograd (activation
           checkpointing); the CPU flash-parts plans for ALiBi and T5-like biases.
           Token transforms (PaTH): ``sdpa`` and ``chunked`` run its blockwise attention
           (:mod:`posenc.attention.path`); ``flex`` and ``linear`` refuse it. Token
           phases (CARoPE) rotate q and k before the backend
           (:mod:`posenc.attention.token_phases`): ``sdpa``, ``chunked`` and ``flex``
           serve them; ``linear`` refuses them.
linear     linear attention (:mod:`posenc.attention.linear`): rotary encodings on the
           feature-mapped q and k (RoFormer §3.4.3), additive encodings, NoPE; causal order
           and key padding; no logit terms. Never chosen by ``auto``: it is another model.
auto       per call, see :func:`choose_backend`.
=========  ===============================================================================

Attention weights in place of the softmax (stick-breaking,
:mod:`posenc.softmax.stick_breaking`): ``sdpa`` all rows at once, ``chunked`` in blocks of
query rows; ``flex`` refuses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_positive_int
from posenc.attention.chunked import chunked_attention
from posenc.attention.context import AttentionContext
from posenc.attention.flex import flex_attention_backend, flex_available
from posenc.attention.local_chunks import chunk_by_chunk, serves
from posenc.attention.plans import explicit_applies
from posenc.attention.plans.base import tracks_grad
from posenc.attention.plans.stick_breaking import stick_breaking_attention
from posenc.attention.rows import compute_dtype
from posenc.attention.sdpa import sdpa_attention
from posenc.encoding.resolve import Hooks

__all__ = [
    "FEATURE_MAPS",
    "SMALL_SCORES",
    "Backend",
    "BackendName",
    "FeatureMap",
    "check_linear_serves",
    "choose_backend",
    "resolve_backend",
    "run_backend",
]

BackendName = Literal["auto", "sdpa", "flex", "chunked", "linear"]
NAMES: tuple[str, ...] = get_args(BackendName)

#: ``q_len · k_len`` up to which ``auto`` materializes logit terms with ``sdpa``: below it
#: one fused call beats blocks (see docs/performance.md).
SMALL_SCORES = 512 * 512


FeatureMap = Literal["elu", "relu"]
#: The ``linear`` backend's feature maps φ (:mod:`posenc.attention.linear`): ``"elu"`` is
#: ``elu(x) + 1`` (positive), ``"relu"`` is ``max(x, 0)``.
FEATURE_MAPS: tuple[str, ...] = get_args(FeatureMap)


@dataclass(frozen=True)
class Backend:
    """An attention backend and its options.

    Args:
        name: ``"auto"`` (default), ``"sdpa"``, ``"flex"``, ``"chunked"`` or ``"linear"``.
        block_size: ``chunked`` query rows per block (None: about 2^24 score elements);
            ``linear``: causal rows per block (None: 64).
        structured: ``chunked`` may take the CPU flash-parts plans (ALiBi, T5-like).
        compile: ``flex`` runs compiled FlexAttention (False: its eager reference, slow and
            materializing; for tests).
        feature_map: ``linear``'s φ, ``"elu"`` (``elu(x) + 1``, default) or ``"relu"``.
    """

    name: BackendName = "auto"
    block_size: int | None = None
    structured: bool = True
    compile: bool = True
    feature_map: FeatureMap = "elu"

    def __post_init__(self) -> None:
        if self.name not in NAMES:
            raise ValueError(
                f"backend must be one of {', '.join(map(repr, NAMES))}; got {self.name!r}"
            )
        if self.block_size is not None:
            block = check_positive_int("block_size", self.block_size)
            object.__setattr__(self, "block_size", block)
        if self.feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"feature_map must be one of {', '.join(map(repr, FEATURE_MAPS))}; "
                f"got {self.feature_map!r}"
            )

    def check(self, hooks: Hooks, *, dropout: float) -> None:
        """Raise ``ValueError`` at construction if this backend cannot serve ``hooks``."""
        if hooks.token_transform is not None and self.name in ("flex", "linear"):
            raise ValueError(
                f"backend {self.name!r} cannot serve {type(hooks.encoding).__name__}: its "
                "transforms act on the keys between each key and query (blockwise, "
                "posenc.token_state.path); use 'sdpa', 'chunked' or 'auto'"
            )
        if self.name == "linear":
            check_linear_serves(hooks, dropout=dropout)
            return
        if self.name != "flex":
            return
        if not flex_available():
            raise ValueError(
                "backend 'flex' needs FlexAttention (torch >= 2.5); "
                f"torch {torch.__version__} lacks it"
            )
        name = type(hooks.encoding).__name__
        if hooks.contextual:
            raise ValueError(
                f"backend 'flex' cannot serve {name}: its logit term reads q and k per pair"
                + (" and its value term needs the probabilities" if hooks.value_term else "")
                + "; use backend 'chunked', 'sdpa' or 'auto'"
            )
        if hooks.scores:
            raise ValueError(
                f"backend 'flex' cannot serve {name}: a scores reader needs whole rows of "
                "scores; use backend 'chunked', 'sdpa' or 'auto'"
            )
        if hooks.weights:
            raise ValueError(
                f"backend 'flex' cannot serve {name}: its weights replace the softmax and read "
                "every key between a pair; use backend 'chunked', 'sdpa' or 'auto'"
            )
        if dropout > 0.0:
            raise ValueError(
                "backend 'flex' has no attention dropout; use dropout=0 or another backend"
            )


def check_linear_serves(hooks: Hooks, *, dropout: float) -> None:
    """Raise ``ValueError`` when linear attention cannot serve ``hooks``: it never forms the
    (query, key) logits, so nothing can be added to them, and it has no probabilities to
    drop; a segment method positions each pair by region, which needs pairs."""
    name = type(hooks.encoding).__name__
    if hooks.token_phases:
        raise ValueError(
            f"backend 'linear' cannot serve {name}: it rotates q and k by phases of the "
            "layer's input (token_phases), which linear attention's feature-mapped path, "
            "rotated by positions, does not do; use 'sdpa', 'chunked', 'flex' or 'auto'"
        )
    if hooks.logit_terms:
        raise ValueError(
            f"backend 'linear' cannot serve {name}: linear attention never forms the "
            "(query, key) logits, so a bias, logit term, score map, sink, token-state bias or "
            "weights in place of the softmax cannot enter; use 'sdpa', 'chunked' or 'auto'"
        )
    if hooks.value_rotation:
        raise ValueError(
            f"backend 'linear' cannot serve {name}: its values carry the keys' rotation and "
            "its output is rotated back (ValueRotation), which linear attention's feature-mapped "
            "path does not do; use 'sdpa', 'chunked', 'flex' or 'auto'"
        )
    if hooks.segments or hooks.per_query_lengths:
        raise ValueError(
            f"backend 'linear' cannot serve {name}: it positions each (query, key) pair by "
            "where the pair lies, which needs the pairs; use 'sdpa', 'chunked' or 'auto'"
        )
    if dropout > 0.0:
        raise ValueError(
            "backend 'linear' has no attention probabilities to drop; use dropout=0 or a "
            "softmax backend"
        )


def resolve_backend(backend: str | Backend) -> Backend:
    """A :class:`Backend` from a name or an instance."""
    if isinstance(backend, Backend):
        return backend
    if not isinstance(backend, str) or backend not in NAMES:
        raise ValueError(
            f"backend must be one of {', '.join(map(repr, NAMES))} or a Backend; got {backend!r}"
        )
    return Backend(backend)  # type: ignore[arg-type]


def choose_backend(
    hooks: Hooks,
    q: Tensor,
    k: Tensor,
    *,
    dropout_p: float,
    context: AttentionContext | None = None,
) -> str:
    """What ``auto`` runs for this call.

    1. No logit terms (NoPE, additive, rotary): ``sdpa`` (its flash kernels).
    2. A bias of the distance alone (``depends_on_distance_only``, or FIRE's
       ``distance_only_up_to`` the call's last position) on the CPU without
       dropout, at default positions with causal order and padding only (``context``):
       ``chunked``, whose distance-table plan beats a materialized bias at every size (with
       a learnable bias, SDPA's math path; measured in the small LM).
    3. Training Shaw or Transformer-XL on the CPU without dropout, eagerly, causal,
       ``q_len == k_len``, at most
       :data:`~posenc.attention.plans.explicit.EXPLICIT_SCORES` pairs, default positions,
       no padding:
       ``chunked``, whose explicit plans (:mod:`posenc.attention.plans.explicit`) write the
       softmax out with a hand-written backward.
    4. ``q_len · k_len ≤`` :data:`SMALL_SCORES`: ``sdpa`` (one fused call over a small
       materialized bias beats blocks).
    5. A pointwise or token-state bias only, on CUDA, no dropout: ``flex``.
    6. Otherwise ``chunked`` (on the CPU its flash-parts plans where they apply).
    """
    if not hooks.logit_terms:
        return "sdpa"
    planned = context is not None and context.index_positions and not context.mask.has_pairwise
    if (
        planned
        and q.device.type == "cpu"
        and dropout_p == 0.0
        and hooks.distance_only(k.shape[-2] - 1)
    ):
        return "chunked"
    if (
        context is not None
        and q.device.type == "cpu"
        and dropout_p == 0.0
        and tracks_grad(hooks, q, k)
        and not torch.compiler.is_compiling()  # the plans run eagerly
        and explicit_applies(hooks, context, q, k)
    ):
        return "chunked"
    if q.shape[-2] * k.shape[-2] <= SMALL_SCORES:
        return "sdpa"
    if (
        (hooks.bias or hooks.token_state)
        and not (hooks.contextual or hooks.scores)
        and q.device.type == "cuda"
        and dropout_p == 0.0
        and flex_available()
    ):
        return "flex"
    return "chunked"


def run_backend(
    backend: Backend,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    hooks: Hooks,
    context: AttentionContext,
    scale: float,
    dropout_p: float,
) -> Tensor:
    """Attention of ``q`` over ``k``, ``v`` with ``backend`` (already capability-checked)."""
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    reach = context.mask.k_len if context.index_positions else None  # |q − k| < k_len
    hooks.prepare(q.device, compute_dtype(q.dtype), reach=reach)
    name: str = backend.name
    if name == "linear":
        raise ValueError("backend 'linear' runs in Attention (it maps q and k before rotation)")
    if name == "auto":
        name = choose_backend(hooks, q, k, dropout_p=dropout_p, context=context)
    if hooks.weights:  # stick-breaking: all rows at once (sdpa) or blocks of rows (chunked)
        rows = q.shape[-2] if name == "sdpa" else backend.block_size
        return stick_breaking_attention(
            q, k, v, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p, block_size=rows
        )
    if name == "sdpa" and not hooks.logit_terms and serves(context.mask):
        # chunked local attention (Llama-4): one SDPA call per chunk, O(L · C)
        return chunk_by_chunk(q, k, v, mask=context.mask, scale=scale, dropout_p=dropout_p)
    if name == "sdpa":
        return sdpa_attention(
            q, k, v, hooks=hooks, context=context, scale=scale, dropout_p=dropout_p
        )
    if name == "flex":
        return flex_attention_backend(
            q, k, v, hooks=hooks, context=context, scale=scale, compile=backend.compile
        )
    return chunked_attention(
        q,
        k,
        v,
        hooks=hooks,
        context=context,
        scale=scale,
        dropout_p=dropout_p,
        block_size=backend.block_size,
        structured=backend.structured,
    )

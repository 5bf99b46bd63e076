"""Explicit-softmax plans with a hand-written backward, for training learnable relative terms
on short causal sequences (Shaw, Transformer-XL, T5 and the other learnable biases of the
distance).

A learnable term inside the softmax needs the score gradients ``dS = P ⊙ (dP − D)`` with
``D_i = dO_i · O_i``, which no fused CPU kernel returns, so short training calls write the
softmax out. Under autograd that costs a saved temporary and a backward node per
elementwise step; here each call is one :class:`torch.autograd.Function` over blocks of
:data:`EXPLICIT_ROWS` query rows (causal rows ``[a, b)`` see keys ``[0, b)`` only, so the
blocks skip most future keys' products). It keeps each block's ``P`` and the output; its
backward forms each block's ``dS`` once, in place, and reduces it by table row in one pass.

One module per term:

===============  ==========================================================================
``shaw``         :data:`EXPLICIT_CLIPPED`: Shaw's clipped tables
                 (:class:`~posenc.encoding.kinds.ClippedRelative`), the band of the ``K`` keys
                 before each query read and added through strided views
``xl``           :data:`EXPLICIT_SINUSOID`: Transformer-XL's terms
                 (:class:`~posenc.encoding.kinds.SinusoidRelative`), the relative shift as a
                 strided view of one product per block
``distance``     :data:`EXPLICIT_DISTANCE`: a learnable bias of the distance alone (T5,
                 KERPLE, the dynamic bias, FIRE below its threshold), a slice of the
                 forward's distance table per block
``_common``      the constants, the blocks of rows, the term interface and the autograd
                 function that runs a term, :func:`explicit_applies`
===============  ==========================================================================

Served: causal attention with ``q_len == k_len``, default positions, no key padding, under
autograd, no rows per block asked for (``Backend(block_size=...)``), at most
:data:`EXPLICIT_SCORES` (query, key) pairs; longer sequences take the flash-parts and
block plans. Papers: see :mod:`posenc.contextual` and :mod:`posenc.bias`. Tested against
the ``sdpa`` backend's materialized reference (values and gradients) and by ``gradcheck``
in float64.
"""

from __future__ import annotations

from posenc.attention.plans.explicit._common import (
    EXPLICIT_ROWS,
    EXPLICIT_SCORES,
    explicit_applies,
)
from posenc.attention.plans.explicit.distance import EXPLICIT_DISTANCE, distance_causal_attention
from posenc.attention.plans.explicit.shaw import (
    EXPLICIT_CLIPPED,
    band_add_,
    band_read,
    shaw_causal_attention,
)
from posenc.attention.plans.explicit.xl import EXPLICIT_SINUSOID, xl_causal_attention

__all__ = [
    "EXPLICIT_CLIPPED",
    "EXPLICIT_DISTANCE",
    "EXPLICIT_ROWS",
    "EXPLICIT_SCORES",
    "EXPLICIT_SINUSOID",
    "band_add_",
    "band_read",
    "distance_causal_attention",
    "explicit_applies",
    "shaw_causal_attention",
    "xl_causal_attention",
]

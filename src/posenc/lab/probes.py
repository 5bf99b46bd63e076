"""Attention measurements of a trained run, recorded as columns of its result rows.

:func:`first_token_mass_fields` gives a decoder LM's first-token attention mass (the
"attention sink", :func:`posenc.models.first_token_attention_mass`): the mean attention
probability on key 0 over the softmax layers, heads and queries ``i ≥ 1``,

.. math::

    m = \\frac{1}{N_\\ell H B (L - 1)}
        \\sum_{\\ell, h, b} \\sum_{i=1}^{L-1} p^{(\\ell, h)}_{b, i, 0},

the quantity gated attention (Qiu et al. 2025, https://arxiv.org/abs/2505.06708, §4.3)
reports falling from 46.7 % to 4.8 % with its sigmoid output gate. A row carries ``m``
(``first_token_mass``) and its largest layer mean (``first_token_mass_max``, the most
sink-bound layer); both are ``None`` for a model the probe cannot read (no softmax layer, or
an encoding that rotates the values).

Example::

    >>> from posenc.models import DecoderLM, ModelConfig
    >>> model = DecoderLM(ModelConfig(vocab_size=16, dim=16, depth=2, num_heads=2))
    >>> sorted(first_token_mass_fields(model, torch.randint(0, 16, (2, 8))))
    ['first_token_mass', 'first_token_mass_max']
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.attention import Attention
from posenc.models import DecoderLM, first_token_attention_mass

__all__ = ["FIRST_TOKEN_COLUMNS", "first_token_mass_fields"]

#: The columns :func:`first_token_mass_fields` adds to a row.
FIRST_TOKEN_COLUMNS = ("first_token_mass", "first_token_mass_max")


def first_token_mass_fields(model: DecoderLM, tokens: Tensor) -> dict[str, float | None]:
    """``{"first_token_mass": m, "first_token_mass_max": max over layers}`` of ``model`` on
    ``tokens`` (see the module), in ``[0, 1]``; ``None`` values when no layer can be read.

    Args:
        model: a trained :class:`~posenc.models.DecoderLM` (left in its train/eval mode).
        tokens: ``(batch, seq)`` token ids, ``seq ≥ 2``, moved to the model's device.
    """
    if not _readable(model):
        return dict.fromkeys(FIRST_TOKEN_COLUMNS)
    device = next(model.parameters()).device
    mass = first_token_attention_mass(model, tokens.to(device=device, dtype=torch.long))
    return {
        "first_token_mass": float(mass.mean()),
        "first_token_mass_max": float(mass.mean(dim=1).max()),
    }


def _readable(model: DecoderLM) -> bool:
    """Whether ``model`` has a softmax attention layer and none rotating its values (whose
    output is not ``Σ p v``, so the probe cannot read its probabilities)."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    softmax = [attn for attn in layers if attn.backend.name != "linear"]
    return bool(softmax) and all(attn.hooks.value_rotation is None for attn in softmax)

"""Measurements of a trained model's attention: the first-token mass (the "attention sink").

Gated attention (Qiu et al. 2025, https://arxiv.org/abs/2505.06708, §4.3) reports the mean
attention probability on the first token falling from 46.7 % to 4.8 % with its output gate;
:func:`first_token_attention_mass` measures the same quantity on a
:class:`~posenc.models.DecoderLM`:

.. math::

    m_{\\ell, h} = \\frac{1}{B (L - 1)} \\sum_b \\sum_{i = 1}^{L - 1} p^{(\\ell, h)}_{b, i, 0}

over the softmax layers ``ℓ`` and heads ``h``, queries ``i ≥ 1`` (query 0 sees only key 0).
Each probability is read exactly, whatever the encoding and backend: the layer is run a
second time on its own input with the values replaced by the indicator of key 0 (``v_j =
e_1`` for ``j = 0``, else 0), so its per-head output's first channel is ``Σ_j p_{ij} v_j =
p_{i0}``; the model's own forward is unchanged.

Example::

    >>> from posenc.models import DecoderLM, ModelConfig
    >>> model = DecoderLM(ModelConfig(vocab_size=16, dim=16, depth=2, num_heads=2))
    >>> first_token_attention_mass(model, torch.randint(0, 16, (1, 8))).shape
    torch.Size([2, 2])
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.attention import Attention

__all__ = ["first_token_attention_mass"]


def first_token_attention_mass(model: nn.Module, tokens: Tensor) -> Tensor:
    """Mean attention probability on key 0, per softmax layer and head (see the module).

    Args:
        model: a :class:`~posenc.models.DecoderLM` (its ``trunk.blocks``); linear and
            delta-rule layers are skipped.
        tokens: ``(batch, seq)`` token ids, ``seq ≥ 2``, no padding.

    Returns:
        ``(softmax layers, heads)`` float64, in layer order; ``.mean()`` is the paper's
        headline number.

    Raises:
        ValueError: naming ``model`` (no softmax layer; an encoding that rotates values,
            whose outputs are not ``Σ p v``) or ``tokens`` (fewer than 2 per row).
    """
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.shape[1] < 2:
        got = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be (batch, seq) with seq >= 2; got {got}")
    trunk: Any = getattr(model, "trunk", None)
    blocks = [] if trunk is None else list(trunk.blocks)
    layers = [
        block.attn
        for block in blocks
        if isinstance(block.attn, Attention) and block.attn.backend.name != "linear"
    ]
    if not layers:
        raise ValueError("model must be a DecoderLM with at least one softmax attention layer")
    for attn in layers:
        if attn.hooks.value_rotation is not None:
            raise ValueError(
                f"model: {attn.hooks.name} rotates the values, so a layer's output is not "
                "Σ p v; its first-token mass cannot be read this way"
            )
    found: list[Tensor] = []
    handles = [attn.register_forward_hook(_probe(attn, found), with_kwargs=True) for attn in layers]
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        model.train(training)
        for handle in handles:
            handle.remove()
    return torch.stack(found)


def _probe(attn: Attention, found: list[Tensor]) -> Any:
    """A forward hook on ``attn`` that re-runs it with key 0's indicator as values and
    appends the mean mass per head to ``found``."""
    running = False

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        nonlocal running
        if running:
            return None
        captured: list[Tensor] = []

        def indicator(_: nn.Module, __: Any, v: Tensor) -> Tensor:
            ones = torch.zeros_like(v).view(*v.shape[:2], attn.num_kv_heads, attn.head_dim)
            ones[:, 0, :, 0] = 1.0
            return ones.view_as(v)

        def before_gate(_: nn.Module, inputs: tuple[Any, ...]) -> None:
            captured.append(inputs[0])  # (batch, heads, seq, head_dim)

        def before_out(_: nn.Module, inputs: tuple[Any, ...]) -> None:
            out = inputs[0]  # (batch, seq, heads · head_dim)
            heads = out.view(*out.shape[:2], attn.num_heads, attn.head_dim).transpose(1, 2)
            captured.append(heads)

        hooks = [attn.v_proj.register_forward_hook(indicator)]
        if attn.gate is not None:
            hooks.append(attn.gate.register_forward_pre_hook(before_gate))
        else:
            hooks.append(attn.out_proj.register_forward_pre_hook(before_out))
        running = True
        try:
            module(*args, **kwargs)
        finally:
            running = False
            for handle in hooks:
                handle.remove()
        mass = captured[0][..., 1:, 0]  # (batch, heads, seq - 1): p(key 0) of queries ≥ 1
        found.append(mass.double().mean(dim=(0, 2)))
        return None

    return hook

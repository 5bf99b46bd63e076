"""The foundation every positional encoding stands on.

:class:`PositionalEncoding` is the base of every encoding: what it declares (how many
position axes it reads, whether layers share it, whether it is defined for causal attention
only) and the typed defaults attention and the model call on any encoding. Where an encoding
acts is said by the protocols it derives from (:mod:`posenc.encoding.protocols`): attention
resolves an encoding once into a :class:`~posenc.encoding.resolve.Hooks` and never probes it
for methods (docs/architecture.md).

State and initialization (the ``torch.nn`` convention): an encoding keeps its parameters as
``nn.Parameter`` and implements ``reset_parameters()``, which draws exactly what its
constructor draws (so a seed gives the same encoding either way); constants that follow from
the constructor's arguments (RoPE's frequencies, ALiBi's slopes, a Fourier matrix) are never
buffers: they are built in float64 on the CPU and memoised per device outside
``state_dict`` and ``Module._apply``, so ``model.to(torch.bfloat16)`` cannot round them and a
model built on the ``meta`` device and materialized with ``to_empty`` has nothing to restore
but its parameters (``model.reset_parameters()`` or ``load_state_dict``). Learnable
frequencies (RoPE-Mixed, complex-order embeddings) are parameters: a dtype cast rounds them as
it rounds every weight.

Hot-path methods do no value checks: inputs are validated once, at the public boundary (the
model, :class:`~posenc.attention.Attention`, an encoding's own ``forward``). Shapes follow
:func:`torch.nn.functional.scaled_dot_product_attention`: q, k, v are ``(batch, heads, seq,
head_dim)``; positions ``(seq,)`` or ``(batch, seq)``, or with a leading axis dimension for
encodings with ``num_axes > 1``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn.utils import skip_init

__all__ = ["EncodingWrapper", "NoPE", "PositionalEncoding", "empty_linear", "state_device"]


class PositionalEncoding(nn.Module):
    """Base of every encoding: how many position axes it reads, whether layers share it and
    whether it is defined for causal attention only."""

    #: Position axes the encoding reads: 1 gives positions ``(seq,)`` / ``(batch, seq)``,
    #: ``n > 1`` gives ``(n, seq)`` / ``(n, batch, seq)`` (M-RoPE's t, h, w).
    num_axes: int = 1
    #: True when the method is defined for causal (decoder) attention only (xPos's decay
    #: grows for keys after the query; CoPE counts gates over earlier keys; the segment
    #: methods): bidirectional attention refuses it (``ValueError`` naming ``pos``).
    causal_only: ClassVar[bool] = False
    #: True when one instance serves every layer (T5's table; parameter-free encodings, whose
    #: per-forward tables are then built once for the whole model).
    shared_across_layers: ClassVar[bool] = False

    def logit_scale(self, head_dim: int) -> float:
        """The scale of ``q · k`` in the logits: ``head_dim ** -0.5`` unless the method has its
        own (DeBERTa's ``1 / sqrt(3 · head_dim)``)."""
        return float(head_dim) ** -0.5

    def validate_positions(self, positions: Tensor, name: str) -> None:
        """The method's own value checks of ``positions`` (whole numbers, table ranges),
        raising ``ValueError`` naming ``name``; run once per forward at the public boundary
        (none by default)."""

    def bind_projections(self, q_proj: nn.Linear, k_proj: nn.Linear) -> None:
        """Called by :class:`~posenc.attention.Attention` with the layer's q and k projections
        at construction, for a method that applies them to its own table (DeBERTa's shared
        position keys); the encoding keeps references and never registers them. Nothing
        by default."""

    def reset_parameters(self) -> None:
        """Re-draw the parameters exactly as the constructor draws them (nothing for a
        parameter-free encoding)."""

    def new_layer(self) -> PositionalEncoding | None:
        """The next layer's encoding, for a method whose layers share some of their parts
        (DeBERTa's relative table); None (the default) lets the model build each layer's
        encoding afresh. Not called when :attr:`shared_across_layers`."""
        return None


class NoPE(PositionalEncoding):
    """No positional encoding (Kazemnejad et al. 2023, https://arxiv.org/abs/2305.19466).

    Only meaningful with a causal mask: bidirectional attention without positions is
    permutation-equivariant.
    """

    shared_across_layers: ClassVar[bool] = True


class EncodingWrapper(PositionalEncoding):
    """An encoding holding another as ``self.encoding``: it acts where the held one acts
    (:func:`~posenc.encoding.resolve.hooks_of` resolves both), plus wherever its own classes
    say (soft-capping, learned sinks, randomized positions).

    What the held encoding declares (position axes, causal only, sharing) and its typed
    defaults (logit scale, position checks, bound projections) are the held one's. Other
    attribute lookups (``num_heads``, ``head_dim`` …) fall back to the held encoding too,
    after this module's own parameters, buffers and submodules.
    """

    encoding: PositionalEncoding

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or name == "encoding":
                raise
            return getattr(self._modules["encoding"], name)

    @property
    def num_axes(self) -> int:  # type: ignore[override]
        return self.encoding.num_axes

    @property
    def causal_only(self) -> bool:  # type: ignore[override]
        return self.encoding.causal_only

    @property
    def shared_across_layers(self) -> bool:  # type: ignore[override]
        """True when the held encoding is shared and this wrapper has no parameters of its
        own (a wrapper with parameters says False)."""
        return self.encoding.shared_across_layers

    def logit_scale(self, head_dim: int) -> float:
        return self.encoding.logit_scale(head_dim)

    def validate_positions(self, positions: Tensor, name: str) -> None:
        self.encoding.validate_positions(positions, name)

    def bind_projections(self, q_proj: nn.Linear, k_proj: nn.Linear) -> None:
        self.encoding.bind_projections(q_proj, k_proj)


def state_device(module: nn.Module) -> torch.device | None:
    """The device of ``module``'s first parameter or buffer; None when it holds none (then
    inputs may live anywhere)."""
    for parameter in module.parameters():
        return parameter.device
    for buffer in module.buffers():
        return buffer.device
    return None


def empty_linear(
    in_features: int,
    out_features: int,
    *,
    bias: bool = True,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Linear:
    """An ``nn.Linear`` whose parameters are allocated, not drawn: its owner's
    ``reset_parameters`` draws them, so that the constructor draws exactly what
    ``reset_parameters`` draws (a ``meta``-device build then ``reset_parameters`` gives the
    module a normal build gives, seed for seed)."""
    where = torch.get_default_device() if device is None else device
    return skip_init(nn.Linear, in_features, out_features, bias=bias, device=where, dtype=dtype)

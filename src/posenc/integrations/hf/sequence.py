"""posenc's RoPE in place of HF's sequence rotaries: ``forward(hidden_states)`` → positions 0…seq−1.

Four HF classes predate the ``(x, position_ids)`` contract: the conformers' rotary
(``Wav2Vec2ConformerRotaryPositionalEmbedding``, ``Wav2Vec2BertRotaryPositionalEmbedding``,
``SeamlessM4TConformerRotaryPositionalEmbedding``) and CLVP's text encoder's
(``ClvpRotaryPositionalEmbedding``). Each reads only the length of ``hidden_states (batch, seq,
…)`` and returns the tables of positions ``m = 0 … seq − 1`` of plain RoPE (RoFormer, Su et al.
2021, https://arxiv.org/abs/2104.09864)

.. math:: φ_{m,i} = m · θ_i, \\qquad θ_i = b^{-2i/d}

in one of two formats (:data:`SequenceTable`): the conformers ``stack([cos, sin])`` of
``cat(φ, φ)``, shape ``(2, seq, 1, 1, d)`` in ``hidden_states``' dtype; CLVP the phases
``cat(φ, φ)`` themselves, shape ``(1, seq, d)`` in float32 (its attention takes their cos and
sin, on the first ``d`` channels of q, k and v). :class:`SequenceRotaryAdapter` computes them
from posenc's float64 frequencies (rounded once); :func:`sequence_adapter` checks it against
one call of HF's module before it replaces anything. Reference: ``transformers`` 5.23.0;
parity tests in ``tests/integrations/hf/test_sequence.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from posenc.rotary.rope import RotaryEmbedding

__all__ = [
    "SEQUENCE_CONVENTIONS",
    "SequenceConvention",
    "SequenceRotaryAdapter",
    "is_sequence_rotary",
    "sequence_adapter",
]

#: ``"stacked"``: ``stack([cos, sin])`` ``(2, seq, 1, 1, d)`` in the input's dtype;
#: ``"phases"``: ``φ`` itself, ``(1, seq, d)`` float32.
SequenceTable = Literal["stacked", "phases"]


@dataclass(frozen=True)
class SequenceConvention:
    """One HF sequence rotary class: its table format and where its base comes from.

    Args:
        table: :data:`SequenceTable`.
        base: HF's constant base (CLVP: 10000), or ``None``: the model config's
            ``rotary_embedding_base``.
    """

    table: SequenceTable
    base: float | None = None


_CONFORMER = SequenceConvention("stacked")

#: HF class name → its convention (transformers 5.23.0).
SEQUENCE_CONVENTIONS: dict[str, SequenceConvention] = {
    "Wav2Vec2ConformerRotaryPositionalEmbedding": _CONFORMER,
    "Wav2Vec2BertRotaryPositionalEmbedding": _CONFORMER,
    "SeamlessM4TConformerRotaryPositionalEmbedding": _CONFORMER,
    "ClvpRotaryPositionalEmbedding": SequenceConvention("phases", base=10000.0),
}


def is_sequence_rotary(module: nn.Module) -> bool:
    """Whether ``module`` is an HF sequence rotary with a convention in
    :data:`SEQUENCE_CONVENTIONS` (or already a :class:`SequenceRotaryAdapter`)."""
    return (
        isinstance(module, SequenceRotaryAdapter) or type(module).__name__ in SEQUENCE_CONVENTIONS
    )


class SequenceRotaryAdapter(nn.Module):
    """HF-style sequence rotary backed by posenc: ``forward(hidden_states)`` → the tables of
    positions ``0 … seq − 1`` in ``convention``'s format (see the module).

    HF's persistent ``inv_freq`` buffer (the conformers save it in checkpoints) is kept under
    the same name, unused, so that ``state_dict`` keys do not change; the frequencies come from
    posenc (float64).

    Args:
        rope: a half-layout :class:`~posenc.rotary.RotaryEmbedding` of HF's width and base.
        convention: the HF class's :class:`SequenceConvention`.
        original: the HF module it replaces, kept (unregistered) for ``unpatch_rotary``.

    Shape:
        - hidden_states: ``(batch, seq, …)``; only its length, dtype and device are read.
        - Output: ``(2, seq, 1, 1, d)`` (``"stacked"``) or ``(1, seq, d)`` (``"phases"``).
    """

    original: nn.Module | None

    def __init__(
        self,
        rope: RotaryEmbedding,
        convention: SequenceConvention,
        original: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if rope.layout != "half":
            raise ValueError(f"rope.layout must be 'half' (HF's cat(φ, φ)), got {rope.layout!r}")
        self.rope = rope
        self.convention = convention
        self.__dict__["original"] = original
        buffer = getattr(original, "inv_freq", None)
        persistent = original is not None and "inv_freq" not in original._non_persistent_buffers_set
        if isinstance(buffer, Tensor) and persistent:
            # a checkpoint key of HF's module: kept so that state_dict() is unchanged
            self.register_buffer("inv_freq", buffer.detach().clone())

    @torch.no_grad()
    def forward(self, hidden_states: Tensor) -> Tensor:
        device = hidden_states.device
        positions = torch.arange(hidden_states.shape[1], device=device)
        if self.convention.table == "phases":
            phases = positions.double()[:, None] * self.rope.inv_freq(device)  # (seq, d / 2)
            return torch.cat((phases, phases), dim=-1)[None].float()
        cos, sin = self.rope.cos_sin(positions, torch.float64)  # (seq, d), cat(c, c)
        return torch.stack([cos, sin])[:, :, None, None, :].to(hidden_states.dtype)

    def extra_repr(self) -> str:
        return f"convention={self.convention}"


def sequence_adapter(module: nn.Module, config: Any) -> SequenceRotaryAdapter:
    """posenc's adapter for one HF sequence rotary module (validated against one call of it).

    The width is HF's ``inv_freq`` buffer's (``d = 2 · numel``); the base is the convention's
    constant or ``config.rotary_embedding_base`` (``config``: the model's config). Raises
    ``ValueError`` for a class without a convention, a config without the base, or tables that
    differ from HF's at positions 0…7 (by more than float32 rounding: relative 1e-5).
    """
    original = module.original if isinstance(module, SequenceRotaryAdapter) else module
    name = type(original).__name__
    if original is None or name not in SEQUENCE_CONVENTIONS:
        raise ValueError(f"{name} has no sequence rotary convention: not patched")
    convention = SEQUENCE_CONVENTIONS[name]
    inv_freq = original.inv_freq
    if not isinstance(inv_freq, Tensor):
        raise ValueError(f"{name} has no inv_freq buffer: not patched")
    base = convention.base
    if base is None:
        base = getattr(config, "rotary_embedding_base", None)
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base <= 0:
            raise ValueError(
                f"{name} reads the config's rotary_embedding_base, got {base!r}: not patched"
            )
    width = 2 * inv_freq.numel()
    rope = RotaryEmbedding(width, base=float(base))
    adapter = SequenceRotaryAdapter(rope, convention, original)
    probe = torch.zeros(1, 8, width, device=inv_freq.device)
    cache = {k: v for k, v in vars(original).items() if k.startswith("cached_")}
    expected, got = original(probe), adapter(probe)
    vars(original).update(cache)  # HF caches by length alone: leave its cache as it was
    if expected.shape != got.shape or not torch.allclose(
        got.double(), expected.double(), rtol=1e-5, atol=1e-5
    ):
        raise ValueError(
            f"{name}'s tables differ from its convention {convention} (shape "
            f"{tuple(expected.shape)} vs {tuple(got.shape)}): not patched"
        )
    return adapter

"""Toy encodings for hooks no shipped method uses yet: a whole-row scores reader, 3 axes."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.encoding.protocols import RotaryEncoding, ScoresReader
from posenc.rotary import apply_rotary, rope_inv_freq


class CumulativeGate(ScoresReader):
    """A scores reader in the spirit of CoPE: adds ``w_h`` times the number of (gated)
    visible keys at or after each key, so it needs complete rows and the visibility mask."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.weight = nn.Parameter(torch.linspace(-0.5, 0.5, num_heads))

    def transform_scores(
        self,
        scores: Tensor,
        *,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        allowed: Tensor | None,
    ) -> Tensor:
        gates = torch.sigmoid(scores)
        if allowed is not None:
            gates = gates * allowed
        after = gates.flip(-1).cumsum(-1).flip(-1)  # visible keys at or after each key
        return scores + self.weight.view(-1, 1, 1).to(scores.dtype) * after


class ThreeAxisRotary(RotaryEncoding):
    """Rotary encoding whose pairs read three position axes (an M-RoPE-like toy).

    Pair ``i`` of the ``head_dim / 2`` pairs reads axis ``i % 3``; positions are ``(3, seq)``
    or ``(3, batch, seq)``.
    """

    num_axes = 3

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.inv_freq = rope_inv_freq(head_dim, 100.0)  # (head_dim / 2,) float64

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> Any:
        pairs = self.head_dim // 2
        axis = torch.arange(pairs) % 3
        chosen = positions.to(torch.float64)[axis]  # (pairs, [batch,] seq)
        angles = chosen.movedim(0, -1) * self.inv_freq  # ([batch,] seq, pairs)
        table = torch.float64 if dtype == torch.float64 else torch.float32
        cos, sin = angles.cos().to(table), angles.sin().to(table)
        return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_tables: Any, k_tables: Any, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        return apply_rotary(q, *q_tables), apply_rotary(k, *k_tables)

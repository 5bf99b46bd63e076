"""Every pointwise bias refuses bad positions in ``bias(q_pos, k_pos)``, naming the argument.

The cases every bias shares (non-finite, rank > 2, batch sizes that differ), then each
bias's own (whole-number positions for bucketed tables, a learned range).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from posenc.bias import AlibiBias, T5RelativeBias
from posenc.bias.dynamic import DynamicPositionBias
from posenc.bias.fire import FireBias
from posenc.bias.kerple import KerpleBias
from posenc.bias.sandwich import SandwichBias

BIASES: dict[str, Callable[[], nn.Module]] = {
    "alibi": lambda: AlibiBias(2),
    "t5": lambda: T5RelativeBias(2),
    "kerple": lambda: KerpleBias(2),
    "sandwich": lambda: SandwichBias(2, 8),
    "fire": lambda: FireBias(2),
    "dynamic": lambda: DynamicPositionBias(2, max_seq_len=8),
}

COMMON: list[tuple[Tensor, Tensor, str]] = [
    (torch.tensor([0.0, float("nan")]), torch.arange(3), "q_pos"),
    (torch.arange(2), torch.tensor([0.0, float("inf")]), "k_pos"),
    (torch.zeros(2, 3, 4, dtype=torch.long), torch.arange(3), "q_pos"),  # rank 3
    (torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long), "q_pos"),
]
WHOLE: list[tuple[Tensor, Tensor, str]] = [  # a table indexed by whole distances
    (torch.tensor([0.5, 1.0]), torch.arange(3), "q_pos"),
    (torch.arange(2), torch.tensor([0.0, 1.25]), "k_pos"),
]
OWN: dict[str, list[tuple[Tensor, Tensor, str]]] = {
    "alibi": [(torch.tensor([True, False]), torch.arange(3), "q_pos")],
    "t5": WHOLE,
    "dynamic": [
        *WHOLE,
        (torch.tensor([3, 8]), torch.arange(3), "q_pos"),  # beyond max_seq_len = 8
        (torch.arange(2), torch.tensor([-1, 0, 1]), "k_pos"),
    ],
}
CASES = [
    pytest.param(name, *case, id=f"{name}-{index}")
    for name in BIASES
    for index, case in enumerate(COMMON + OWN.get(name, []))
]


@pytest.mark.parametrize(("bias", "q_pos", "k_pos", "name"), CASES)
def test_bad_positions(bias: str, q_pos: Tensor, k_pos: Tensor, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        BIASES[bias]().bias(q_pos, k_pos)

"""Position interpolation (PI): every frequency divided by the factor.

Paper: Chen et al. 2023, https://arxiv.org/abs/2306.15595. Reproduces HF transformers 5.23
``ROPE_INIT_FUNCTIONS["linear"]`` in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from posenc._validate import check_positive_float
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.scaling._common import check_seq_len, set_field
from posenc.rotary.scaling.base import Scaling

__all__ = ["Linear"]


@dataclass(frozen=True)
class Linear(Scaling):
    """Position interpolation (PI): ``θ'_i = θ_i / s``, i.e. positions ``m / s``; ``A = 1``.

    Paper: Chen et al. 2023, https://arxiv.org/abs/2306.15595. Tested against HF
    ``ROPE_INIT_FUNCTIONS["linear"]``.

    Args:
        factor: ``s`` > 0 (``s < 1`` compresses, which HF allows with a warning).

    Example::

        >>> Linear(4.0).inv_freq(4, 100.0)
        tensor([0.2500, 0.0250], dtype=torch.float64)
    """

    factor: float
    type_name: ClassVar[str] = "linear"

    def __post_init__(self) -> None:
        set_field(self, "factor", check_positive_float("factor", self.factor))

    def inv_freq(self, rotary_dim: int, base: float, *, seq_len: int | None = None) -> Tensor:
        check_seq_len(seq_len)
        return rope_inv_freq(rotary_dim, base) / self.factor

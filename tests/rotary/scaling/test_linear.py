"""Position interpolation: parity with HF ``ROPE_INIT_FUNCTIONS["linear"]`` over a grid."""

from __future__ import annotations

import pytest

from posenc.rotary.scaling import Linear
from tests.rotary.scaling.hf_reference import BASES, DIMS, FACTORS, assert_matches_hf, hf_init


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_linear_matches_hf(head_dim: int, partial: float, base: float) -> None:
    for factor in FACTORS:
        hf = hf_init("linear", head_dim, {"factor": factor, "rope_theta": base}, partial=partial)
        assert_matches_hf(Linear(factor), int(head_dim * partial), base, hf)


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

"""NTK-aware and dynamic NTK: parity with HF ``ROPE_INIT_FUNCTIONS["dynamic"]`` and with
rotary-embedding-torch's ``theta_rescale_factor``."""

from __future__ import annotations

import itertools

import pytest
import torch

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.scaling import DynamicNTK, NTKAware
from tests.rotary.scaling.hf_reference import BASES, DIMS, FACTORS, assert_matches_hf, hf_init


@pytest.mark.parametrize(("head_dim", "partial"), DIMS)
@pytest.mark.parametrize("base", BASES)
def test_dynamic_matches_hf(head_dim: int, partial: float, base: float) -> None:
    # seq_len below, at and above max_position_embeddings = 4096.
    for factor, seq_len in itertools.product(FACTORS, [None, 1024, 4095, 4096, 4097, 12288]):
        params = {"factor": factor, "rope_theta": base}
        hf = hf_init("dynamic", head_dim, params, partial=partial, seq_len=seq_len)
        ours = DynamicNTK(factor, max_position_embeddings=4096)
        assert_matches_hf(ours, int(head_dim * partial), base, hf, seq_len=seq_len)


@pytest.mark.parametrize("dim", [16, 64, 128])
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_ntk_aware_matches_rotary_embedding_torch(dim: int, factor: float) -> None:
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    reference = rotary_embedding_torch.RotaryEmbedding(dim, theta_rescale_factor=factor)
    torch.testing.assert_close(
        NTKAware(factor).inv_freq(dim, 1e4).float(), reference.freqs.detach(), rtol=1e-6, atol=0
    )


def test_ntk_aware_keeps_the_highest_and_divides_the_lowest_frequency_by_s() -> None:
    # b' = b s^(d/(d-2)) gives θ'_{d/2-1} = θ_{d/2-1} / s exactly (the NTK-aware design).
    got, plain = NTKAware(8.0).inv_freq(64, 1e4), rope_inv_freq(64, 1e4)
    torch.testing.assert_close(got[[0, -1]], plain[[0, -1]] / torch.tensor([1.0, 8.0]))


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

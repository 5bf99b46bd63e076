"""posenc.rotary.deepseek: the trailing rope slice equals plain RoPE on those channels, the
in-place path equals the out-of-place one, MLA's shared key rope, compressed-entry positions,
and bad input. Parity with transformers: tests/integrations/hf/test_deepseek.py; in
attention: tests/attention/test_value_rotation.py."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.rotary import (
    DecoupledRotary,
    DeepSeekV4Rotary,
    RotaryEmbedding,
    YaRN,
    compressed_positions,
    compressed_visible,
    join_decoupled,
)
from posenc.rotary.kernels import available_impls, rotary_impl

GENERATOR = torch.Generator().manual_seed(0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_trailing_slice_is_plain_rope_of_those_channels(layout: str, dtype: torch.dtype) -> None:
    scaling = YaRN(factor=4.0, original_max_position_embeddings=32)
    decoupled = DecoupledRotary(24, 8, base=500.0, layout=layout, scaling=scaling)  # type: ignore[arg-type]
    plain = RotaryEmbedding(8, base=500.0, layout=layout, scaling=scaling)  # type: ignore[arg-type]
    q = torch.randn(2, 3, 7, 24, generator=GENERATOR).to(dtype)
    k = torch.randn(2, 1, 7, 24, generator=GENERATOR).to(dtype)
    positions = torch.tensor([0, 3, 4, 9, 100, 101, 4000])
    q_rot, k_rot = decoupled(q, k, positions, positions)
    q_plain, k_plain = plain(q[..., 16:], k[..., 16:], positions, positions)
    assert torch.equal(q_rot[..., 16:], q_plain) and torch.equal(k_rot[..., 16:], k_plain)
    assert torch.equal(q_rot[..., :16], q[..., :16]) and torch.equal(k_rot[..., :16], k[..., :16])
    # the attention's in-place path (fresh projections, no autograd) gives the same bits
    tables = decoupled.rotary_tables(positions, dtype)
    q_in, k_in = decoupled.rotate_qk(q.clone(), k.clone(), tables, tables, inplace=True)
    assert torch.equal(q_in, q_rot) and torch.equal(k_in, k_rot)


def test_full_width_and_value_round_trip() -> None:
    rope = DeepSeekV4Rotary(8, 8)  # rope_dim == head_dim: the whole head
    x = torch.randn(1, 2, 5, 8, generator=GENERATOR, dtype=torch.float64)
    positions = torch.arange(5) * 7
    assert_close(
        rope.rotate(x, positions), RotaryEmbedding(8, layout="interleaved").rotate(x, positions)
    )
    # R(−p) R(p) = 1: de-rotating what was rotated at the same positions gives it back
    back = rope.derotate_output_at(rope.rotate_values_at(x, positions), positions)
    assert_close(back, x, rtol=1e-14, atol=1e-14)


def test_join_decoupled_broadcasts_the_shared_key_rope() -> None:
    q_nope, q_rope = torch.randn(2, 4, 3, 6), torch.randn(2, 4, 3, 2)
    k_nope, k_rope = torch.randn(2, 4, 5, 6), torch.randn(2, 1, 5, 2)
    q, k = join_decoupled(q_nope, q_rope, k_nope, k_rope)
    assert torch.equal(q, torch.cat([q_nope, q_rope], -1))
    assert torch.equal(k, torch.cat([k_nope, k_rope.expand(-1, 4, -1, -1)], -1))
    # rotating the one shared rope slice, or every head's copy of it, gives the same keys
    rope = DecoupledRotary(8, 2)
    positions = torch.arange(5)
    _, k_rot = rope(q[:, :, :0], k, positions[:0], positions)
    shared = DecoupledRotary(2, 2).rotate(k_rope, positions)
    assert torch.equal(k_rot[..., 6:], shared.expand(-1, 4, -1, -1))


def test_compressed_positions_and_visibility() -> None:
    assert compressed_positions(4, 4).tolist() == [0, 4, 8, 12]
    assert compressed_positions(0, 128).tolist() == []
    visible = compressed_visible(torch.arange(12), 3, 4)
    # query t sees entry w once w < (t + 1) // 4: entry 0 from t = 3, entry 1 from t = 7
    assert visible.sum(-1).tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    batched = compressed_visible(torch.tensor([[3, 8], [0, 11]]), 3, 4)
    assert batched.shape == (2, 2, 3)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: DecoupledRotary(16, 32), r"rope_dim must be even and at most head_dim \(16\)"),
        (lambda: DecoupledRotary(16, 7), "rope_dim must be even"),
        (lambda: DecoupledRotary(16, 0), "rope_dim"),
        (lambda: DecoupledRotary(0, 2), "head_dim"),
        (lambda: DeepSeekV4Rotary(16, 18), "rope_dim must be even and at most head_dim"),
        (lambda: compressed_positions(3, 0), "compress_ratio must be an int >= 1"),
        (lambda: compressed_positions(3, -4), "compress_ratio must be an int >= 1"),
        (lambda: compressed_positions(-1, 4), "num_entries must be an int >= 0"),
        (lambda: compressed_visible(torch.arange(3), 2, 0), "compress_ratio must be an int >= 1"),
        (lambda: compressed_visible(torch.arange(3.0), 2, 4), "q_pos must be integer"),
    ],
)
def test_bad_arguments(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_bad_tensors() -> None:
    rope = DeepSeekV4Rotary(16, 8)
    positions = torch.arange(4)
    with pytest.raises(
        ValueError, match="q has last dim 12 but this DeepSeekV4Rotary has head_dim 16"
    ):
        rope(torch.randn(1, 2, 4, 12), torch.randn(1, 1, 4, 16), positions, positions)
    with pytest.raises(
        ValueError, match="v has last dim 4, narrower than this DeepSeekV4Rotary's rope_dim 8"
    ):
        rope.rotate_values_at(torch.randn(1, 1, 4, 4), positions)
    with pytest.raises(ValueError, match="k_pos has 3 positions but v has seq 4"):
        rope.rotate_values_at(torch.randn(1, 1, 4, 16), torch.arange(3))
    with pytest.raises(ValueError, match="k_rope must have one head"):
        join_decoupled(
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 2, 3, 2),
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 2, 3, 2),
        )
    with pytest.raises(ValueError, match="q_rope must have q_nope's"):
        join_decoupled(
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 2, 5, 2),
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 1, 3, 2),
        )
    with pytest.raises(ValueError, match="k_rope must have k_nope's batch and seq"):
        join_decoupled(
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 2, 3, 2),
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 1, 6, 2),
        )
    with pytest.raises(
        ValueError, match="k_nope and k_rope must have q_nope's and q_rope's widths"
    ):
        join_decoupled(
            torch.randn(1, 2, 3, 4),
            torch.randn(1, 2, 3, 2),
            torch.randn(1, 2, 3, 5),
            torch.randn(1, 1, 3, 2),
        )


@pytest.mark.parametrize("impl", available_impls())
def test_every_kernel_rotates_the_slice_view(impl: str) -> None:
    """The rope slice is a strided view of each head: every kernel (numba on the CPU too)
    rotates it, in place and out of place, to the bits of the torch path."""
    device = "cuda" if impl == "triton" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("triton rotates CUDA tensors")
    rope = DeepSeekV4Rotary(48, 16)
    x = torch.randn(2, 3, 40, 48, generator=GENERATOR).transpose(1, 2).contiguous().transpose(1, 2)
    x = x.to(device)
    positions = torch.arange(40, device=device) * 3
    tables = rope.rotary_tables(positions, x.dtype)
    with rotary_impl("torch"):
        expected = rope.rotate_values(x, tables)
        expected_back = rope.derotate_output(x, tables)
    with rotary_impl(impl):  # type: ignore[arg-type]
        assert torch.equal(rope.rotate_values(x, tables), expected)
        assert torch.equal(rope.derotate_output(x, tables), expected_back)
        q_in, _ = rope.rotate_qk(x.clone(), x[:, :1].clone(), tables, tables, inplace=True)
    assert torch.equal(q_in, expected)

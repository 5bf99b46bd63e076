"""HoPE: only the pairs whose period fits the training length rotate (float64 formula parity)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, Backend
from posenc.attention.flex import flex_available
from posenc.models import DecoderLM, ModelConfig
from posenc.registry import ModelDims, build_encoding
from posenc.rotary.hope import HighFrequencyOnly, hope_inv_freq, hope_rotary
from posenc.rotary.scaling import scaling_to_dict


@pytest.mark.parametrize(
    ("dim", "base", "length"), [(8, 1e4, 64), (64, 1e4, 2048), (128, 5e5, 8192)]
)
def test_frequencies_equal_the_formula(dim: int, base: float, length: int) -> None:
    want = []
    for i in range(dim // 2):
        theta = base ** (-2 * i / dim)
        want.append(theta if 2 * math.pi / theta <= length else 0.0)
    got = hope_inv_freq(dim, base, length)
    assert got.dtype == torch.float64
    assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-15, atol=0)
    kept = int((got > 0).sum())
    assert 0 < kept < dim // 2 and bool((got[kept:] == 0).all())  # the slow tail is cut
    assert HighFrequencyOnly(length).kept_pairs(dim, base) == kept


def _rotate_by_formula(x: torch.Tensor, positions: torch.Tensor, theta: torch.Tensor):
    """Half layout: pair (j, j + d/2) turned by positions · θ_j (float64)."""
    half = x.shape[-1] // 2
    angle = positions.double()[:, None] * theta  # (seq, half)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], -1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_equals_the_formula_and_zeroed_pairs_are_position_independent(layout) -> None:
    g = torch.Generator().manual_seed(0)
    rope = hope_rotary(16, train_length=64, layout=layout)
    theta = hope_inv_freq(16, 1e4, 64)
    kept = int((theta > 0).sum())  # 3 of 8 pairs
    q = torch.randn(1, 2, 6, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 6, 16, generator=g, dtype=torch.float64)
    q_pos = torch.tensor([0, 5, 17, 1000, 123_456, 10**6])
    k_pos = torch.tensor([3, 9, 64, 999, 7, 2**20])
    q_rot, k_rot = rope(q, k, q_pos, k_pos)
    if layout == "half":
        assert_close(q_rot, _rotate_by_formula(q, q_pos, theta), rtol=0, atol=1e-12)
        assert_close(k_rot, _rotate_by_formula(k, k_pos, theta), rtol=0, atol=1e-12)
        slow = torch.cat([torch.arange(kept, 8), torch.arange(8 + kept, 16)])
    else:  # pair j is channels (2j, 2j + 1)
        slow = torch.arange(2 * kept, 16)
    # the zeroed pairs: unrotated, so their part of q·k is the plain dot product at any
    # positions, while the kept pairs' part moves with the distance
    assert_close(q_rot[..., slow], q[..., slow], rtol=0, atol=0)
    part = q_rot[..., slow] @ k_rot[..., slow].transpose(-1, -2)
    assert_close(part, q[..., slow] @ k[..., slow].transpose(-1, -2), rtol=0, atol=1e-12)
    fast = torch.tensor([i for i in range(16) if i not in set(slow.tolist())])
    moved = q_rot[..., fast] @ k_rot[..., fast].transpose(-1, -2)
    assert (moved - q[..., fast] @ k[..., fast].transpose(-1, -2)).abs().max() > 1e-2


def test_registered_with_the_models_training_length() -> None:
    rope = build_encoding("hope", ModelDims(dim=64, num_heads=4, max_seq_len=256))
    assert rope.scaling == HighFrequencyOnly(256)
    assert_close(rope.inv_freq(), hope_inv_freq(16, 1e4, 256))
    own = build_encoding("hope", ModelDims(dim=64, num_heads=4), train_length=64, base=100.0)
    assert_close(own.inv_freq(), hope_inv_freq(16, 100.0, 64))


@pytest.mark.parametrize("length", [0, -4, 6, 2.5, True, "64"])
def test_bad_train_length_names_it(length) -> None:
    with pytest.raises(ValueError, match="train_length"):
        hope_rotary(16, train_length=length)
    with pytest.raises(ValueError, match="train_length"):
        build_encoding("hope", ModelDims(dim=64, num_heads=4), train_length=length)


def test_not_a_context_extension_scaling() -> None:
    with pytest.raises(ValueError):
        scaling_to_dict(HighFrequencyOnly(64))


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
def test_model_kv_cache_decoding_equals_full_forward(backend: str) -> None:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=32, dim=32, depth=2, num_heads=2, pos="hope", max_seq_len=16, backend=backend
    )
    model = DecoderLM(config).double().eval()
    tokens = torch.randint(0, 32, (2, 20))  # beyond the training length too
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :5], cache=cache)]
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(5, 20)]
    assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)


@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
def test_every_backend_serves_it() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    outs = []
    for backend in ("sdpa", "chunked", Backend("flex", compile=False)):
        torch.manual_seed(1)
        attn = Attention(32, 2, pos=hope_rotary(16, train_length=16), backend=backend).double()
        with torch.no_grad():
            outs.append(attn(x))
    assert_close(outs[1], outs[0], rtol=0, atol=1e-12)
    assert_close(outs[2], outs[0], rtol=0, atol=1e-12)

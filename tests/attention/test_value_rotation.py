"""The output-side rotation place (ValueRotation, DeepSeek-V4 eq. 26) in attention.

Attention rotates new values with the key tables before the KV cache stores them (the cache
holds rotated values) and rotates the output back with the query tables. Checked here: the
reference formula on whole tensors, decoding equals a full forward on every backend that
takes a rotary, the output is relative (a shift of all positions leaves it unchanged, in
float64; without the de-rotation it does not), and the paths that cannot serve it refuse."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend
from posenc.encoding import SegmentEncoding, ValueRotation, hooks_of
from posenc.rotary import DecoupledRotary, DeepSeekV4Rotary, YaRN
from posenc.rotary.scaling import DynamicNTK

HEAD_DIM, ROPE_DIM = 16, 8


def _rope(**kwargs: Any) -> DeepSeekV4Rotary:
    return DeepSeekV4Rotary(HEAD_DIM, ROPE_DIM, base=100.0, **kwargs)


def _attention(backend: str | Backend = "sdpa", dtype: torch.dtype = torch.float64) -> Attention:
    torch.manual_seed(0)
    return Attention(
        32, 4, num_kv_heads=1, head_dim=HEAD_DIM, pos=_rope(), backend=backend, dtype=dtype
    )


def _reference(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """``o_i = Σ_j p_ij R((j − i)θ) v_j`` on the rope slice, written out per pair: every
    value rotated by its own ``j − i`` (float64, causal, q/k already rotated)."""
    rope = _rope()
    heads = q.shape[1]
    k, v = k.expand(-1, heads, -1, -1), v.expand(-1, heads, -1, -1)
    scores = q @ k.transpose(-1, -2) * HEAD_DIM**-0.5
    scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    probs = scores.softmax(-1)  # (batch, heads, q, k)
    out = torch.zeros_like(q)
    for i in range(q.shape[2]):
        # each value rotated by j − i: rotate by j, then by −i
        relative = rope.derotate_output_at(
            rope.rotate_values_at(v, k_pos), q_pos[i].expand(k_pos.shape[0])
        )
        out[:, :, i] = (probs[:, :, i, :, None] * relative).sum(-2)
    return out


def test_attend_equals_the_formula() -> None:
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 7, HEAD_DIM, generator=generator, dtype=torch.float64)
    latent = torch.randn(2, 1, 7, HEAD_DIM, generator=generator, dtype=torch.float64)
    positions = torch.arange(7) + 5
    rope = _rope()
    q, k = rope(q, latent, positions, positions)
    v = rope.rotate_values_at(latent, positions)
    unrotated = _reference(q, k, latent, positions, positions)
    got = attend(q, k, v, pos=rope, q_pos=positions, k_pos=positions, causal=True)
    assert_close(got, unrotated)
    # only the rope slice changes: the nope channels are plain attention's
    plain = attend(q, k, latent, q_pos=positions, k_pos=positions, causal=True)
    assert_close(got[..., : HEAD_DIM - ROPE_DIM], plain[..., : HEAD_DIM - ROPE_DIM])
    assert (got[..., -ROPE_DIM:] - plain[..., -ROPE_DIM:]).abs().max() > 1e-3


@pytest.mark.parametrize("backend", ["sdpa", "chunked", "auto", Backend("chunked", block_size=2)])
def test_decoding_equals_full_forward(backend: str | Backend) -> None:
    attention = _attention(backend)
    x = torch.randn(2, 11, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = attention(x)
        cache = KVCache()
        steps = [attention(x[:, :6], cache=cache)]
        steps += [attention(x[:, i : i + 1], cache=cache) for i in range(6, 11)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-12, atol=1e-12)
    # the cache holds values rotated by their key positions (as it holds rotated keys)
    rope = attention.pos
    assert isinstance(rope, DeepSeekV4Rotary)
    with torch.no_grad():
        v = attention.v_proj(x).view(2, 11, 1, HEAD_DIM).transpose(1, 2)
        assert cache.v is not None
        assert_close(cache.v, rope.rotate_values_at(v, torch.arange(11)))


def test_flex_and_chunked_equal_sdpa() -> None:
    """float32: FlexAttention on the CPU takes no float64 (its eager reference here)."""
    x = torch.randn(1, 9, 32, generator=torch.Generator().manual_seed(3))
    reference = _attention("sdpa", torch.float32)
    with torch.no_grad():
        expected = reference(x)
        for backend in (Backend("flex", compile=False), "chunked"):
            other = _attention(backend, torch.float32)
            other.load_state_dict(reference.state_dict())
            assert_close(other(x), expected)


def test_gradients_flow_through_value_rotation() -> None:
    attention = _attention()
    x = torch.randn(1, 5, 32, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: attention(t), (x,))


@pytest.mark.parametrize("derotate", [True, False])
def test_output_is_relative_only_with_derotation(derotate: bool) -> None:
    """Shifting every position by 1000 leaves the output unchanged (float64) with eq. 26's
    de-rotation; with values rotated but the output not rotated back, it does not."""
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 6, HEAD_DIM, generator=generator, dtype=torch.float64)
    latent = torch.randn(1, 1, 6, HEAD_DIM, generator=generator, dtype=torch.float64)
    rope = _rope(scaling=YaRN(factor=4.0, original_max_position_embeddings=16))
    plain = DecoupledRotary(HEAD_DIM, ROPE_DIM, base=100.0, scaling=rope.scaling)

    def run(shift: int) -> Tensor:
        positions = torch.arange(6) + shift
        q_rot, k_rot = rope(q, latent, positions, positions)
        v = rope.rotate_values_at(latent, positions)
        pos = rope if derotate else plain  # plain: no output rotation
        return attend(q_rot, k_rot, v, pos=pos, q_pos=positions, k_pos=positions, causal=True)

    if derotate:
        assert_close(run(1000), run(0), rtol=1e-10, atol=1e-10)
    else:
        assert (run(1000) - run(0)).abs().max() > 1e-2


def test_refusals() -> None:
    q, k = torch.randn(1, 4, 3, HEAD_DIM), torch.randn(1, 1, 3, HEAD_DIM)
    with pytest.raises(ValueError, match=r"v must have k's head_dim \(16\) for DeepSeekV4Rotary"):
        attend(q, k, torch.randn(1, 1, 3, 12), pos=_rope(), causal=True)
    with pytest.raises(ValueError, match="k and v must have the same length"):
        attend(q, k, torch.randn(1, 1, 4, HEAD_DIM), pos=_rope(), causal=True)
    with pytest.raises(ValueError, match="backend 'linear' cannot serve DeepSeekV4Rotary"):
        Attention(32, 4, head_dim=HEAD_DIM, pos=_rope(), backend="linear")
    attention = _attention()
    with pytest.raises(ValueError, match="must keep keys rotated"):
        attention(torch.randn(1, 3, 32, dtype=torch.float64), cache=KVCache(keys="unrotated"))
    with pytest.raises(ValueError, match="follow the length"):
        _rope(scaling=DynamicNTK(factor=2.0, max_position_embeddings=16))


class _LengthDependent(DeepSeekV4Rotary):
    """Says its frequencies follow the length once built (the constructor refuses a scaling
    that does; hooks_of refuses any ValueRotation that says so)."""

    def __init__(self) -> None:
        super().__init__(HEAD_DIM, ROPE_DIM)
        self.dynamic = True

    @property
    def depends_on_length(self) -> bool:
        return getattr(self, "dynamic", False)


class _Segmented(SegmentEncoding, ValueRotation):
    head_dim = HEAD_DIM


class _Undeclared(nn.Module):
    def rotate_values(self, v: Tensor, k_tables: Any) -> Tensor:
        return v


def test_hooks_refuse_what_cannot_serve_value_rotation() -> None:
    assert hooks_of(_rope()).value_rotation is not None
    assert hooks_of(DecoupledRotary(HEAD_DIM, ROPE_DIM)).value_rotation is None
    with pytest.raises(ValueError, match="frequencies that follow the length"):
        hooks_of(_LengthDependent())
    with pytest.raises(ValueError, match="a segment method"):
        hooks_of(_Segmented())
    with pytest.raises(ValueError, match="has the methods of ValueRotation"):
        hooks_of(_Undeclared())

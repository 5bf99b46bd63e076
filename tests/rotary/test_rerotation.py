"""rerotate: keys rotated at p, moved by δ, against a fresh rotation at p + δ (whole tensors).

The bound (derived in docs/long-context.md, "Moving cached keys: rerotate"), per element of a
pair whose exact rotated value has norm ``r`` (``A·|k pair|``, times xPos' scale), for keys of
dtype ``d`` rotated in ``c`` (float32, or float64 for float64 keys), ``u`` the unit roundoff:

* the cached key ``R(p)k``: its tables rounded to ``c`` (``u_c·r``, a scaled rotation), four
  products (``√2·u_c·r``) and two sums (``u_c·r``) in ``c``, then the cast to ``d``
  (``u_d·r``): a pair error of norm ``(2 + √2)·u_c·r + u_d·r``, which ``R(δ)`` keeps;
* the move: float64 rotation (``(2 + √2)·u₆₄·r``) and one rounding to ``d`` (``u_d·r``);
* the fresh ``R(p + δ)k``: tables, products, sum (``3·u_c·r`` per element) and the cast;
* the float64 phases: ``fl(pθ) + fl(δθ)`` against ``fl((p + δ)θ)``, at most
  ``u₆₄·(|p| + |δ| + |p + δ|)·θ_max`` radians, i.e. that times ``r``.

First order in ``u`` (the neglected terms are below 2⁻¹⁴ of the bound for bfloat16).
bfloat16: ``3·2⁻⁸·r`` ≈ 1.5 ulp of ``r``; float32 ``(6 + √2)·2⁻²⁴·r``.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from posenc.rotary import (
    DynamicNTK,
    FourierRotaryEmbedding,
    LearnedRotation,
    Linear,
    Llama3,
    LongRoPE,
    MultiAxisRotary,
    PolarEmbedding,
    RotaryEmbedding,
    Scaling,
    XPos,
    YaRN,
    rerotate,
    xpos_scale,
)
from posenc.rotary.axial import AxialRotary2D
from posenc.rotary.layouts import Layout, pair_views

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
UNIT = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}
UNIT[torch.float16] = 2.0**-11
SCALINGS: dict[str, Scaling | None] = {
    "none": None,
    "linear": Linear(4.0),
    "yarn": YaRN(8.0, 64),
    "llama3": Llama3(8.0, 1.0, 4.0, 64),
}


def move_bound(dtype: torch.dtype, r: Tensor, phase: Tensor | float) -> Tensor:
    """The per-element bound of the module docstring, from the pair norms ``r``."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    u_c, u_d, u64 = UNIT[compute], UNIT[dtype], UNIT[torch.float64]
    cast = u_d if dtype != compute else 0.0
    stored = (2 + math.sqrt(2)) * u_c + cast
    move = (2 + math.sqrt(2)) * u64 + u_d
    fresh = 3 * u_c + cast
    return (stored + move + fresh + phase) * r


def phase_error(p: Tensor, delta: Tensor | float, theta_max: float) -> Tensor:
    """``u₆₄·(|p| + |δ| + |p + δ|)·θ_max`` per token, shaped to broadcast against keys:
    ``(seq, 1)`` or ``(batch, 1, seq, 1)``."""
    p = p.double()
    delta = torch.as_tensor(delta, dtype=torch.float64)
    phase = UNIT[torch.float64] * (p.abs() + delta.abs() + (p + delta).abs()) * theta_max
    return phase[..., None] if phase.dim() < 2 else phase[..., None, :, None]


def pair_norms(k: Tensor, rotary_dim: int, layout: str) -> Tensor:
    """``|k pair|`` at every rotated channel of ``k`` (float64), 0 at pass-through channels."""
    a, b = pair_views(k.double(), rotary_dim, layout)
    norm = (a * a + b * b).sqrt()
    full = torch.cat((norm, norm), -1) if layout == "half" else norm.repeat_interleave(2, -1)
    rest = k.shape[-1] - rotary_dim
    return torch.cat((full, full.new_zeros(*full.shape[:-1], rest)), -1)


def assert_within(actual: Tensor, expected: Tensor, bound: Tensor) -> None:
    """Every element of ``actual`` within ``bound`` of ``expected`` (whole tensors)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    diff = (actual.detach().double() - expected.detach().double()).abs()
    over = diff > bound
    worst = float((diff / bound.clamp_min(1e-300)).max())
    assert not bool(over.any()), f"{int(over.sum())}/{diff.numel()} over the bound (×{worst:.3g})"


def keys(dtype: torch.dtype, shape: tuple[int, ...] = (2, 3, 40, 32), seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)


def check_move(rope: RotaryEmbedding, k: Tensor, p: Tensor, delta: int | Tensor) -> Tensor:
    """rerotate(R(p)k, δ) against R(p + δ)k within the bound; pass-through bit-identical."""
    cached = rope.rotate(k, p)
    moved = rerotate(cached, delta, rope)
    shifted = p + delta
    if shifted.dim() == 2 and shifted.shape[0] != k.shape[0]:
        shifted = shifted.expand(k.shape[0], -1)
    fresh = rope.rotate(k, shifted)
    r = rope.attention_factor * pair_norms(k, rope.rotary_dim, rope.layout)
    theta = float(rope.inv_freq("cpu").max())
    assert_within(moved, fresh, move_bound(k.dtype, r, phase_error(p, delta, theta)))
    torch.testing.assert_close(
        moved[..., rope.rotary_dim :], cached[..., rope.rotary_dim :], rtol=0, atol=0
    )
    return moved


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [32, 20])
@pytest.mark.parametrize("scaling", list(SCALINGS))
def test_moved_keys_equal_a_fresh_rotation_to_the_bound(
    dtype: torch.dtype, layout: Layout, rotary_dim: int, scaling: str
) -> None:
    rope = RotaryEmbedding(
        32,
        rotary_dim=rotary_dim,
        layout=layout,
        scaling=SCALINGS[scaling],
    )
    k, p = keys(dtype), torch.arange(40)
    for delta in (7, -13, 1000):
        check_move(rope, k, p, delta)
    per_row = torch.tensor([[5], [-3]])  # (batch, 1)
    check_move(rope, k, p + 20, per_row)
    per_token = torch.randint(-20, 200, (2, 40), generator=torch.Generator().manual_seed(1))
    check_move(rope, k, p + 20, per_token)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_positions_near_a_million(dtype: torch.dtype, layout: Layout) -> None:
    rope = RotaryEmbedding(32, rotary_dim=24, layout=layout)
    k, p = keys(dtype), torch.arange(40)
    check_move(rope, k, p, 10**6)  # a block moved far out
    check_move(rope, k, p + 10**6, -(10**6) + 3)  # and back
    check_move(rope, k, p + 999_000, 1_500)


def test_float64_is_exact_to_1e_12_relative() -> None:
    rope = RotaryEmbedding(32, scaling=YaRN(8.0, 64))
    k, p = keys(torch.float64), torch.arange(40)
    cached = rope.rotate(k, p)
    moved, fresh = rerotate(cached, 777, rope), rope.rotate(k, p + 777)
    r = rope.attention_factor * pair_norms(k, 32, "half")
    assert_within(moved, fresh, 1e-12 * r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_move_is_one_rounding_of_the_exact_rotation(dtype: torch.dtype, layout: Layout) -> None:
    """rerotate(x, δ) is R(δ)x computed exactly (float64, as complex numbers) and rounded once."""
    rope = RotaryEmbedding(32, rotary_dim=24, layout=layout)
    cached = rope.rotate(keys(dtype), torch.arange(40))
    moved = rerotate(cached, 123, rope)
    a, b = pair_views(cached.double(), 24, layout)
    turn = torch.polar(torch.ones(12, dtype=torch.float64), 123 * rope.inv_freq("cpu"))
    z = torch.complex(a, b) * turn
    expected = cached.double().clone()
    ea, eb = pair_views(expected, 24, layout)
    ea.copy_(z.real)
    eb.copy_(z.imag)
    torch.testing.assert_close(moved, expected.to(dtype), rtol=0, atol=0)


def test_inplace_overwrites_the_keys_and_equals_the_copy() -> None:
    rope = RotaryEmbedding(32, rotary_dim=16, layout="interleaved")
    cached = rope.rotate(keys(torch.bfloat16), torch.arange(40))
    copy = rerotate(cached, 9, rope)
    same = rerotate(cached, 9, rope, inplace=True)
    assert same is cached
    torch.testing.assert_close(cached, copy, rtol=0, atol=0)


def test_long_blocks_are_moved_in_chunks_alike() -> None:
    """3000 tokens × 4 heads × 16 pairs: two chunks of float64 work, the second partial."""
    rope = RotaryEmbedding(32, rotary_dim=24)
    k, p = keys(torch.float32, (1, 4, 3000, 32)), torch.arange(3000)
    check_move(rope, k, p, 31)
    check_move(rope, k, p, (torch.arange(3000)[None] % 17) - 8)


def test_gradients_flow_through_a_copy() -> None:
    rope = RotaryEmbedding(16)
    cached = rope.rotate(keys(torch.float64, (1, 2, 5, 16)), torch.arange(5)).requires_grad_()
    rerotate(cached, 3, rope).sum().backward()
    assert cached.grad is not None and cached.grad.abs().sum() > 0


@pytest.mark.parametrize("scaling", ["dynamic_ntk", "longrope", "dynamic_yarn"])
@pytest.mark.parametrize("length", [50, 500])
def test_length_dependent_frequencies_move_with_a_stated_length(scaling: str, length: int) -> None:
    """Both blocks rotated with the frequencies of one length: exact, as for static ones."""
    half = tuple(1.0 + i / 4 for i in range(16))
    made = {
        "dynamic_ntk": DynamicNTK(4.0, 64),
        "longrope": LongRoPE(tuple(1.0 for _ in half), half, 64, factor=8.0),
        "dynamic_yarn": YaRN(4.0, 64, dynamic=True),
    }[scaling]
    rope = RotaryEmbedding(32, scaling=made)
    k, p, delta = keys(torch.float32), torch.arange(40), 21

    def rotated(positions: Tensor) -> Tensor:
        tables = rope.rotary_tables(positions, k.dtype, length=length)
        return rope.rotate_qk(k, k, tables, tables)[1]

    moved = rerotate(rotated(p), delta, rope, frequency_length=length)
    inv_freq = made.inv_freq(32, rope.base, seq_len=rope.frequency_length(length))
    factor = made.attention_factor_at(rope.frequency_length(length))
    r = factor * pair_norms(k, 32, "half")
    phase = phase_error(p, delta, float(inv_freq.max()))
    assert_within(moved, rotated(p + delta), move_bound(k.dtype, r, phase))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_moves_by_a_shift_per_axis(dtype: torch.dtype, interleaved: bool) -> None:
    rope = MultiAxisRotary.mrope(32, (4, 6, 6), base=1e4, interleaved=interleaved)
    k = keys(dtype)
    generator = torch.Generator().manual_seed(2)
    p = torch.randint(0, 50, (3, 2, 40), generator=generator)  # (t, h, w) per batch row

    def rotated(positions: Tensor) -> Tensor:
        tables = rope.rotary_tables(positions, dtype)
        return rope.rotate_qk(k, k, tables, tables)[1]

    r = pair_norms(k, 32, "half")
    for delta in (torch.tensor([30, 0, 0]), torch.tensor([[[4]], [[-2]], [[9]]])):
        moved = rerotate(rotated(p), delta, rope)
        shifted = p + delta.reshape(3, -1, 1)
        phase = phase_error(p.abs().amax(0), delta.abs().max(), 1.0)
        assert_within(moved, rotated(shifted), move_bound(dtype, r, phase))
    per_token = torch.randint(-9, 9, (3, 2, 40), generator=generator)
    moved = rerotate(rotated(p), per_token, rope)
    phase = phase_error(p.abs().amax(0), 9, 1.0)
    assert_within(moved, rotated(p + per_token), move_bound(dtype, r, phase))


def test_rope_mixed_moves_per_head() -> None:
    """RoPE-Mixed: learned float32 frequencies per head. Its angles are float32 dot products
    ``p_row·f_row + p_col·f_col`` (each off by ≤ ``2·u₃₂·Σ|p_a f_a|``), the cached one at
    ``p`` and the fresh one at ``p + δ``; the move's are float64. So the phase term is
    ``2·u₃₂·(|p| + |p + δ|)·max Σ_a |f_a|``."""
    torch.manual_seed(5)
    rope = MultiAxisRotary.mixed(32, 3)
    k = keys(torch.float32)
    p = torch.randint(0, 16, (2, 2, 40), generator=torch.Generator().manual_seed(6))

    def rotated(positions: Tensor) -> Tensor:
        tables = rope.rotary_tables(positions, k.dtype)
        return rope.rotate_qk(k, k, tables, tables)[1]

    delta = torch.tensor([3, -5])
    moved = rerotate(rotated(p), delta, rope)
    theta = float(rope.frequencies.detach().abs().sum(-1).max())  # |f·(row, column)| ≤ this
    largest = p.abs().amax(0)  # (batch, seq): the largest axis
    phase = 2 * UNIT[torch.float32] * (2 * largest + delta.abs().max()) * theta
    phase = phase[:, None, :, None].double()
    bound = move_bound(torch.float32, pair_norms(k, 32, "interleaved"), phase)
    assert_within(moved, rotated(p + delta[:, None, None]), bound)


def test_mrope_on_text_equals_rope() -> None:
    """All three axes equal: M-RoPE is 1D RoPE, and moving it by (δ, δ, δ) is RoPE's move."""
    mrope = MultiAxisRotary.mrope(32, (4, 6, 6), base=1e4)
    rope = RotaryEmbedding(32, base=1e4)
    cached = rope.rotate(keys(torch.float32), torch.arange(40))
    torch.testing.assert_close(
        rerotate(cached, [11, 11, 11], mrope), rerotate(cached, 11, rope), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_xpos_moves_with_its_scale_ratio(dtype: torch.dtype) -> None:
    rope = XPos(32, rotary_dim=24, scale_base=64.0, center=20.0)
    k, p = keys(dtype), torch.arange(40)
    cached = rope.rotate_keys(k, p)
    for delta in (5, -30):
        moved = rerotate(cached, delta, rope)
        scale = xpos_scale(p + delta, 24, scale_base=64.0, center=20.0, inverse=True)
        r = pair_norms(k, 24, "interleaved")
        r[..., :24] *= scale
        phase = phase_error(p, delta, 1.0)
        # the scale ζ^{-δ/B} adds one float64 product to the move (negligible, covered)
        assert_within(moved, rope.rotate_keys(k, p + delta), move_bound(dtype, r, phase))
        torch.testing.assert_close(moved[..., 24:], cached[..., 24:], rtol=0, atol=0)


def test_comrope_moves_exactly_in_float64() -> None:
    torch.manual_seed(3)
    rope = LearnedRotation.comrope_ld(16, 2, num_heads=2)
    k = keys(torch.float64, (1, 2, 12, 16))
    p = torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(4)).double()

    def rotated(positions: Tensor) -> Tensor:
        tables = rope.rotary_tables(positions, torch.float64)
        return rope.rotate_qk(k, k, tables, tables)[1]

    delta = torch.tensor([3.0, -2.0])
    moved = rerotate(rotated(p), delta, rope)
    block = k.unflatten(-1, (rope.num_blocks, rope.block_size)).norm(dim=-1)
    r = block.repeat_interleave(rope.block_size, -1)
    assert_within(moved, rotated(p + delta[:, None]), 1e-12 * r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pope_keys_move_by_their_phases(dtype: torch.dtype) -> None:
    """PoPE's key ``softplus(k)·[cos jθ | sin jθ]`` is a rotation of ``(m, 0)`` pairs."""
    rope = PolarEmbedding(16, 2)
    k, p = keys(dtype, (1, 2, 30, 16)), torch.arange(30)

    def rotated(positions: Tensor) -> Tensor:
        tables = rope.rotary_tables(positions, dtype)
        return rope.rotate_qk(k, k, tables, tables)[1]

    moved = rerotate(rotated(p), 17, rope)
    # softplus(k) rounded as polar_map rounds it; its tables and product: 2·u₃₂, the cast
    m = torch.nn.functional.softplus(k.float()).double()
    r = torch.cat((m, m), -1)
    u_d, u32 = UNIT[dtype], UNIT[torch.float32]
    cast = u_d if dtype != torch.float32 else 0.0
    bound = (2 * u32 + cast + u_d + 2 * u32 + cast + 3e-16) * r
    assert_within(moved, rotated(p + 17), bound)


# ---- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scaling",
    [
        DynamicNTK(4.0, 64),
        YaRN(4.0, 64, dynamic=True),
        LongRoPE((1.0,) * 16, (2.0,) * 16, 64, factor=8.0),
    ],
)
def test_length_dependent_frequencies_need_a_stated_length(scaling: object) -> None:
    rope = RotaryEmbedding(32, scaling=scaling)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rope: this RotaryEmbedding has frequencies that follow"):
        rerotate(keys(torch.float32), 3, rope)


def test_a_stated_length_for_fixed_frequencies_raises() -> None:
    with pytest.raises(ValueError, match="frequency_length is only for"):
        rerotate(keys(torch.float32), 3, RotaryEmbedding(32), frequency_length=100)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_frequency_length_must_be_a_positive_int(bad: object) -> None:
    rope = RotaryEmbedding(32, scaling=DynamicNTK(4.0, 64))
    with pytest.raises(ValueError, match="frequency_length must be an int >= 1"):
        rerotate(keys(torch.float32), 3, rope, frequency_length=bad)  # type: ignore[arg-type]


def test_rounded_tables_raise() -> None:
    with pytest.raises(ValueError, match=r"stores its cos/sin tables in torch\.bfloat16"):
        rerotate(keys(torch.float32), 3, RotaryEmbedding(32, dtype=torch.bfloat16))


@pytest.mark.parametrize(
    ("rope", "match"),
    [
        (FourierRotaryEmbedding(32, 3, train_length=64), "FoPE"),
        (AxialRotary2D(32, 4, 10), "token indices"),
        (LearnedRotation.liere(32, 2, num_heads=3), "do not commute"),
        (MultiAxisRotary.mrope(32, (4, 6, 6), scaling=DynamicNTK(4.0, 64)), "follow the seq"),
    ],
)
def test_rotaries_whose_move_is_no_fixed_rotation_raise(rope: object, match: str) -> None:
    with pytest.raises(ValueError, match=f"rope: .*{match}"):
        rerotate(keys(torch.float32), 3, rope)  # type: ignore[arg-type]


def test_other_encodings_raise_naming_what_is_supported() -> None:
    from posenc.segments import SelfExtend

    with pytest.raises(ValueError, match="rope: rerotate moves keys of RotaryEmbedding"):
        rerotate(keys(torch.float32), 3, SelfExtend(RotaryEmbedding(32), window=8, group=4))


@pytest.mark.parametrize(
    ("delta", "match"),
    [
        (torch.zeros(40, 2), "delta must broadcast to"),
        (torch.zeros(2), "delta must broadcast to"),  # (batch,) is ambiguous: (batch, 1)
        (torch.tensor(float("nan")), "delta must be finite"),
        (True, "delta must be a number"),
        ("3", "delta must be a number or a tensor"),
    ],
)
def test_bad_delta_raises(delta: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rerotate(keys(torch.float32), delta, RotaryEmbedding(32))  # type: ignore[arg-type]


def test_mrope_needs_one_shift_per_axis() -> None:
    rope = MultiAxisRotary.mrope(32, (4, 6, 6))
    with pytest.raises(ValueError, match="delta must hold one shift per axis"):
        rerotate(keys(torch.float32), 3, rope)


def test_bad_keys_raise() -> None:
    rope = RotaryEmbedding(32)
    with pytest.raises(ValueError, match="keys has last dim 16"):
        rerotate(keys(torch.float32, (1, 1, 4, 16)), 3, rope)
    with pytest.raises(ValueError, match="keys must be a floating tensor"):
        rerotate(torch.zeros(1, 4, 32, dtype=torch.long), 3, rope)

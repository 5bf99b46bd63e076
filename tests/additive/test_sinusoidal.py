"""Sinusoidal encodings: the formula in float64, reference parity, shift property, dtypes."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call
from torch.testing import assert_close

from posenc.additive import (
    ScaledSinusoidalEncoding,
    SinusoidalEncoding,
    sinusoidal_encoding,
    sinusoidal_inv_freq,
)
from posenc.attention import hooks_of
from posenc.encoding.protocols import AdditiveEncoding

EPS32 = 2.0**-24  # unit roundoff of float32
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def reference(
    positions: torch.Tensor, dim: int, base: float = 10000.0, layout: str = "interleaved"
) -> torch.Tensor:
    """The formula, channel by channel, with Python floats (float64) and libm sin/cos."""
    half = dim // 2
    flat = [float(p) for p in positions.reshape(-1).tolist()]
    rows = []
    for p in flat:
        row = []
        for c in range(dim):
            if layout == "interleaved":
                i, fn = c // 2, (math.sin if c % 2 == 0 else math.cos)
            else:
                i, fn = c % half, (math.sin if c < half else math.cos)
            row.append(fn(p * base ** (-(2 * i) / dim)))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64).reshape(*positions.shape, dim)


POSITIONS = {
    "integer": torch.arange(48),
    "fractional": torch.tensor([0.0, 0.5, 1.25, 3.75, 10.1, 511.875, 4096.0625]),
    "float32": torch.tensor([0.1, 2.7, 1000.3], dtype=torch.float32),
    "large": torch.tensor([999_000, 999_999, 1_000_000, 123_456]),
    "large_fractional": torch.tensor([1e6 + 0.5, 654_321.25], dtype=torch.float64),
}
DIMS = [1, 2, 3, 7, 8, 33, 64]


@pytest.mark.parametrize("kind", POSITIONS)
@pytest.mark.parametrize("dim", DIMS)
def test_float64_matches_formula(kind: str, dim: int) -> None:
    positions = POSITIONS[kind]
    out = sinusoidal_encoding(positions, dim, dtype=torch.float64)
    # torch's sin/cos and libm's may differ in the last ulp; values lie in [-1, 1].
    assert_close(out, reference(positions, dim), rtol=0, atol=1e-15)


@pytest.mark.parametrize("dim", [2, 8, 64])
@pytest.mark.parametrize("base", [10000.0, 500000.0, 2.5])
def test_concat_float64_matches_formula(dim: int, base: float) -> None:
    positions = torch.cat([POSITIONS["integer"], POSITIONS["large_fractional"]])
    out = sinusoidal_encoding(positions, dim, base, layout="concat", dtype=torch.float64)
    assert_close(out, reference(positions, dim, base, "concat"), rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
@pytest.mark.parametrize("kind", POSITIONS)
def test_low_precision_is_cast_of_float64_reference(
    dtype: torch.dtype, layout: str, kind: str
) -> None:
    positions, dim = POSITIONS[kind], 32
    out = sinusoidal_encoding(positions, dim, layout=layout, dtype=dtype)
    assert out.dtype == dtype
    assert_close(out, reference(positions, dim, layout=layout).to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("dim", [3, 7, 33])
def test_odd_dim_last_channel_is_unpaired_sin(dim: int) -> None:
    positions = torch.tensor([0.0, 1.0, 17.5, 3000.0], dtype=torch.float64)
    out = sinusoidal_encoding(positions, dim, dtype=torch.float64)
    # i = (dim - 1) // 2 and the true d: frequency base^(-(dim - 1)/dim).
    expected = torch.sin(positions * 10000.0 ** (-(dim - 1) / dim))
    assert_close(out[:, -1], expected, rtol=0, atol=1e-15)
    assert out.shape == (4, dim)


def test_inv_freq_matches_formula() -> None:
    dim, base = 11, 500000.0
    expected = torch.tensor([base ** (-2 * i / dim) for i in range(6)], dtype=torch.float64)
    assert_close(sinusoidal_inv_freq(dim, base), expected, rtol=0, atol=0)


def test_batched_positions_match_rows() -> None:
    positions = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13], [5, 0, 999_999, 7]])
    out = sinusoidal_encoding(positions, 10, dtype=torch.float64)
    assert out.shape == (3, 4, 10)
    assert_close(out, reference(positions, 10), rtol=0, atol=1e-15)
    module_out = SinusoidalEncoding(10, dtype=torch.float64)(positions)
    assert_close(module_out, out, rtol=0, atol=0)


def test_module_matches_function_and_has_no_parameters() -> None:
    pe = SinusoidalEncoding(12, base=100.0, layout="concat")
    assert isinstance(pe, AdditiveEncoding) and hooks_of(pe).additive
    assert list(pe.parameters()) == [] and list(pe.buffers()) == []
    positions = torch.arange(70_000)  # any length: there is no table
    out = pe(positions)
    assert out.dtype == torch.get_default_dtype()
    expected = sinusoidal_encoding(positions, 12, 100.0, "concat", torch.get_default_dtype())
    assert_close(out, expected, rtol=0, atol=0)


def test_module_dtype_argument() -> None:
    positions = torch.arange(20)
    out = SinusoidalEncoding(16, dtype=torch.bfloat16)(positions)
    assert_close(out, reference(positions, 16).to(torch.bfloat16), rtol=0, atol=0)


@CUDA
def test_cuda_output_follows_positions_device() -> None:
    positions = POSITIONS["large_fractional"].cuda()
    out = sinusoidal_encoding(positions, 16)
    assert out.device == positions.device
    # CUDA's float64 sin may differ from the CPU's in the last ulp, rarely flipping a rounding.
    assert_close(out.cpu(), sinusoidal_encoding(positions.cpu(), 16), rtol=0, atol=2 * EPS32)
    assert ScaledSinusoidalEncoding(16, device="cuda")(positions).device == positions.device


def test_concat_is_channel_permutation_of_interleaved() -> None:
    dim, positions = 16, torch.cat([POSITIONS["integer"], POSITIONS["large_fractional"]])
    concat = sinusoidal_encoding(positions, dim, layout="concat", dtype=torch.float64)
    interleaved = sinusoidal_encoding(positions, dim, layout="interleaved", dtype=torch.float64)
    half = dim // 2
    perm = [c // 2 + (half if c % 2 else 0) for c in range(dim)]  # 0, h, 1, h+1, ...
    assert_close(concat[:, perm], interleaved, rtol=0, atol=0)


def rotation_for_shift(k: float, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Block-diagonal M_k with PE(p + k) = M_k PE(p), built from k alone (interleaved)."""
    m = torch.zeros(dim, dim, dtype=torch.float64)
    for i in range(dim // 2):
        angle = k * base ** (-(2 * i) / dim)
        c, s = math.cos(angle), math.sin(angle)
        # (sin(a + b), cos(a + b)) = [[cos b, sin b], [-sin b, cos b]] (sin a, cos a)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[c, s], [-s, c]], dtype=torch.float64
        )
    return m


@pytest.mark.parametrize("k", [1.0, 7.0, 100.5, 4096.0])
@pytest.mark.parametrize("dim", [2, 16, 64])
def test_shift_is_a_fixed_rotation(k: float, dim: int) -> None:
    m_k = rotation_for_shift(k, dim)
    position_sets = [
        torch.arange(200, dtype=torch.float64),
        torch.rand(200, dtype=torch.float64) * 1000.0,
    ]
    for positions in position_sets:  # the same M_k for both sets of p
        pe = sinusoidal_encoding(positions, dim, dtype=torch.float64)
        shifted = sinusoidal_encoding(positions + k, dim, dtype=torch.float64)
        # Angles reach ~5000 rad: float64 rounding of p·ω is ~1e-12 there.
        assert_close(shifted, pe @ m_k.T, rtol=0, atol=1e-11)


def pe_parity_atol(max_angle: float) -> float:
    """References compute ω and p·ω in float32: a few ulp relative error on angles up to
    ``max_angle`` (ω_0 = 1), plus the float32 rounding of sin/cos."""
    return 4 * max_angle * EPS32 + 2 * EPS32


@pytest.mark.parametrize("channels", [2, 8, 64, 130])
def test_parity_positional_encodings_1d(channels: int) -> None:
    torch_encodings = pytest.importorskip("positional_encodings.torch_encodings")
    length = 256
    theirs = torch_encodings.PositionalEncoding1D(channels)(torch.zeros(2, length, channels))
    ours = SinusoidalEncoding(channels)(torch.arange(length).expand(2, length))
    assert_close(ours, theirs, rtol=0, atol=pe_parity_atol(length - 1))


@pytest.mark.parametrize("dim", [2, 16, 64, 130])
def test_parity_x_transformers_scaled_sinusoidal(dim: int) -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    length, gain = 256, 0.37
    theirs_module = xt.ScaledSinusoidalEmbedding(dim)
    ours_module = ScaledSinusoidalEncoding(dim)
    assert_close(ours_module.gain.reshape(1), theirs_module.scale.detach(), rtol=0, atol=0)
    with torch.no_grad():
        theirs_module.scale.fill_(gain)
        ours_module.gain.fill_(gain)
    x = torch.zeros(1, length, dim)
    theirs = theirs_module(x).detach()  # positions arange(length)
    ours = ours_module(torch.arange(length)).detach()
    assert_close(ours, theirs, rtol=0, atol=gain * pe_parity_atol(length - 1))
    offset_pos = torch.arange(length, dtype=torch.float32) + 1000.5
    theirs = theirs_module(x, pos=offset_pos).detach()
    ours = ours_module(offset_pos).detach()
    assert_close(ours, theirs, rtol=0, atol=gain * pe_parity_atol(length + 1000.5))


@pytest.mark.parametrize("layout", ["concat", "interleaved"])
def test_scaled_equals_gain_times_encoding(layout: str) -> None:
    dim, positions = 10, torch.tensor([[0.0, 3.5, 77.0], [1e6, 2.0, 9.25]], dtype=torch.float64)
    pe = ScaledSinusoidalEncoding(dim, base=300.0, layout=layout, dtype=torch.float64)
    assert_close(pe.gain.detach(), torch.tensor(dim**-0.5, dtype=torch.float64), rtol=0, atol=0)
    with torch.no_grad():
        pe.gain.fill_(1.75)
    expected = 1.75 * reference(positions, dim, 300.0, layout)
    assert_close(pe(positions), expected, rtol=0, atol=4e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_scaled_output_dtype_follows_gain(dtype: torch.dtype) -> None:
    positions = torch.arange(40)
    pe = ScaledSinusoidalEncoding(8).to(dtype)
    gain = float(pe.gain.detach())  # already rounded to dtype
    expected = (gain * reference(positions, 8, layout="concat")).to(dtype)
    assert_close(pe(positions), expected, rtol=0, atol=0)
    assert_close(ScaledSinusoidalEncoding(8, dtype=dtype)(positions), expected, rtol=0, atol=0)


def test_scaled_gradcheck_wrt_gain() -> None:
    pe = ScaledSinusoidalEncoding(6, dtype=torch.float64)
    positions = torch.tensor([[0.0, 1.5, 9.0], [100.0, 3.0, 2.25]])

    def f(gain: torch.Tensor) -> torch.Tensor:
        return functional_call(pe, {"gain": gain}, (positions,))

    gain = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (gain,))
    pe(positions).sum().backward()
    assert pe.gain.grad is not None


BAD_CONSTRUCTOR_ARGS = [
    ({"dim": 0}, "dim"),
    ({"dim": -4}, "dim"),
    ({"dim": 8, "base": 0.0}, "base"),
    ({"dim": 8, "base": -10.0}, "base"),
    ({"dim": 8, "base": float("nan")}, "base"),
    ({"dim": 8, "layout": "halves"}, "layout"),
    ({"dim": 7, "layout": "concat"}, "dim"),
    ({"dim": 8, "dtype": torch.int64}, "dtype"),
]


@pytest.mark.parametrize(("kwargs", "name"), BAD_CONSTRUCTOR_ARGS)
@pytest.mark.parametrize(
    "build",
    [
        lambda **kw: sinusoidal_encoding(torch.arange(3), **kw),
        lambda **kw: SinusoidalEncoding(**kw),
        lambda **kw: ScaledSinusoidalEncoding(**{"layout": "interleaved", **kw}),
    ],
    ids=["function", "SinusoidalEncoding", "ScaledSinusoidalEncoding"],
)
def test_bad_arguments_raise(build, kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        build(**kwargs)


def test_scaled_default_layout_concat_needs_even_dim() -> None:
    with pytest.raises(ValueError, match="dim"):
        ScaledSinusoidalEncoding(5)


BAD_POSITIONS = {
    "nan": torch.tensor([0.0, float("nan")]),
    "inf": torch.tensor([0.0, float("inf")]),
    "3d": torch.zeros(2, 3, 4),
    "0d": torch.tensor(3),
    "bool": torch.tensor([True, False]),
    "list": [0, 1, 2],
}


@pytest.mark.parametrize("kind", BAD_POSITIONS)
@pytest.mark.parametrize(
    "encode",
    [
        lambda p: sinusoidal_encoding(p, 8),
        lambda p: SinusoidalEncoding(8)(p),
        lambda p: ScaledSinusoidalEncoding(8)(p),
    ],
    ids=["function", "SinusoidalEncoding", "ScaledSinusoidalEncoding"],
)
def test_bad_positions_raise(encode, kind: str) -> None:
    with pytest.raises(ValueError, match="positions"):
        encode(BAD_POSITIONS[kind])

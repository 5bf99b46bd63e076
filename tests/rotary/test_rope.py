"""RotaryEmbedding: parity with HF and rotary-embedding-torch, properties, dtypes, bad input."""

from __future__ import annotations

import pytest
import torch

from posenc.rotary import DynamicNTK, YaRN
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.rope import RotaryEmbedding

LAYOUTS = ["half", "interleaved"]


def pairwise_rotation(x: torch.Tensor, positions: torch.Tensor, rotary_dim: int, layout: str):
    """Float64 reference: rotate each channel pair (a, b) by the 2x2 matrix of angle m·θ_i."""
    half = rotary_dim // 2
    theta = torch.tensor([10000.0 ** (-2 * i / rotary_dim) for i in range(half)], dtype=x.dtype)
    angle = positions.to(x.dtype)[..., None] * theta  # (seq, half) or (batch, seq, half)
    if angle.dim() == 3:
        angle = angle[:, None]
    first = torch.arange(half) if layout == "half" else 2 * torch.arange(half)
    second = first + half if layout == "half" else first + 1
    a, b = x[..., first], x[..., second]
    out = x.clone()
    out[..., first] = a * angle.cos() - b * angle.sin()
    out[..., second] = a * angle.sin() + b * angle.cos()
    return out


@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(32, 32), (32, 16), (48, 8)])
@pytest.mark.parametrize("offset", [0, 5])
def test_interleaved_matches_rotary_embedding_torch(
    head_dim: int, rotary_dim: int, offset: int
) -> None:
    ret = pytest.importorskip("rotary_embedding_torch")
    theirs = ret.RotaryEmbedding(dim=rotary_dim, cache_if_possible=False)
    x = torch.randn(2, 3, 11, head_dim)
    expected = theirs.rotate_queries_or_keys(x, offset=offset)
    rope = RotaryEmbedding(head_dim, rotary_dim=rotary_dim, layout="interleaved")
    ours = rope.rotate(x, torch.arange(offset, offset + 11))
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary_dim", [16, 10])
def test_matches_pairwise_rotation_matrices(layout: str, rotary_dim: int) -> None:
    x = torch.randn(2, 3, 6, 16, dtype=torch.float64)
    positions = torch.tensor([[0.0, 1.0, 2.5, 7.0, 1000.0, 12345.25], [3, 4, 5, 6, 7, 8]])
    rope = RotaryEmbedding(16, rotary_dim=rotary_dim, layout=layout)
    expected = pairwise_rotation(x, positions.double(), rotary_dim, layout)
    torch.testing.assert_close(rope.rotate(x, positions), expected)


def scores(rope: RotaryEmbedding, q, k, q_pos, k_pos) -> torch.Tensor:
    q_rot, k_rot = rope(q, k, q_pos, k_pos)
    return (q_rot * k_rot).sum(-1)  # (1, 1, n): score of pair j is q_j · k_j


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fractional", [False, True])
def test_scores_depend_only_on_relative_position(layout: str, fractional: bool) -> None:
    n, d = 64, 32
    rope = RotaryEmbedding(d, layout=layout)
    q, k = (torch.randn(1, 1, n, d, dtype=torch.float64) for _ in range(2))
    m, k_pos, shift = (torch.randint(0, 5000, (n,)) for _ in range(3))
    if fractional:
        m = m + torch.rand(n, dtype=torch.float64)
        k_pos = k_pos + torch.rand(n, dtype=torch.float64)
    base = scores(rope, q, k, m, k_pos)
    torch.testing.assert_close(scores(rope, q, k, m + shift, k_pos + shift), base)
    torch.testing.assert_close(scores(rope, q, k, m - k_pos, torch.zeros(n)), base)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rotation_keeps_norms_and_position_zero_is_identity(layout: str) -> None:
    x = torch.randn(2, 3, 9, 24, dtype=torch.float64)
    rope = RotaryEmbedding(24, rotary_dim=16, layout=layout)
    rotated = rope.rotate(x, torch.randint(0, 10**6, (9,)))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rotated[..., 16:], x[..., 16:], rtol=0, atol=0)
    torch.testing.assert_close(rope.rotate(x, torch.zeros(9, dtype=torch.long)), x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kv_cache_suffix_equals_rows_of_full_rotation(layout: str) -> None:
    rope = RotaryEmbedding(16, layout=layout)
    x = torch.randn(2, 4, 12, 16)
    full = rope.rotate(x, torch.arange(12))
    torch.testing.assert_close(rope.rotate(x[:, :, 9:], torch.arange(9, 12)), full[:, :, 9:])
    # forward: 3 new queries against 12 cached keys, GQA (4 query heads, 2 key heads).
    q, k = torch.randn(2, 4, 3, 16), x[:, :2]
    q_rot, k_rot = rope(q, k, torch.arange(9, 12), torch.arange(12))
    torch.testing.assert_close(q_rot, rope.rotate(q, torch.arange(9, 12)), rtol=0, atol=0)
    torch.testing.assert_close(k_rot, full[:, :2], rtol=0, atol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_batched_positions_rotate_each_row(layout: str) -> None:
    rope = RotaryEmbedding(8, layout=layout)
    x = torch.randn(3, 2, 5, 8)
    positions = torch.randint(0, 100, (3, 5))
    rows = [rope.rotate(x[b : b + 1], positions[b]) for b in range(3)]
    torch.testing.assert_close(rope.rotate(x, positions), torch.cat(rows), rtol=0, atol=0)


def test_model_dtype_cast_leaves_frequencies_alone() -> None:
    rope = RotaryEmbedding(16).to(torch.bfloat16)
    assert rope.state_dict() == {}
    torch.testing.assert_close(rope.inv_freq(), rope_inv_freq(16), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dtype_forward_is_float32_rotation_rounded_once(dtype: torch.dtype, layout: str) -> None:
    rope = RotaryEmbedding(32, rotary_dim=24, layout=layout)
    x = torch.randn(2, 3, 10, 32).to(dtype)
    positions = torch.arange(1000, 1010)
    out = rope.rotate(x, positions)
    assert out.dtype == dtype
    expected = rope.rotate(x.float(), positions).to(dtype)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_float64_path_stays_float64() -> None:
    rope = RotaryEmbedding(16)
    x = torch.randn(1, 2, 5, 16, dtype=torch.float64)
    positions = torch.arange(2**30, 2**30 + 5)
    out = rope.rotate(x, positions)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, pairwise_rotation(x, positions, 16, "half"))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"head_dim": 0}, "head_dim"),
        ({"head_dim": 64, "rotary_dim": 31}, "rotary_dim"),
        ({"head_dim": 32, "rotary_dim": 64}, "rotary_dim"),
        ({"head_dim": 32, "base": 0.0}, "base"),
        ({"head_dim": 32, "base": -5.0}, "base"),
        ({"head_dim": 32, "layout": "neox"}, "layout"),
        ({"head_dim": 32, "dtype": torch.int32}, "dtype"),
    ],
)
def test_constructor_rejects(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        RotaryEmbedding(**kwargs)


def test_forward_rejects() -> None:
    rope = RotaryEmbedding(16)
    q, k, pos = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16), torch.arange(4)
    cases = [
        ((torch.randn(1, 2, 4, 8), k, pos, pos), r"\bq\b"),
        ((q, torch.randn(1, 2, 4, 8), pos, pos), r"\bk\b"),
        ((torch.randn(2, 4, 16), k, pos, pos), r"\bq\b"),
        ((q, k, torch.tensor([0.0, float("nan"), 2.0, 3.0]), pos), "q_pos"),
        ((q, k, pos, pos[None, None]), "k_pos"),
        ((q, k, torch.arange(5), pos), "q_pos"),
        ((q, k, pos, torch.arange(3)), "k_pos"),
        ((q, k, torch.arange(8).view(2, 4), pos), "q_pos"),
    ]
    for args, name in cases:
        with pytest.raises(ValueError, match=name):
            rope(*args)


def test_rotate_rejects() -> None:
    rope = RotaryEmbedding(8)
    with pytest.raises(ValueError, match="positions"):
        rope.rotate(torch.randn(1, 1, 3, 8), torch.arange(4))
    with pytest.raises(ValueError, match=r"\bx\b"):
        rope.rotate(torch.randn(1, 1, 3, 6), torch.arange(3))


@pytest.mark.parametrize(
    "make",
    [
        lambda: RotaryEmbedding(16),
        lambda: RotaryEmbedding(16, rotary_dim=8, layout="interleaved"),
        lambda: RotaryEmbedding(16, scaling=YaRN(4.0, 64)),
        lambda: RotaryEmbedding(16, scaling=DynamicNTK(2.0, 64)),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_memoised_position_tables_give_the_computed_bits(make, dtype) -> None:
    # Public calls gather integer CPU positions from memoised tables of 0 … n − 1; every row
    # must equal the tables computed for the positions themselves (float positions, which
    # never gather), including after a length-dependent scaling changed its frequencies.
    from posenc.rotary.rope import TABLE_CACHE_POSITIONS

    rope = make()
    cases = [
        torch.arange(300),
        torch.tensor([[5, 0, 299], [7, 7, 3]]),
        torch.arange(200, 260),  # grows nothing: 256 … rows already there
        torch.tensor([1000, 2]),  # grows the memo (dynamic NTK: and rescales)
        torch.tensor([-3, 4]),  # negative: computed
        torch.tensor([TABLE_CACHE_POSITIONS + 5]),  # past the memo's cap: computed
    ]
    for positions in cases:
        got = rope.cos_sin(positions, dtype)
        expected = rope.cos_sin(positions.to(torch.float64), dtype)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == dtype
            assert torch.equal(g, e)
    assert all(t[0].shape[0] <= TABLE_CACHE_POSITIONS for t in rope._table_memo.values())


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_consecutive_positions_read_the_memo_and_leave_it_alone(layout) -> None:
    # Consecutive integer positions (a prompt, a cache's new block) rotate by slices of the
    # memoised tables; the result equals that of the same positions gathered (a batch of
    # one) and of float positions (computed), and nothing the caller gets back shares the
    # memo: cos_sin's tables written to change no later rotation.
    rope = RotaryEmbedding(16, rotary_dim=12, layout=layout)
    q, k = torch.randn(2, 3, 37, 16), torch.randn(2, 1, 37, 16)
    positions = torch.arange(5, 42)
    got = rope(q, k, positions, positions)
    cos, sin = rope.cos_sin(positions)
    cos.fill_(2.0), sin.fill_(3.0)
    for expected in (
        rope(q, k, positions[None], positions[None]),
        rope(q, k, positions.double(), positions.double()),
        rope(q, k, positions, positions),
    ):
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g, e)


# Every test here runs on the pure-torch rotation and on the fast kernels.
pytestmark = pytest.mark.usefixtures("every_rotary_impl")

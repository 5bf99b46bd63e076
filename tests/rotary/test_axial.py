"""2D axial RoPE: relative (Δx, Δy) scores, 1D RoPE along a row, parity, errors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import hooks_of
from posenc.encoding.protocols import RotaryEncoding
from posenc.rotary import AxialRotary2D, RotaryEmbedding, axial_cos_sin
from posenc.rotary.layouts import rotary_channel_permutation

LAYOUTS = ["interleaved", "half"]


def _qk(head_dim: int, seq: int, batch: int = 2, heads: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(batch, heads, seq, head_dim, generator=g, dtype=torch.float64)
    return q, k


def _scores(rope: AxialRotary2D, q, k, q_pos, k_pos):
    q_rot, k_rot = rope(q, k, q_pos, k_pos)
    return q_rot @ k_rot.transpose(-1, -2)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scores_depend_only_on_offsets(layout: str) -> None:
    height, width, head_dim = 6, 7, 16
    rope = AxialRotary2D(head_dim, height, width, layout=layout)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 1, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 1, head_dim, generator=g, dtype=torch.float64)

    def score(qy: int, qx: int, ky: int, kx: int) -> torch.Tensor:
        return _scores(rope, q, k, torch.tensor([qy * width + qx]), torch.tensor([ky * width + kx]))

    base = score(1, 2, 0, 4)
    assert_close(score(3, 2, 2, 4), base)  # shift y
    assert_close(score(1, 4, 0, 6), base)  # shift x
    assert_close(score(4, 3, 3, 5), base)  # shift both
    assert not torch.allclose(score(1, 2, 0, 5), base)  # another Δx changes the score
    assert not torch.allclose(score(2, 2, 0, 4), base)  # another Δy changes the score


def test_whole_grid_shift_keeps_scores() -> None:
    height, width, head_dim = 5, 5, 8
    rope = AxialRotary2D(head_dim, height, width)
    q, k = _qk(head_dim, 4)
    coords = torch.tensor([[0, 0], [0, 2], [1, 1], [2, 0]])  # (y, x) of 4 tokens
    shifted = coords + torch.tensor([2, 1])
    pos = coords[:, 0] * width + coords[:, 1]
    pos_shifted = shifted[:, 0] * width + shifted[:, 1]
    assert_close(_scores(rope, q, k, pos_shifted, pos_shifted), _scores(rope, q, k, pos, pos))


def test_first_row_is_1d_rope_on_x_half() -> None:
    head_dim, width = 16, 9
    rope = AxialRotary2D(head_dim, 3, width, base=100.0)
    reference = RotaryEmbedding(
        head_dim, rotary_dim=head_dim // 2, base=100.0, layout="interleaved"
    )
    q, k = _qk(head_dim, width)
    positions = torch.arange(width)  # row 0: x = t, y = 0 (the y half is not rotated)
    got_q, got_k = rope(q, k, positions, positions)
    want_q, want_k = reference(q, k, positions, positions)
    assert_close(got_q, want_q)
    assert_close(got_k, want_k)


def test_first_column_is_1d_rope_on_y_half() -> None:
    head_dim, height, width = 8, 6, 4
    rope = AxialRotary2D(head_dim, height, width, base=100.0)
    reference = RotaryEmbedding(head_dim // 2, base=100.0, layout="interleaved")
    q, k = _qk(head_dim, height)
    rows = torch.arange(height)
    got_q, _ = rope(q, k, rows * width, rows * width)  # x = 0, y = row
    want_q, _ = reference(q[..., head_dim // 2 :], k[..., head_dim // 2 :], rows, rows)
    assert_close(got_q, torch.cat([q[..., : head_dim // 2], want_q], dim=-1))


def test_half_layout_is_interleaved_permuted() -> None:
    head_dim = 12
    perm = rotary_channel_permutation(head_dim, "interleaved", "half")
    inter = AxialRotary2D(head_dim, 3, 4, layout="interleaved")
    half = AxialRotary2D(head_dim, 3, 4, layout="half")
    q, k = _qk(head_dim, 12)
    pos = torch.arange(12)
    q_i, k_i = inter(q, k, pos, pos)
    q_h, k_h = half(q[..., perm], k[..., perm], pos, pos)
    assert_close(q_h, q_i[..., perm])
    assert_close(k_h, k_i[..., perm])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_norms_preserved(layout: str) -> None:
    rope = AxialRotary2D(16, 4, 4, layout=layout)  # type: ignore[arg-type]
    q, k = _qk(16, 16)
    pos = torch.arange(16)
    q_rot, k_rot = rope(q, k, pos, pos)
    assert_close(q_rot.norm(dim=-1), q.norm(dim=-1))
    assert_close(k_rot.norm(dim=-1), k.norm(dim=-1))


def test_separate_and_batched_positions() -> None:
    rope = AxialRotary2D(8, 4, 4)
    q = torch.randn(2, 1, 3, 8)
    k = torch.randn(2, 1, 5, 8)
    q_pos = torch.tensor([[0, 5, 15], [1, 2, 3]])
    k_pos = torch.tensor([4, 6, 8, 10, 12])
    q_rot, k_rot = rope(q, k, q_pos, k_pos)
    for b in range(2):
        want_q = rope.rotate(q[b : b + 1], q_pos[b])
        assert_close(q_rot[b : b + 1], want_q)
    assert_close(k_rot, rope.rotate(k, k_pos))
    assert q_rot.shape == q.shape and k_rot.shape == k.shape


def test_dtypes_follow_input() -> None:
    rope = AxialRotary2D(8, 2, 2)
    pos = torch.arange(4)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        q = torch.randn(1, 1, 4, 8, dtype=dtype)
        q_rot, k_rot = rope(q, q, pos, pos)
        assert q_rot.dtype == dtype and k_rot.dtype == dtype
        expected = rope(q.double(), q.double(), pos, pos)[0].to(dtype)
        assert_close(q_rot, expected)


def test_parity_with_rotary_embedding_torch_axial() -> None:
    ret = pytest.importorskip("rotary_embedding_torch")
    height, width, head_dim = 3, 5, 16
    reference = ret.RotaryEmbedding(dim=head_dim // 2, theta=100)
    freqs = reference.get_axial_freqs(height, width).reshape(height * width, head_dim)
    q, _ = _qk(head_dim, height * width)
    q = q.float()
    # rotary-embedding-torch orders the axes [y | x]; RoPE-ViT (and we) order them [x | y].
    swap = torch.cat([torch.arange(head_dim // 2, head_dim), torch.arange(head_dim // 2)])
    want = ret.apply_rotary_emb(freqs, q[..., swap])[..., swap]
    rope = AxialRotary2D(head_dim, height, width, base=100.0)
    pos = torch.arange(height * width)
    assert_close(rope(q, q, pos, pos)[0], want, rtol=1e-5, atol=1e-5)


def test_is_a_rotary_encoding_without_parameters() -> None:
    rope = AxialRotary2D(8, 2, 2)
    assert isinstance(rope, RotaryEncoding)
    assert hooks_of(rope).rotary and not hooks_of(rope).logit_terms
    # its frequencies are a buffer rebuilt from the arguments: nothing to learn or to save
    assert list(rope.parameters()) == [] and rope.state_dict() == {}


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"head_dim": 6}, "head_dim"),
        ({"head_dim": 0}, "head_dim"),
        ({"height": 0}, "height"),
        ({"width": 1.5}, "width"),
        ({"base": -1.0}, "base"),
        ({"layout": "neox"}, "layout"),
        ({"dtype": torch.int32}, "dtype"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"head_dim": 8, "height": 2, "width": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        AxialRotary2D(**args)  # type: ignore[arg-type]


def test_forward_errors() -> None:
    rope = AxialRotary2D(8, 2, 3)
    q = torch.randn(1, 1, 6, 8)
    pos = torch.arange(6)
    with pytest.raises(ValueError, match=r"q_pos.*height=2, width=3"):
        rope(q, q, torch.arange(1, 7), pos)
    with pytest.raises(ValueError, match="k_pos"):
        rope(q, q, pos, pos - 1)
    with pytest.raises(ValueError, match="k_pos"):
        rope(q, q, pos, pos + 0.5)
    with pytest.raises(ValueError, match="q_pos"):
        rope(q, q, torch.arange(5), pos)
    with pytest.raises(ValueError, match="head_dim"):
        rope(torch.randn(1, 1, 6, 4), q, pos, pos)
    with pytest.raises(ValueError, match="k must"):
        rope(q, q[0], pos, pos)


def test_axial_cos_sin_errors() -> None:
    with pytest.raises(ValueError, match="head_dim"):
        axial_cos_sin(torch.arange(2), torch.arange(2), 10)
    with pytest.raises(ValueError, match="x and y"):
        axial_cos_sin(torch.arange(2), torch.arange(3), 8)

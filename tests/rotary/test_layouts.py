"""Layout conversion: channel permutations and q/k weight permutation between half/interleaved."""

from __future__ import annotations

import pytest
import torch

from posenc.rotary.layouts import permute_rotary_weight, rotary_channel_permutation
from posenc.rotary.rope import RotaryEmbedding


def test_interleaved_to_half_anchor() -> None:
    expected = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    torch.testing.assert_close(rotary_channel_permutation(8, "interleaved", "half"), expected)


@pytest.mark.parametrize("rotary_dim", [2, 6, 64])
def test_permutations_are_inverse_and_same_layout_is_identity(rotary_dim: int) -> None:
    to_half = rotary_channel_permutation(rotary_dim, "interleaved", "half")
    to_interleaved = rotary_channel_permutation(rotary_dim, "half", "interleaved")
    identity = torch.arange(rotary_dim)
    torch.testing.assert_close(to_half[to_interleaved], identity)
    torch.testing.assert_close(to_interleaved[to_half], identity)
    for layout in ("half", "interleaved"):
        torch.testing.assert_close(rotary_channel_permutation(rotary_dim, layout, layout), identity)


def test_weight_matches_hf_llama_converter_formula() -> None:
    # Documented anchor: HF's Llama converter maps Meta (interleaved) q/k weights to the half
    # layout with w.view(heads, head_dim // 2, 2, in).transpose(1, 2).reshape(heads*head_dim, in).
    heads, head_dim, in_features = 3, 8, 5
    weight = torch.randn(heads * head_dim, in_features)
    expected = (
        weight.view(heads, head_dim // 2, 2, in_features)
        .transpose(1, 2)
        .reshape(heads * head_dim, in_features)
    )
    torch.testing.assert_close(permute_rotary_weight(weight, heads, head_dim), expected)


def test_partial_rotary_keeps_pass_through_rows_and_bias_works() -> None:
    heads, head_dim, rotary_dim = 2, 10, 4
    bias = torch.arange(heads * head_dim, dtype=torch.float32)
    out = permute_rotary_weight(bias, heads, head_dim, rotary_dim=rotary_dim)
    expected = torch.tensor([0, 2, 1, 3, 4, 5, 6, 7, 8, 9], dtype=torch.float32)
    torch.testing.assert_close(out, torch.cat((expected, expected + head_dim)))
    back = permute_rotary_weight(
        out, heads, head_dim, rotary_dim=rotary_dim, src="half", dst="interleaved"
    )
    torch.testing.assert_close(back, bias)


@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(16, 16), (12, 8)])
@pytest.mark.parametrize(("src", "dst"), [("interleaved", "half"), ("half", "interleaved")])
def test_layouts_agree_after_weight_permutation(
    head_dim: int, rotary_dim: int, src: str, dst: str
) -> None:
    batch, seq, hidden, q_heads, k_heads = 2, 7, 24, 4, 2
    x = torch.randn(batch, seq, hidden, dtype=torch.float64)
    w_q = torch.randn(q_heads * head_dim, hidden, dtype=torch.float64)
    w_k = torch.randn(k_heads * head_dim, hidden, dtype=torch.float64)
    b_q = torch.randn(q_heads * head_dim, dtype=torch.float64)
    positions = torch.arange(100, 100 + seq) + 0.5

    def project(weight, bias, heads):  # (batch, heads, seq, head_dim)
        y = x @ weight.T + (0 if bias is None else bias)
        return y.view(batch, seq, heads, head_dim).transpose(1, 2)

    def permute(weight, heads):
        return permute_rotary_weight(
            weight, heads, head_dim, rotary_dim=rotary_dim, src=src, dst=dst
        )

    rope_src = RotaryEmbedding(head_dim, rotary_dim=rotary_dim, layout=src)
    rope_dst = RotaryEmbedding(head_dim, rotary_dim=rotary_dim, layout=dst)
    q_src, k_src = rope_src(
        project(w_q, b_q, q_heads), project(w_k, None, k_heads), positions, positions
    )
    q_dst, k_dst = rope_dst(
        project(permute(w_q, q_heads), permute(b_q, q_heads), q_heads),
        project(permute(w_k, k_heads), None, k_heads),
        positions,
        positions,
    )
    per_head = torch.cat(
        (rotary_channel_permutation(rotary_dim, src, dst), torch.arange(rotary_dim, head_dim))
    )
    torch.testing.assert_close(q_dst, q_src[..., per_head])
    torch.testing.assert_close(k_dst, k_src[..., per_head])
    k_src, k_dst = k_src.repeat_interleave(2, dim=1), k_dst.repeat_interleave(2, dim=1)  # GQA
    torch.testing.assert_close(q_dst @ k_dst.transpose(-1, -2), q_src @ k_src.transpose(-1, -2))


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((torch.randn(10, 4), 2, 4), {}, "weight"),
        ((torch.randn(8, 4, 2), 2, 4), {}, "weight"),
        ((torch.randn(8, 4), 0, 4), {}, "num_heads"),
        ((torch.randn(8, 4), 2, 0), {}, "head_dim"),
        ((torch.randn(8, 4), 2, 4), {"rotary_dim": 6}, "rotary_dim"),
        ((torch.randn(8, 4), 2, 4), {"rotary_dim": 3}, "rotary_dim"),
        ((torch.randn(8, 4), 2, 4), {"src": "neox"}, "src"),
        ((torch.randn(8, 4), 2, 4), {"dst": "gptj"}, "dst"),
    ],
)
def test_permute_rotary_weight_rejects(args: tuple, kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        permute_rotary_weight(*args, **kwargs)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((5, "half", "interleaved"), "rotary_dim"),
        ((4, "x", "half"), "src"),
        ((4, "half", 1), "dst"),
    ],
)
def test_rotary_channel_permutation_rejects(args: tuple, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        rotary_channel_permutation(*args)

"""T5 bucketed bias: parity with HF buckets and compute_bias, sharing, gradcheck, bad input."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.bias import T5RelativeBias, t5_bucket

BUCKET_CONFIGS = [(32, 128), (16, 64), (64, 256)]


def _hf_t5():
    return pytest.importorskip("transformers.models.t5.modeling_t5")


@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKET_CONFIGS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_bucket_matches_hf(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    hf = _hf_t5()
    rel = torch.arange(-1000, 1001)
    expected = hf.T5Attention._relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    ours = t5_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert ours.dtype == torch.long
    assert torch.equal(ours, expected)


def test_bucket_documented_anchors() -> None:
    # anchors-other.md §2.2: first distance of each bucket (32 buckets, max distance 128).
    past = torch.tensor([0, 7, 8, 12, 16, 23, 32, 46, 64, 91, 500])
    expected = torch.tensor([0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15])
    assert torch.equal(t5_bucket(-past), expected)
    assert torch.equal(t5_bucket(past[1:]), expected[1:] + 16)
    causal = torch.tensor([15, 16, 19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113])
    assert torch.equal(t5_bucket(-causal, bidirectional=False), torch.arange(15, 32))
    assert torch.equal(t5_bucket(torch.arange(1, 50), bidirectional=False), torch.zeros(49).long())


def _hf_attention(num_heads: int, num_buckets: int, max_distance: int, is_decoder: bool):
    hf = _hf_t5()
    from transformers import T5Config

    config = T5Config(
        d_model=16,
        d_kv=4,
        num_heads=num_heads,
        relative_attention_num_buckets=num_buckets,
        relative_attention_max_distance=max_distance,
        is_decoder=is_decoder,
    )
    return hf.T5Attention(config, has_relative_attention_bias=True, layer_idx=0)


@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKET_CONFIGS)
@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize(("q_len", "k_len"), [(40, 40), (1, 300), (5, 37)])
def test_bias_matches_hf_compute_bias(
    num_buckets: int, max_distance: int, is_decoder: bool, q_len: int, k_len: int
) -> None:
    heads = 3
    hf_attn = _hf_attention(heads, num_buckets, max_distance, is_decoder)
    past = k_len - q_len  # KV cache: the queries are the last q_len positions
    with torch.no_grad():
        expected = hf_attn.compute_bias(q_len, k_len, past_seen_tokens=past)
    ours = T5RelativeBias(
        heads, num_buckets=num_buckets, max_distance=max_distance, bidirectional=not is_decoder
    )
    with torch.no_grad():
        ours.weight.copy_(hf_attn.relative_attention_bias.weight)
        result = ours.bias(torch.arange(past, k_len), torch.arange(k_len))
    assert_close(result[None], expected, rtol=0, atol=0)


def test_batched_positions_and_shift_invariance() -> None:
    t5 = T5RelativeBias(2)
    q_pos = torch.tensor([[3, 4], [100, 101]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4], [97, 98, 99, 100, 101]])
    bias = t5.bias(q_pos, k_pos)
    assert bias.shape == (2, 2, 2, 5)
    assert_close(bias[0], bias[1])  # same relative layout
    assert_close(bias[0], t5.bias(q_pos[0], k_pos[0]))
    # Whole-valued float positions are accepted.
    assert_close(t5.bias(q_pos[0].double(), k_pos[0].float()), bias[0])


def test_shared_across_layers_and_no_scaling() -> None:
    assert T5RelativeBias.shared_across_layers is True
    t5 = T5RelativeBias(2, num_buckets=8, max_distance=16, dtype=torch.float64)
    pos = torch.arange(3)
    # Raw table entries, no 1/sqrt(d) factor: bucket(0) = 0 on the diagonal.
    assert_close(t5.bias(pos, pos).diagonal(dim1=-2, dim2=-1), t5.weight[0][:, None].expand(2, 3))


def test_gradcheck_table() -> None:
    t5 = T5RelativeBias(2, num_buckets=8, max_distance=16, dtype=torch.float64)
    q_pos, k_pos = torch.arange(3, 7), torch.arange(7)
    weight = t5.weight.detach().clone().requires_grad_(True)

    def fn(w: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(t5, {"weight": w}, (q_pos, k_pos))

    assert torch.autograd.gradcheck(fn, (weight,))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 2, "num_buckets": 1, "bidirectional": False}, "num_buckets"),
        ({"num_heads": 2, "num_buckets": 2}, "num_buckets"),
        ({"num_heads": 2, "num_buckets": 33}, "num_buckets"),
        ({"num_heads": 2, "num_buckets": 32, "max_distance": 8}, "max_distance"),
        (
            {"num_heads": 2, "num_buckets": 32, "max_distance": 16, "bidirectional": False},
            "max_distance",
        ),
        ({"num_heads": 2, "max_distance": 0}, "max_distance"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        T5RelativeBias(**kwargs)


def test_smallest_valid_bucket_counts() -> None:
    rel = torch.arange(-50, 51)
    causal = t5_bucket(rel, bidirectional=False, num_buckets=2, max_distance=2)
    assert torch.equal(causal, (rel < 0).long())
    both = t5_bucket(rel, num_buckets=4, max_distance=2)
    assert torch.equal(both, (rel < 0).long() + 2 * (rel > 0).long() + (rel > 0).long())


def test_bad_relative_position() -> None:
    with pytest.raises(ValueError, match="relative_position"):
        t5_bucket(torch.tensor([0.5]))

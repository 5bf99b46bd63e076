"""FlexAttention's score_mod is derived from bias_at, so it equals the materialized bias."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import Backend, attend, hooks_of
from posenc.attention.flex import flex_available, score_mod_of
from posenc.registry import ModelDims, build_encoding, list_encodings

pytestmark = pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")

HEADS = 4
BIAS_CASES = [
    ("alibi", {}),
    ("alibi", {"mode": "symmetric", "num_biased_heads": 2}),
    ("t5", {}),
    ("t5", {"bidirectional": False, "num_buckets": 8, "max_distance": 20}),
    ("kerple", {}),
    ("kerple", {"kernel": "power"}),
    ("sandwich", {}),
    ("fire", {}),
    ("dynamic", {}),
    ("dynamic", {"log_distance": True, "norm": True, "mode": "symmetric"}),
    ("grape_additive", {}),
]


def test_every_registered_bias_is_covered() -> None:
    biases = {spec.name for spec in list_encodings() if spec.family == "bias"}
    assert biases == {name for name, _ in BIAS_CASES}


def evaluate_score_mod(
    score_mod, batch: int, heads: int, q_len: int, k_len: int, dtype: torch.dtype
) -> torch.Tensor:
    """``score_mod(0, b, h, q, kv)`` at every index, vmapped over scalar indices as
    FlexAttention evaluates it."""
    zero = torch.zeros((), dtype=dtype)

    def fn(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return score_mod(zero, b, h, q, kv)

    for axis in (3, 2, 1, 0):  # kv innermost
        fn = torch.vmap(fn, in_dims=tuple(0 if i == axis else None for i in range(4)))
    return fn(torch.arange(batch), torch.arange(heads), torch.arange(q_len), torch.arange(k_len))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(("name", "kwargs"), BIAS_CASES)
def test_score_mod_equals_materialized_bias(
    name: str, kwargs: dict, batched: bool, dtype: torch.dtype
) -> None:
    encoding = build_encoding(name, ModelDims(dim=32, num_heads=HEADS), kwargs)
    for p in encoding.parameters():
        nn.init.normal_(p)
    hooks = hooks_of(encoding)
    q_pos = torch.tensor([[3, 4, 9], [0, 50, 300]]) if batched else torch.tensor([7, 8, 200])
    k_pos = (
        torch.tensor([[0, 1, 2, 3, 4, 9, 12], [0, 1, 50, 51, 200, 300, 299]])
        if batched
        else torch.arange(200, 207)
    )
    hooks.prepare(torch.device("cpu"), dtype)
    score_mod = score_mod_of(hooks, q_pos, k_pos)
    assert score_mod is not None
    got = evaluate_score_mod(score_mod, 2, HEADS, 3, 7, dtype)
    # bias_at on the grid (an encoding's bias_grid, the materialized paths' cheaper route to
    # the same values, is compared with it in its own tests).
    heads = torch.arange(HEADS).view(-1, 1, 1)
    want = encoding.bias_at(heads, q_pos[..., None, :, None], k_pos[..., None, None, :], dtype)
    if kwargs.get("kernel") == "power":
        # KERPLE's pow: its vectorized and scalar loops round differently, and vmap evaluates
        # each pair at another place of another tensor: equal to the dtype's rounding, not
        # bitwise. The other biases are lookups or elementwise ops whose result does not
        # depend on where the element sits: bitwise.
        rtol = 1e-12 if dtype == torch.float64 else 1e-6
        assert_close(got, want.expand(2, HEADS, 3, 7), rtol=rtol, atol=0)
    else:
        assert_close(got, want.expand(2, HEADS, 3, 7), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kwargs"), BIAS_CASES)
def test_compiled_flex_equals_reference(name: str, kwargs: dict) -> None:
    torch._dynamo.reset()
    encoding = build_encoding(name, ModelDims(dim=32, num_heads=HEADS), kwargs)
    q, k, v = (torch.randn(2, HEADS, 256, 16) for _ in range(3))
    padding = torch.ones(2, 256, dtype=torch.bool)
    padding[0, :40] = False
    with torch.no_grad():
        got = attend(
            q, k, v, pos=encoding, causal=True, key_padding_mask=padding, backend=Backend("flex")
        )
        want = attend(q, k, v, pos=encoding, causal=True, key_padding_mask=padding, backend="sdpa")
    assert_close(got, want, rtol=1e-5, atol=1e-5)

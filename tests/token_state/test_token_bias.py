"""The token-state hook's plumbing: block and score_mod agree, the cache keeps the states."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache
from posenc.token_state.fox import ForgettingGate
from posenc.token_state.token_bias import TokenBias
from tests.attention.test_flex import evaluate_score_mod


def test_score_mod_equals_the_materialized_block() -> None:
    fox = ForgettingGate(8, 3)
    q_state, k_state = torch.randn(2, 3, 4), torch.randn(2, 3, 6)
    bias = TokenBias(fox, q_state, k_state)
    whole = bias.block(0, 4, 6, torch.float32)
    assert_close(evaluate_score_mod(bias.score_mod(), 2, 3, 4, 6, torch.float32), whole)
    assert_close(bias.block(1, 3, 5, torch.float32), whole[:, :, 1:3, :5])


def test_the_cache_keeps_states_truncates_them_and_refuses_keys_without_them() -> None:
    torch.manual_seed(0)
    fox = ForgettingGate(8, 2)
    attn = Attention(8, 2, pos=fox)
    x = torch.randn(1, 5, 8)
    cache = KVCache()
    with torch.no_grad():
        attn(x, cache=cache)
        states = cache.token_states.clone()
        assert states.shape == (1, 2, 5)
        cache.truncate(3)
        assert_close(cache.token_states, states[..., :3])
        again = attn(x[:, 3:], cache=cache)  # decoding continues from the third key's state
        assert_close(cache.token_states, states)
        assert_close(again, attn(x)[:, 3:])
    plain = KVCache()
    with torch.no_grad():
        Attention(8, 2)(x, cache=plain)
    with pytest.raises(ValueError, match=r"^cache: this KVCache holds no token states"):
        _ = plain.token_states

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache
from posenc.rotary import RotaryEmbedding


def test_buffers_grow_by_doubling_and_keep_what_was_written() -> None:
    attn = Attention(16, 2, pos=RotaryEmbedding(8)).eval()
    x = torch.randn(1, 12, 16)
    cache = KVCache()
    with torch.no_grad():
        attn(x[:, :4], cache=cache)
        assert cache.capacity == 4
        attn(x[:, 4:5], cache=cache)
        assert (cache.length, cache.capacity) == (5, 8)
        for i in range(5, 12):
            attn(x[:, i : i + 1], cache=cache)
        assert (cache.length, cache.capacity) == (12, 16)
        reference = KVCache()
        attn(x, cache=reference)
    assert cache.k is not None and reference.k is not None
    assert_close(cache.k, reference.k)
    assert cache.positions is not None and torch.equal(cache.positions, torch.arange(12))


def test_truncate_rewinds_keys_and_positions() -> None:
    attn = Attention(16, 2, pos=RotaryEmbedding(8)).eval()
    x = torch.randn(1, 6, 16)
    cache = KVCache()
    with torch.no_grad():
        full = attn(x, cache=cache)
        cache.truncate(3)
        again = attn(x[:, 3:], cache=cache)
    assert_close(again, full[:, 3:])
    with pytest.raises(ValueError, match="length"):
        cache.truncate(10)


def test_gradients_flow_through_a_concatenating_cache() -> None:
    attn = Attention(16, 2, pos=RotaryEmbedding(8))
    x = torch.randn(1, 5, 16, requires_grad=True)
    cache = KVCache()
    out = torch.cat([attn(x[:, :3], cache=cache), attn(x[:, 3:], cache=cache)], dim=1)
    out.sum().backward()
    assert x.grad is not None
    grad = x.grad.clone()
    x.grad = None
    attn(x).sum().backward()
    assert_close(grad, x.grad)


def test_dtype_change_raises() -> None:
    attn = Attention(16, 2)
    cache = KVCache()
    with torch.no_grad():
        attn(torch.randn(1, 2, 16), cache=cache)
        with pytest.raises(ValueError, match="cache holds"):
            attn.double()(torch.randn(1, 1, 16, dtype=torch.float64), cache=cache)


def test_a_rolling_cache_stays_bounded_and_keeps_positions() -> None:
    """Attention sinks: keys no later query can see leave the cache in batches (at most as
    many dropped-but-unreleased keys as kept ones), the kept keys keep their positions, and
    decoding equals the full forward."""
    from posenc.segments import AttentionSinks

    torch.manual_seed(0)
    sinks, window = 2, 5
    attn = Attention(16, 2, pos=AttentionSinks(RotaryEmbedding(8), sinks=sinks, window=window))
    x = torch.randn(1, 60, 16)
    cache = KVCache()
    with torch.no_grad():
        steps = [attn(x[:, i : i + 1], cache=cache) for i in range(60)]
        full = attn(x)
        kept = sinks + window  # what the next query can see besides itself
        assert cache.length <= 2 * kept
        assert cache.evicted == 60 - cache.length
        assert cache.positions is not None
        assert cache.positions[:sinks].tolist() == list(range(sinks))
        assert cache.positions[-window:].tolist() == list(range(60 - window, 60))
        assert not cache.index_positions
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_release_drops_columns_everywhere_and_memos_follow() -> None:
    attn = Attention(16, 2, pos=RotaryEmbedding(8)).eval()
    cache = KVCache(keys="unrotated")
    with torch.no_grad():
        attn(
            torch.randn(1, 6, 16), cache=cache, key_padding_mask=torch.ones(1, 6, dtype=torch.bool)
        )
    keep = torch.tensor([True, False, False, False, True, True])
    cache.release(keep)
    assert cache.length == 3 and cache.evicted == 3
    assert cache.positions is not None and cache.positions.tolist() == [0, 4, 5]
    assert cache.key_padding_mask is not None and cache.key_padding_mask.shape == (1, 3)
    assert all(memo.length == 3 for memo in cache._memo.values())
    cache.release(torch.tensor([True, True, False]))  # fewer dropped than kept: not yet
    assert cache.length == 3


def test_a_cache_stays_bound_to_its_layer_after_that_layer_is_gone() -> None:
    """The cache remembers its layer weakly: a new layer built where a collected one was (the
    same id) is still another layer."""
    import gc

    cache = KVCache()
    first = Attention(16, 2, pos=RotaryEmbedding(8)).eval()
    with torch.no_grad():
        first(torch.randn(1, 3, 16), cache=cache)
    del first
    gc.collect()
    second = Attention(16, 2, pos=RotaryEmbedding(8)).eval()
    with pytest.raises(ValueError, match="cache: this KVCache already holds another"):
        second(torch.randn(1, 1, 16), cache=cache)


def _decode(attn: Attention, x: torch.Tensor, cache: KVCache, start: int, stop: int) -> list:
    return [attn(x[:, i : i + 1], cache=cache) for i in range(start, stop)]


def _rolling_attention(method: str) -> tuple[Attention, torch.Tensor]:
    """Attention whose cache rolls (``"sinks"``: 1 sink and a window of 3; ``"lm_infinite"``:
    a local window of 4 and 1 global token), and 30 tokens for it."""
    from posenc.segments import AttentionSinks, LMInfinite

    torch.manual_seed(0)
    rotary = RotaryEmbedding(8)
    pos = (
        AttentionSinks(rotary, sinks=1, window=3)
        if method == "sinks"
        else LMInfinite(rotary, local_window=4, global_tokens=1)
    )
    return Attention(16, 2, pos=pos).eval(), torch.randn(1, 30, 16)


@pytest.mark.parametrize("method", ["sinks", "lm_infinite"])
def test_rolling_back_a_rolling_cache_below_its_evicted_keys_raises(method: str) -> None:
    """Truncating a rolling cache below the length it had just after its last eviction would
    let the next queries miss keys it dropped: refused, naming both lengths."""
    attn, x = _rolling_attention(method)
    cache = KVCache()
    with torch.no_grad():
        _decode(attn, x, cache, 0, 20)
        assert cache.evicted > 0
        floor = cache.rollback_floor
        assert 0 < floor <= cache.length
        with pytest.raises(
            ValueError,
            match=rf"length must be >= {floor} .*got {floor - 1}.* dropped {cache.evicted} keys",
        ):
            cache.truncate(floor - 1)
        with pytest.raises(ValueError, match=rf"length must be >= {floor}"):
            cache.truncate(0)
        assert cache.length > floor - 1  # nothing was changed by the refusals


@pytest.mark.parametrize("method", ["sinks", "lm_infinite"])
def test_rolling_back_a_rolling_cache_to_its_floor_stays_exact(method: str) -> None:
    """From the earliest length it accepts, decoding again equals a fresh forward."""
    attn, x = _rolling_attention(method)
    cache = KVCache()
    with torch.no_grad():
        _decode(attn, x, cache, 0, 20)
        floor = cache.rollback_floor
        assert cache.positions is not None
        next_position = int(cache.positions[floor - 1]) + 1
        cache.truncate(floor)
        again = torch.cat(_decode(attn, x, cache, next_position, 30), dim=1)
        fresh = attn(x)
    assert_close(again, fresh[:, next_position:])


def test_a_cache_that_never_evicted_rolls_back_to_zero() -> None:
    cache = KVCache()
    attn = Attention(16, 2, pos=RotaryEmbedding(8)).eval()
    with torch.no_grad():
        attn(torch.randn(1, 5, 16), cache=cache)
    assert cache.rollback_floor == 0
    cache.truncate(0)
    assert cache.length == 0

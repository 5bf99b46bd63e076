"""Bad settings and misuse of a segment method raise ValueError naming the argument."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache, attend
from posenc.models import DecoderLM, ModelConfig
from posenc.rotary import RotaryEmbedding
from posenc.segments import AttentionSinks, DualChunk, LMInfinite, ReRoPE, SelfExtend, log_scale


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (SelfExtend, {"window": 0}, "window must be a positive integer"),
        (SelfExtend, {"window": 8, "group": -2}, "group must be a positive integer"),
        (SelfExtend, {"window": 4, "group": 8}, r"group \(8\) must be <= window \(4\)"),
        (SelfExtend, {"offset": "round"}, "offset"),
        (SelfExtend, {"log_scale_base": 1}, "log_scale_base must be an integer >= 2"),
        (ReRoPE, {"log_scale_base": 2.5}, "log_scale_base must be an integer >= 2"),
        (DualChunk, {"chunk_size": 0}, "chunk_size must be a positive integer"),
        (
            DualChunk,
            {"chunk_size": 8, "local_window": 8},
            r"local_window \(8\) must be < chunk_size \(8\)",
        ),
        (DualChunk, {"local_window": -1}, "local_window must be a non-negative integer \\(>= 0\\)"),
        (ReRoPE, {"window": -3}, "window must be a positive integer"),
        (ReRoPE, {"leak": 1.0}, "leak must be > 1"),
        (ReRoPE, {"leak": 0.0}, "leak"),
        (LMInfinite, {"local_window": 0}, "local_window"),
        (LMInfinite, {"global_tokens": 0}, "global_tokens"),
        (LMInfinite, {"local_window": 8, "limit": 4}, r"limit \(4\) must be >= local_window \(8\)"),
        (AttentionSinks, {"sinks": 0}, "sinks must be a positive integer"),
        (AttentionSinks, {"window": 0}, "window must be a positive integer"),
    ],
)
def test_settings_out_of_range_name_the_argument(cls: Any, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cls(RotaryEmbedding(8), **kwargs)


def test_registry_arguments_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match="windw"):
        DecoderLM(ModelConfig(dim=32, num_heads=4, pos="self_extend", pos_kwargs={"windw": 4}))
    model = DecoderLM(
        ModelConfig(
            dim=32,
            num_heads=4,
            pos="self_extend",
            pos_kwargs={"window": 4, "group": 2, "base": 500.0},
        )
    )
    assert model.encoding.rotary.base == 500.0 and model.encoding.window == 4


def test_bidirectional_attention_refuses_a_segment_method() -> None:
    se = SelfExtend(RotaryEmbedding(8), window=4, group=2)
    with pytest.raises(ValueError, match="causal attention only"):
        Attention(16, 2, pos=se, causal=False)
    q = torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match="causal attention only"):
        attend(q, q, q, pos=se, causal=False)


def test_a_method_needs_a_cache_of_unrotated_keys() -> None:
    attn = Attention(16, 2, pos=SelfExtend(RotaryEmbedding(8), window=4, group=2))
    with pytest.raises(ValueError, match="keys='unrotated'"):
        attn(torch.randn(1, 3, 16), cache=KVCache(keys="rotated"))
    with pytest.raises(ValueError, match="keys must be one of"):
        KVCache(keys="pre-rotated")  # type: ignore[arg-type]


def test_one_cache_serves_one_layer() -> None:
    model = DecoderLM(ModelConfig(dim=32, depth=2, num_heads=4, pos="rope"))
    shared = KVCache()
    with pytest.raises(
        ValueError, match="cache: this KVCache already holds another attention layer"
    ):
        model(torch.randint(0, 256, (1, 4)), cache=[shared, shared])


def test_a_rolling_cache_refuses_positions_it_cannot_renumber() -> None:
    attn = Attention(16, 2, pos=AttentionSinks(RotaryEmbedding(8), sinks=1, window=3)).eval()
    x = torch.randn(1, 30, 16)
    cache = KVCache()
    with torch.no_grad():
        for i in range(20):
            attn(x[:, i : i + 1], cache=cache)
        assert cache.evicted > 0
        with pytest.raises(ValueError, match="positions: this rolling KVCache dropped"):
            attn(x[:, 20:21], torch.tensor([10]), cache=cache)
        kept = KVCache(evict=False)
        for i in range(20):
            attn(x[:, i : i + 1], cache=kept)
        assert kept.evicted == 0 and kept.length == 20


# Integer settings: a numpy integer or a 0-d integer tensor is read as the Python int it holds
# (kept as such, so the segments' positions and reprs are those of the int); bool and floats get
# the shared message of posenc._validate.check_int.


def _integer_settings() -> list[tuple[str, Any]]:
    """``(what, call(n))``: segment settings read as ints; each returns the ints it stored."""
    from posenc.segments import PositionMap, Region

    def region(n: Any) -> tuple[Any, ...]:
        r = Region(lo=n - 3, hi=n, chunk=n, key_below=n, q_from=n - 3, q_below=n)
        return r.lo, r.hi, r.chunk, r.key_below, r.q_from, r.q_below

    return [
        ("PositionMap.div", lambda n: PositionMap(div=n).div),
        ("PositionMap.mod", lambda n: PositionMap(mod=n).mod),
        ("Region", region),
        (
            "DualChunk",
            lambda n: (lambda m: (m.chunk_size, m.local_window))(
                DualChunk(RotaryEmbedding(8), chunk_size=2 * n, local_window=n)
            ),
        ),
        (
            "LMInfinite.limit",
            lambda n: LMInfinite(RotaryEmbedding(8), local_window=n, limit=n).limit,
        ),
        (
            "SelfExtend.log_scale_base",
            lambda n: (
                SelfExtend(RotaryEmbedding(8), window=4, group=2, log_scale_base=n).log_scale_base
            ),
        ),
        ("ReRoPE.window", lambda n: ReRoPE(RotaryEmbedding(8), window=n).window),
    ]


@pytest.mark.parametrize("value", [np.int64(3), torch.tensor(3)], ids=["np.int64", "tensor"])
@pytest.mark.parametrize(
    ("what", "call"), _integer_settings(), ids=[w for w, _ in _integer_settings()]
)
def test_integer_settings_read_integral_scalars_as_ints(
    what: str, call: Callable[[Any], Any], value: object
) -> None:
    expected, got = call(3), call(value)
    assert got == expected
    leaves = got if isinstance(got, tuple) else (got,)
    assert all(type(x) is int for x in leaves), got


@pytest.mark.parametrize("value", [True, 2.5], ids=["bool", "float"])
@pytest.mark.parametrize(
    ("what", "call"), _integer_settings(), ids=[w for w, _ in _integer_settings()]
)
def test_integer_settings_refuse_bool_and_float_with_the_shared_message(
    what: str, call: Callable[[Any], Any], value: object
) -> None:
    with pytest.raises(
        ValueError, match=r"must be .*: an int, numpy integer or 0-d integer tensor"
    ):
        call(value)


@pytest.mark.parametrize("value", [np.int64(4), torch.tensor(4)], ids=["np.int64", "tensor"])
def test_log_scale_reads_an_integral_base_length(value: object) -> None:
    positions = torch.arange(-2, 20)
    got = log_scale(positions, value)  # type: ignore[arg-type]
    assert_close(got, log_scale(positions, 4), rtol=0, atol=0)


@pytest.mark.parametrize("value", [True, 2.5], ids=["bool", "float"])
def test_log_scale_refuses_bool_and_float_base_length_with_the_shared_message(
    value: object,
) -> None:
    with pytest.raises(ValueError, match=r"^base_length must be an integer >= 2: an int, numpy"):
        log_scale(torch.arange(4), value)  # type: ignore[arg-type]

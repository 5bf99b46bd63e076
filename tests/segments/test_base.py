"""The description of a segment method: position maps, regions (and the key ranges the
chunked backend derives from them), the method base class and its errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from posenc.bias import AlibiBias
from posenc.rotary import MultiAxisRotary, RotaryEmbedding
from posenc.segments import (
    PositionMap,
    Region,
    Segment,
    SegmentedRotary,
    SelfExtend,
    log_scale,
    pair_positions,
)


def test_position_maps() -> None:
    p = torch.arange(12)
    assert torch.equal(PositionMap()(p), p)
    assert PositionMap().is_identity and not PositionMap(div=2).is_identity
    assert torch.equal(PositionMap(div=4, shift=6)(p), p // 4 + 6)
    assert torch.equal(PositionMap(mod=5, shift=5, cap=7)(p), (p % 5 + 5).clamp(max=7))
    assert torch.equal(PositionMap(const=3)(p), torch.full_like(p, 3))
    # whole numbers keep integer positions; fractions give float64
    assert PositionMap(div=2, shift=3)(p).dtype == torch.int64
    leaky = PositionMap(scale=0.25, shift=4.5)(p)
    assert leaky.dtype == torch.float64
    assert torch.equal(leaky, p.double() * 0.25 + 4.5)
    assert torch.equal(PositionMap(div=2)(p.double() + 0.5), torch.floor((p.double() + 0.5) / 2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"div": 0}, "div"),
        ({"mod": -1}, "mod"),
        ({"div": 2, "mod": 2}, "div or mod"),
        ({"scale": 0.0}, "scale"),
        ({"shift": math.inf}, "shift"),
        ({"cap": "3"}, "cap"),
        ({"const": math.nan}, "const"),
    ],
)
def test_position_map_errors_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PositionMap(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lo": 3, "hi": 3}, "lo must be < hi"),
        ({"lo": 1.5}, "lo"),
        ({"chunk": 0}, "chunk"),
        ({"key_below": 0}, "key_below"),
    ],
)
def test_region_errors_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Region(**kwargs)


REGIONS = [
    Region(hi=5),
    Region(lo=5),
    Region(lo=2, hi=7),
    Region(lo=0, hi=1, chunk=4),
    Region(lo=1, hi=2, chunk=4),
    Region(lo=2, chunk=4),
    Region(lo=4, key_below=3),
    Region(lo=3, hi=9, chunk=3, key_below=10),
]


@pytest.mark.parametrize("region", REGIONS, ids=repr)
def test_key_ranges_hold_exactly_the_region(region: Region) -> None:
    """Brute force over blocks of query positions: every key of the region lies in the
    candidate range, and the whole range holds keys every query pairs with."""
    keys = torch.arange(40)
    for first, rows in itertools.product(range(0, 30), (1, 3, 8)):
        last = first + rows - 1
        queries = torch.arange(first, last + 1)
        inside = region.contains(queries[:, None], keys[None, :])
        (c0, c1), (w0, w1) = region.key_range(first, last)
        some = inside.any(0).nonzero().flatten()
        if some.numel():
            assert c0 <= int(some.min()) and int(some.max()) < c1
        if w1 > w0:
            assert bool(inside[:, w0:w1].all())


@pytest.mark.parametrize("region", REGIONS, ids=repr)
def test_keys_seen_later_are_exactly_those_some_later_query_pairs_with(region: Region) -> None:
    keys = torch.arange(50)
    for q_min in range(0, 40, 3):
        later = torch.arange(q_min, 400)[:, None]
        truth = region.contains(later, keys[None, :]).any(0)
        assert torch.equal(region.seen_later(keys, q_min), truth)


def test_pair_positions_and_log_scale() -> None:
    segments = SelfExtend(RotaryEmbedding(8), window=4, group=2).segments()
    index, distance = pair_positions(segments, torch.arange(8), torch.arange(8))
    assert index[7].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert distance[7].tolist() == [5, 5, 4, 4, 3, 2, 1, 0]
    future = torch.ones(8, 8, dtype=torch.bool).triu(1)
    assert bool((index[future] == -1).all()) and bool(distance[future].isnan().all())
    scale = log_scale(torch.tensor([0, 15, 16, 255]), 16)
    # torch's log (a vectorized kernel) against the C library's: equal to float64 rounding,
    # not bitwise; the clamped ones are exactly 1.
    want = torch.tensor([1.0, 1.0, math.log(17) / math.log(16), 2.0], dtype=torch.float64)
    torch.testing.assert_close(scale, want, rtol=1e-15, atol=0)
    assert scale[:2].tolist() == [1.0, 1.0]
    # negative positions (padding) scale by 1: no -inf or NaN to reach real tokens
    padded = log_scale(torch.tensor([-5, -2, -1, 255]), 16)
    assert padded[:3].tolist() == [1.0, 1.0, 1.0]
    torch.testing.assert_close(
        padded[3], torch.tensor(2.0, dtype=torch.float64), rtol=1e-15, atol=0
    )


def test_a_method_wraps_one_axis_rotary_encodings_only() -> None:
    with pytest.raises(ValueError, match="rotary must be a rotary encoding"):
        SelfExtend(AlibiBias(4))
    with pytest.raises(ValueError, match="rotary must be a rotary encoding"):
        SelfExtend(nn.Linear(2, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one axis"):
        SelfExtend(MultiAxisRotary.axial(16, 2))
    with pytest.raises(ValueError, match="already a segment method"):
        SelfExtend(SelfExtend(RotaryEmbedding(8)))


def test_a_new_method_is_a_subclass_with_segments() -> None:
    class HalfDistance(SegmentedRotary):
        def __init__(self, rotary: nn.Module) -> None:
            super().__init__(rotary)
            self._freeze()

        def build_segments(self) -> tuple[Segment, ...]:
            return (Segment("all", Region(), PositionMap(scale=0.5), PositionMap(scale=0.5)),)

    from posenc.attention import attend

    method = HalfDistance(RotaryEmbedding(8))
    q, k, v = (torch.randn(1, 2, 10, 8, dtype=torch.float64) for _ in range(3))
    rope = RotaryEmbedding(8)
    positions = torch.arange(10) * 0.5
    qr, kr = rope(q, k, positions, positions)
    want = attend(qr, kr, v, causal=True)
    for backend in ("sdpa", "chunked", "flex"):
        from posenc.attention import Backend

        chosen = Backend("flex", compile=False) if backend == "flex" else backend
        torch.testing.assert_close(attend(q, k, v, pos=method, causal=True, backend=chosen), want)

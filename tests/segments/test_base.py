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
    check_segments,
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


class Capped(SegmentedRotary):
    """The docs' recipe: settings after ``super().__init__``, then ``build_segments``."""

    def __init__(self, rotary: nn.Module, *, window: int) -> None:
        super().__init__(rotary)
        self.window = window

    def build_segments(self) -> tuple[Segment, ...]:
        far = Segment(
            "far", Region(lo=self.window), PositionMap(const=self.window), PositionMap(const=0)
        )
        return (Segment("near", Region(hi=self.window)), far)


def test_the_subclass_recipe_builds_its_segments_at_construction() -> None:
    method = Capped(RotaryEmbedding(8), window=3)
    assert [s.region for s in method.segments()] == [Region(hi=3), Region(lo=3)]
    assert method.checked(method.segments())  # attention skips checking it again
    assert not method.checked(tuple(list(method.segments())))
    _, distance = pair_positions(method.segments(), torch.arange(6), torch.arange(6))
    assert distance[5].tolist() == [3, 3, 3, 2, 1, 0]

    class Wider(Capped):  # a subclass of a method: built once, with its final settings
        def __init__(self, rotary: nn.Module) -> None:
            super().__init__(rotary, window=2)
            self.window = 5

    assert [s.region for s in Wider(RotaryEmbedding(8)).segments()] == [
        Region(hi=5),
        Region(lo=5),
    ]

    class Unfinished(SegmentedRotary):
        pass

    with pytest.raises(NotImplementedError, match="Unfinished must implement build_segments"):
        Unfinished(RotaryEmbedding(8))


class Custom(SegmentedRotary):
    def __init__(self, rotary: nn.Module, regions: tuple[Region, ...]) -> None:
        super().__init__(rotary)
        self.regions = regions

    def build_segments(self) -> tuple[Segment, ...]:
        return tuple(Segment(f"s{i}", r) for i, r in enumerate(self.regions))


@pytest.mark.parametrize(
    ("regions", "match"),
    [
        (
            (Region(hi=4), Region(lo=2)),
            "'s0' and 's1' overlap .*query at position 2 with the key at 0",
        ),
        ((Region(lo=0, hi=1, chunk=4), Region(hi=3)), "'s0' and 's1' overlap"),
        ((Region(hi=2), Region(lo=1, key_below=3)), "'s0' and 's1' overlap"),
        ((Region(lo=1),), "no segment holds the query at position 0 with its own key"),
        ((Region(hi=4, q_from=2), Region(lo=4)), "query at position 0 with its own key"),
        (
            (Region(lo=1, chunk=4), Region(lo=0, hi=1, chunk=4, key_below=4)),
            "query at position 4 with its own key",
        ),
    ],
)
def test_overlapping_or_uncovering_regions_are_refused_at_construction(
    regions: tuple[Region, ...], match: str
) -> None:
    with pytest.raises(ValueError, match=f"Custom: .*{match}"):
        Custom(RotaryEmbedding(8), regions)


def test_every_built_in_method_partitions_its_pairs() -> None:
    from posenc.segments import ILLUSTRATIVE, AttentionSinks, DualChunk, LMInfinite, ReRoPE

    classes = {
        "self_extend": SelfExtend,
        "dual_chunk": DualChunk,
        "rerope": ReRoPE,
        "lm_infinite": LMInfinite,
        "sinks": AttentionSinks,
    }
    for name, cls in classes.items():
        for kwargs in (ILLUSTRATIVE[name], {}):
            check_segments(cls(RotaryEmbedding(8), **kwargs).segments(), name)  # no error


def _brute_force(regions: tuple[Region, ...], n: int) -> tuple[bool, bool]:
    """(some causal pair lies in two regions, every query holds its own key) on n positions."""
    p = torch.arange(n)
    causal = p[None, :] <= p[:, None]
    count = sum(r.contains(p[:, None], p[None, :]).int() for r in regions) * causal
    return bool((count > 1).any()), bool((count.diagonal() > 0).all())


def _random_region(gen: torch.Generator) -> Region:
    def pick(options: list) -> object:
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    lo = pick([None, 0, 1, 2, 3, 5])
    hi = pick([None, 1, 2, 4, 6])
    if lo is not None and hi is not None and lo >= hi:
        lo, hi = None, hi
    return Region(
        lo=lo,
        hi=hi,
        chunk=pick([None, None, 2, 3]),
        key_below=pick([None, None, 2, 4]),
        q_from=pick([None, None, 3]),
    )


def test_the_partition_check_agrees_with_brute_force() -> None:
    """On random sets of regions: refused for an overlap exactly when some causal pair lies
    in two regions, for a missing own key exactly when some query's own key lies in none."""
    gen = torch.Generator().manual_seed(0)
    seen = {"overlap": 0, "uncovered": 0, "fine": 0}
    for trial in range(300):
        regions = tuple(_random_region(gen) for _ in range(1 + trial % 3))
        segments = tuple(Segment(f"s{i}", r) for i, r in enumerate(regions))
        overlap, covered = _brute_force(regions, 60)
        for region in regions:  # each region's key interval is exactly its causal pairs
            p = torch.arange(60)
            start, stop = region.key_interval(p)
            keys = p[None, :]
            interval = (keys >= start[:, None]) & (keys < stop[:, None])
            truth = region.contains(p[:, None], keys) & (keys <= p[:, None])
            assert torch.equal(interval, truth), region
        if overlap:
            seen["overlap"] += 1
            with pytest.raises(ValueError, match="overlap"):
                check_segments(segments, "x")
        elif not covered:
            seen["uncovered"] += 1
            with pytest.raises(ValueError, match="own key"):
                check_segments(segments, "x")
        else:
            seen["fine"] += 1
            check_segments(segments, "x")
    assert min(seen.values()) >= 10, seen


def test_attention_checks_a_segments_hook_that_bypassed_the_build() -> None:
    from posenc.attention import attend

    class Hooked(SegmentedRotary):
        def build_segments(self) -> tuple[Segment, ...]:
            return (Segment("all", Region()),)

        def segments(self) -> tuple[Segment, ...]:
            return (Segment("a", Region(hi=4)), Segment("b", Region(lo=2)))

    q = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match="Hooked: segments 'a' and 'b' overlap"):
        attend(q, q, q, pos=Hooked(RotaryEmbedding(8)), causal=True)
    with pytest.raises(ValueError, match="non-empty tuple"):
        check_segments([Segment("a", Region())], "x")


def test_pair_positions_follow_attentions_causal_order() -> None:
    """Query ``i`` is key ``k_len − q_len + i``; two tokens at one position still see only
    backwards, and per-row positions give one matrix per row."""
    segments = SelfExtend(RotaryEmbedding(8), window=4, group=2).segments()
    twice = torch.tensor([0, 1, 1, 2])
    index, distance = pair_positions(segments, twice, twice)
    assert torch.equal(index == -1, torch.ones(4, 4, dtype=torch.bool).triu(1))
    assert distance[1].tolist()[:2] == [1.0, 0.0] and distance[1, 2:].isnan().all()
    rows = torch.stack([torch.arange(6), torch.arange(6) + 3])
    index, distance = pair_positions(segments, rows, rows)
    assert index.shape == distance.shape == (2, 6, 6)
    for row in range(2):
        want_index, want_distance = pair_positions(segments, rows[row], rows[row])
        assert torch.equal(index[row], want_index)
        torch.testing.assert_close(distance[row], want_distance, equal_nan=True)
    last_index, last_distance = pair_positions(segments, torch.tensor([5]), torch.arange(6))
    full_index, full_distance = pair_positions(segments, torch.arange(6), torch.arange(6))
    assert torch.equal(last_index, full_index[5:])
    torch.testing.assert_close(last_distance, full_distance[5:], equal_nan=True)


@pytest.mark.parametrize(
    ("q_pos", "k_pos", "match"),
    [
        (torch.arange(4)[None], torch.arange(4), "both be"),
        (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4), "both be"),
        (torch.arange(5), torch.arange(4), "q_pos must not be longer"),
        (torch.zeros(2, 3), torch.zeros(3, 3), "one batch"),
    ],
)
def test_pair_positions_refuse_shapes_that_do_not_fit(
    q_pos: torch.Tensor, k_pos: torch.Tensor, match: str
) -> None:
    segments = SelfExtend(RotaryEmbedding(8), window=4, group=2).segments()
    with pytest.raises(ValueError, match=match):
        pair_positions(segments, q_pos, k_pos)


@pytest.mark.parametrize("base", [1, 0, -3, 2.5, True, None])
def test_log_scale_refuses_a_base_length_below_two(base: object) -> None:
    with pytest.raises(ValueError, match=r"base_length must be an integer >= 2[:,] .*got"):
        log_scale(torch.arange(5), base)  # type: ignore[arg-type]


BACKENDS = {
    "sdpa": "sdpa",
    "chunked": "chunked",
    "chunked-blocks": {"structured": False},
    "flex": {"compile": False},
}


def _backend(name: str) -> object:
    from posenc.attention import Backend

    chosen = BACKENDS[name]
    if isinstance(chosen, str):
        return chosen
    return Backend("flex" if name == "flex" else "chunked", **chosen)


@pytest.mark.parametrize("case", ["left-padding", "padded-row", "far-keys"])
def test_queries_that_see_no_key_are_zero_on_every_backend(case: str) -> None:
    """A query with no visible key (padding, or positions no segment pairs) gets a zero row
    on every backend, and the other rows agree."""
    from posenc.attention import attend
    from posenc.segments import LMInfinite

    torch.manual_seed(0)
    batch, length = 2, 24
    q, k, v = (torch.randn(batch, 2, length, 8, dtype=torch.float64) for _ in range(3))
    method = LMInfinite(RotaryEmbedding(8), local_window=4, global_tokens=2)
    kwargs: dict = {}
    unseen = torch.zeros(batch, length, dtype=torch.bool)
    if case == "left-padding":
        real = torch.ones(batch, length, dtype=torch.bool)
        real[0, :5] = False
        kwargs["key_padding_mask"] = real
        unseen[0, :5] = True  # a left-padding query sees only padding
    elif case == "padded-row":
        real = torch.ones(batch, length, dtype=torch.bool)
        real[1] = False
        kwargs["key_padding_mask"] = real
        unseen[1] = True
    else:  # positions no segment pairs: far past the local window, no global token
        method = LMInfinite(RotaryEmbedding(8), local_window=4, global_tokens=1)
        k_pos = torch.arange(length).repeat(batch, 1)
        k_pos[:, 2:] += 100
        q_pos = k_pos.clone()
        q_pos[0, 1] = 50  # row 0: key 0 is the global token (at 0), seen from 50
        q_pos[1, 1] = 60
        k_pos[1, 0] = 5  # row 1: keys at 5 and 1, 55 and 59 away, neither global
        kwargs.update(q_pos=q_pos, k_pos=k_pos)
        unseen[1, 1] = True
    outs = {
        name: attend(q, k, v, pos=method, causal=True, backend=_backend(name), **kwargs)
        for name in BACKENDS
    }
    assert bool(unseen.any())
    zeros = torch.zeros_like(outs["sdpa"])
    for name, out in outs.items():
        rows = unseen[:, None, :, None].expand_as(out)
        torch.testing.assert_close(out[rows], zeros[rows], rtol=0, atol=0, msg=name)
        torch.testing.assert_close(out, outs["sdpa"], msg=name)
    assert bool((outs["sdpa"][~unseen[:, None, :, None].expand_as(zeros)] != 0).all())

"""Positions with several axes end to end; per-forward state built once; validation once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Attention, KVCache
from posenc.models import DecoderLM, ModelConfig
from posenc.positions import grid_positions
from posenc.registry import EncodingSpec, register_encoding, unregister_encoding
from tests.attention.toys import ThreeAxisRotary

DIM, HEADS = 48, 4  # head_dim 12: 6 pairs, 2 per axis


def image_then_text(batch: int) -> torch.Tensor:
    """(3, batch, 10) ids: 2 text tokens, a 2×3 image (one time step), 2 text tokens that
    continue at max + 1 (the M-RoPE rule); row 1 starts 5 later."""
    text = torch.arange(2).expand(3, 2)
    image = grid_positions(1, 2, 3) + 2
    after = torch.arange(2).expand(3, 2) + int(image.max()) + 1
    row = torch.cat([text, image, after], dim=-1)
    return torch.stack([row, row + 5], dim=1)[:, :batch]


def test_three_axis_positions_through_attention_and_cache() -> None:
    torch.manual_seed(0)
    attn = Attention(DIM, HEADS, pos=ThreeAxisRotary(DIM // HEADS)).double()
    x = torch.randn(2, 10, DIM, dtype=torch.float64)
    positions = image_then_text(2)
    full = attn(x, positions)
    cache = KVCache()
    parts = [attn(x[:, :7], positions[..., :7], cache=cache)]
    parts += [attn(x[:, i : i + 1], positions[..., i : i + 1], cache=cache) for i in range(7, 10)]
    assert_close(torch.cat(parts, dim=1), full, rtol=1e-12, atol=1e-12)
    assert cache.positions is not None and cache.positions.shape == (3, 2, 10)
    # The positions matter: shuffling the axes changes the output.
    assert (attn(x, positions.flip(0)) - full).abs().max() > 1e-3


def test_next_position_after_a_cache_is_max_plus_one() -> None:
    torch.manual_seed(0)
    attn = Attention(DIM, HEADS, pos=ThreeAxisRotary(DIM // HEADS)).double()
    x = torch.randn(1, 9, DIM, dtype=torch.float64)
    positions = image_then_text(1)[..., :9]
    cache = KVCache()
    attn(x[:, :8], positions[..., :8], cache=cache)
    # The 9th token's default position: max of the cached ids (the image's 4) + 1 on every
    # axis, which is where the text after the image continues; not the cache length (8).
    assert positions[..., :8].max() == 4 and torch.equal(positions[..., 8], torch.full((3, 1), 5))
    step = attn(x[:, 8:], cache=cache)
    explicit = KVCache()
    attn(x[:, :8], positions[..., :8], cache=explicit)
    assert_close(step, attn(x[:, 8:], positions[..., 8:], cache=explicit), rtol=1e-12, atol=1e-12)
    length = KVCache()
    attn(x[:, :8], positions[..., :8], cache=length)
    assert (step - attn(x[:, 8:], torch.full((3, 1, 1), 8), cache=length)).abs().max() > 1e-6


@pytest.fixture
def three_axis_encoding() -> Iterator[str]:
    spec = EncodingSpec(
        "three_axis_toy",
        "rotary",
        "a test toy (no paper, see arxiv.org)",
        "three axes",
        lambda: ThreeAxisRotary,
        lambda d: {"head_dim": d.resolved_head_dim},
    )
    register_encoding(spec)
    yield spec.name
    unregister_encoding(spec.name)


def test_three_axis_positions_through_the_model_and_cache(three_axis_encoding: str) -> None:
    torch.manual_seed(0)
    model = DecoderLM(
        ModelConfig(vocab_size=50, dim=DIM, depth=2, num_heads=HEADS, pos=three_axis_encoding)
    ).double()
    tokens = torch.randint(0, 50, (2, 10))
    positions = image_then_text(2)
    with torch.no_grad():
        full = model(tokens, positions)
        cache = model.new_cache()
        first = model(tokens[:, :6], positions[..., :6], cache=cache)
        rest = [
            model(tokens[:, i : i + 1], positions[..., i : i + 1], cache=cache)
            for i in range(6, 10)
        ]
    assert_close(torch.cat([first, *rest], dim=1), full, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"positions must have shape \(3, seq\)"):
        model(tokens, torch.arange(10))


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls = [0]
    original = getattr(owner, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return calls


@pytest.mark.parametrize(
    ("pos", "owner", "method"),
    [
        ("rope", "posenc.rotary.rope.RotaryEmbedding", "rotary_tables"),
        ("xpos", "posenc.rotary.xpos.XPos", "rotary_tables"),
        ("alibi", "posenc.encoding.resolve.Hooks", "materialized_bias"),
        ("t5", "posenc.encoding.resolve.Hooks", "materialized_bias"),
    ],
)
def test_shared_tables_are_built_once_per_forward(
    monkeypatch: pytest.MonkeyPatch, pos: str, owner: str, method: str
) -> None:
    module_name, class_name = owner.rsplit(".", 1)
    cls = getattr(__import__(module_name, fromlist=[class_name]), class_name)
    calls = count_calls(monkeypatch, cls, method)
    model = DecoderLM(
        ModelConfig(vocab_size=50, dim=32, depth=4, num_heads=4, pos=pos, backend="sdpa")
    )
    with torch.no_grad():
        model(torch.randint(0, 50, (2, 12)))
    assert calls[0] == 1


class SyncCounter:
    """Counts the Python-level device→host reads of tensor values."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in ("__bool__", "item", "tolist", "__int__", "__float__"):
            original = getattr(torch.Tensor, name)

            def counting(self_: torch.Tensor, *args: Any, _original: Any = original) -> Any:
                self.count += 1
                return _original(self_, *args)

            monkeypatch.setattr(torch.Tensor, name, counting)


@pytest.mark.parametrize("pos", ["rope", "alibi", "t5", "shaw"])
def test_value_checks_do_not_grow_with_depth(monkeypatch: pytest.MonkeyPatch, pos: str) -> None:
    """Inputs are validated once per forward (token ids: one read), never per layer."""
    counts = {}
    for depth in (1, 4):
        torch.manual_seed(0)
        model = DecoderLM(ModelConfig(vocab_size=50, dim=32, depth=depth, num_heads=4, pos=pos))
        tokens = torch.randint(0, 50, (2, 9))
        with torch.no_grad():
            cache = model.new_cache()
            model(tokens[:, :8], cache=cache)
            counter = SyncCounter(monkeypatch)
            model(tokens[:, 8:], cache=cache)  # one decoding step
        counts[depth] = counter.count
        monkeypatch.undo()
    assert counts[1] == counts[4]
    assert counts[4] <= 1  # the token-id range check

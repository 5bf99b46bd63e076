"""KVCache.rerotate: a cached document moved to other positions, then decoding, against a fresh
forward of the document at the moved positions (posenc attention, float32).

Tolerance: the moved keys differ from the fresh ones by the rounding bound of
tests/rotary/test_rerotation.py (≤ (6 + √2)·2⁻²⁴ of a pair's norm in float32); through one
attention layer that is a relative perturbation of the logits and outputs of a few float32
roundings, so the outputs are compared with ``assert_close``'s float32 defaults (rtol 1.3e-6,
atol 1e-5), which is one to two orders above it and far below a wrong position (a shift of one
position moves the outputs by ~1e-1 here, asserted too).
"""

from __future__ import annotations

import pytest
import torch

from posenc.attention import Attention, KVCache
from posenc.rotary import MultiAxisRotary, RotaryEmbedding, YaRN
from posenc.rotary.scaling import DynamicNTK
from tests.rotary.test_rerotation import assert_within, move_bound, pair_norms

DOC, QUESTION, SHIFT = 12, 5, 37


def _attention(pos: object) -> tuple[Attention, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    attn = Attention(32, 4, pos=pos).eval()  # type: ignore[arg-type]
    return attn, torch.randn(2, DOC, 32), torch.randn(2, QUESTION, 32)


def _fresh(attn: Attention, doc: torch.Tensor, question: torch.Tensor, first: int) -> torch.Tensor:
    """The question's outputs (at ``SHIFT + DOC …``) after a fresh forward of the document at
    ``first …``."""
    positions = torch.cat([torch.arange(first, first + DOC), QUESTION_AT])
    return attn(torch.cat([doc, question], 1), positions)[:, DOC:]


QUESTION_AT = torch.arange(SHIFT + DOC, SHIFT + DOC + QUESTION)


@pytest.mark.parametrize("keys", ["rotated", "unrotated"])
@pytest.mark.parametrize("step", ["prefill", "decode"])
def test_decoding_after_moving_a_cached_document_equals_a_fresh_forward(
    keys: str, step: str
) -> None:
    rope = RotaryEmbedding(8, scaling=YaRN(4.0, 16))
    attn, doc, question = _attention(rope)
    cache = KVCache(keys=keys)  # type: ignore[arg-type]
    with torch.no_grad():
        attn(doc, cache=cache)  # the document cached at 0 … DOC − 1
        cache.rerotate(SHIFT, rope)
        assert cache.positions is not None
        torch.testing.assert_close(cache.positions, torch.arange(SHIFT, SHIFT + DOC))
        if step == "prefill":
            out = attn(question, cache=cache)  # continues at max + 1 = SHIFT + DOC
        else:
            steps = [
                attn(question[:, i : i + 1], QUESTION_AT[i : i + 1], cache=cache)
                for i in range(QUESTION)
            ]
            out = torch.cat(steps, 1)
        fresh = _fresh(attn, doc, question, SHIFT)
        unmoved = _fresh(attn, doc, question, 0)  # the same question before the cache moved
    print(f"max |Δ| after the move ({keys}, {step}): {(out - fresh).abs().max():.2e}")
    torch.testing.assert_close(out, fresh)
    assert (out - unmoved).abs().max() > 1e-2  # without the move: far outside the tolerance


@pytest.mark.parametrize("keys", ["rotated", "unrotated"])
def test_a_moved_cache_holds_the_keys_of_a_fresh_prefill(keys: str) -> None:
    """Against a cache prefilled at the moved positions (same shapes, so only the keys can
    differ): rotated keys within the rounding bound of tests/rotary/test_rerotation.py,
    unrotated ones (rotated when read) identical, and so are the next outputs."""
    rope = RotaryEmbedding(8, scaling=YaRN(4.0, 16))
    attn, doc, question = _attention(rope)
    moved, fresh, raw = KVCache(keys=keys), KVCache(keys=keys), KVCache(keys="unrotated")  # type: ignore[arg-type]
    with torch.no_grad():
        attn(doc, cache=moved)
        moved.rerotate(SHIFT, rope)
        attn(doc, torch.arange(SHIFT, SHIFT + DOC), cache=fresh)
        attn(doc, cache=raw)  # the keys before rotation
        assert moved.k is not None and fresh.k is not None and raw.k is not None
        assert moved.positions is not None and fresh.positions is not None
        torch.testing.assert_close(moved.positions, fresh.positions, rtol=0, atol=0)
        if keys == "rotated":
            r = rope.attention_factor * pair_norms(raw.k, 8, "half")
            assert_within(moved.k, fresh.k, move_bound(torch.float32, r, 0.0))
        else:
            torch.testing.assert_close(moved.k, fresh.k, rtol=0, atol=0)
        out, expected = attn(question, cache=moved), attn(question, cache=fresh)
    print(f"max |Δ| of the next outputs ({keys}): {(out - expected).abs().max():.2e}")
    if keys == "rotated":
        torch.testing.assert_close(out, expected)
    else:
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_moving_a_block_in_the_middle_per_batch_row() -> None:
    """Keys 4 … 8 moved by a shift per batch row; the rest keep theirs."""
    rope = RotaryEmbedding(8)
    attn, doc, question = _attention(rope)
    cache = KVCache()
    shift = torch.tensor([[3], [40]])
    with torch.no_grad():
        attn(doc, cache=cache)
        cache.rerotate(shift, rope, start=4, end=9)
        out = attn(question, torch.arange(100, 100 + QUESTION), cache=cache)
        positions = torch.arange(DOC).repeat(2, 1)
        positions[:, 4:9] += shift
        expected = torch.cat([positions, torch.arange(100, 100 + QUESTION).repeat(2, 1)], 1)
        fresh = attn(torch.cat([doc, question], 1), expected)[:, DOC:]
    assert cache.positions is not None
    torch.testing.assert_close(cache.positions[:, :DOC], positions)
    torch.testing.assert_close(out, fresh)


def test_an_unrotated_cache_moves_exactly_under_length_dependent_frequencies() -> None:
    """Dynamic NTK: the unrotated keys are rotated when read, with the frequencies of the
    moved length; the move changes positions only (no frequency_length needed)."""
    rope = RotaryEmbedding(8, scaling=DynamicNTK(4.0, 16))
    attn, doc, question = _attention(rope)
    cache = KVCache()
    with torch.no_grad():
        attn(doc, cache=cache)
        assert cache.rotated is False
        cache.rerotate(SHIFT, rope)
        out = attn(question, cache=cache)
        fresh = _fresh(attn, doc, question, SHIFT)
    torch.testing.assert_close(out, fresh)


def test_mrope_cache_moves_per_axis() -> None:
    rope = MultiAxisRotary.mrope(8, (2, 1, 1), base=1e4)
    attn, doc, question = _attention(rope)
    cache = KVCache()
    grid = torch.stack([torch.arange(DOC), torch.arange(DOC) % 3, torch.arange(DOC) // 3])
    shift = torch.tensor([SHIFT, 2, 5])
    with torch.no_grad():
        attn(doc, grid, cache=cache)
        cache.rerotate(shift, rope)
        text = torch.arange(QUESTION).repeat(3, 1) + 60
        out = attn(question, text, cache=cache)
        fresh = attn(torch.cat([doc, question], 1), torch.cat([grid + shift[:, None], text], 1))
    torch.testing.assert_close(out, fresh[:, DOC:])


def test_gradients_flow_through_a_moved_concatenating_cache() -> None:
    rope = RotaryEmbedding(8)
    attn, doc, question = _attention(rope)
    cache = KVCache()
    attn(doc, cache=cache)
    cache.rerotate(SHIFT, rope)
    attn(question, cache=cache).sum().backward()
    assert all(p.grad is not None for p in attn.parameters())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"start": 5, "end": 3}, "start and end must satisfy"),
        ({"end": DOC + 1}, "start and end must satisfy"),
        ({"delta": torch.zeros(3)}, "delta must broadcast to the moved block"),
        ({"delta": True}, "delta must be a number or a tensor"),
    ],
)
def test_bad_moves_raise(kwargs: dict, match: str) -> None:
    rope = RotaryEmbedding(8)
    attn, doc, _ = _attention(rope)
    cache = KVCache()
    with torch.no_grad():
        attn(doc, cache=cache)
    delta = kwargs.pop("delta", 3)
    with pytest.raises(ValueError, match=match):
        cache.rerotate(delta, rope, **kwargs)


def test_an_empty_cache_or_a_non_rotary_raises() -> None:
    with pytest.raises(ValueError, match="holds no keys"):
        KVCache().rerotate(3, RotaryEmbedding(8))
    with pytest.raises(ValueError, match="rope must be a rotary encoding"):
        KVCache().rerotate(3, object())  # type: ignore[arg-type]


def test_rotated_keys_of_a_length_dependent_rotary_need_a_stated_length() -> None:
    rope = RotaryEmbedding(8, scaling=DynamicNTK(4.0, 16))
    attn = Attention(32, 4, pos=RotaryEmbedding(8)).eval()
    cache = KVCache(keys="rotated")
    with torch.no_grad():
        attn(torch.randn(1, 4, 32), cache=cache)
    with pytest.raises(ValueError, match="frequencies that follow the sequence length"):
        cache.rerotate(3, rope)

"""Randomized positions (Ruoss et al. 2023) as a wrapper around any one-axis encoding."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.bias import AlibiBias
from posenc.encoding.base import NoPE
from posenc.encoding.randomized import RandomizedPositions
from posenc.models import DecoderLM, ModelConfig
from posenc.positions import randomized_positions
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import MultiAxisRotary, RotaryEmbedding

L = 64


def _wrapped(**kwargs) -> RandomizedPositions:
    return RandomizedPositions(RotaryEmbedding(16), L, **kwargs)


def test_on_arange_it_is_ruoss_scheme() -> None:
    pe = _wrapped()
    pe.generator = torch.Generator().manual_seed(3)
    got = pe.transform_positions(torch.arange(9), batch=4)
    expected = randomized_positions(9, L, batch=4, generator=torch.Generator().manual_seed(3))
    assert_close(got, expected, rtol=0, atol=0)


def test_map_is_increasing_per_row_and_keeps_packed_documents() -> None:
    pe = _wrapped()
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0], [0, 1, 2, 3, 4, 5, 6, 7]])
    got = pe.transform_positions(positions, batch=2)
    assert got.dtype == torch.int64 and got.shape == positions.shape
    assert bool(((got >= 0) & (got < L)).all())
    for row, pos in zip(got, positions, strict=True):
        order = pos.argsort(stable=True)
        values, keys = row[order], pos[order]
        # Equal positions map to equal values, larger ones to strictly larger values.
        assert bool((values.diff()[keys.diff() == 0] == 0).all())
        assert bool((values.diff()[keys.diff() > 0] > 0).all())
    # Rows draw independently.
    assert not torch.equal(got[0, :4], got[1, :4])


def test_ordered_evaluation_is_the_identity_and_training_is_not() -> None:
    pe = _wrapped(evaluation="ordered")
    positions = torch.arange(7)
    assert pe.training  # a new module trains, and training always draws
    drawn = pe.transform_positions(positions, batch=2)
    assert drawn.shape == (2, 7) and not torch.equal(drawn[0], positions)
    pe.eval()
    assert pe.transform_positions(positions, batch=2) is positions


def _pair(pos: str, **kwargs):
    torch.manual_seed(0)
    base = DecoderLM(ModelConfig(vocab_size=13, dim=32, depth=2, num_heads=4, pos=pos))
    torch.manual_seed(0)
    options = {"randomized": {"max_length": L, **kwargs}}
    wrapped = DecoderLM(
        ModelConfig(vocab_size=13, dim=32, depth=2, num_heads=4, pos=pos, pos_kwargs=options)
    )
    # The wrapped encoding's parameters live one level down, under "encoding.".
    state = {
        key.replace("attn.pos.", "attn.pos.encoding.").replace(
            "trunk.additive.", "trunk.additive.encoding."
        ): value
        for key, value in base.state_dict().items()
    }
    wrapped.load_state_dict(state)  # strict: the same parameters, renamed
    return base, wrapped


@pytest.mark.parametrize("pos", ["rope", "alibi", "t5", "sinusoidal"])
def test_model_draws_the_positions_it_would_be_given(pos: str) -> None:
    base, wrapped = _pair(pos)
    tokens = torch.randint(0, 13, (3, 10))
    wrapped.encoding.generator = torch.Generator().manual_seed(5)
    got = wrapped(tokens)
    positions = randomized_positions(10, L, batch=3, generator=torch.Generator().manual_seed(5))
    assert_close(got, base(tokens, positions))
    assert not torch.allclose(got, base(tokens))


@pytest.mark.parametrize("pos", ["rope", "alibi", "xl"])
def test_ordered_evaluation_equals_the_plain_model_and_continues_a_cache(pos: str) -> None:
    base, wrapped = _pair(pos, evaluation="ordered")
    base.eval()
    wrapped.eval()
    tokens = torch.randint(0, 13, (2, 9))
    full = wrapped(tokens)
    assert_close(full, base(tokens))
    cache = wrapped.new_cache()
    steps = [wrapped(tokens[:, :5], cache=cache)]
    steps += [wrapped(tokens[:, i : i + 1], cache=cache) for i in range(5, 9)]
    assert_close(torch.cat(steps, dim=1), full)


def test_a_random_draw_cannot_continue_a_cache() -> None:
    _, wrapped = _pair("rope")
    wrapped.eval()  # evaluation="randomized" still draws
    cache = wrapped.new_cache()
    wrapped(torch.randint(0, 13, (1, 4)), cache=cache)
    with pytest.raises(ValueError, match="cache: randomized positions cannot continue"):
        wrapped(torch.randint(0, 13, (1, 1)), cache=cache)


def test_learned_table_must_cover_max_length() -> None:
    dims = ModelDims(dim=32, num_heads=4, max_seq_len=32)
    with pytest.raises(ValueError, match="max_seq_len"):
        build_encoding("learned", dims, randomized=L)
    pe = build_encoding("learned", dims, max_seq_len=L, randomized=L)
    assert isinstance(pe, RandomizedPositions)
    assert pe.encoding.max_seq_len == L


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: RandomizedPositions(RotaryEmbedding(16), 0), "max_length"),
        (lambda: _wrapped(evaluation="sorted"), "evaluation"),
        (lambda: RandomizedPositions(NoPE(), L), "nothing to randomize"),
        (lambda: RandomizedPositions(MultiAxisRotary.axial(16), L), "one axis"),
        (lambda: RandomizedPositions(_wrapped(), L), "already"),
        (lambda: RandomizedPositions(torch.nn.Linear(2, 2), L), "pos must be a positional"),
        (lambda: _wrapped().transform_positions(torch.arange(L + 1), batch=1), "max_length"),
        (lambda: _wrapped().transform_positions(torch.tensor([-1, 0]), batch=1), ">= 0"),
        (lambda: _wrapped().transform_positions(torch.tensor([0.5]), batch=1), "whole"),
        (lambda: build_encoding("rope", ModelDims(32, 4), randomized="x"), "randomized"),
        (lambda: build_encoding("rope", ModelDims(32, 4), randomized={"L": 3}), "max_length"),
    ],
)
def test_bad_input_names_the_argument(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_delegates_the_hooks() -> None:
    alibi = AlibiBias(4)
    pe = RandomizedPositions(alibi, L)
    assert pe.num_heads == 4
    assert pe.shared_across_layers
    q, k = torch.arange(3, 6), torch.arange(6)
    assert_close(pe.bias(q, k), alibi.bias(q, k))

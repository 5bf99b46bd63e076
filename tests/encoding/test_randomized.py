"""Randomized positions (Ruoss et al. 2023) as a wrapper around any one-axis encoding."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.bias import AlibiBias
from posenc.encoding.base import NoPE
from posenc.encoding.randomized import RandomizedPositions, randomize_positions
from posenc.models import DecoderLM, ModelConfig
from posenc.positions import positions_from_padding_mask, randomized_positions
from posenc.registry import ModelDims, build_encoding
from posenc.rotary import MultiAxisRotary, RotaryEmbedding
from tests.padded import padded_rows

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


def _seeded(pe: RandomizedPositions, seed: int = 7) -> RandomizedPositions:
    pe.generator = torch.Generator().manual_seed(seed)
    return pe


def _padded(side: str, real_count: int, pads: int) -> tuple[torch.Tensor, slice]:
    """A one-row ``real`` mask with ``pads`` padding tokens on ``side``; the real tokens' slice."""
    seq = real_count + pads
    kept = slice(0, real_count) if side == "right" else slice(pads, seq)
    real = torch.zeros(1, seq, dtype=torch.bool)
    real[0, kept] = True
    return real, kept


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("pads", [1, 5, 20])
@pytest.mark.parametrize("numbering", ["arange", "counted"])
def test_padding_does_not_move_the_real_tokens_positions(
    side: str, pads: int, numbering: str
) -> None:
    """With the same generator state a padded row's real tokens get exactly the positions the
    row gets unpadded (the map once covered the padding: 3 real tokens then 5 pads drew a
    subset of 8 and kept its 3 smallest)."""
    alone = _seeded(_wrapped()).transform_positions(torch.arange(6), batch=1)
    real, kept = _padded(side, 6, pads)
    seq = real.shape[1]
    given = torch.arange(seq) if numbering == "arange" else positions_from_padding_mask(real)[0]
    got = _seeded(_wrapped()).transform_positions(given, batch=1, real=real)
    assert_close(got[:, kept], alone, rtol=0, atol=0)
    pad = ~real[0]
    assert_close(got[0, pad], given[pad], rtol=0, atol=0)  # padding keeps its positions


def test_in_a_batch_each_rows_draw_ignores_padding_and_the_other_rows() -> None:
    """Rows of 3, 7 and 5 real tokens (the second a packed pair) padded on either side to 9
    and to 16 columns: every real token gets the same position both times, and each row the
    positions it gets in a batch of rows without padding."""
    rows = [torch.arange(3), torch.tensor([0, 1, 2, 3, 0, 1, 2]), torch.arange(5) + 4]

    narrow, narrow_real = padded_rows(rows, 9, ("right", "left", "right"))
    wide, wide_real = padded_rows(rows, 16, ("left", "right", "left"))
    got_narrow = _seeded(_wrapped()).transform_positions(narrow, batch=3, real=narrow_real)
    got_wide = _seeded(_wrapped()).transform_positions(wide, batch=3, real=wide_real)
    assert_close(got_narrow[narrow_real], got_wide[wide_real], rtol=0, atol=0)
    # Unpadded, one row at a time: row b is the b-th row drawn by the same generator.
    pe = _seeded(_wrapped())
    for b, row in enumerate(rows):
        one = pe.transform_positions(row, batch=1)
        start = 0 if b != 1 else 2  # the packed row is left-padded in the narrow batch
        assert_close(got_narrow[b, start : start + len(row)], one[0], rtol=0, atol=0)


def test_the_function_is_the_transform() -> None:
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 9]])
    real = torch.tensor([[True] * 4 + [False] * 2, [False] + [True] * 5])
    got = randomize_positions(positions, L, real=real, generator=torch.Generator().manual_seed(1))
    want = _seeded(_wrapped(), 1).transform_positions(positions, batch=2, real=real)
    assert_close(got, want, rtol=0, atol=0)
    assert_close(got[~real], positions[~real], rtol=0, atol=0)


def test_the_draw_depends_only_on_positions_relative_to_the_first_real_one() -> None:
    base = _seeded(_wrapped()).transform_positions(torch.arange(6), batch=2)
    shifted = _seeded(_wrapped()).transform_positions(torch.arange(6) + 11, batch=2)
    assert_close(shifted, base, rtol=0, atol=0)


def test_a_row_without_real_tokens_keeps_its_positions() -> None:
    positions = torch.arange(5).expand(2, -1)
    real = torch.tensor([[True] * 5, [False] * 5])
    got = _seeded(_wrapped()).transform_positions(positions, batch=2, real=real)
    alone = _seeded(_wrapped()).transform_positions(torch.arange(5), batch=1)
    assert_close(got[:1], alone, rtol=0, atol=0)
    assert_close(got[1], positions[1], rtol=0, atol=0)
    nothing = _seeded(_wrapped()).transform_positions(
        positions, batch=2, real=torch.zeros(2, 5, dtype=torch.bool)
    )
    assert_close(nothing, positions, rtol=0, atol=0)


@pytest.mark.parametrize("pos", ["rope", "alibi", "t5", "sinusoidal"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_padded_models_real_tokens_give_their_unpadded_outputs(pos: str, side: str) -> None:
    """Training forward, same generator seed: a padded row's real tokens give the outputs of
    the row unpadded (left padding numbered by attention's default ``arange``)."""
    _, wrapped = _pair(pos)
    wrapped.train()
    tokens = torch.randint(0, 13, (1, 10), generator=torch.Generator().manual_seed(2))
    real, kept = _padded(side, 7, 3)
    with torch.no_grad():
        wrapped.encoding.generator = torch.Generator().manual_seed(9)
        padded = wrapped(tokens, key_padding_mask=real)
        wrapped.encoding.generator = torch.Generator().manual_seed(9)
        alone = wrapped(tokens[:, kept])
        wrapped.encoding.generator = torch.Generator().manual_seed(10)
        other = wrapped(tokens[:, kept])
    assert_close(padded[:, kept], alone)
    assert not torch.allclose(other, alone)  # the draw matters: the comparison could fail


@pytest.mark.parametrize("pos", ["rope", "alibi"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_ordered_evaluation_is_unaffected_by_padding(pos: str, side: str) -> None:
    base, wrapped = _pair(pos, evaluation="ordered")
    base.eval()
    wrapped.eval()
    positions = torch.arange(10)
    real, kept = _padded(side, 7, 3)
    assert wrapped.encoding.transform_positions(positions, batch=1, real=real) is positions
    tokens = torch.randint(0, 13, (1, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = wrapped(tokens, key_padding_mask=real)
        assert_close(got, base(tokens, key_padding_mask=real), rtol=0, atol=0)
        # RoPE and ALiBi read distances only: the real tokens give their unpadded outputs.
        assert_close(got[:, kept], base(tokens[:, kept]))


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
        (
            lambda: _wrapped().transform_positions(
                torch.arange(3), batch=2, real=torch.ones(2, 4, dtype=torch.bool)
            ),
            r"real must have the shape \(2, 3\)",
        ),
        (
            lambda: _wrapped().transform_positions(
                torch.arange(3), batch=1, real=torch.tensor([[1.0, 0.5, 1.0]])
            ),
            "real must be bool or hold only 0 and 1",
        ),
        (lambda: build_encoding("rope", ModelDims(32, 4), randomized="x"), "randomized"),
        (lambda: randomize_positions(torch.arange(3), L), r"positions must be a \(batch, seq\)"),
        (lambda: randomize_positions(torch.arange(3)[None], 0), "max_length"),
        (lambda: randomize_positions(torch.arange(3)[None], 2), "max_length"),
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

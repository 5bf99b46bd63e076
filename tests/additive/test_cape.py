"""CAPE: the augmentation's distributions and bounds, eval = the sinusoid, the model, the cache."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.additive import CAPE, SinusoidalEncoding, cape_augment
from posenc.models import DecoderLM, ModelConfig
from posenc.positions import positions_from_padding_mask
from posenc.registry import ModelDims, build_encoding
from tests.padded import padded_rows

POSITIONS = torch.arange(64, dtype=torch.float64).expand(4096, 64)


def draw(**settings) -> torch.Tensor:
    return cape_augment(POSITIONS, generator=torch.Generator().manual_seed(0), **settings)


def test_each_augmentation_stays_in_its_bounds_and_fills_them() -> None:
    # global shift: one Δ per sequence, uniform on [-Δmax, Δmax]
    delta = draw(max_global_shift=5.0) - POSITIONS
    assert_close(delta, delta[:, :1].expand_as(delta), rtol=0, atol=1e-12)
    assert delta.abs().max() <= 5.0 and delta.min() < -4.9 and delta.max() > 4.9
    assert abs(float(delta[:, 0].mean())) < 0.2 and abs(float(delta[:, 0].var()) - 25 / 3) < 0.5
    # local shift: one ε per token, uniform on [-εmax/2, εmax/2]
    local = draw(max_local_shift=0.5) - POSITIONS
    assert local.abs().max() <= 0.25 and local.min() < -0.249 and local.max() > 0.249
    assert float(local.std(dim=-1).min()) > 0.05  # differs along each sequence
    assert abs(float(local.var()) - 0.5**2 / 12) < 1e-3
    # global scaling: one λ per sequence, log-uniform on [1/λmax, λmax]
    scaled = draw(max_global_scaling=2.0)[:, 1:] / POSITIONS[:, 1:]
    assert_close(scaled, scaled[:, :1].expand_as(scaled), rtol=1e-12, atol=0)
    log = scaled[:, 0].log()
    assert log.abs().max() <= math.log(2.0) + 1e-12 and log.max() > 0.99 * math.log(2.0)
    assert abs(float(log.mean())) < 0.03  # symmetric in log


def test_the_formula_with_the_same_draws_in_float64() -> None:
    """λ (x + Δ + ε) with Δ, λ, then ε as (seq, batch) drawn in that order from the
    generator."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 10, dtype=torch.float64)
    got = cape_augment(
        x, max_global_shift=2.0, max_local_shift=0.4, max_global_scaling=1.5, generator=g
    )
    g = torch.Generator().manual_seed(3)
    delta = (torch.rand(3, 1, generator=g, dtype=torch.float64) * 2 - 1) * 2.0
    lam = ((torch.rand(3, 1, generator=g, dtype=torch.float64) * 2 - 1) * math.log(1.5)).exp()
    eps = (torch.rand(10, 3, generator=g, dtype=torch.float64).T * 2 - 1) * 0.2
    assert_close(got, lam * (x + delta + eps), rtol=0, atol=1e-14)


def test_deterministic_under_a_generator_and_eval_is_the_sinusoid() -> None:
    cape = CAPE(16, max_global_shift=5.0, max_local_shift=0.5, max_global_scaling=1.2)
    outs = []
    for seed in (0, 0, 1):
        cape.generator = torch.Generator().manual_seed(seed)
        outs.append(cape(cape.transform_positions(torch.arange(12), batch=3)))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])
    assert outs[0].shape == (3, 12, 16)
    cape.eval()
    positions = torch.arange(12)
    assert cape.transform_positions(positions, batch=3) is positions
    assert torch.equal(cape(positions), SinusoidalEncoding(16)(positions))


def test_normalize_centres_each_sequence_in_training_and_evaluation() -> None:
    cape = CAPE(8, normalize=True).eval()
    rows = cape.transform_positions(torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]]), batch=2)
    assert_close(rows, torch.tensor([[-1.5, -0.5, 0.5, 1.5]] * 2, dtype=torch.float64))


def _model(**pos_kwargs) -> DecoderLM:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=32, dim=32, depth=2, num_heads=2, pos="cape", pos_kwargs=pos_kwargs
    )
    return DecoderLM(config).double()


def test_model_trains_on_augmented_positions_and_evaluates_on_plain_ones() -> None:
    model = _model(max_global_shift=10.0, max_local_shift=0.5, max_global_scaling=1.5)
    tokens = torch.randint(0, 32, (2, 9))
    model.train()
    model.encoding.generator = torch.Generator().manual_seed(0)
    first = model(tokens)
    model.encoding.generator = torch.Generator().manual_seed(0)
    assert torch.equal(model(tokens), first)  # the same draws
    assert (model(tokens) - first).abs().max() > 1e-6  # new draws
    model.eval()
    plain = _model().eval()  # no augmentation: the same weights (same seed)
    with torch.no_grad():
        full = model(tokens)
        assert_close(full, plain(tokens), rtol=0, atol=0)
        cache = model.new_cache()
        steps = [model(tokens[:, :4], cache=cache)]
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(4, 9)]
    assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)


def test_training_cannot_continue_a_cache() -> None:
    model = _model(max_global_shift=1.0).train()
    cache = model.new_cache()
    tokens = torch.randint(0, 32, (1, 4))
    with torch.no_grad():
        model.eval()
        model(tokens, cache=cache)
        model.train()
        with pytest.raises(ValueError, match="cache"):
            model(tokens[:, :1], cache=cache)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_global_shift", -1.0),
        ("max_global_shift", float("nan")),
        ("max_global_shift", True),
        ("max_local_shift", -0.1),
        ("max_local_shift", "0.5"),
        ("max_global_scaling", 0.5),
        ("max_global_scaling", float("inf")),
        ("normalize", "yes"),
        ("dim", 0),
        ("base", -1.0),
    ],
)
def test_bad_arguments_name_them(name: str, value: object) -> None:
    kwargs = {"dim": 8, name: value}
    with pytest.raises(ValueError, match=name):
        CAPE(**kwargs)  # type: ignore[arg-type]
    if name != "dim":
        with pytest.raises(ValueError, match=name):
            build_encoding("cape", ModelDims(dim=8, num_heads=2), {name: value})


# ---- padding and bad inputs -----------------------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
def test_normalize_reads_only_the_real_tokens_of_a_padded_batch(side: str) -> None:
    """A padded row's real tokens give what the same tokens give unpadded: the mean of the
    normalization is over the real tokens (with the padding's positions it moved a real
    token's logits by 0.46 here)."""
    model = _model(normalize=True).eval()
    tokens = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(1))
    real = torch.ones(2, 9, dtype=torch.bool)
    kept = slice(0, 6) if side == "right" else slice(3, 9)
    real[1] = False
    real[1, kept] = True
    with torch.no_grad():
        padded = model(tokens, key_padding_mask=real)
        alone = model(tokens[1:, kept])
        whole = model(tokens[:1])
    assert_close(padded[1, kept], alone[0])
    assert_close(padded[:1], whole)  # the unpadded row is its own forward


def test_normalize_centres_the_real_tokens_and_shifts_padding_alike() -> None:
    cape = CAPE(8, normalize=True).eval()
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    real = torch.tensor([[True, True, True, True], [True, True, False, False]])
    rows = cape.transform_positions(positions, batch=2, real=real)
    want = torch.tensor([[-1.5, -0.5, 0.5, 1.5], [-0.5, 0.5, 1.5, 2.5]], dtype=torch.float64)
    assert_close(rows, want, rtol=0, atol=0)
    # 0/1 masks as bool ones; a row without real tokens is left as it is (nothing to centre)
    ints = cape.transform_positions(positions, batch=2, real=real.long())
    assert_close(ints, want, rtol=0, atol=0)
    empty = cape.transform_positions(positions, batch=2, real=torch.zeros(2, 4, dtype=torch.bool))
    assert_close(empty, positions.double(), rtol=0, atol=0)


SHIFTS = {"max_global_shift": 4.0, "max_local_shift": 0.5, "max_global_scaling": 1.5}


def _augmented(positions: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(4)
    return cape_augment(positions, generator=g, real=real, **SHIFTS)


def test_the_augmentation_of_real_tokens_ignores_padding() -> None:
    """Rows of 3, 6 and 4 real tokens padded on either side to 8 and to 13 columns: the real
    tokens get the same draws both times, and those of the rows unpadded (the local shifts
    were drawn per column and the scale after them: 3 pads moved a real token by 0.4)."""
    rows = [torch.arange(3.0), torch.arange(6.0) + 2, torch.arange(4.0)]

    narrow, narrow_real = padded_rows(rows, 8, ("right", "left", "right"), fill=7.0)
    wide, wide_real = padded_rows(rows, 13, ("left", "right", "left"), fill=7.0)
    got_narrow = _augmented(narrow, narrow_real)
    got_wide = _augmented(wide, wide_real)
    assert_close(got_narrow[narrow_real], got_wide[wide_real], rtol=0, atol=0)
    # Without padding (each row cut to 6 columns, the longest): the same real tokens' values.
    unpadded = torch.stack([torch.cat([row, torch.full((6 - len(row),), 7.0)]) for row in rows])
    cut = torch.arange(6) < torch.tensor([[len(row)] for row in rows])
    assert_close(got_narrow[narrow_real], _augmented(unpadded, cut)[cut], rtol=0, atol=0)
    # real=None reads every token as real: the same as an all-True mask.
    assert_close(_augmented(narrow), _augmented(narrow, torch.ones_like(narrow_real)))


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("normalize", [False, True])
def test_a_padded_training_forward_gives_the_real_tokens_their_unpadded_outputs(
    side: str, normalize: bool
) -> None:
    """Same generator seed, training: a padded row's real tokens give the outputs of the row
    unpadded (positions counted over the real tokens, as HF ``generate`` numbers them)."""
    model = _model(normalize=normalize, **SHIFTS).train()
    tokens = torch.randint(0, 32, (1, 9), generator=torch.Generator().manual_seed(1))
    real = torch.zeros(1, 9, dtype=torch.bool)
    kept = slice(0, 6) if side == "right" else slice(3, 9)
    real[0, kept] = True
    positions = positions_from_padding_mask(real)
    with torch.no_grad():
        model.encoding.generator = torch.Generator().manual_seed(6)
        padded = model(tokens, positions, key_padding_mask=real)
        model.encoding.generator = torch.Generator().manual_seed(6)
        alone = model(tokens[:, kept])
        model.encoding.generator = torch.Generator().manual_seed(7)
        other = model(tokens[:, kept])
    assert_close(padded[:, kept], alone)
    assert not torch.allclose(other, alone)  # the draw matters: the comparison could fail


@pytest.mark.parametrize(
    ("real", "match"),
    [
        (torch.tensor([[1.0, 0.5, 1.0, 1.0]] * 2), "real must be bool or hold only 0 and 1"),
        (torch.ones(2, 3, dtype=torch.bool), r"real must have the shape \(2, 4\)"),
    ],
)
def test_a_bad_real_mask_is_named(real: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CAPE(8, normalize=True).transform_positions(torch.arange(4), batch=2, real=real)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_cape_augment_refuses_non_finite_positions(bad: float) -> None:
    positions = torch.zeros(2, 4, dtype=torch.float64)
    positions[1, 2] = bad
    with pytest.raises(ValueError, match=r"^positions must be finite"):
        cape_augment(positions, max_global_shift=1.0)


@pytest.mark.parametrize(
    "positions",
    [torch.arange(4.0), torch.zeros(1, 2, 4), torch.zeros(2, 4, dtype=torch.bool), [[0.0, 1.0]]],
)
def test_cape_augment_refuses_positions_that_are_not_a_batch_of_rows(positions: object) -> None:
    """1-D positions would unpack into a wrong (batch, seq); the pure function takes rows
    (``CAPE.transform_positions`` expands ``(seq,)`` to its batch)."""
    with pytest.raises(ValueError, match=r"^positions must be a real \(batch, seq\) tensor"):
        cape_augment(positions, max_global_shift=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("max_global_scaling", 0.0, "max_global_scaling must be a number >= 1"),
        ("max_global_scaling", 0.5, "max_global_scaling must be a number >= 1"),
        ("max_global_scaling", math.nan, "max_global_scaling must be a number >= 1"),
        ("max_global_shift", -1.0, "max_global_shift must be a finite number >= 0"),
        ("max_global_shift", math.inf, "max_global_shift must be a finite number >= 0"),
        ("max_local_shift", math.nan, "max_local_shift must be a finite number >= 0"),
    ],
)
def test_cape_augment_names_a_bad_range(name: str, value: float, match: str) -> None:
    with pytest.raises(ValueError, match=rf"^{match}"):
        cape_augment(torch.zeros(2, 4), **{name: value})


def test_cape_augment_takes_integer_positions_and_numpy_ranges() -> None:
    import numpy as np

    g = torch.Generator().manual_seed(0)
    got = cape_augment(
        torch.arange(4).expand(2, 4),
        max_global_shift=np.float64(2.0),
        max_local_shift=0.5,
        max_global_scaling=np.int64(2),
        generator=g,
    )
    g = torch.Generator().manual_seed(0)
    want = cape_augment(
        torch.arange(4.0).expand(2, 4),
        max_global_shift=2.0,
        max_local_shift=0.5,
        max_global_scaling=2.0,
        generator=g,
    )
    assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("real", "match"),
    [
        (torch.tensor([[1.0, 0.5, 1.0, 1.0]] * 2), "real must be bool or hold only 0 and 1"),
        (torch.ones(2, 3, dtype=torch.bool), r"real must have the shape \(2, 4\)"),
    ],
)
def test_the_training_draw_names_a_bad_real_mask(real: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cape_augment(torch.zeros(2, 4), max_local_shift=0.5, real=real)
    with pytest.raises(ValueError, match=match):
        CAPE(8, max_local_shift=0.5).transform_positions(torch.arange(4), batch=2, real=real)

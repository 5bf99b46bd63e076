"""The resolution experiment: adapting each encoding to a larger grid, end to end."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("sklearn")

from posenc.lab.config import RunnerArgs, replace_fields
from posenc.lab.experiments.resolution import (
    ResolutionConfig,
    canvas,
    evaluate_at,
    run_resolution,
    upsample,
)
from posenc.lab.experiments.vit import DigitsViT

TINY = replace_fields(
    ResolutionConfig(),
    encodings=("none", "learned_2d", "rope_axial"),
    seeds=(0,),
    dim=16,
    depth=1,
    num_heads=2,
    epochs=1,
    batch_size=64,
    test_size=100,
    test_sides=(8, 12),
    runner=RunnerArgs(progress=False),
)


def test_upsample_at_the_training_size_is_the_vits_own_scaling():
    pixels = torch.randint(0, 17, (3, 64))
    assert_close(upsample(pixels, 8), pixels.float() * (2 / 16) - 1)
    assert upsample(pixels, 12).shape == (3, 144)


def test_canvas_keeps_the_digit_and_its_patches():
    pixels = torch.randint(0, 17, (2, 64))
    images = canvas(pixels, 12, 2).reshape(2, 12, 12)
    assert_close(images[:, 2:10, 2:10].reshape(2, 64), upsample(pixels, 8))
    images[:, 2:10, 2:10] = -1.0
    assert bool((images == -1.0).all())  # blank everywhere else


@pytest.mark.parametrize("encoding", ["learned_2d", "rope_axial", "rope_mixed", "sinusoidal_grid"])
def test_every_variant_at_the_training_size_is_the_trained_model(encoding):
    torch.manual_seed(0)
    vit = DigitsViT(TINY.model_config(encoding)).eval()
    pixels, labels = torch.randint(0, 17, (40, 64)), torch.randint(0, 10, (40,))
    with torch.no_grad():
        trained = float((vit(pixels).argmax(-1) == labels).float().mean())
    for variant in ("resampled", "extrapolated", "rescaled"):
        if variant == "resampled" and encoding != "learned_2d":
            continue
        assert evaluate_at(vit, pixels, labels, 8, variant) == pytest.approx(trained)


def test_resampling_adapts_a_copy_of_the_table():
    torch.manual_seed(0)
    vit = DigitsViT(TINY.model_config("learned_2d"))
    before = copy.deepcopy(vit.additive.weight.detach())
    evaluate_at(
        vit, torch.randint(0, 17, (4, 64)), torch.zeros(4, dtype=torch.long), 16, "resampled"
    )
    assert torch.equal(vit.additive.weight, before)  # the trained model is left as it was


@pytest.mark.parametrize("encoding", ["learned", "sinusoidal_2d", "rope_2d"])
def test_encodings_fixed_to_the_training_grid_are_refused(encoding):
    with pytest.raises(ValueError, match=rf"encodings: '{encoding}' cannot be tested"):
        replace(TINY, encodings=(encoding,))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("test_sides", (6,), "test_sides"),
        ("test_sides", (9,), "multiples"),
        ("mode", "zoom", "mode"),
    ],
)
def test_bad_config(field, value, match):
    with pytest.raises(ValueError, match=match):
        replace(TINY, **{field: value})


def test_end_to_end_rows(tmp_path):
    rows = run_resolution(TINY, tmp_path / "res", echo=None)
    keys = {(r["encoding"], r["variant"], r["side"]) for r in rows}
    assert keys == {
        ("none", "extrapolated", 8),
        ("none", "extrapolated", 12),
        ("learned_2d", "resampled", 8),
        ("learned_2d", "resampled", 12),
        ("rope_axial", "extrapolated", 8),
        ("rope_axial", "extrapolated", 12),
        ("rope_axial", "rescaled", 8),
        ("rope_axial", "rescaled", 12),
    }
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["grid"] == r["side"] // 2 for r in rows)
    by_key = {(r["encoding"], r["variant"], r["side"]): r["accuracy"] for r in rows}
    # at the training size rescaling changes nothing
    assert by_key[("rope_axial", "rescaled", 8)] == by_key[("rope_axial", "extrapolated", 8)]
    assert (tmp_path / "res" / "report.html").is_file()
    assert {r["mode"] for r in rows} == {"upsample"}

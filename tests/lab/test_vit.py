"""The digits ViT experiment: a tiny end-to-end run, resume, config checks, patch order."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("sklearn")

from posenc.lab import vit as vit_module
from posenc.lab.results import read_results_csv
from posenc.lab.vit import (
    ENCODINGS,
    DigitsSource,
    DigitsViT,
    DigitsViTConfig,
    VitConfig,
    format_vit_table,
    load_digits_splits,
    patchify,
    run_vit,
)

TINY = VitConfig(
    seeds=(0,),
    dim=16,
    depth=1,
    num_heads=2,
    mlp_ratio=2.0,
    epochs=1,
    batch_size=256,  # 5 steps per epoch
    warmup_steps=2,
    progress=False,
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, object]]]:
    out = tmp_path_factory.mktemp("vit")
    return out, run_vit(TINY, out, echo=None)


def _unpatchify(patches: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(batch, grid², p²) → (batch, side²), the inverse of patchify."""
    batch, num, _ = patches.shape
    grid = int(num**0.5)
    blocks = patches.reshape(batch, grid, grid, patch_size, patch_size).permute(0, 1, 3, 2, 4)
    return blocks.reshape(batch, (grid * patch_size) ** 2)


def test_rows_columns_and_ranges(tiny_run: tuple[Path, list[dict[str, object]]]) -> None:
    _, rows = tiny_run
    assert [r["encoding"] for r in rows] == list(ENCODINGS)
    for row in rows:
        assert row["experiment"] == "vit" and row["seed"] == 0
        assert 0.0 <= row["accuracy"] <= 1.0  # type: ignore[operator]
        assert 0.0 <= row["train_accuracy"] <= 1.0  # type: ignore[operator]
        assert row["steps"] == TINY.steps == 5
        assert torch.isfinite(torch.tensor(row["final_loss"]))
    params = {r["encoding"]: r["params"] for r in rows}
    # learned_1d adds a 16 × dim table; the others add no parameters.
    assert params["learned_1d"] == params["none"] + 16 * TINY.dim
    assert params["sinusoidal_2d"] == params["rope_2d"] == params["none"]


def test_files_written(tiny_run: tuple[Path, list[dict[str, object]]]) -> None:
    out, rows = tiny_run
    assert json.loads((out / "config.json").read_text())["experiment"] == "vit"
    assert (out / "report.html").is_file()
    assert read_results_csv(out / "results.csv") == rows
    for encoding in ENCODINGS:
        run = out / "runs" / encoding / "seed0"
        for name in ("eval.json", "final.pt", "done.json", "metrics.jsonl", "config.json"):
            assert (run / name).is_file(), (encoding, name)
    assert "learned_1d" in format_vit_table(rows)


def test_resume_does_no_training(
    tiny_run: tuple[Path, list[dict[str, object]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, rows = tiny_run

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished run must not train again")

    monkeypatch.setattr(vit_module, "train", fail)
    assert run_vit(replace(TINY, progress=True, threads=None), out, echo=None) == rows


def test_lost_eval_is_recomputed_from_final_weights(
    tiny_run: tuple[Path, list[dict[str, object]]],
) -> None:
    out, rows = tiny_run
    (out / "runs" / "rope_2d" / "seed0" / "eval.json").unlink()
    assert run_vit(TINY, out, echo=None) == rows


def test_config_mismatch_raises(tiny_run: tuple[Path, list[dict[str, object]]]) -> None:
    out, _ = tiny_run
    with pytest.raises(ValueError, match="dim"):
        run_vit(replace(TINY, dim=32), out, echo=None)


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"encodings": ("none", "alibi")}, "encodings"),
        ({"encodings": ()}, "encodings"),
        ({"seeds": ()}, "seeds"),
        ({"seeds": (-1,)}, "seeds"),
        ({"epochs": 0}, "epochs"),
        ({"dim": 18, "num_heads": 2}, "dim"),
        ({"dim": 24, "num_heads": 4}, "head_dim"),  # rope_2d needs head_dim % 4 == 0
        ({"patch_size": 3}, "patch_size"),
        ({"test_size": 1797}, "test_size"),
        ({"lr": 0.0}, "lr"),
        ({"threads": 0}, "threads"),
        ({"rope_base": -1.0}, "rope_base"),
    ],
)
def test_config_errors(changes: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        replace(TINY, **changes)  # type: ignore[arg-type]


def test_config_accepts_json_lists() -> None:
    config = replace(TINY, encodings=["none", "rope_2d"], seeds=[3])  # type: ignore[arg-type]
    assert config.encodings == ("none", "rope_2d") and config.seeds == (3,)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_patch_order(encoding: str) -> None:
    """Without positions the model sees a bag of patches; with them, patch order matters."""
    torch.manual_seed(0)
    model = DigitsViT(DigitsViTConfig(encoding=encoding, dim=16, depth=2, num_heads=2)).eval()
    if encoding == "learned_1d":  # the N(0, 0.02²) init is tiny: make the table count
        torch.nn.init.normal_(model.additive.weight)  # type: ignore[union-attr]
    tokens = torch.randint(0, 17, (3, 64))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    permuted = _unpatchify(patchify(tokens, 2)[:, perm], 2)
    with torch.no_grad():
        logits, logits_permuted = model(tokens), model(permuted)
        # Moving each patch together with its position never changes the logits.
        patches = model.embed(tokens)
        assert_close(model.classify(patches[:, perm], perm), logits, rtol=1e-5, atol=1e-5)
    if encoding == "none":
        assert_close(logits_permuted, logits, rtol=1e-5, atol=1e-5)
    else:
        assert not torch.allclose(logits_permuted, logits, rtol=1e-3, atol=1e-3)


def test_patchify_row_major() -> None:
    image = torch.arange(16).reshape(1, 4, 4)
    patches = patchify(image, 2)
    assert_close(patches[0, 0], torch.tensor([0, 1, 4, 5]))
    assert_close(patches[0, 1], torch.tensor([2, 3, 6, 7]))
    assert_close(patches[0, 2], torch.tensor([8, 9, 12, 13]))
    assert_close(_unpatchify(patches, 2), image.reshape(1, 16))
    with pytest.raises(ValueError, match="patch_size"):
        patchify(image, 3)


def test_splits_and_source_are_seeded() -> None:
    data = load_digits_splits(500, seed=0)
    assert data.train_pixels.shape == (1297, 64) and data.test_pixels.shape == (500, 64)
    assert int(data.train_pixels.min()) >= 0 and int(data.train_pixels.max()) <= 16
    again = load_digits_splits(500, seed=0)
    assert_close(again.test_labels, data.test_labels)
    other = load_digits_splits(500, seed=1)
    assert not torch.equal(other.test_labels, data.test_labels)

    source = DigitsSource(data.train_pixels, data.train_labels, seed=0)
    batch = source.batch(3, 64)
    assert_close(
        DigitsSource(data.train_pixels, data.train_labels, seed=0).batch(3, 64).tokens, batch.tokens
    )
    assert batch.loss_mask[:, 0].all() and not batch.loss_mask[:, 1:].any()
    assert_close(batch.targets, batch.targets[:, :1].expand(-1, 64))
    shards = [source.batch(3, 64, rank=r, world_size=2).tokens for r in range(2)]
    assert_close(torch.cat(shards), batch.tokens)
    # An epoch visits every image once: pixels that spell their own index show it.
    index = DigitsSource(torch.arange(100)[:, None].expand(-1, 64), torch.zeros(100).long())
    seen = torch.cat([index.batch(step, 10).tokens[:, 0] for step in range(10)])
    assert_close(seen.sort().values, torch.arange(100))
    assert not torch.equal(index.batch(10, 10).tokens, index.batch(0, 10).tokens)
    with pytest.raises(ValueError, match="batch_size"):
        source.batch(0, 5000)


def test_forward_errors() -> None:
    model = DigitsViT(DigitsViTConfig(encoding="rope_2d", dim=16, num_heads=2))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(2, 63, dtype=torch.long))
    with pytest.raises(ValueError, match="key_padding_mask"):
        model(torch.zeros(2, 64, dtype=torch.long), key_padding_mask=torch.ones(2, 64).bool())
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(2, 64, dtype=torch.long), torch.arange(1, 17))

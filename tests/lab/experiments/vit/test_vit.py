"""The digits ViT experiment: a tiny end-to-end run, resume, config checks, patch order,
every registered encoding, and the registry construction against the classes built directly."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

pytest.importorskip("sklearn")

from posenc.additive import LearnedPositionalEmbedding, Sinusoidal2D
from posenc.attention import build_context, hooks_of
from posenc.encoding import AdditiveEncoding
from posenc.lab.config import RunnerArgs, expand_flat_options, from_record, replace_fields
from posenc.lab.experiments import vit as vit_module
from posenc.lab.experiments.vit import (
    ALIASES,
    DEFAULT_ENCODINGS,
    DigitsViT,
    DigitsViTConfig,
    VitConfig,
    format_vit_table,
    patchify,
    run_vit,
)
from posenc.lab.results import read_results_csv
from posenc.models import Block, EncoderClassifier, ModelConfig
from posenc.positions import grid_positions
from posenc.registry import EncodingSpec, list_encodings, register_encoding, unregister_encoding
from posenc.rotary import AxialRotary2D

ENCODINGS = ["none", *ALIASES, *(spec.name for spec in list_encodings())]

TINY = replace_fields(
    VitConfig(),
    seeds=(0,),
    dim=16,
    depth=1,
    num_heads=2,
    mlp_ratio=2.0,
    epochs=1,
    batch_size=256,  # 5 steps per epoch
    warmup_steps=2,
    runner=RunnerArgs(progress=False),
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
    assert [r["encoding"] for r in rows] == list(DEFAULT_ENCODINGS)
    for row in rows:
        assert row["experiment"] == "vit" and row["seed"] == 0
        assert 0.0 <= row["accuracy"] <= 1.0  # type: ignore[operator]
        assert 0.0 <= row["train_accuracy"] <= 1.0  # type: ignore[operator]
        assert row["steps"] == TINY.steps == 5
        assert torch.isfinite(torch.tensor(row["final_loss"]))
    params = {r["encoding"]: r["params"] for r in rows}
    # learned_1d adds a 16 × dim table; the others add no parameters.
    assert params["learned_1d"] == params["none"] + 16 * TINY.model.dim
    assert params["sinusoidal_2d"] == params["rope_2d"] == params["none"]


def test_files_written(tiny_run: tuple[Path, list[dict[str, object]]]) -> None:
    out, rows = tiny_run
    assert json.loads((out / "config.json").read_text())["experiment"] == "vit"
    assert (out / "report.html").is_file()
    assert read_results_csv(out / "results.csv") == rows
    for encoding in DEFAULT_ENCODINGS:
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
    assert run_vit(replace_fields(TINY, progress=True, threads=None), out, echo=None) == rows


def test_lost_eval_is_recomputed_from_final_weights(
    tiny_run: tuple[Path, list[dict[str, object]]],
) -> None:
    out, rows = tiny_run
    (out / "runs" / "rope_2d" / "seed0" / "eval.json").unlink()
    assert run_vit(TINY, out, echo=None) == rows


def test_config_mismatch_raises(tiny_run: tuple[Path, list[dict[str, object]]]) -> None:
    out, _ = tiny_run
    with pytest.raises(ValueError, match="dim"):
        run_vit(replace_fields(TINY, dim=32), out, echo=None)


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"encodings": ("none", "xpos")}, "encodings"),  # causal only
        ({"encodings": ("none", "bogus")}, "encodings"),
        ({"encodings": ()}, "encodings"),
        ({"encodings": ("none", "none")}, "encodings"),
        ({"seeds": ()}, "seeds"),
        ({"seeds": (-1,)}, "seeds"),
        ({"epochs": 0}, "epochs"),
        ({"dim": 18, "num_heads": 2}, "dim"),
        ({"dim": 24, "num_heads": 4}, "head_dim"),  # rope_2d needs head_dim % 4 == 0
        ({"patch_size": 3}, "patch_size"),
        ({"test_size": 1797}, "test_size"),
        ({"lr": 0.0}, "lr"),
        ({"threads": 0}, "threads"),
        ({"dim": 18, "num_heads": 1, "encodings": ("sinusoidal_2d",)}, "encodings"),  # dim % 4
        ({"pos_kwargs": {"rope_2d": {"base": -1.0}}}, "base"),
        ({"pos_kwargs": {"rope_2d": {"basis": 50.0}}}, "basis"),
        ({"pos_kwargs": {"rope": {"base": 50.0}}}, "pos_kwargs"),  # not in encodings
        ({"pos_kwargs": {"none": {"base": 50.0}}}, "pos_kwargs"),
        ({"pos_kwargs": {"rope_2d": 50.0}}, "pos_kwargs"),
    ],
)
def test_config_errors(changes: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        replace_fields(TINY, **changes)  # type: ignore[arg-type]


def test_a_flat_config_json_reads_as_the_sections() -> None:
    """A config.json written before the model and training were sections: every field at
    its top."""
    record = dataclasses.asdict(TINY)
    flat = json.loads(json.dumps({**record.pop("model"), **record.pop("train"), **record}))
    assert from_record(VitConfig, flat) == TINY
    assert expand_flat_options(VitConfig, ["--dim", "32", "--seeds", "1"]) == [
        "--model.dim",
        "32",
        "--train.seeds",
        "1",
    ]


def test_config_accepts_json_lists() -> None:
    config = replace_fields(TINY, encodings=["none", "rope_2d"], seeds=[3])  # type: ignore[arg-type]
    assert config.encodings == ("none", "rope_2d") and config.train.seeds == (3,)


def _servable(encoding: str) -> bool:
    try:
        DigitsViTConfig(encoding=encoding, dim=16, depth=2, num_heads=2)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("encoding", [e for e in ENCODINGS if _servable(e)])
def test_patch_order(encoding: str) -> None:
    """Without positions the model sees a bag of patches; with them, patch order matters."""
    torch.manual_seed(0)
    model = DigitsViT(DigitsViTConfig(encoding=encoding, dim=16, depth=2, num_heads=2)).eval()
    encoding_module = model.encoding
    if encoding_module is not None:  # tiny inits (N(0, 0.02²) tables): make the encoding count
        for parameter in encoding_module.parameters():
            torch.nn.init.normal_(parameter, std=0.5)
            if encoding == "kerple":  # positive parameters (negative ones read as eps = 0.01)
                parameter.data.abs_()
    tokens = torch.randint(0, 17, (3, 64))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    permuted = _unpatchify(patchify(tokens, 2)[:, perm], 2)
    with torch.no_grad():
        logits, logits_permuted = model(tokens), model(permuted)
        # Moving each patch together with its position never changes the logits.
        assert_close(model(permuted, perm), logits, rtol=1e-5, atol=1e-5)
    if encoding in ("none", "nope"):
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


def test_forward_errors() -> None:
    model = DigitsViT(DigitsViTConfig(encoding="rope_2d", dim=16, num_heads=2))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(2, 63, dtype=torch.long))
    with pytest.raises(ValueError, match="key_padding_mask"):
        model(torch.zeros(2, 64, dtype=torch.long), key_padding_mask=torch.ones(2, 64).bool())
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(2, 64, dtype=torch.long), torch.arange(1, 17))


# ---- any registered encoding -------------------------------------------------------------


@pytest.mark.parametrize("spec", list_encodings(), ids=lambda spec: spec.name)
def test_every_registered_encoding_trains_in_the_vit_or_is_refused(spec: EncodingSpec) -> None:
    """A forward and backward of a tiny ViT, or a refusal naming the field and the reason."""
    reason = "causal" if spec.causal_only else "token ids" if spec.name == "complex_order" else ""
    three_axes = (
        "mrope", "videorope", "mmrope", "ilrope", "omnirope", "circlerope", "tm_rope", "msrope"
    )  # fmt: skip
    reason = "3 position axes" if spec.name in three_axes else reason  # t, h, w
    reason = "num_kv_heads >= 3" if spec.name == "mhrope" else reason  # a head per axis
    if reason:
        with pytest.raises(ValueError, match=rf"encoding '{spec.name}'.*{reason}"):
            DigitsViTConfig(encoding=spec.name, dim=16, depth=2, num_heads=2)
        with pytest.raises(ValueError, match=rf"^encodings: .*{reason}"):
            replace_fields(TINY, encodings=("none", spec.name))
        return
    replace_fields(TINY, encodings=("none", spec.name))  # the experiment's config accepts it
    torch.manual_seed(0)
    model = DigitsViT(DigitsViTConfig(encoding=spec.name, dim=16, depth=2, num_heads=2))
    logits = model(torch.randint(0, 17, (3, 64)))
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
    if spec.needs_grid:  # built for the patch grid: its size, or one position axis per grid axis
        encoding: Any = model.encoding
        if hasattr(encoding, "height"):
            assert (encoding.height, encoding.width) == (4, 4)
        elif hasattr(encoding, "size"):
            assert encoding.size == (4, 4)
        else:
            assert encoding.num_axes == 2


def test_the_encoding_gets_the_model_dims_and_pos_kwargs() -> None:
    config = replace_fields(
        TINY, encodings=("rope_2d", "t5"), pos_kwargs={"rope_2d": {"base": 50.0}}
    )
    rope = DigitsViT(config.model_config("rope_2d")).encoding
    assert isinstance(rope, AxialRotary2D) and rope.base == 50.0 and rope.head_dim == 8
    t5 = DigitsViT(config.model_config("t5")).encoding
    assert t5.bidirectional is True  # type: ignore[union-attr]  # ModelDims(causal=False)
    assert DigitsViT(config.model_config("none")).encoding is None


def test_the_old_name_learned_1d_is_the_registered_learned() -> None:
    models = {}
    for name in ("learned_1d", "learned"):
        torch.manual_seed(0)
        models[name] = DigitsViT(DigitsViTConfig(encoding=name, dim=16, num_heads=2))
    old, new = models["learned_1d"].state_dict(), models["learned"].state_dict()
    assert list(old) == list(new)
    for key in old:
        assert torch.equal(old[key], new[key]), key


class _DirectViT(nn.Module):
    """The ViT as built before the registry: the encoding classes constructed directly."""

    def __init__(self, encoding: str, dim: int, depth: int, num_heads: int) -> None:
        super().__init__()
        self.patch_embed = nn.Linear(4, dim)
        self.additive: nn.Module | None = None
        if encoding == "learned_1d":
            self.additive = LearnedPositionalEmbedding(16, dim)
        elif encoding == "sinusoidal_2d":
            self.additive = Sinusoidal2D(4, 4, dim)
        shape = ModelConfig(
            vocab_size=17, dim=dim, depth=depth, num_heads=num_heads, max_seq_len=16, pos="none"
        )
        rotary = (
            AxialRotary2D(dim // num_heads, 4, 4, base=100.0) if encoding == "rope_2d" else None
        )
        self.blocks = nn.ModuleList(Block(shape, rotary, causal=False) for _ in range(depth))
        self.hooks = hooks_of(rotary)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, patches: Tensor, positions: Tensor) -> Tensor:
        batch, seq, _ = patches.shape
        context = build_context(
            batch=batch,
            seq=seq,
            device=patches.device,
            causal=False,
            hooks=self.hooks,
            positions=positions,
        )
        x = patches if self.additive is None else patches + self.additive(positions)
        for block in self.blocks:
            x = block(x, context=context)
        return self.head(self.norm(x).mean(dim=1))


@pytest.mark.parametrize("encoding", DEFAULT_ENCODINGS)
def test_registry_construction_equals_the_classes_built_directly(encoding: str) -> None:
    """Same seed, same parameters and the same logits: the documented rows reproduce. The
    ViT is the public EncoderClassifier; the direct build is the ViT's first wiring (its
    parameters in the same order, under the names run folders of that version saved)."""
    torch.manual_seed(0)
    model = DigitsViT(DigitsViTConfig(encoding=encoding, dim=16, depth=2, num_heads=2))
    assert isinstance(model.model, EncoderClassifier)
    torch.manual_seed(0)
    direct = _DirectViT(encoding, dim=16, depth=2, num_heads=2)
    ours, theirs = model.state_dict(), direct.state_dict()
    assert [key.removeprefix("model.").removeprefix("trunk.") for key in ours] == list(theirs)
    for mine, old in zip(ours.values(), theirs.values(), strict=True):
        assert torch.equal(mine, old)
    assert type(model.encoding) is type(direct.additive or direct.blocks[0].attn.pos)
    tokens = torch.randint(0, 17, (3, 64))
    patches = direct.patch_embed(patchify(model.pixels(tokens).reshape(3, 8, 8), 2))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for positions in (torch.arange(16), perm):
            permuted = _unpatchify(patchify(tokens, 2)[:, positions], 2)
            assert torch.equal(model(permuted, positions), direct(patches[:, positions], positions))


@pytest.mark.parametrize("encoding", DEFAULT_ENCODINGS)
def test_weights_saved_under_the_old_names_load(encoding: str) -> None:
    """Run folders written before the ViT was the public model keep loading."""
    torch.manual_seed(1)
    direct = _DirectViT(encoding, dim=16, depth=2, num_heads=2)
    model = DigitsViT(DigitsViTConfig(encoding=encoding, dim=16, depth=2, num_heads=2))
    model.load_state_dict(direct.state_dict())  # strict: every key found
    for mine, old in zip(model.state_dict().values(), direct.state_dict().values(), strict=True):
        assert torch.equal(mine, old)
    wrapped = nn.ModuleDict({"vit": DigitsViT(model.config)})  # nested, as in training
    wrapped.load_state_dict({f"vit.{k}": v for k, v in direct.state_dict().items()})
    assert torch.equal(wrapped["vit"].model.head.weight, direct.head.weight)


class _RowColumnTable(AdditiveEncoding):
    """A test encoding reading ``num_axes`` position axes: a learned vector per index."""

    num_axes = 2

    def __init__(self, dim: int, size: int = 4) -> None:
        super().__init__()
        self.dim = dim
        self.tables = nn.Parameter(torch.randn(self.num_axes, size, dim))
        self.seen: list[Tensor] = []

    def forward(self, positions: Tensor) -> Tensor:
        self.seen.append(positions)
        return torch.stack([self.tables[a][positions[a]] for a in range(self.num_axes)]).sum(0)


class _TimeRowColumnTable(_RowColumnTable):
    num_axes = 3


@pytest.fixture
def register() -> Iterator[Callable[[str, type[nn.Module]], None]]:
    """Registers test encodings by name for one test."""
    names: list[str] = []

    def add(name: str, cls: type[nn.Module]) -> None:
        register_encoding(
            EncodingSpec(
                name=name,
                family="additive",
                paper="a test encoding, https://arxiv.org/abs/0000.00000",
                summary="a learned table per position axis",
                factory=lambda: cls,  # type: ignore[arg-type, return-value]
                from_dims=lambda dims: {"dim": dims.dim},
            )
        )
        names.append(name)

    yield add
    for name in names:
        unregister_encoding(name)


def test_a_two_axis_encoding_gets_rows_and_columns(register: Any) -> None:
    register("row_column_table", _RowColumnTable)
    model = DigitsViT(DigitsViTConfig(encoding="row_column_table", dim=16, num_heads=2))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    model.classify(torch.randn(2, 1, 8, 8), perm)
    expected = torch.stack((perm // 4, perm % 4))  # (2, seq): row, column
    assert torch.equal(model.encoding.seen[-1], expected)  # type: ignore[union-attr, index]


def test_an_encoding_reading_other_axes_is_refused(register: Any) -> None:
    register("time_row_column_table", _TimeRowColumnTable)
    with pytest.raises(ValueError, match="3 position axes"):
        DigitsViTConfig(encoding="time_row_column_table", dim=16, num_heads=2)
    with pytest.raises(ValueError, match=r"^encodings: .*3 position axes"):
        replace_fields(TINY, encodings=("time_row_column_table",))


def test_config_validation_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    DigitsViTConfig(encoding="learned", dim=16, num_heads=2)  # a trial build draws a table
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("encoding", [e for e in ENCODINGS if _servable(e)])
def test_the_vit_is_the_public_model_its_config_names(encoding: str) -> None:
    """Same config, same seed: the ViT's weights and logits are those of
    ``EncoderClassifier(config.model_config(), 10)`` on its scaled pixels."""
    config = DigitsViTConfig(encoding=encoding, dim=16, depth=2, num_heads=2)
    torch.manual_seed(0)
    vit = DigitsViT(config).eval()
    torch.manual_seed(0)
    public = EncoderClassifier(config.model_config(), num_classes=10).eval()
    ours, theirs = vit.state_dict(), public.state_dict()
    assert list(ours) == [f"model.{key}" for key in theirs]
    for mine, built in zip(ours.values(), theirs.values(), strict=True):
        assert torch.equal(mine, built)
    tokens = torch.randint(0, 17, (3, 64), generator=torch.Generator().manual_seed(2))
    # the ViT numbers its patches explicitly (as before it was the public model): the same
    # positions give the same logits bit for bit; the model's own default positions (the
    # index path of some encodings: FIRE, XL, dynamic) agree to rounding
    axes = public.trunk.position_hooks.num_axes
    positions = grid_positions(4, 4) if axes == 2 else torch.arange(16)
    with torch.no_grad():
        logits = vit(tokens)
        assert torch.equal(logits, public(vit.pixels(tokens), positions))
        assert_close(public(vit.pixels(tokens)), logits)

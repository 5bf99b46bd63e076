"""VLA: how image, instruction and action-slot positions should be numbered.

The task (:mod:`posenc.lab.data.scenes`): a ``G × G`` grid scene with three objects (shape ×
colour) and an agent, an instruction naming one object ("go to red square", filler words
lengthening it) and the action chunk: a shortest path from the agent to the named object
(rows first, then columns), padded with ``stay``. The tokens are
``[image patches (one per cell; one block per camera view) | instruction | action slots]``;
a model embeds the patches (linear), the words (a table), a learned query per action slot and
a learned embedding of each token's modality, runs a bidirectional
:class:`~posenc.lab.signal_models.SignalTransformer` and reads a 5-way action (stay, up,
down, left, right) from every action slot. The right action depends on where the named
object and the agent are, so the model must tie the instruction to image positions.

The question: what goes wrong at the modality boundaries when image and text positions are
numbered on, and which numbering carries over to a larger image grid and a longer
instruction. Numberings (``layouts``, :func:`~posenc.lab.data.scenes.layout_position_ids`):

* ``"flat"``: one index over everything, so a patch at (r, c) sits at ``r·G + c`` — its row
  stride is the grid width, and the instruction and the action slots start at ``G²``: a
  larger grid changes both the patches' geometry and where the text begins;
* ``"qwen2_vl"``: M-RoPE's (t, h, w) for the patches and text continuing at ``G`` on all
  three axes (Qwen2-VL): a larger grid keeps every patch's (h, w) and moves the text by ``ΔG``;
* ``"max_plus_one"``: the text at the vision block's ``max + 1`` — the same ids as
  ``"qwen2_vl"`` for one image (it differs only for a history of more than ``G`` frames), so
  it is not in the default sweep;
* ``"action_axis"``: ``"qwen2_vl"`` for image and text, every action slot at the position
  after the instruction on those three axes and a fourth axis ordering the slots.

Encodings meet a layout when they read its axes: 1-axis encodings (``rope``,
``sinusoidal``, ...) the flat numbering; ``mrope`` (3 axes) the (t, h, w) layouts; grid
encodings of any number of axes (``rope_axial``: axial RoPE, each axis the full frequency
range, unlike M-RoPE's split) every multi-axis layout, built with its axes (four for
``"action_axis"``); ``"none"`` runs once (layout ``"flat"``, whose positions it ignores).
Every encoding here is a function of positions, so the larger grid and the longer
instruction are met by evaluating it at the new positions (nothing to resample).

A short history (``history = H``, "a short history of frames"): every scene
adds its ``H`` previous frames (the agent at the earlier cells of a walk to its current
cell, :func:`~posenc.lab.data.scenes.make_scenes`), each camera view's block holding the
``H + 1`` frames frame-major, numbered by ``layout_position_ids(..., frames=H + 1)``. The
actions are still those of the current (last) frame, so the numbering must tell the model
which frame is the current one: ``"flat"`` by order alone, ``"qwen2_vl"`` by the t axis
``0..H``. (``"max_plus_one"`` differs from ``"qwen2_vl"`` only when ``H + 1 > G``.)

Conditions (``condition``, ``condition_label``): 0 the trained grid and instruction length
(``G4``), 1 the larger grid (``G6``), 2 the longer instruction (``instr +4``), 3 both. The
action chunk has ``action_length`` slots in every condition, ``2(test_grid − 1)`` by default
(the longest path on the larger grid): the trained chunks are padded with ``stay`` to it, so
the same learned slots are read everywhere, though slots past ``2(grid − 1)`` never saw a
move in training (a longer path on the larger grid is beyond the trained slots as well as
the trained positions).

Rows: ``experiment="vla"``, ``layout``, ``encoding``, ``seed``, ``condition``,
``condition_label``, ``in_distribution``, ``accuracy`` (per action slot), ``chunk_accuracy``
(whole chunk exact), ``stay_accuracy`` (the "always stay" baseline on that condition's test
set), ``grid``, ``instruction_length``, ``views``, ``train_loss``, and ``history`` when it is
above 0 (rows without history stay as they were).

The package: this module (config, model, runs, tables) and :mod:`.claims` (the finding its
rows test).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posenc._validate import (
    check_int,
    check_non_negative_int,
    check_positive_float,
    check_positive_int,
)
from posenc.lab.atlas import atlas_section, atlas_table
from posenc.lab.batch import derive_seed
from posenc.lab.config import EpochArgs, ModelArgs
from posenc.lab.data.scenes import (
    ACTIONS,
    CELL,
    STAY,
    VIEWS,
    WORDS,
    camera_views,
    image_patches,
    layout_position_ids,
    make_scenes,
)
from posenc.lab.experiments.vla.claims import CLAIMS
from posenc.lab.runner import Experiment, Run, check_builds, run_experiment
from posenc.lab.signal_models import NONE, SignalRunConfig, SignalTransformer, fit_signal_model
from posenc.lab.tables import pivot, text_table
from posenc.positions.multimodal import RUN_KINDS
from posenc.registry import ModelDims, encoding_spec

__all__ = ["EXPERIMENT", "LAYOUT_AXES", "VlaConfig", "VlaModel", "format_vla_table", "run_vla"]

Row = dict[str, Any]

#: Position axes of each numbering of :func:`~posenc.lab.data.scenes.layout_position_ids`.
LAYOUT_AXES = {"flat": 1, "qwen2_vl": 3, "max_plus_one": 3, "action_axis": 4}
TITLE = "VLA grid scenes: per-slot action accuracy by numbering / encoding"


@dataclass(frozen=True)
class VlaConfig(SignalRunConfig):
    """The VLA experiment: :class:`~posenc.lab.signal_models.SignalRunConfig`'s model and
    training (defaults: the documented sweep, 6 (layout, encoding) pairs × 3 seeds of about
    100 CPU-seconds each: about 15 minutes with ``workers=2`` on 2 idle cores), plus

    Args:
        layouts: the numberings compared (keys of :data:`LAYOUT_AXES`); each encoding runs
            under those whose axes it reads (see the module).
        grid: cells per side of the training scenes.
        test_grid: cells per side of the larger test scenes.
        instruction_length: words per instruction in training.
        test_instruction_length: words per instruction in the longer test instructions
            (filler words added).
        action_length: action slots of every chunk (≥ ``2(test_grid − 1)``); None = that.
        views: camera views per scene (:func:`~posenc.lab.data.scenes.camera_views`), each
            its own image block.
        history: previous frames per scene (≥ 0; None, the default, = 0, so that a folder
            written before this field existed resumes), frame-major in each view's block.
        num_objects: objects per scene.
        train_size: training scenes.
        test_size: test scenes per condition.
        rope_base: the base of every rotary encoding that takes one (``rope``, ``mrope``,
            ``rope_axial``; ``pos_kwargs`` overrides it per encoding). 10 rather than the
            papers' 10⁴-10⁶: with 12 pairs per head, M-RoPE at Qwen2-VL's base 10⁶ gives
            the rows and columns frequencies below 10⁻², 10⁻⁴ rad per cell, blind to a
            4-cell grid (a scale artefact, not the numbering's).
        model: the transformer (``dim`` 96, 3 blocks of 4 heads).
        train: the seeds and the schedule (20 epochs of 32 scenes at lr 1e-3).
    """

    encodings: tuple[str, ...] = (NONE, "sinusoidal", "rope", "mrope", "rope_axial")
    layouts: tuple[str, ...] = ("flat", "qwen2_vl", "action_axis")
    grid: int = 4
    test_grid: int = 6
    instruction_length: int = 4
    test_instruction_length: int = 8
    action_length: int | None = None
    views: int = 1
    history: int | None = None
    num_objects: int = 3
    train_size: int = 4000
    test_size: int = 500
    rope_base: float = 10.0
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, dim=96, depth=3))
    train: EpochArgs = field(default_factory=functools.partial(EpochArgs, lr=1e-3))

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "layouts", tuple(self.layouts))
        if not self.layouts or len(set(self.layouts)) != len(self.layouts):
            raise ValueError(f"layouts must be distinct names, got {self.layouts}")
        for layout in self.layouts:
            if layout not in LAYOUT_AXES:
                raise ValueError(f"layouts must be from {', '.join(LAYOUT_AXES)}, got {layout!r}")
        for name in ("grid", "test_grid", "instruction_length", "test_instruction_length"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.test_grid <= self.grid:
            raise ValueError(f"test_grid must exceed grid ({self.grid}), got {self.test_grid}")
        if self.instruction_length < 4:
            raise ValueError(f"instruction_length must be >= 4, got {self.instruction_length}")
        if self.test_instruction_length <= self.instruction_length:
            raise ValueError(
                f"test_instruction_length must exceed instruction_length "
                f"({self.instruction_length}), got {self.test_instruction_length}"
            )
        longest = 2 * (self.test_grid - 1)
        if self.action_length is not None:
            action_length = check_positive_int("action_length", self.action_length)
            object.__setattr__(self, "action_length", action_length)
        if self.action_length is not None and self.action_length < longest:
            raise ValueError(
                f"action_length must be >= {longest}, the longest path on the test grid, "
                f"got {self.action_length}"
            )
        object.__setattr__(self, "views", check_int("views", self.views, low=1, high=len(VIEWS)))
        if self.views > 1 and "max_plus_one" in self.layouts:
            raise ValueError("layouts: 'max_plus_one' numbers one vision block; set views=1")
        if self.history is not None:
            object.__setattr__(self, "history", check_non_negative_int("history", self.history))
        for name in ("num_objects", "train_size", "test_size"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        check_positive_float("rope_base", self.rope_base)
        if self.num_objects + 1 > self.grid**2:
            raise ValueError(f"num_objects must leave a cell for the agent on grid {self.grid}")
        if not pairs(self):
            raise ValueError(f"encodings: none of {self.encodings} reads any of {self.layouts}")
        check_builds(
            (f"encodings: {encoding!r} under layout {layout!r}", _builder(self, encoding, layout))
            for layout, encoding in pairs(self)
        )

    @property
    def slots(self) -> int:
        """Action slots of every chunk."""
        return self.action_length or 2 * (self.test_grid - 1)

    @property
    def conditions(self) -> list[tuple[str, int, int]]:
        """``(label, grid, instruction_length)`` of conditions 0 (trained) to 3."""
        extra = self.test_instruction_length - self.instruction_length
        return [
            (f"G{self.grid}", self.grid, self.instruction_length),
            (f"G{self.test_grid}", self.test_grid, self.instruction_length),
            (f"instr +{extra}", self.grid, self.test_instruction_length),
            ("both", self.test_grid, self.test_instruction_length),
        ]

    @property
    def frames(self) -> int:
        """Frames per camera view: the history and the current one."""
        return (self.history or 0) + 1

    def max_seq_len(self) -> int:
        """Tokens of the longest test sequence (the flat numbering's largest position + 1)."""
        patches = self.views * self.frames * self.test_grid**2 + self.views - 1
        return patches + self.test_instruction_length + self.slots


def _is_grid_encoding(encoding: str) -> bool:
    return encoding != NONE and encoding_spec(encoding).needs_grid


def _reads(config: VlaConfig, encoding: str, layout: str) -> bool:
    """Whether ``encoding`` reads ``layout``'s axes (see the module)."""
    axes = LAYOUT_AXES[layout]
    if encoding == NONE:
        return layout == ("flat" if "flat" in config.layouts else config.layouts[0])
    if _is_grid_encoding(encoding):
        return axes > 1
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        built = _model(config, encoding, layout)
    return built.num_axes == axes


def pairs(config: VlaConfig) -> list[tuple[str, str]]:
    """``(layout, encoding)`` of every run (per seed), layout-major."""
    return [
        (layout, encoding)
        for layout in config.layouts
        for encoding in config.encodings
        if _reads(config, encoding, layout)
    ]


def _model(config: VlaConfig, encoding: str, layout: str) -> SignalTransformer:
    """The transformer of ``encoding`` under ``layout``: a grid encoding gets the layout's
    axes (``(views · frames, G, G)`` grids of up to 3 axes; ``num_axes`` beyond)."""
    kwargs = dict(config.pos_kwargs.get(encoding, {}))
    rotary = encoding != NONE and encoding_spec(encoding).family == "rotary"
    if rotary and "base" in encoding_spec(encoding).parameters():
        kwargs.setdefault("base", config.rope_base)
    axes = LAYOUT_AXES[layout]
    grid: tuple[int, ...] | None = None
    if _is_grid_encoding(encoding):
        grid = (config.views * config.frames, config.grid, config.grid)
        if axes > len(grid):
            kwargs.setdefault("num_axes", axes)
    dims = ModelDims(
        dim=config.model.dim,
        num_heads=config.model.num_heads,
        max_seq_len=config.max_seq_len(),
        causal=False,
        grid=grid,
    )
    return SignalTransformer(
        encoding, dims, depth=config.model.depth, mlp_ratio=config.mlp_ratio, pos_kwargs=kwargs
    )


def _builder(config: VlaConfig, encoding: str, layout: str) -> Any:
    return lambda: _model(config, encoding, layout)


class VlaModel(nn.Module):
    """Patches, words, action-slot queries and modality embeddings → transformer → actions.

    Shape:
        patches ``(batch, views, frames · G², 3·CELL²)``, words ``(batch, L)``, positions as
        :class:`SignalTransformer` reads them, ``kinds (seq,)`` → logits ``(batch, slots, 5)``.
    """

    def __init__(self, config: VlaConfig, encoding: str, layout: str) -> None:
        super().__init__()
        self.patch_embed = nn.Linear(3 * CELL * CELL, config.model.dim)
        self.word_embed = nn.Embedding(len(WORDS), config.model.dim)
        self.kind_embed = nn.Embedding(len(RUN_KINDS), config.model.dim)
        self.marker = nn.Parameter(torch.randn(config.model.dim) * 0.02)  # between two views
        self.queries = nn.Parameter(torch.randn(config.slots, config.model.dim) * 0.02)
        self.transformer = _model(config, encoding, layout)
        self.head = nn.Linear(config.model.dim, len(ACTIONS))

    def forward(self, patches: Tensor, words: Tensor, positions: Tensor, kinds: Tensor) -> Tensor:
        batch, views = patches.shape[:2]
        pieces: list[Tensor] = []
        for view in range(views):
            if view:
                pieces.append(self.marker.expand(batch, 1, -1))
            pieces.append(self.patch_embed(patches[:, view]))
        pieces.append(self.word_embed(words))
        pieces.append(self.queries.expand(batch, -1, -1))
        x = torch.cat(pieces, dim=1) + self.kind_embed(kinds)
        hidden = self.transformer(x, positions)
        return self.head(hidden[:, -self.queries.shape[0] :])


@dataclass(frozen=True)
class _Split:
    """One condition's scenes as model inputs; positions and kinds are shared by every scene."""

    patches: Tensor  # (count, views, frames · G², 3·CELL²), frame-major in each view
    words: Tensor
    actions: Tensor
    positions: Tensor
    kinds: Tensor


def _split(
    config: VlaConfig, layout: str, axes: int, count: int, grid: int, length: int, seed: int
) -> _Split:
    """``count`` scenes of ``grid`` and instruction ``length`` from ``seed``, laid out by
    ``layout`` (one row of ids for a 1-axis encoding)."""
    scenes = make_scenes(
        count,
        grid,
        seed=seed,
        num_objects=config.num_objects,
        instruction_length=length,
        action_length=config.slots,
        history=config.frames - 1,
    )
    frames = scenes.frames().flatten(0, 1)  # (count · frames, 3, S, S)
    views = camera_views(frames, config.views)  # (count · frames, views, 3, S, S)
    patches = image_patches(views.flatten(0, 1)).unflatten(0, (count, config.frames, config.views))
    patches = patches.transpose(1, 2).flatten(2, 3)  # (count, views, frames · G², 3·CELL²)
    laid = layout_position_ids(
        grid,
        length,
        config.slots,
        layout,  # type: ignore[arg-type]
        frames=config.frames,
        views=config.views,
    )
    positions = laid.position_ids[0] if axes == 1 else laid.position_ids
    return _Split(patches, scenes.instructions, scenes.actions, positions, laid.kinds)


def _plan(config: VlaConfig) -> list[Run]:
    return [
        Run(
            f"{layout}/{encoding}/seed{seed}",
            {"layout": layout, "encoding": encoding, "seed": seed},
        )
        for layout, encoding in pairs(config)
        for seed in config.train.seeds
    ]


def _execute(config: VlaConfig, run: Run, run_dir: Path) -> list[Row]:
    layout, encoding, seed = run.params["layout"], run.params["encoding"], run.params["seed"]
    torch.manual_seed(derive_seed("vla", seed, 0))
    model = VlaModel(config, encoding, layout)
    axes = model.transformer.num_axes
    train = _split(
        config,
        layout,
        axes,
        config.train_size,
        config.grid,
        config.instruction_length,
        derive_seed("vla-train", config.data_seed, 0),
    )

    def loss_of(index: Tensor) -> Tensor:
        logits = model(train.patches[index], train.words[index], train.positions, train.kinds)
        return nn.functional.cross_entropy(logits.flatten(0, 1), train.actions[index].flatten())

    generator = torch.Generator().manual_seed(derive_seed("vla-order", seed, 0))
    summary = fit_signal_model(model, loss_of, config.train_size, config.train, generator)
    rows: list[Row] = []
    for condition, (label, grid, length) in enumerate(config.conditions):
        test = _split(
            config,
            layout,
            axes,
            config.test_size,
            grid,
            length,
            derive_seed("vla-test", config.data_seed, condition),
        )
        with torch.no_grad():
            logits = torch.cat(
                [
                    model(
                        test.patches[s : s + 256],
                        test.words[s : s + 256],
                        test.positions,
                        test.kinds,
                    )
                    for s in range(0, config.test_size, 256)
                ]
            )
        right = logits.argmax(-1) == test.actions
        rows.append(
            {
                "experiment": "vla",
                "layout": layout,
                "encoding": encoding,
                "seed": seed,
                "condition": condition,
                "condition_label": label,
                "in_distribution": condition == 0,
                "accuracy": float(right.float().mean()),
                "chunk_accuracy": float(right.all(dim=1).float().mean()),
                "stay_accuracy": float((test.actions == STAY).float().mean()),
                "grid": grid,
                "instruction_length": length,
                "views": config.views,
                "train_loss": summary["train_loss"],
            }
        )
        if config.frames > 1:
            rows[-1]["history"] = config.frames - 1
    return rows


def format_vla_table(rows: Sequence[Row]) -> str:
    """Per-slot accuracy (the atlas table, titled with the "always stay" baseline of each
    condition) and whole-chunk exact match, per layout / encoding and condition."""
    selected = [row for row in rows if row.get("experiment") == "vla"]
    if not selected:
        return ""
    baseline: dict[str, float] = {}
    for row in selected:
        baseline.setdefault(str(row["condition_label"]), float(row["stay_accuracy"]))
    stay = ", ".join(f"{label} {value:.3f}" for label, value in baseline.items())
    views = selected[0].get("views", 1)
    history = selected[0].get("history", 0)
    title = TITLE + (f" ({views} camera views)" if views != 1 else "")
    title += f" ({history} previous frames)" if history else ""
    per_slot = atlas_table(selected, "vla", f"{title}; 'always stay' baseline: {stay}")
    header, body = pivot(
        selected,
        ["layout", "encoding"],
        "condition",
        "chunk_accuracy",
        digits=3,
        label=lambda c: next(str(r["condition_label"]) for r in selected if r["condition"] == c),
    )
    chunk = "whole-chunk exact match ('always stay': 0)\n" + text_table(header, body)
    return per_slot + "\n\n" + chunk


def run_vla(config: VlaConfig, out: str | Path, **kwargs: Any) -> list[Row]:
    """Run (or resume) the VLA experiment in ``out``; return its rows."""
    return run_experiment(EXPERIMENT, config, out, **kwargs)


EXPERIMENT: Experiment[VlaConfig] = Experiment(
    name="vla",
    summary="VLA grid scenes: flat vs M-RoPE vs action-axis numberings, larger grid, longer text",
    title="VLA: numbering image, instruction and action positions",
    config=VlaConfig,
    plan=_plan,
    execute=_execute,
    table=format_vla_table,
    claims=CLAIMS,
    sections=(atlas_section("vla", "Vision-language-action: grid scenes"),),
)

"""Video: which positional encoding for moving digits trained on short clips and a small canvas.

The task (:mod:`posenc.lab.data.moving_digits`): one sklearn digit sliding one pixel per frame
over a blank canvas in one of four directions, bouncing off the edges; the label is
``digit · 4 + direction`` (40 classes, chance 2.5 %), so a model needs the digit's shape
(where its patches lie relative to each other) and its motion (which way it moves from frame to
frame). Clips are cut into ``time_patch × patch_size × patch_size`` tubelets (a linear
embedding of each), a bidirectional transformer with the encoding under test
(:class:`~posenc.lab.signal_models.SignalTransformer`) reads them, mean pooling and a linear
head classify. The default tubelet is one frame (``time_patch=1``): with two-frame tubelets
the one-pixel move lies inside each token and no encoding beat none at the trained setting
(measured, seed 0: none 0.632, learned_factorized 0.626); with one frame per token the sign
of the motion (left or right, up or down) is only in the order of the frames, which only the
positions give (none then gets the axis of motion but not its sign: 0.48 against axial
RoPE's 0.64).

The question: trained at ``frames`` = F frames on a ``canvas`` = C pixel square, which encoding
still classifies clips of 2F and 4F frames (the same clips, continued: the first F frames are
the trained clip; the digit bounces more often in a longer clip, as it would in the data) and
clips on a larger ``test_canvas`` (the same digits, directions and relative starts)? Test
conditions (the row's ``condition``): 0 = F frames on C (as trained), 1 = 2F, 2 = 4F,
3 = F frames on the larger canvas. Every test clip is of held-out digit images.

Encodings (labels in ``encodings``) and the positions they read, token ``k`` of the tubelet
grid ``(T, H, W)`` at ``(t, h, w)``:

* ``sinusoidal_grid``: 3D sin-cos of ``(t, h, w)``; any grid: evaluated at the new positions.
* ``learned_factorized``: MAE-ST's separable space + time tables (Feichtenhofer et al. 2022,
  https://arxiv.org/abs/2205.09113), ``S[h·W + w] + T[t]`` (``groups=((1, 2), (0,))``, the
  default here unless ``pos_kwargs`` names other groups). The tables are finite, so for a
  longer clip or a larger canvas they are **interpolated** to the new grid as MAE-ST does
  when it changes the number of frames or the resolution (:func:`resample_factorized`: the
  time table linearly, the space table bicubically as timm's ``resample_abs_pos_embed``).
* ``rope_axial``: axial 3D RoPE, pairs split between t, h and w; any positions. Every
  rotary encoding that takes a base gets ``rope_base`` (10; see :class:`VideoConfig`).
* ``mrope``: Qwen2-VL's M-RoPE (https://arxiv.org/abs/2409.12191) on ``(t, h, w)``: for a
  sequence of video tokens alone Qwen2-VL's ids are the grid indices themselves.
* ``videorope``: VideoRoPE (Wei et al. 2025, https://arxiv.org/abs/2502.05173) on the
  diagonal-layout ids of ``posenc.positions.multimodal_layouts.videorope_position_ids`` (temporal
  spacing ``videorope_spacing``).
* ``v2pe``: V2PE (Ge et al. 2024, https://arxiv.org/abs/2412.09616), a label, not a registry
  name: 1D ``rope`` over ``posenc.positions.multimodal_layouts.v2pe_position_ids``, each visual
    token
  advancing the position by ``v2pe_step`` (token order t-major, then rows, then columns).
* ``comrope_ap``, ``comrope_ld``, ``liere``: learned rotation generators over ``(t, h, w)``
  (the registry scales each axis by ``1 / size`` of the training grid, the references'
  unit-interval coordinates: a longer clip or a larger canvas reads coordinates beyond 1).
* ``none``: no position information (the tubelets' content alone; a permutation-invariant
  bag of tokens).

Every encoding meets every condition; none is left out of a condition.

Rows: ``experiment="video"``, ``encoding`` (the label), ``seed``, ``condition`` (0..3),
``condition_label`` (``"F=4"``, ``"2F=8"``, ``"4F=16"``, ``"canvas 24"``),
``in_distribution`` (condition 0), ``accuracy``, plus ``frames``, ``canvas``, ``tokens``
and the run's ``train_loss``.

The package: this module (config, model, runs, tables) and :mod:`.claims` (the findings its
rows test).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_positive_float, check_positive_int
from posenc.additive.learned import resize_table
from posenc.additive.learned_grid import FactorizedLearned, resample_grid_table
from posenc.lab.atlas import atlas_section, atlas_table
from posenc.lab.batch import derive_seed
from posenc.lab.config import EpochArgs, ModelArgs
from posenc.lab.data.digits import IMAGE_SIZE, load_digits_splits
from posenc.lab.data.moving_digits import NUM_CLASSES, make_moving_digits, tubelets
from posenc.lab.experiments.video.claims import CLAIMS
from posenc.lab.runner import Experiment, Run, check_pos_kwargs, run_experiment
from posenc.lab.signal_models import (
    NONE,
    SignalRunConfig,
    SignalTransformer,
    accuracy_in_batches,
    fit_signal_model,
)
from posenc.positions import grid_positions
from posenc.positions.multimodal import VIDEO, mrope_position_ids
from posenc.positions.multimodal_layouts import v2pe_position_ids, videorope_position_ids
from posenc.registry import ModelDims, encoding_spec

__all__ = [
    "DEFAULT_ENCODINGS",
    "ENCODINGS",
    "EXPERIMENT",
    "Condition",
    "VideoClassifier",
    "VideoConfig",
    "conditions",
    "encoding_positions",
    "resample_factorized",
    "run_video",
]

Row = dict[str, Any]

#: Every encoding the experiment wires (labels; ``v2pe`` builds ``rope``).
ENCODINGS: tuple[str, ...] = (
    "sinusoidal_grid",
    "learned_factorized",
    "rope_axial",
    "mrope",
    "videorope",
    "v2pe",
    "comrope_ap",
    "comrope_ld",
    "liere",
    NONE,
)
#: The documented sweep: every wired encoding.
DEFAULT_ENCODINGS: tuple[str, ...] = ENCODINGS
#: Labels that are not registry names: the registry encoding they build.
_REGISTRY_NAME = {"v2pe": "rope"}
#: This experiment's default constructor arguments (``pos_kwargs`` overrides them).
_DEFAULT_KWARGS: dict[str, dict[str, Any]] = {"learned_factorized": {"groups": ((1, 2), (0,))}}


class Condition(NamedTuple):
    """One test condition: its order, its label, and the clips' frames and canvas side."""

    order: int
    label: str
    frames: int
    canvas: int


@dataclass(frozen=True)
class VideoConfig(SignalRunConfig):
    """The video experiment: :class:`~posenc.lab.signal_models.SignalRunConfig`'s model and
    training, plus

    Args:
        model: the transformer (``dim`` 96 with 4 heads: head_dim 24, which axial 3D RoPE
            splits evenly over t, h and w, and M-RoPE / VideoRoPE into 4 + 4 + 4 pairs).
        train: the seeds and the schedule (10 epochs of 64 clips at lr 3e-3).
        frames: F, frames per training clip (a multiple of ``time_patch``, ≥ 2).
        canvas: C, side of the training canvas (a multiple of ``patch_size``, ≥ 9).
        test_canvas: side of the larger test canvas (a multiple of ``patch_size``, > ``canvas``).
        time_patch: frames per tubelet.
        patch_size: pixels per tubelet side.
        train_repeats: training clips per training digit image (each its own direction and
            start): ``1297 · train_repeats`` clips.
        test_size: held-out digit images, one test clip each per condition.
        v2pe_step: V2PE's position step per visual token (``v2pe``).
        videorope_spacing: VideoRoPE's temporal spacing δ (``videorope``).
        rope_base: the base of every rotary encoding that takes one (``rope_axial``,
            ``mrope``, ``videorope``, ``v2pe``'s ``rope``; ``pos_kwargs`` overrides it per
            encoding). 10 rather than the papers' 100 (RoPE-ViT) to 10⁶ (Qwen2-VL): with 12
            pairs per head, at 10⁶ M-RoPE's columns and VideoRoPE's time turn by about 10⁻⁴
            rad per step, blind to a grid of 4 frames (a scale artefact, not the layout's).
    """

    encodings: tuple[str, ...] = DEFAULT_ENCODINGS
    model: ModelArgs = field(default_factory=functools.partial(ModelArgs, dim=96, depth=2))
    train: EpochArgs = field(
        default_factory=functools.partial(EpochArgs, epochs=10, batch_size=64, lr=3e-3)
    )
    frames: int = 4
    canvas: int = 16
    test_canvas: int = 24
    time_patch: int = 1
    patch_size: int = 4
    train_repeats: int = 3
    test_size: int = 500
    v2pe_step: float = 0.25
    videorope_spacing: float = 2.0
    rope_base: float = 10.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("frames", "canvas", "test_canvas", "time_patch", "patch_size"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        object.__setattr__(
            self, "train_repeats", check_positive_int("train_repeats", self.train_repeats)
        )
        object.__setattr__(self, "test_size", check_positive_int("test_size", self.test_size))
        check_positive_float("v2pe_step", self.v2pe_step)
        check_positive_float("videorope_spacing", self.videorope_spacing)
        check_positive_float("rope_base", self.rope_base)
        if self.frames < 2 or self.frames % self.time_patch:
            raise ValueError(
                f"frames must be >= 2 and a multiple of time_patch ({self.time_patch}), "
                f"got {self.frames}"
            )
        if self.canvas <= IMAGE_SIZE or self.canvas % self.patch_size:
            raise ValueError(
                f"canvas must exceed the {IMAGE_SIZE}-pixel digit and be a multiple of "
                f"patch_size ({self.patch_size}), got {self.canvas}"
            )
        if self.test_canvas <= self.canvas or self.test_canvas % self.patch_size:
            raise ValueError(
                f"test_canvas must exceed canvas ({self.canvas}) and be a multiple of "
                f"patch_size ({self.patch_size}), got {self.test_canvas}"
            )
        check_pos_kwargs(self.pos_kwargs, self.encodings, self._checked_model)

    def _checked_model(self, encoding: str) -> SignalTransformer:
        """The model of ``encoding``, refused unless it reads the positions it will get."""
        model = self.transformer(encoding, *self._shape)
        wanted = 1 if encoding in (NONE, "v2pe") else 3
        if model.num_axes != wanted:
            raise ValueError(
                f"it reads {model.num_axes} position axes, the video gives {wanted} "
                "((t, h, w); a 1D numbering of the tokens is 'v2pe')"
            )
        return model

    @property
    def grid(self) -> tuple[int, int, int]:
        """The training clips' tubelet grid ``(T, H, W)``."""
        return _grid(self.frames, self.canvas, self)

    @property
    def _shape(self) -> tuple[tuple[int, int, int], int]:
        """The training grid and the longest test sequence (``max_seq_len``)."""
        return self.grid, max(math.prod(_grid(c.frames, c.canvas, self)) for c in conditions(self))

    def transformer(
        self, encoding: str, grid: tuple[int, ...], max_seq_len: int
    ) -> SignalTransformer:
        """The transformer of encoding label ``encoding`` (``v2pe`` builds ``rope``; MAE-ST's
        groups for ``learned_factorized`` and ``rope_base`` for the rotary ones unless
        ``pos_kwargs`` gives others)."""
        dims = ModelDims(
            dim=self.model.dim,
            num_heads=self.model.num_heads,
            max_seq_len=max_seq_len,
            causal=False,
            grid=grid,
        )
        name = _REGISTRY_NAME.get(encoding, encoding)
        kwargs = {**_DEFAULT_KWARGS.get(encoding, {}), **self.pos_kwargs.get(encoding, {})}
        spec = None if encoding == NONE else encoding_spec(name)
        if spec is not None and spec.family == "rotary" and "base" in spec.parameters():
            kwargs.setdefault("base", self.rope_base)
        return SignalTransformer(
            name,
            dims,
            depth=self.model.depth,
            mlp_ratio=self.mlp_ratio,
            pos_kwargs=kwargs,
        )


def _grid(frames: int, canvas: int, config: VideoConfig) -> tuple[int, int, int]:
    side = canvas // config.patch_size
    return frames // config.time_patch, side, side


def conditions(config: VideoConfig) -> list[Condition]:
    """The four test conditions: as trained, 2F and 4F frames, and the larger canvas."""
    f, c = config.frames, config.canvas
    return [
        Condition(0, f"F={f}", f, c),
        Condition(1, f"2F={2 * f}", 2 * f, c),
        Condition(2, f"4F={4 * f}", 4 * f, c),
        Condition(3, f"canvas {config.test_canvas}", f, config.test_canvas),
    ]


def encoding_positions(encoding: str, grid: Sequence[int], config: VideoConfig) -> Tensor:
    """The positions encoding label ``encoding`` reads for tubelets on ``grid`` ``(T, H, W)``
    (token order of :func:`~posenc.lab.data.moving_digits.tubelets`): ``(3, T·H·W)``
    ``(t, h, w)`` for the grid encodings, Qwen2-VL's M-RoPE ids
    (:func:`~posenc.positions.multimodal.mrope_position_ids`), VideoRoPE's diagonal ids, V2PE's 1D
    ids,
    token indices for ``none`` (read by nothing)."""
    t, h, w = grid
    if encoding == NONE:
        return torch.arange(t * h * w)
    types = torch.full((t * h * w,), VIDEO)  # a video alone: its run starts at 0
    if encoding == "videorope":
        ids, _ = videorope_position_ids(
            types,
            video_grid_thw=[grid],
            spatial_merge_size=1,
            temporal_spacing=config.videorope_spacing,
        )
        return ids.float()
    if encoding == "v2pe":
        return v2pe_position_ids(types, config.v2pe_step).float()
    if encoding == "mrope":  # Qwen2-VL's ids of a video run alone: its grid indices
        ids, _ = mrope_position_ids(types[None], video_grid_thw=[grid], spatial_merge_size=1)
        return ids[:, 0]
    return grid_positions(t, h, w)


@torch.no_grad()
def resample_factorized(table: FactorizedLearned, size: Sequence[int]) -> FactorizedLearned:
    """A copy of ``table`` on the grid ``size``, each group's table interpolated as MAE-ST
    moves its embeddings to another clip length or resolution: a one-axis group (time)
    linearly (:func:`~posenc.additive.learned.resize_table`), a two-axis group (space)
    bicubically as timm's ``resample_abs_pos_embed``
    (:func:`~posenc.additive.learned_grid.resample_grid_table`), ``align_corners=False``.

    Raises:
        ValueError: naming ``size`` when it has another number of axes, or a group of three
            or more axes (no interpolation of such tables is defined here).
    """
    new = tuple(check_positive_int(f"size[{i}]", s) for i, s in enumerate(size))
    if len(new) != table.num_axes:
        raise ValueError(f"size must have {table.num_axes} axes like the table, got {new}")
    out = copy.deepcopy(table)
    for index, group in enumerate(table.groups):
        old_sizes = tuple(table.size[a] for a in group)
        new_sizes = tuple(new[a] for a in group)
        weight = table.tables[index].detach()
        if len(group) == 1:
            weight = resize_table(weight, new_sizes[0])
        elif len(group) == 2:
            weight = resample_grid_table(weight, new_sizes, old_sizes)
        else:
            raise ValueError(f"size: a group of {len(group)} axes {group} cannot be resampled")
        out.tables[index] = nn.Parameter(weight)
    out.size = new
    return out


class VideoClassifier(nn.Module):
    """Tubelet embedding → :class:`SignalTransformer` → mean over tokens → 40 logits.

    Shape:
        tokens ``(batch, seq, time_patch · patch_size²)``, positions as the encoding reads
        them → ``(batch, 40)``.
    """

    def __init__(self, config: VideoConfig, encoding: str) -> None:
        super().__init__()
        self.embed = nn.Linear(config.time_patch * config.patch_size**2, config.model.dim)
        self.transformer = config.transformer(encoding, *config._shape)
        self.head = nn.Linear(config.model.dim, NUM_CLASSES)

    def forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        hidden = self.transformer(self.embed(tokens), positions)
        return self.head(hidden.mean(dim=1))

    def at_grid(self, grid: Sequence[int]) -> VideoClassifier:
        """The model for clips on ``grid``: itself, or a copy with its finite learned tables
        interpolated to the grid (:func:`resample_factorized`)."""
        additive = self.transformer.additive
        if not isinstance(additive, FactorizedLearned) or tuple(grid) == additive.size:
            return self
        model = copy.deepcopy(self)
        model.transformer.additive = resample_factorized(additive, grid)
        return model


def _clips(config: VideoConfig) -> tuple[Tensor, Tensor, dict[int, tuple[Tensor, Tensor]]]:
    """Training tokens and labels, and each condition's test tokens and labels."""
    data = load_digits_splits(config.test_size, seed=config.data_seed)
    videos, labels = [], []
    for repeat in range(config.train_repeats):
        seed = derive_seed("video-train", config.data_seed, repeat)
        clips = make_moving_digits(
            data.train_pixels, data.train_labels, config.frames, config.canvas, seed=seed
        )
        videos.append(clips.videos)
        labels.append(clips.labels)
    train_tokens, _ = tubelets(torch.cat(videos), config.time_patch, config.patch_size)
    tests = {}
    for condition in conditions(config):
        clips = make_moving_digits(
            data.test_pixels,
            data.test_labels,
            condition.frames,
            condition.canvas,
            seed=derive_seed("video-test", config.data_seed),
        )
        tokens, _ = tubelets(clips.videos, config.time_patch, config.patch_size)
        tests[condition.order] = (tokens, clips.labels)
    return train_tokens, torch.cat(labels), tests


def _predict(model: VideoClassifier, tokens: Tensor, positions: Tensor, index: Tensor) -> Tensor:
    return model(tokens[index], positions)


def _plan(config: VideoConfig) -> list[Run]:
    """Seed by seed (every encoding's first seed first: a sweep stopped early still compares
    them all)."""
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for seed in config.train.seeds
        for encoding in config.encodings
    ]


def _execute(config: VideoConfig, run: Run, run_dir: Path) -> list[Row]:
    encoding, seed = run.params["encoding"], run.params["seed"]
    train_tokens, train_labels, tests = _clips(config)
    torch.manual_seed(derive_seed("video-init", seed))
    model = VideoClassifier(config, encoding)
    positions = encoding_positions(encoding, config.grid, config)

    def loss_of(index: Tensor) -> Tensor:
        return F.cross_entropy(model(train_tokens[index], positions), train_labels[index])

    generator = torch.Generator().manual_seed(derive_seed("video-batches", seed))
    fit = fit_signal_model(model, loss_of, train_tokens.shape[0], config.train, generator)
    rows: list[Row] = []
    for condition in conditions(config):
        tokens, labels = tests[condition.order]
        grid = _grid(condition.frames, condition.canvas, config)
        adapted = model.at_grid(grid).eval()
        test_positions = encoding_positions(encoding, grid, config)
        accuracy = accuracy_in_batches(
            functools.partial(_predict, adapted, tokens, test_positions), labels
        )
        rows.append(
            {
                "experiment": "video",
                "encoding": encoding,
                "seed": seed,
                "condition": condition.order,
                "condition_label": condition.label,
                "in_distribution": condition.order == 0,
                "accuracy": accuracy,
                "frames": condition.frames,
                "canvas": condition.canvas,
                "tokens": math.prod(grid),
                **fit,
            }
        )
    return rows


def format_video_table(rows: Sequence[Row]) -> str:
    """Accuracy per encoding and test condition, mean ± std over seeds."""
    return atlas_table(rows, "video", "moving digits (digit × direction, 40 classes)")


def run_video(
    config: VideoConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in ``out`` (see the module); return its rows."""
    return run_experiment(EXPERIMENT, config, out, echo=echo)


EXPERIMENT = Experiment(
    name="video",
    summary="moving digits trained at F frames on a small canvas, tested at 2F, 4F, larger canvas",
    title="posenc: video encodings",
    config=VideoConfig,
    plan=_plan,
    execute=_execute,
    table=format_video_table,
    claims=CLAIMS,
    sections=(atlas_section("video", "Video: moving digits"),),
)

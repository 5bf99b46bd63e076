"""Keyword spotting on spectrograms: which encoding, as 1D frames and as 2D patches, carries
over from short clips to longer ones.

The task (:mod:`posenc.lab.data.audio`): a clip holds one of 8 chirp/tone keywords at a
random onset in noise with distractor tones; words ``k`` and ``k + 4`` are the same segments
in reverse order, so the label needs frequency *and* temporal order. A model is trained on
clips of ``durations_s[0]`` seconds (1.024 s = 64 frames) and tested on held-out clips of
each duration (condition 0: the trained length; 2.048 s and 4.096 s: conditions 1 and 2).
The longer clips come from the same generator (the distractors keep their density: their
count scales with the duration); only the background around the keyword grows, so what is
tested is positions beyond those trained, not another task.

The question: which positional encoding for a spectrogram, read

* as **frames** (``layout="frames"``): one token per ``frames_per_token`` consecutive frames,
  1-axis positions ``0 .. n − 1``; encodings ``sinusoidal``, ``learned``, ``rope``, ``alibi``
  (symmetric, the encoder's) and ``none``;
* as **patches** (``layout="patches"``): ``patch_frames × patch_bins`` time × frequency
  patches on a grid ``(T, F)`` (time outer), 2-axis positions ``(t, f)``; encodings
  ``sinusoidal_grid`` (2D sin-cos), ``learned_2d`` (ViT's table), ``learned_factorized``
  (``R[t] + C[f]``), ``rope_axial``, ``rope_mixed`` (learned frequencies) and ``none``.

An encoding's layout follows from the registry: one that needs a grid runs on patches, any
other on frames, ``"none"`` on both (``layouts`` restricts them). The model is
:class:`~posenc.lab.signal_models.SignalTransformer` between a linear token embedding (the
log-spectrogram standardized by the training set's mean and std) and mean pooling + a linear
head over the 8 words.

How each encoding meets a longer clip (the ``adaptation`` column):

* ``learned`` (a table of the trained ``n`` rows): interpolated linearly to the longer clip's
  ``n'`` rows (:meth:`~posenc.additive.learned.LearnedPositionalEmbedding.resize`,
  ``align_corners=False``): the trained table stretched over the clip (``"interpolated"``);
* ``learned_2d``: resampled bicubically to the longer grid ``(T', F)``
  (:meth:`~posenc.additive.learned_grid.LearnedGrid.resample`, timm's; ``"resampled"``);
* ``learned_factorized``: its time table ``R`` interpolated linearly to ``T'`` rows as
  ``learned``, its frequency table ``C`` kept (``"interpolated"``);
* every other encoding reads the longer clip's integer positions, beyond the trained ones
  (``"extrapolated"``); ``none`` has nothing to adapt.

An encoding that cannot meet the longest clip (one fixed to the trained grid, e.g.
``sinusoidal_2d``, ``rope_2d``) is refused at the start naming ``encodings``: no row is written
for a condition an encoding cannot be evaluated on.

Rows (:mod:`posenc.lab.atlas`'s schema): ``experiment="audio"``, ``layout``, ``encoding``,
``seed``, ``condition``, ``condition_label`` (``"2.048 s"``), ``in_distribution``,
``accuracy``, plus ``accuracy_trained_span`` / ``accuracy_beyond_span`` (the clips whose keyword
lies within the trained clip's frames / ends beyond them: seen positions or new ones, at the
same clip length), ``clips_beyond_span``, ``duration_s``, ``tokens`` (per clip),
``adaptation`` and ``train_loss``.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import check_non_negative_int, check_positive_int
from posenc.additive.learned import LearnedPositionalEmbedding, resize_table
from posenc.additive.learned_grid import FactorizedLearned, LearnedGrid
from posenc.lab.atlas import atlas_section, atlas_table
from posenc.lab.batch import derive_seed
from posenc.lab.config import EpochArgs
from posenc.lab.data.audio import (
    FREQ_BINS,
    KEYWORD_FRAMES,
    NUM_KEYWORDS,
    AudioDataset,
    clip_frames,
    make_audio_dataset,
    to_frames,
    to_patches,
)
from posenc.lab.runner import Experiment, Run, check_builds, run_experiment
from posenc.lab.signal_models import (
    NONE,
    SignalRunConfig,
    SignalTransformer,
    accuracy_in_batches,
    fit_signal_model,
)
from posenc.positions import grid_positions
from posenc.registry import encoding_spec

__all__ = [
    "DEFAULT_ENCODINGS",
    "EXPERIMENT",
    "LAYOUTS",
    "AudioClassifier",
    "AudioConfig",
    "adapt_to_grid",
    "evaluate",
    "layouts_of",
    "run_audio",
    "span_accuracies",
    "token_positions",
    "tokenize",
]

Row = dict[str, Any]

#: The documented comparison: 1D encodings over frames, 2D ones over patches, none on both.
DEFAULT_ENCODINGS = (
    NONE,
    "sinusoidal",
    "learned",
    "rope",
    "alibi",
    "sinusoidal_grid",
    "learned_2d",
    "learned_factorized",
    "rope_axial",
    "rope_mixed",
)
#: How a spectrogram becomes tokens.
LAYOUTS = ("frames", "patches")


def layouts_of(encoding: str) -> tuple[str, ...]:
    """The layouts ``encoding`` runs on: grid encodings on patches, others on frames, none on
    both."""
    if encoding == NONE:
        return LAYOUTS
    try:
        spec = encoding_spec(encoding)
    except ValueError as error:
        raise ValueError(f"encodings: {error}") from None
    return ("patches",) if spec.needs_grid else ("frames",)


@dataclass(frozen=True)
class AudioConfig(SignalRunConfig):
    """The audio experiment (defaults: the documented sweep, about 15 min with ``workers=2``
    on 2 idle cores); the shared fields are :class:`~posenc.lab.signal_models.SignalRunConfig`'s.

    Args:
        layouts: which token layouts to run (``"frames"``, ``"patches"``).
        durations_s: clip lengths in seconds, increasing; the first is trained and tested in
            distribution (condition 0), the others are tested only.
        train_clips: training clips (of ``durations_s[0]``).
        test_clips: held-out clips per duration.
        snr_db: keyword power over noise power, dB.
        distractors: distractor tones per clip of ``durations_s[0]``; a clip ``r`` times longer
            holds ``round(r · distractors)`` (the same density).
        frames_per_token: spectrogram frames per token of the frames layout.
        patch_frames: frames (time) per patch of the patches layout.
        patch_bins: frequency bins per patch of the patches layout.
        train: the seeds and the schedule (12 epochs).
    """

    encodings: tuple[str, ...] = DEFAULT_ENCODINGS
    layouts: tuple[str, ...] = LAYOUTS
    durations_s: tuple[float, ...] = (1.024, 2.048, 4.096)
    train_clips: int = 2000
    test_clips: int = 500
    snr_db: float = 0.0
    distractors: int = 2
    frames_per_token: int = 2
    patch_frames: int = 8
    patch_bins: int = 16
    train: EpochArgs = field(default_factory=functools.partial(EpochArgs, epochs=12))

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "layouts", tuple(self.layouts))
        if not self.layouts or any(layout not in LAYOUTS for layout in self.layouts):
            raise ValueError(f"layouts must be some of {LAYOUTS}, got {self.layouts}")
        for encoding in self.encodings:
            if encoding != NONE and not set(layouts_of(encoding)) & set(self.layouts):
                raise ValueError(
                    f"encodings: {encoding!r} runs on {layouts_of(encoding)[0]}, which is not "
                    f"in layouts {self.layouts}"
                )
        object.__setattr__(self, "durations_s", tuple(self.durations_s))
        if not self.durations_s or any(
            isinstance(d, bool) or not isinstance(d, (int, float)) for d in self.durations_s
        ):
            raise ValueError(f"durations_s must be numbers of seconds, got {self.durations_s}")
        if any(b <= a for a, b in zip(self.durations_s, self.durations_s[1:], strict=False)):
            raise ValueError(f"durations_s must increase, got {self.durations_s}")
        object.__setattr__(self, "train_clips", check_positive_int("train_clips", self.train_clips))
        object.__setattr__(self, "test_clips", check_positive_int("test_clips", self.test_clips))
        object.__setattr__(
            self, "distractors", check_non_negative_int("distractors", self.distractors)
        )
        if not -30 <= self.snr_db <= 60:
            raise ValueError(f"snr_db must be in [-30, 60], got {self.snr_db}")
        for name in ("frames_per_token", "patch_frames", "patch_bins"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if FREQ_BINS % self.patch_bins:
            raise ValueError(f"patch_bins must divide {FREQ_BINS}, got {self.patch_bins}")
        for duration in self.durations_s:
            frames = clip_frames(duration)  # names duration_s when too short
            for name in ("frames_per_token", "patch_frames"):
                if frames % getattr(self, name):
                    raise ValueError(
                        f"{name} must divide the {frames} frames of every clip in durations_s "
                        f"(got {getattr(self, name)}, {duration} s)"
                    )
        check_builds(  # every model once on the meta device: pos_kwargs judged now
            (f"encodings: {name!r} on {layout}", functools.partial(self.classifier, name, layout))
            for name, layout in self.pairs()
        )

    def pairs(self) -> list[tuple[str, str]]:
        """``(encoding, layout)`` of every run, layouts outer."""
        return [
            (encoding, layout)
            for layout in self.layouts
            for encoding in self.encodings
            if layout in layouts_of(encoding)
        ]

    def grid(self, layout: str, condition: int) -> tuple[int, ...]:
        """The token grid of a clip of ``durations_s[condition]``: ``(n,)`` or ``(T, F)``."""
        frames = clip_frames(self.durations_s[condition])
        if layout == "frames":
            return (frames // self.frames_per_token,)
        return (frames // self.patch_frames, FREQ_BINS // self.patch_bins)

    def distractors_at(self, condition: int) -> int:
        """Distractor tones per clip of ``durations_s[condition]`` (constant density)."""
        return round(self.distractors * self.durations_s[condition] / self.durations_s[0])

    def classifier(self, encoding: str, layout: str) -> AudioClassifier:
        """The model of ``encoding`` on ``layout``, sized for the trained clips."""
        grid = self.grid(layout, 0)
        token_dim = (
            self.frames_per_token * FREQ_BINS
            if layout == "frames"
            else self.patch_frames * self.patch_bins
        )
        body = self.transformer(encoding, grid, max_seq_len=math.prod(grid))
        return AudioClassifier(body, token_dim, self.model.dim)


class AudioClassifier(nn.Module):
    """Linear token embedding, :class:`SignalTransformer`, mean pooling, linear head.

    Shape:
        tokens ``(batch, seq, token_dim)`` (standardized log-spectrogram values), positions
        as the body reads them (:func:`token_positions`) → logits ``(batch, NUM_KEYWORDS)``.
    """

    def __init__(self, body: SignalTransformer, token_dim: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Linear(token_dim, dim)
        self.body = body
        self.head = nn.Linear(dim, NUM_KEYWORDS)

    def forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        hidden = self.body(self.embed(tokens), positions)
        return self.head(hidden.mean(1))


def token_positions(num_axes: int, grid: tuple[int, ...]) -> Tensor:
    """What an encoding reading ``num_axes`` axes gets for the tokens of ``grid``: the token
    index ``(seq,)`` (frames; ``learned_2d``'s row-major table index on patches) or the
    ``(t, f)`` cell of each patch ``(2, seq)``, time outer as :func:`to_patches` orders them."""
    if num_axes == 1:
        return torch.arange(math.prod(grid))
    if num_axes != len(grid):
        raise ValueError(
            f"num_axes must be 1 (token index) or {len(grid)} (the grid axes), got {num_axes}"
        )
    return grid_positions(*grid)


def tokenize(spectrograms: Tensor, config: AudioConfig, layout: str) -> Tensor:
    """Spectrograms ``(clips, frames, bins)`` → tokens of ``layout`` ``(clips, seq, token_dim)``
    (:func:`~posenc.lab.data.audio.to_frames` / :func:`~posenc.lab.data.audio.to_patches`)."""
    if layout == "frames":
        return to_frames(spectrograms, config.frames_per_token)
    return to_patches(spectrograms, config.patch_frames, config.patch_bins)[0]


def adapt_to_grid(model: AudioClassifier, grid: tuple[int, ...]) -> str:
    """Resize a trained table to the longer clip's ``grid`` in place (see the module); return
    how the encoding meets it: ``"resampled"``, ``"interpolated"``, ``"extrapolated"`` or
    ``"none"``."""
    table = model.body.additive
    if isinstance(table, LearnedGrid):
        table.resample(grid)
        return "resampled"
    if isinstance(table, FactorizedLearned):
        if table.groups != tuple((axis,) for axis in range(table.num_axes)):
            raise ValueError(
                f"groups must be one axis per table to extend time, got {table.groups}"
            )
        with torch.no_grad():
            time = resize_table(table.tables[0].detach(), grid[0])
        table.tables[0] = nn.Parameter(time)
        table.size = (grid[0], *table.size[1:])
        return "interpolated"
    if isinstance(table, LearnedPositionalEmbedding):
        table.resize(math.prod(grid))
        return "interpolated"
    return "none" if model.body.encoding_name == NONE else "extrapolated"


def _dataset(config: AudioConfig, condition: int, split: str) -> AudioDataset:
    """The training clips (``split="train"``, condition 0) or one condition's test clips,
    each split and condition from its own seed derived from ``data_seed``."""
    return _clips(
        config.train_clips if split == "train" else config.test_clips,
        config.durations_s[condition],
        derive_seed("audio", split, config.data_seed, condition),
        config.snr_db,
        config.distractors_at(condition),
    )


@functools.lru_cache(maxsize=8)
def _clips(
    count: int, duration_s: float, seed: int, snr_db: float, distractors: int
) -> AudioDataset:
    """:func:`make_audio_dataset`, cached per process (a worker's runs share the data)."""
    return make_audio_dataset(count, duration_s, seed=seed, snr_db=snr_db, distractors=distractors)


def prepare_audio(config: AudioConfig) -> None:
    """Check before anything is written that every encoding meets the longest clip: each
    model, adapted (:func:`adapt_to_grid`), runs one clip of it."""
    last = len(config.durations_s) - 1
    for encoding, layout in config.pairs():
        with torch.random.fork_rng(devices=[]):
            model = config.classifier(encoding, layout)
            grid = config.grid(layout, last)
            try:
                adapt_to_grid(model, grid)
                tokens = torch.zeros(1, math.prod(grid), model.embed.in_features)
                with torch.no_grad():
                    model(tokens, token_positions(model.body.num_axes, grid))
            except (ValueError, TypeError, RuntimeError) as error:
                raise ValueError(
                    f"encodings: {encoding!r} on {layout} cannot meet the {grid} grid of "
                    f"{config.durations_s[last]} s clips: {error}"
                ) from None


def evaluate(model: AudioClassifier, tokens: Tensor, positions: Tensor, labels: Tensor) -> float:
    """Accuracy of ``model`` on ``tokens`` ``(clips, seq, token_dim)`` at ``positions``."""

    def predict(index: Tensor) -> Tensor:
        return model(tokens[index.to(tokens.device)], positions)

    return accuracy_in_batches(predict, labels.to(tokens.device))


def span_accuracies(
    model: AudioClassifier,
    tokens: Tensor,
    positions: Tensor,
    test: AudioDataset,
    config: AudioConfig,
) -> dict[str, float | int]:
    """``accuracy`` over the clips, and apart for the clips whose keyword lies within the
    trained clip's frames (``accuracy_trained_span``: positions seen in training) and those
    whose keyword ends beyond them (``accuracy_beyond_span``, ``clips_beyond_span``; absent
    when there are none, as in the trained condition)."""
    inside = test.onsets + KEYWORD_FRAMES <= clip_frames(config.durations_s[0])
    out: dict[str, float | int] = {}
    correct = 0.0
    for name, mask in (("trained_span", inside), ("beyond_span", ~inside)):
        count = int(mask.sum())
        if count:
            accuracy = evaluate(model, tokens[mask.to(tokens.device)], positions, test.labels[mask])
            out[f"accuracy_{name}"] = accuracy
            correct += round(accuracy * count)
            if name == "beyond_span":
                out["clips_beyond_span"] = count
    return {"accuracy": correct / len(inside), **out}


def _plan(config: AudioConfig) -> list[Run]:
    return [
        Run(
            f"{layout}/{encoding}/seed{seed}",
            {"encoding": encoding, "layout": layout, "seed": seed},
        )
        for encoding, layout in config.pairs()
        for seed in config.train.seeds
    ]


def _execute(config: AudioConfig, run: Run, run_dir: Path) -> list[Row]:
    encoding, layout, seed = run.params["encoding"], run.params["layout"], run.params["seed"]
    train = _dataset(config, 0, "train")
    shift, scale = float(train.spectrograms.mean()), float(train.spectrograms.std())

    def tokens_of(data: AudioDataset) -> Tensor:
        return tokenize((data.spectrograms - shift) / scale, config, layout).to(config.device)

    torch.manual_seed(derive_seed("audio-model", seed))
    model = config.classifier(encoding, layout).to(config.device)
    tokens, labels = tokens_of(train), train.labels.to(config.device)
    grid = config.grid(layout, 0)
    positions = token_positions(model.body.num_axes, grid).to(config.device)

    def loss_of(index: Tensor) -> Tensor:
        return F.cross_entropy(model(tokens[index], positions), labels[index])

    generator = torch.Generator().manual_seed(derive_seed("audio-batches", seed))
    fit = fit_signal_model(model, loss_of, tokens.shape[0], config.train, generator)
    rows: list[Row] = []
    for condition, duration in enumerate(config.durations_s):
        test = _dataset(config, condition, "test")
        grid = config.grid(layout, condition)
        adapted = model
        adaptation = "trained"
        if condition > 0:
            adapted = copy.deepcopy(model)
            adaptation = adapt_to_grid(adapted, grid)
        test_positions = token_positions(adapted.body.num_axes, grid).to(config.device)
        spans = span_accuracies(adapted, tokens_of(test), test_positions, test, config)
        rows.append(
            {
                "experiment": "audio",
                "layout": layout,
                "encoding": encoding,
                "seed": seed,
                "condition": condition,
                "condition_label": f"{duration:g} s",
                "in_distribution": condition == 0,
                "accuracy": spans.pop("accuracy"),
                **spans,
                "duration_s": duration,
                "tokens": math.prod(grid),
                "adaptation": adaptation,
                "train_loss": fit["train_loss"],
            }
        )
    return rows


def format_audio_table(rows: Sequence[Row]) -> str:
    """Accuracy by (layout, encoding) and clip length, mean ± std over seeds."""
    return atlas_table(rows, "audio", "keyword spotting, trained on the first clip length")


def run_audio(
    config: AudioConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in ``out`` (see the module); return its rows."""
    return run_experiment(EXPERIMENT, config, out, echo=echo)


EXPERIMENT = Experiment(
    name="audio",
    summary="keyword spotting on spectrograms (frames, patches) trained 1 s, tested 2 s, 4 s",
    title="posenc: audio (spectrogram frames and patches, longer clips)",
    config=AudioConfig,
    plan=_plan,
    execute=_execute,
    table=format_audio_table,
    prepare=prepare_audio,
    sections=(atlas_section("audio", "Audio: keyword spotting on spectrograms"),),
)

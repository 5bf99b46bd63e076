"""Synthetic keyword spotting: chirp "words" in noise, as log-magnitude spectrograms.

A data source for the lab's audio task (:mod:`posenc.lab.experiments.audio`), made on the
machine (no download).
The vocabulary holds :data:`NUM_KEYWORDS` words; each word is a sequence of three segments
of :data:`SEGMENT_FRAMES` frames, each segment a tone or a linear chirp given by its start
and end frequency (:data:`KEYWORDS`). Words ``k`` and ``k + 4`` are the same segments in
reverse order, so the same frequencies carry the same energy and only their order in time
tells the two apart: a model needs both frequency and temporal structure.

A clip of ``duration_s`` seconds at :data:`SAMPLE_RATE` Hz holds one keyword (unit
amplitude, random phase) starting at a random frame-aligned onset, white Gaussian background
noise at ``snr_db`` (keyword power over noise power) and ``distractors`` steady tones at random
frequencies and times (half amplitude, one segment long). Its spectrogram is
``log(|STFT| / (Σ window / 2) + EPS)`` with a Hann window of :data:`N_FFT` samples and hop
:data:`HOP`: frame ``t`` is centred on sample ``t · HOP``, a clip of ``S`` samples has
``⌊S / HOP⌋`` frames and :data:`FREQ_BINS` = ``N_FFT / 2`` bins of :data:`BIN_HZ` Hz (the
Nyquist bin is dropped), so a unit sinusoid on a bin centre reads ``log 1 = 0``.
``duration_s = 1.024`` gives 64 frames × 128 bins. Longer test clips come from a larger
``duration_s``: the same words, more background.

The spectrogram enters a model as 1D tokens (:func:`to_frames`: rows, optionally several
frames per token) or as 2D time × frequency patches (:func:`to_patches`, with the patch grid
for 2D position encodings; :func:`from_patches` inverts it).

Example::

    >>> data = make_audio_dataset(16, 1.024, seed=0)
    >>> data.spectrograms.shape, data.labels.shape
    (torch.Size([16, 64, 128]), torch.Size([16]))
    >>> patches, grid = to_patches(data.spectrograms, 8, 16)
    >>> patches.shape, grid
    (torch.Size([16, 64, 128]), (8, 8))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc._validate import (
    check_int,
    check_non_negative_int,
    check_positive_float,
    check_positive_int,
)
from posenc.lab.batch import derive_seed

__all__ = [
    "BIN_HZ",
    "EPS",
    "FREQ_BINS",
    "HOP",
    "KEYWORDS",
    "KEYWORD_FRAMES",
    "NUM_KEYWORDS",
    "N_FFT",
    "SAMPLE_RATE",
    "SEGMENT_FRAMES",
    "AudioDataset",
    "clip_frames",
    "from_patches",
    "keyword_frequency_track",
    "log_spectrogram",
    "make_audio_dataset",
    "synthesize_keyword",
    "to_frames",
    "to_patches",
]

SAMPLE_RATE = 8000  # Hz
N_FFT = 256  # 32 ms Hann window
HOP = 128  # 16 ms between frames
FREQ_BINS = N_FFT // 2  # 0 .. 3968.75 Hz; the Nyquist bin is dropped
BIN_HZ = SAMPLE_RATE / N_FFT  # 31.25 Hz per bin
EPS = 1e-4  # floor of the magnitude before the log
SEGMENT_FRAMES = 8  # 128 ms per tone / chirp
DISTRACTOR_AMPLITUDE = 0.5

# The segment alphabet: (start Hz, end Hz); equal ends make a tone.
_A = (500.0, 500.0)
_B = (1500.0, 1500.0)
_C = (750.0, 2250.0)  # rising chirp
_D = (3000.0, 1000.0)  # falling chirp
_E = (2500.0, 2500.0)
_BASE = ((_A, _B, _C), (_A, _C, _D), (_B, _D, _E), (_C, _E, _A))
KEYWORDS: tuple[tuple[tuple[float, float], ...], ...] = _BASE + tuple(w[::-1] for w in _BASE)
"""Word ``k`` as its segments ``(start Hz, end Hz)``; word ``k + 4`` is word ``k`` reversed."""
NUM_KEYWORDS = len(KEYWORDS)
KEYWORD_FRAMES = SEGMENT_FRAMES * len(KEYWORDS[0])  # 24 frames = 384 ms


@dataclass(frozen=True)
class AudioDataset:
    """Clips as log-magnitude spectrograms ``(clips, frames, FREQ_BINS)`` float32, their
    keyword ``labels`` ``(clips,)`` int64 and keyword ``onsets`` ``(clips,)`` int64: the frame
    where the keyword starts (it fills frames ``onset .. onset + KEYWORD_FRAMES - 1``)."""

    spectrograms: Tensor
    labels: Tensor
    onsets: Tensor


def clip_frames(duration_s: float) -> int:
    """Frames of a clip of ``duration_s`` seconds: ``⌊round(duration_s · SAMPLE_RATE) / HOP⌋``.

    Raises:
        ValueError: naming ``duration_s`` if it is not positive or too short for a keyword.
    """
    check_positive_float("duration_s", duration_s)
    frames = round(duration_s * SAMPLE_RATE) // HOP
    if frames < KEYWORD_FRAMES:
        raise ValueError(
            f"duration_s must hold a keyword of {KEYWORD_FRAMES * HOP / SAMPLE_RATE} s "
            f"({KEYWORD_FRAMES} frames), got {duration_s!r}"
        )
    return frames


def keyword_frequency_track(label: int) -> Tensor:
    """The planned instantaneous frequency (Hz) of word ``label``, one value per sample
    ``(KEYWORD_FRAMES · HOP,)`` float64: each segment sweeps linearly from start to end."""
    label = check_int("label", label, low=0, high=NUM_KEYWORDS - 1)
    samples = SEGMENT_FRAMES * HOP
    ramp = torch.arange(samples, dtype=torch.float64) / samples
    return torch.cat([start + (end - start) * ramp for start, end in KEYWORDS[label]])


def synthesize_keyword(label: int, phase: float = 0.0) -> Tensor:
    """Word ``label`` as a unit-amplitude waveform ``(KEYWORD_FRAMES · HOP,)`` float64.

    The phase integrates the frequency track (``φ[n] = phase + 2π Σ_{m ≤ n} f[m] / SAMPLE_RATE``)
    so it stays continuous across segments: no clicks that would smear energy over all bins.
    """
    track = keyword_frequency_track(label)
    return torch.sin(phase + 2 * math.pi * torch.cumsum(track, 0) / SAMPLE_RATE)


def log_spectrogram(waveforms: Tensor) -> Tensor:
    """Log-magnitude spectrogram ``(..., samples) → (..., ⌊samples / HOP⌋, FREQ_BINS)`` float32.

    ``log(|STFT| / (Σ window / 2) + EPS)``, Hann window of ``N_FFT``, hop ``HOP``, centred
    frames (frame ``t`` on sample ``t · HOP``); the last centred frame, which hangs past the
    clip, and the Nyquist bin are dropped so the shape divides evenly into patches.
    """
    window = torch.hann_window(N_FFT, dtype=waveforms.dtype, device=waveforms.device)
    lead = waveforms.shape[:-1]
    stft = torch.stft(
        waveforms.reshape(-1, waveforms.shape[-1]),
        N_FFT,
        HOP,
        window=window,
        center=True,
        return_complex=True,
    )  # (clips, N_FFT / 2 + 1, 1 + samples // HOP)
    frames = waveforms.shape[-1] // HOP
    magnitude = stft.abs()[:, :FREQ_BINS, :frames].transpose(1, 2) / (window.sum() / 2)
    return torch.log(magnitude + EPS).to(torch.float32).reshape(*lead, frames, FREQ_BINS)


def make_audio_dataset(
    count: int,
    duration_s: float = 1.024,
    *,
    seed: int = 0,
    snr_db: float = 0.0,
    distractors: int = 2,
) -> AudioDataset:
    """``count`` clips of ``duration_s`` seconds, a pure function of the arguments.

    Labels are uniform over the :data:`NUM_KEYWORDS` words, onsets uniform over the frames
    where the whole keyword fits. ``snr_db`` is the keyword's power (1/2) over the noise
    variance, in dB, in [-30, 60]; ``distractors`` steady tones per clip.

    Raises:
        ValueError: naming the argument (``count``, ``duration_s``, ``snr_db``,
            ``distractors``) that is out of range.
    """
    count = check_positive_int("count", count)
    frames = clip_frames(duration_s)
    if isinstance(snr_db, bool) or not isinstance(snr_db, (int, float)) or not -30 <= snr_db <= 60:
        raise ValueError(f"snr_db must be a number in [-30, 60], got {snr_db!r}")
    distractors = check_non_negative_int("distractors", distractors)
    generator = torch.Generator().manual_seed(derive_seed("audio", seed))
    samples = round(duration_s * SAMPLE_RATE)
    keyword_samples = KEYWORD_FRAMES * HOP
    labels = torch.randint(NUM_KEYWORDS, (count,), generator=generator)
    onsets = torch.randint(frames - KEYWORD_FRAMES + 1, (count,), generator=generator)
    phases = 2 * math.pi * torch.rand(count, generator=generator, dtype=torch.float64)
    noise_std = math.sqrt(0.5 * 10 ** (-snr_db / 10))
    waves = noise_std * torch.randn(count, samples, generator=generator, dtype=torch.float64)
    for clip in range(count):
        start = int(onsets[clip]) * HOP
        word = synthesize_keyword(int(labels[clip]), float(phases[clip]))
        waves[clip, start : start + keyword_samples] += word
    # Distractors: steady tones of one segment at random frequencies (a bin range clear of
    # DC and Nyquist) and sample offsets; they may overlap the keyword.
    tone_samples = SEGMENT_FRAMES * HOP
    tone_time = torch.arange(tone_samples, dtype=torch.float64) / SAMPLE_RATE
    for clip in range(count):
        hz = 250 + 3500 * torch.rand(distractors, generator=generator, dtype=torch.float64)
        starts = torch.randint(samples - tone_samples + 1, (distractors,), generator=generator)
        for f, s in zip(hz.tolist(), starts.tolist(), strict=True):
            tone = torch.sin(2 * math.pi * f * tone_time)
            waves[clip, s : s + tone_samples] += DISTRACTOR_AMPLITUDE * tone
    return AudioDataset(log_spectrogram(waves), labels, onsets)


def to_frames(spectrograms: Tensor, frames_per_token: int = 1) -> Tensor:
    """1D tokens: ``(clips, frames, bins) → (clips, frames / k, k · bins)``, ``k`` consecutive
    frames concatenated per token (``k = 1``: the rows themselves).

    Raises:
        ValueError: naming ``frames_per_token`` if it does not divide the frames.
    """
    clips, frames, bins = _check_spectrograms(spectrograms)
    frames_per_token = check_positive_int("frames_per_token", frames_per_token)
    if frames % frames_per_token:
        raise ValueError(
            f"frames_per_token must divide the {frames} frames, got {frames_per_token}"
        )
    return spectrograms.reshape(clips, frames // frames_per_token, frames_per_token * bins)


def to_patches(
    spectrograms: Tensor, patch_frames: int, patch_bins: int
) -> tuple[Tensor, tuple[int, int]]:
    """2D time × frequency patches ``(clips, patches, patch_frames · patch_bins)`` and the
    grid ``(frames / patch_frames, bins / patch_bins)``.

    Patches run row-major over the grid (time outer, frequency inner), so patch ``p`` sits at
    grid cell ``(p // grid[1], p % grid[1])``; inside a patch the values run frame by frame.

    Raises:
        ValueError: naming ``patch_frames`` or ``patch_bins`` if it does not divide its axis.
    """
    clips, frames, bins = _check_spectrograms(spectrograms)
    patch_frames = check_positive_int("patch_frames", patch_frames)
    patch_bins = check_positive_int("patch_bins", patch_bins)
    if frames % patch_frames:
        raise ValueError(f"patch_frames must divide the {frames} frames, got {patch_frames}")
    if bins % patch_bins:
        raise ValueError(f"patch_bins must divide the {bins} frequency bins, got {patch_bins}")
    grid = (frames // patch_frames, bins // patch_bins)
    patches = spectrograms.reshape(clips, grid[0], patch_frames, grid[1], patch_bins)
    patches = patches.permute(0, 1, 3, 2, 4)  # (clips, time cells, freq cells, pf, pb)
    return patches.reshape(clips, grid[0] * grid[1], patch_frames * patch_bins), grid


def from_patches(
    patches: Tensor, grid: tuple[int, int], patch_frames: int, patch_bins: int
) -> Tensor:
    """The inverse of :func:`to_patches`: ``(clips, patches, patch_dim) → (clips, frames, bins)``.

    Raises:
        ValueError: naming ``patches`` if its shape does not match ``grid`` and the patch size.
    """
    rows, cols = grid
    if patches.dim() != 3 or patches.shape[1:] != (rows * cols, patch_frames * patch_bins):
        raise ValueError(
            f"patches must be (clips, {rows * cols}, {patch_frames * patch_bins}) for grid "
            f"{grid} and patch {patch_frames}×{patch_bins}, got {tuple(patches.shape)}"
        )
    cells = patches.reshape(-1, rows, cols, patch_frames, patch_bins).permute(0, 1, 3, 2, 4)
    return cells.reshape(-1, rows * patch_frames, cols * patch_bins)


def _check_spectrograms(spectrograms: Tensor) -> tuple[int, int, int]:
    if not isinstance(spectrograms, Tensor) or spectrograms.dim() != 3:
        got = tuple(spectrograms.shape) if isinstance(spectrograms, Tensor) else spectrograms
        raise ValueError(f"spectrograms must be (clips, frames, bins), got {got!r}")
    clips, frames, bins = spectrograms.shape
    return clips, frames, bins

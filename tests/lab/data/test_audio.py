"""The synthetic keyword source: seeded clips, keywords where and at the frequencies planned,
reversed words told apart only by time order, patches that reassemble, longer clips."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.lab.data.audio import (
    BIN_HZ,
    FREQ_BINS,
    HOP,
    KEYWORD_FRAMES,
    KEYWORDS,
    NUM_KEYWORDS,
    SEGMENT_FRAMES,
    clip_frames,
    from_patches,
    keyword_frequency_track,
    log_spectrogram,
    make_audio_dataset,
    synthesize_keyword,
    to_frames,
    to_patches,
)


def _interior_frames() -> list[int]:
    """Keyword frames whose window lies inside one segment (not on a segment boundary)."""
    return [t for t in range(KEYWORD_FRAMES) if t % SEGMENT_FRAMES != 0]


def _assert_keyword_at_planned_bins(spectrogram: torch.Tensor, label: int, onset: int) -> None:
    track = keyword_frequency_track(label)
    for t in _interior_frames():
        planned = float(track[t * HOP]) / BIN_HZ  # frame t is centred on sample t · HOP
        peak = int(spectrogram[onset + t].argmax())
        assert abs(peak - planned) <= 1, (label, t, peak, planned)


def test_dataset_is_seeded_and_shaped() -> None:
    data = make_audio_dataset(12, 1.024, seed=0)
    assert data.spectrograms.shape == (12, 64, FREQ_BINS) and clip_frames(1.024) == 64
    assert data.spectrograms.dtype == torch.float32 and data.labels.dtype == torch.long
    assert int(data.labels.min()) >= 0 and int(data.labels.max()) < NUM_KEYWORDS
    assert int(data.onsets.min()) >= 0 and int(data.onsets.max()) <= 64 - KEYWORD_FRAMES
    again = make_audio_dataset(12, 1.024, seed=0)
    assert_close(again.spectrograms, data.spectrograms)
    assert_close(again.labels, data.labels) and assert_close(again.onsets, data.onsets)
    other = make_audio_dataset(12, 1.024, seed=1)
    assert not torch.equal(other.spectrograms, data.spectrograms)
    assert not torch.equal(other.labels, data.labels)


@pytest.mark.parametrize("duration_s", [1.024, 4.096])
def test_keyword_energy_at_planned_frequencies_and_frames(duration_s: float) -> None:
    # Clean enough that the keyword wins every frame's argmax; longer clips keep it intact.
    data = make_audio_dataset(16, duration_s, seed=3, snr_db=30.0, distractors=0)
    assert data.spectrograms.shape[1] == clip_frames(duration_s)
    assert set(data.labels.tolist()) >= {0, 4}  # a word and its reversal both appear
    for spectrogram, label, onset in zip(data.spectrograms, data.labels, data.onsets, strict=True):
        _assert_keyword_at_planned_bins(spectrogram, int(label), int(onset))
        # Outside the keyword's span (and one frame of window overlap) only noise remains.
        quiet = torch.ones(spectrogram.shape[0], dtype=torch.bool)
        quiet[max(int(onset) - 1, 0) : int(onset) + KEYWORD_FRAMES + 1] = False
        assert float(spectrogram[quiet].max()) < float(spectrogram[~quiet].max()) - 2


def test_keyword_survives_default_noise_and_distractors() -> None:
    """At the default 0 dB and two distractors the keyword still tops most of its frames."""
    data = make_audio_dataset(32, 1.024, seed=0)
    hits = total = 0
    for spectrogram, label, onset in zip(data.spectrograms, data.labels, data.onsets, strict=True):
        track = keyword_frequency_track(int(label))
        for t in _interior_frames():
            peak = int(spectrogram[int(onset) + t].argmax())
            hits += abs(peak - float(track[t * HOP]) / BIN_HZ) <= 1
            total += 1
    assert hits / total > 0.8


def test_reversed_words_share_spectrum_but_not_time_order() -> None:
    pad = torch.zeros(4 * HOP, dtype=torch.float64)
    for word in range(NUM_KEYWORDS // 2):
        assert KEYWORDS[word + NUM_KEYWORDS // 2] == KEYWORDS[word][::-1]
        forward, backward = (
            log_spectrogram(torch.cat([pad, synthesize_keyword(w), pad])).exp()
            for w in (word, word + NUM_KEYWORDS // 2)
        )
        totals_forward, totals_backward = forward.sum(0), backward.sum(0)
        # Same energy per frequency (up to the segment joins) ...
        assert_close(totals_backward, totals_forward, rtol=0.02, atol=0.02 * totals_forward.max())
        # ... but in a different order: the frame-by-frame peaks differ.
        assert not torch.equal(forward.argmax(1), backward.argmax(1))
        assert (forward - backward).abs().sum() > 0.5 * forward.sum()


def test_patches_and_frames_reassemble() -> None:
    spectrograms = make_audio_dataset(3, 1.024, seed=0).spectrograms  # (3, 64, 128)
    patches, grid = to_patches(spectrograms, 8, 16)
    assert patches.shape == (3, 64, 128) and grid == (8, 8)
    assert_close(from_patches(patches, grid, 8, 16), spectrograms)
    # Patch p is grid cell (p // 8, p % 8), read frame by frame.
    assert_close(patches[1, 8 * 2 + 5].reshape(8, 16), spectrograms[1, 16:24, 80:96])
    assert_close(to_frames(spectrograms), spectrograms)
    assert_close(to_frames(spectrograms, 4)[:, 1], spectrograms[:, 4:8].reshape(3, -1))


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: make_audio_dataset(0), "count"),
        (lambda: make_audio_dataset(4, 0.0), "duration_s"),
        (lambda: make_audio_dataset(4, 0.2), "duration_s"),  # shorter than a keyword
        (lambda: make_audio_dataset(4, snr_db=float("nan")), "snr_db"),
        (lambda: make_audio_dataset(4, snr_db=100.0), "snr_db"),
        (lambda: make_audio_dataset(4, distractors=-1), "distractors"),
        (lambda: keyword_frequency_track(NUM_KEYWORDS), "label"),
        (lambda: to_patches(torch.zeros(1, 64, 128), 6, 16), "patch_frames"),
        (lambda: to_patches(torch.zeros(1, 64, 128), 8, 48), "patch_bins"),
        (lambda: to_patches(torch.zeros(64, 128), 8, 16), "spectrograms"),
        (lambda: to_frames(torch.zeros(1, 64, 128), 3), "frames_per_token"),
        (lambda: from_patches(torch.zeros(1, 64, 128), (8, 4), 8, 16), "patches"),
    ],
)
def test_bad_input_names_the_argument(call: object, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()  # type: ignore[operator]

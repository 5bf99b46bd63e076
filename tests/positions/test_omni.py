"""Qwen-Omni's TM-RoPE ids: parity with transformers' ``qwen2_5_omni`` / ``qwen3_omni_moe``
``get_rope_index`` on mixed text/audio/image/video sequences and padded batches, the rules,
errors."""

from __future__ import annotations

import types

import pytest
import torch

from posenc.positions.omni import omni_position_ids

VISION_START, AUDIO_START, IMAGE, VIDEO, AUDIO = 151652, 151647, 151655, 151656, 151646
VISION_END, AUDIO_END = 151653, 151648

RUNS = {
    "audio_image_video": [
        ("text", 3), ("audio", 7), ("text", 2), ("image", (1, 4, 6)), ("text", 1),
        ("video", (3, 4, 4), 0.5), ("text", 2),
    ],
    "video_with_audio": [
        ("text", 2), ("video_audio", (4, 4, 4), 1.0, 90), ("text", 3),
        ("image", (1, 8, 4)), ("text", 1),
    ],
    "fractional_times": [
        ("text", 1), ("video_audio", (5, 2, 4), 1 / 3, 40), ("text", 2),
        ("video_audio", (3, 4, 2), 0.7, 20), ("text", 1),
    ],
}  # fmt: skip


def _model(version, rate):
    """transformers' ``get_rope_index`` bound to a stub carrying the config it reads."""
    if version == "qwen3_omni":
        module = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
        owner = module.Qwen3OmniMoePreTrainedModelForConditionalGeneration
        lengths = lambda n: module._get_feat_extract_output_lengths(n, 50)  # noqa: E731
    else:
        module = pytest.importorskip("transformers.models.qwen2_5_omni.modeling_qwen2_5_omni")
        owner = module.Qwen2_5OmniPreTrainedModelForConditionalGeneration
        lengths = lambda n: ((n - 1) // 2 + 1 - 2) // 2 + 1  # noqa: E731
    config = types.SimpleNamespace(
        image_token_id=IMAGE, video_token_id=VIDEO, audio_token_id=AUDIO,
        vision_start_token_id=VISION_START, audio_start_token_id=AUDIO_START,
        position_id_per_seconds=rate, seconds_per_chunk=2,
        audio_config=types.SimpleNamespace(n_window=50),
    )  # fmt: skip
    stub = types.SimpleNamespace(spatial_merge_size=2, config=config)
    for name in ("get_llm_pos_ids_for_vision", "get_chunked_index", "get_rope_index"):
        setattr(stub, name, types.MethodType(getattr(owner, name), stub))

    def feature_length(tokens):  # the audio feature length that gives `tokens` LLM tokens
        return next(n for n in range(1, 20000) if int(lengths(torch.tensor(n))) == tokens)

    return stub, feature_length


def _tokens(runs):
    """input ids, grids, seconds and audio feature counts of the runs (as the processor)."""
    ids, images, videos, seconds, audios = [], [], [], [], []
    for run in runs:
        kind = run[0]
        if kind == "text":
            ids += list(range(1000, 1000 + run[1]))
        elif kind == "audio":
            ids += [AUDIO_START] + [AUDIO] * run[1] + [AUDIO_END]
            audios.append(run[1])
        else:
            t, h, w = run[1]
            (images if kind == "image" else videos).append(run[1])
            token = IMAGE if kind == "image" else VIDEO
            patches = [token] * (t * h * w // 4)
            if kind == "video_audio":
                ids += [VISION_START, AUDIO_START] + patches + [AUDIO] * run[3]
                ids += [AUDIO_END, VISION_END]
                audios.append(run[3])
            else:
                ids += [VISION_START, *patches, VISION_END]
            if kind != "image":
                seconds.append(run[2])
    return ids, images, videos, seconds, audios


@pytest.mark.parametrize("version", ["qwen3_omni", "qwen2_5_omni"])
@pytest.mark.parametrize("rate", [25, 13])
def test_equals_transformers_on_a_padded_batch(version, rate):
    """Two sequences in one left-padded batch (their grids, seconds and audio lengths in
    order), each against posenc's ids of its runs. transformers' ``use_audio_in_video``
    holds for every video of the batch: these videos all carry their audio."""
    names = ("video_with_audio", "fractional_times")
    stub, feature_length = _model(version, rate)
    rows = [_tokens(RUNS[name]) for name in names]
    width = max(len(row[0]) for row in rows)
    input_ids = torch.tensor([[0] * (width - len(r[0])) + r[0] for r in rows])
    mask = torch.tensor([[0] * (width - len(r[0])) + [1] * len(r[0]) for r in rows])
    expected, expected_delta = stub.get_rope_index(
        input_ids,
        torch.tensor([g for r in rows for g in r[1]]),
        torch.tensor([g for r in rows for g in r[2]]),
        mask,
        use_audio_in_video=True,
        audio_seqlens=torch.tensor([feature_length(n) for r in rows for n in r[4]]),
        second_per_grids=torch.tensor([s for r in rows for s in r[3]]),
    )
    for row, name in enumerate(names):
        ids, kinds, delta = omni_position_ids(
            RUNS[name], version=version, position_id_per_seconds=rate
        )
        got = expected[:, row, mask[row].bool()]
        if version == "qwen2_5_omni":  # int ids: equal
            torch.testing.assert_close(ids, got.double(), rtol=0, atol=0)
            torch.testing.assert_close(delta, expected_delta[row, 0].double(), rtol=0, atol=0)
        else:  # float32 sums in transformers: equal at float32
            torch.testing.assert_close(ids.float(), got)
            torch.testing.assert_close(delta.float(), expected_delta[row, 0].float())
        assert kinds.shape == (ids.shape[1],)


@pytest.mark.parametrize("version", ["qwen3_omni", "qwen2_5_omni"])
def test_equals_transformers_without_audio_in_video(version):
    stub, feature_length = _model(version, 25)
    ids_, images, videos, seconds, audios = _tokens(RUNS["audio_image_video"])
    expected, expected_delta = stub.get_rope_index(
        torch.tensor([ids_]), torch.tensor(images), torch.tensor(videos),
        torch.ones(1, len(ids_), dtype=torch.long), use_audio_in_video=False,
        audio_seqlens=torch.tensor([feature_length(n) for n in audios]),
        second_per_grids=torch.tensor(seconds),
    )  # fmt: skip
    ids, _, delta = omni_position_ids(
        RUNS["audio_image_video"], version=version, position_id_per_seconds=25
    )
    torch.testing.assert_close(ids, expected[:, 0].double(), rtol=0, atol=0)
    torch.testing.assert_close(delta, expected_delta[0, 0].double(), rtol=0, atol=0)


def test_rules_by_hand():
    """Text and audio count on; an image's time is 0 per frame; a video's is ρ s f; the
    token after a block sits at its max + 1."""
    ids, kinds, delta = omni_position_ids(
        [("text", 2), ("audio", 2), ("video", (2, 4, 2), 0.5)], position_id_per_seconds=10
    )
    # text 0 1 | <bos> 2, audio 3 4, <eos> 5 | <bos> 6, frames at 7 and 12 (2 × 1 patches
    # each), <eos> at 13
    torch.testing.assert_close(ids[0], torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 7, 12, 12, 13.0],
                                                    dtype=torch.float64))  # fmt: skip
    torch.testing.assert_close(ids[1], torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 7, 8, 13.0],
                                                    dtype=torch.float64))  # fmt: skip
    assert kinds.tolist() == [0, 0, 0, 1, 1, 0, 0, 3, 3, 3, 3, 0]
    assert float(delta) == 14 - 12


def test_video_audio_interleaves_by_time():
    """Qwen3-Omni: the merged block's temporal ids never decrease; video first on ties."""
    ids, kinds, _ = omni_position_ids([("video_audio", (3, 2, 2), 0.4, 25)],
                                      position_id_per_seconds=25)  # fmt: skip
    block = slice(2, 2 + 3 + 25)
    times = ids[0, block]
    assert bool((times[1:] >= times[:-1]).all())
    assert kinds[block].tolist()[:2] == [3, 1]  # frame 0 at the same time as audio token 0


@pytest.mark.parametrize(("version", "rate"), [("qwen3_omni", 13.0), ("qwen2_5_omni", 25.0)])
def test_default_rate_is_the_released_checkpoints(version, rate):
    runs = [("video", (3, 2, 2), 1.0)]
    default, _, _ = omni_position_ids(runs, version=version)
    explicit, _, _ = omni_position_ids(runs, version=version, position_id_per_seconds=rate)
    torch.testing.assert_close(default, explicit, rtol=0, atol=0)
    assert default[0, 2].item() - default[0, 1].item() == rate  # frame 1, 1 s after frame 0


def test_qwen25_markers_share_a_position():
    ids, _, _ = omni_position_ids([("text", 1), ("video_audio", (1, 2, 2), 1.0, 3)],
                                  version="qwen2_5_omni")  # fmt: skip
    assert ids[0, 1] == ids[0, 2] == 1 and ids[0, -1] == ids[0, -2]


@pytest.mark.parametrize(
    ("runs", "kwargs", "match"),
    [
        ([("speech", 3)], {}, r"runs\[0\]"),
        ([("video", (1, 2, 2))], {}, r"runs\[0\] \(video\) must have 3"),
        ([("audio", 0)], {}, "audio tokens"),
        ([("video", (1, 2, 2), 0.0)], {}, "seconds per grid"),
        ([("image", (1, 3, 2))], {}, "spatial_merge_size"),
        ([], {}, "at least one token"),
        ([("text", 1)], {"version": "qwen2_omni"}, "version"),
        ([("text", 1)], {"position_id_per_seconds": 0}, "position_id_per_seconds"),
    ],
)
def test_bad_input_names_the_argument(runs, kwargs, match):
    with pytest.raises(ValueError, match=match):
        omni_position_ids(runs, **kwargs)

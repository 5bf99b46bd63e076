"""M-RoPE position ids: parity with transformers' get_rope_index (Qwen2-VL, 2.5-VL, 3-VL) on
mixed batches with padding, the rules by hand, decode deltas, errors."""

from __future__ import annotations

import runpy
import types
from pathlib import Path

import pytest
import torch

from posenc.positions.multimodal import (
    IMAGE,
    TEXT,
    VIDEO,
    mrope_position_ids,
    sequence_position_ids,
    vision_position_ids,
)


def sequence(*runs):
    """token types of runs ('t', n) / ('i', n) / ('v', n)."""
    kinds = {"t": TEXT, "i": IMAGE, "v": VIDEO}
    return [kinds[kind] for kind, n in runs for _ in range(n)]


def pad(rows, side):
    width = max(len(r) for r in rows)
    types_, mask = [], []
    for row in rows:
        fill = [0] * (width - len(row))
        ones, zeros = [1] * len(row), [0] * (width - len(row))
        types_.append(fill + row if side == "left" else row + fill)
        mask.append(zeros + ones if side == "left" else ones + zeros)
    return torch.tensor(types_), torch.tensor(mask)


# Two rows: text, image 1×4×6 (6 tokens at merge 2), text, video 3×4×4 (12 tokens), text;
# and text, video 2×2×4 (4 tokens), text, image 1×6×2 (3 tokens), text.
ROWS = [
    sequence(("t", 3), ("i", 6), ("t", 2), ("v", 12), ("t", 4)),
    sequence(("t", 5), ("v", 4), ("t", 1), ("i", 3), ("t", 2)),
]
IMAGES = torch.tensor([[1, 4, 6], [1, 6, 2]])
VIDEOS = torch.tensor([[3, 4, 4], [2, 2, 4]])


def hf_model(version):
    """The model class's get_rope_index bound to a stand-in holding only the config it reads."""
    module = pytest.importorskip(f"transformers.models.{version}.modeling_{version}")
    cls = {
        "qwen2_vl": "Qwen2VLModel",
        "qwen2_5_vl": "Qwen2_5_VLModel",
        "qwen3_vl": "Qwen3VLModel",
    }[version]
    model_cls = getattr(module, cls)
    vision = types.SimpleNamespace(spatial_merge_size=2, tokens_per_second=2)
    fake = types.SimpleNamespace(config=types.SimpleNamespace(vision_config=vision))
    fake.get_vision_position_ids = types.MethodType(model_cls.get_vision_position_ids, fake)
    return lambda *args, **kwargs: model_cls.get_rope_index(fake, *args, **kwargs)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("version", ["qwen2_vl", "qwen2_5_vl"])
def test_equals_transformers_get_rope_index(version, side):
    token_types, mask = pad(ROWS, side)
    extra = {}
    if version == "qwen2_5_vl":
        extra = {"second_per_grid_ts": torch.tensor([0.5, 1.5])}
    expected, expected_delta = hf_model(version)(
        token_types, token_types, IMAGES, VIDEOS, attention_mask=mask, **extra
    )
    ours = {"tokens_per_second": 2.0, **extra}
    got, delta = mrope_position_ids(
        token_types, IMAGES, VIDEOS, attention_mask=mask, version=version, **ours
    )
    assert torch.equal(got, expected)
    assert torch.equal(delta, expected_delta.reshape(-1, 1))


@pytest.mark.parametrize("side", ["right", "left"])
def test_qwen3_vl_splits_videos_into_frames(side):
    # Qwen3-VL's processor separates frames with timestamp text: one run per frame
    rows = [
        sequence(("t", 2), ("v", 4), ("t", 1), ("v", 4), ("t", 2), ("i", 6), ("t", 1)),
        sequence(("t", 3), ("i", 3), ("t", 2)),
    ]
    token_types, mask = pad(rows, side)
    images = torch.tensor([[1, 4, 6], [1, 6, 2]])
    videos = torch.tensor([[2, 4, 4]])
    expected, expected_delta = hf_model("qwen3_vl")(
        token_types, token_types, images, videos.clone(), attention_mask=mask
    )
    got, delta = mrope_position_ids(
        token_types, images, videos, attention_mask=mask, version="qwen3_vl"
    )
    assert torch.equal(got, expected)
    assert torch.equal(delta, expected_delta.reshape(-1, 1))


@pytest.mark.parametrize("separator", [1, 3])
def test_qwen3_vl_video_run_of_several_frames_equals_transformers(separator):
    """A ("video", (T, h, w)) run in Qwen3-VL mode: T frames with `separator` text tokens
    between them (the timestamp and markers its processor writes), numbered as transformers'
    get_rope_index numbers those tokens (it splits video_grid_thw into frames)."""
    runs = [("text", 2), ("video", (3, 4, 4)), ("text", 2), ("image", (1, 4, 6)), ("text", 1)]
    ids, kinds = sequence_position_ids(runs, version="qwen3_vl", frame_separator=separator)
    by_kind = {0: TEXT, 1: TEXT, 2: IMAGE, 3: VIDEO}  # RUN_KINDS: text, action, image, video
    token_types = torch.tensor([[by_kind[k] for k in kinds.tolist()]])
    assert int((token_types == TEXT).sum()) == 2 + 2 * separator + 2 + 1
    expected, _ = hf_model("qwen3_vl")(
        token_types, token_types, torch.tensor([[1, 4, 6]]), torch.tensor([[3, 4, 4]])
    )
    assert torch.equal(ids, expected[:, 0])


def test_rules_by_hand():
    # text 2, image 1×4×6 at merge 2 (2×3 tokens), text 2
    token_types = torch.tensor([sequence(("t", 2), ("i", 6), ("t", 2))])
    ids, delta = mrope_position_ids(token_types, [[1, 4, 6]])
    assert ids[:, 0].tolist() == [
        [0, 1, 2, 2, 2, 2, 2, 2, 5, 6],  # t
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],  # h: rows
        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6],  # w: columns
    ]
    # the text after the image resumes at 2 + max(2, 3) = 5; the next token after a cache
    # of the 10 tokens sits at 10 + delta = 7 = max + 1
    assert delta.item() == 7 - 10


def test_absolute_time_spaces_frames_by_seconds():
    # Qwen2.5-VL: Δ = tokens_per_second · second_per_grid_t, floored after the multiply
    ids = vision_position_ids(10, (4, 2, 2), spatial_merge_size=2, interval=2 * 0.75)
    assert ids[0].tolist() == [10, 11, 13, 14]  # ⌊0⌋, ⌊1.5⌋, ⌊3⌋, ⌊4.5⌋


def test_text_only_is_one_dimensional():
    token_types = torch.zeros(2, 7, dtype=torch.long)
    ids, delta = mrope_position_ids(token_types)
    assert torch.equal(ids, torch.arange(7).expand(3, 2, 7))
    assert delta.tolist() == [[0], [0]]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"token_types": torch.tensor([[0, 1, 1]])}, "fewer grids"),
        ({"token_types": torch.tensor([[0, 3]])}, "token_types must hold"),
        ({"token_types": torch.tensor([0, 0])}, r"token_types must be a \(batch, seq\)"),
        ({"token_types": torch.tensor([[0, 1, 1]]), "image_grid_thw": [[1, 4, 4]]}, "does not"),
        ({"token_types": torch.tensor([[0]]), "image_grid_thw": [[1, 2, 2]]}, "left over"),
        ({"token_types": torch.tensor([[0]]), "image_grid_thw": [[1, 2]]}, r"image_grid_thw\[0\]"),
        ({"token_types": torch.tensor([[0]]), "version": "qwen4"}, "version"),
        ({"token_types": torch.tensor([[0, 0]]), "attention_mask": torch.ones(1, 3)}, "mask"),
        (
            {
                "token_types": torch.tensor([[2]]),
                "video_grid_thw": [[1, 2, 2]],
                "second_per_grid_ts": [1.0, 2.0],
            },
            "second_per_grid_ts",
        ),
    ],
)
def test_errors_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mrope_position_ids(**kwargs)


# ---- vision-language-action sequences ---------------------------------------------------------


def test_actions_are_numbered_as_text_and_views_do_not_overlap():
    ids, kinds = sequence_position_ids(
        [("image", (1, 4, 4)), ("text", 1), ("image", (1, 4, 6)), ("text", 2), ("action", 3)]
    )
    # camera 1: 2×2 tokens at 0..1; marker at 2; camera 2 (2×3 tokens) from 3; it spans
    # max(2, 3) = 3, so the text resumes at 6 and the actions follow at 8, 9, 10
    assert ids[:, :4].tolist() == [[0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 1]]
    assert ids[:, 4].tolist() == [2, 2, 2]
    assert ids[1, 5:11].tolist() == [3, 3, 3, 4, 4, 4] and ids[2, 5:11].tolist() == [3, 4, 5] * 2
    assert ids[:, 11:].tolist() == [[6, 7, 8, 9, 10]] * 3
    assert kinds.tolist() == [2] * 4 + [0] + [2] * 6 + [0, 0, 1, 1, 1]
    assert int(ids[:, :4].max()) < int(ids[:, 5:11].min())  # the views share no position


def test_consecutive_vision_runs_and_bad_runs_are_refused():
    with pytest.raises(ValueError, match=r"runs\[1\] follows another vision run"):
        sequence_position_ids([("image", (1, 4, 4)), ("image", (1, 4, 4))])
    with pytest.raises(ValueError, match=r"runs\[0\] must be \(kind, size\)"):
        sequence_position_ids([("audio", 3)])


def test_numbering_on_example_shows_what_goes_wrong():
    example = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "numbering_on.py"))
    rows = example["measures"]()
    assert rows["positions one image spans"] == (64, 8)
    assert rows["vertical neighbours (row 0 → row 1)"] == (8, 1)
    assert rows["row wrap (end of row 0 → start of row 1)"] == (1, 7)
    plain, mrope = rows["first action ↔ camera 1's first patch"]
    assert plain > 4 * mrope

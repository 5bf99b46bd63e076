"""VideoRoPE and V2PE position ids: parity with the references' builders re-derived in float64,
the rules by hand (diagonal layout, temporal spacing, text after vision, visual steps), the
video-only case, padding, errors naming the argument."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from posenc.positions import positions_from_padding_mask
from posenc.positions.multimodal import IMAGE, TEXT, VIDEO, mrope_position_ids
from posenc.positions.multimodal_layouts import (
    v2pe_position_ids,
    videorope_position_ids,
    videorope_vision_ids,
)
from posenc.rotary.multi_axis import MultiAxisRotary

F64 = torch.float64
# Qwen2-VL's special token ids, as the VideoRoPE reference reads them
IMAGE_ID, VIDEO_ID, VISION_START = 151655, 151656, 151652


def reference_videorope_ids(input_ids, image_grid_thw, video_grid_thw, merge, scale_factor):
    """Float64 re-derivation of ``get_t_scale_rope_index`` (Wiselnn570/VideoRoPE
    ``videorope-transformer/modeling_videorope.py``) for one unpadded sequence: ``(3, seq)``
    ids and the decode delta."""
    tokens = list(input_ids)
    starts = [i for i, tok in enumerate(tokens) if tok == VISION_START]
    image_nums = sum(tokens[i + 1] == IMAGE_ID for i in starts)
    video_nums = sum(tokens[i + 1] == VIDEO_ID for i in starts)
    pieces: list[torch.Tensor] = []
    st, image_index, video_index = 0, 0, 0
    remain_images, remain_videos = image_nums, video_nums
    for _ in range(image_nums + video_nums):
        ed_image = tokens.index(IMAGE_ID, st) if remain_images > 0 else len(tokens) + 1
        ed_video = tokens.index(VIDEO_ID, st) if remain_videos > 0 else len(tokens) + 1
        if ed_image < ed_video:
            t, h, w = image_grid_thw[image_index]
            image_index, remain_images, ed = image_index + 1, remain_images - 1, ed_image
        else:
            t, h, w = video_grid_thw[video_index]
            video_index, remain_videos, ed = video_index + 1, remain_videos - 1, ed_video
        gt, gh, gw = t, h // merge, w // merge
        text_len = ed - st
        st_idx = pieces[-1][0].max() + 1 if pieces else 0
        pieces.append(torch.arange(text_len, dtype=F64).view(1, -1).expand(3, -1) + st_idx)
        t_index = torch.arange(gt, dtype=F64).view(-1, 1).expand(-1, gh * gw).flatten()
        h_index = torch.arange(gh, dtype=F64).view(1, -1, 1).expand(gt, -1, gw).flatten()
        w_index = torch.arange(gw, dtype=F64).view(1, 1, -1).expand(gt, gh, -1).flatten()
        h_index, w_index = h_index - (gh - 1) // 2, w_index - (gw - 1) // 2
        t_index = t_index * scale_factor + text_len + st_idx
        pieces.append(torch.stack([t_index, h_index + t_index, w_index + t_index]))
        st = ed + gt * gh * gw
    if st < len(tokens):
        st_idx = pieces[-1][0].max() + 1 if pieces else 0
        pieces.append(torch.arange(len(tokens) - st, dtype=F64).view(1, -1).expand(3, -1) + st_idx)
    ids = torch.cat(pieces, dim=1)
    return ids, float(ids[0].max() + 1 - len(tokens))


def qwen_sequence(runs, merge):
    """Input ids of runs ('t', n) / ('i', grid) / ('v', grid): each vision run after a
    vision-start token, as Qwen2-VL's processor writes them; and the grids."""
    ids, images, videos, word = [], [], [], 1
    for kind, size in runs:
        if kind == "t":
            ids += list(range(word, word + size))
            word += size
            continue
        ids.append(VISION_START)
        t, h, w = size
        ids += [IMAGE_ID if kind == "i" else VIDEO_ID] * (t * (h // merge) * (w // merge))
        (images if kind == "i" else videos).append(size)
    return ids, images, videos


def token_types(ids):
    kinds = {IMAGE_ID: IMAGE, VIDEO_ID: VIDEO}
    return torch.tensor([kinds.get(tok, TEXT) for tok in ids])


# ---- VideoRoPE ------------------------------------------------------------------------------


@pytest.mark.parametrize("spacing", [2.0, 1.0, 0.5, 3.0])
@pytest.mark.parametrize(
    ("runs", "merge"),
    [
        ([("t", 3), ("v", (4, 4, 6)), ("t", 5)], 2),
        ([("t", 2), ("i", (1, 6, 4)), ("t", 3), ("v", (3, 2, 2)), ("t", 4)], 2),
        ([("t", 1), ("v", (2, 5, 3)), ("t", 2), ("v", (3, 4, 4))], 1),
        ([("t", 4), ("i", (1, 4, 4)), ("t", 1), ("i", (1, 2, 6))], 2),
    ],
)
def test_videorope_ids_equal_the_reference(runs, merge, spacing):
    ids, images, videos = qwen_sequence(runs, merge)
    want, want_delta = reference_videorope_ids(ids, images, videos, merge, spacing)
    got, delta = videorope_position_ids(
        token_types(ids)[None],
        images or None,
        videos or None,
        spatial_merge_size=merge,
        temporal_spacing=spacing,
    )
    assert got.dtype == F64 and got.shape == (3, 1, len(ids))
    assert_close(got[:, 0], want, rtol=0, atol=0)
    assert delta.tolist() == [[want_delta]]


def test_a_video_alone_starts_at_zero_on_the_diagonal():
    # the lab's case: F frames of an H × W patch grid, no text, one patch per token
    frames, height, width, spacing = 3, 4, 5, 0.5
    types = torch.full((frames * height * width,), VIDEO)
    ids, delta = videorope_position_ids(
        types,
        video_grid_thw=[(frames, height, width)],
        spatial_merge_size=1,
        temporal_spacing=spacing,
    )
    f, r, c = torch.meshgrid(
        torch.arange(frames, dtype=F64),
        torch.arange(height, dtype=F64),
        torch.arange(width, dtype=F64),
        indexing="ij",
    )
    t = spacing * f
    want = torch.stack((t, t + r - (height - 1) // 2, t + c - (width - 1) // 2)).reshape(3, -1)
    assert_close(ids, want, rtol=0, atol=0)
    assert_close(videorope_vision_ids(0, (frames, height, width), temporal_spacing=spacing), want)
    assert delta.tolist() == [spacing * (frames - 1) + 1 - frames * height * width]
    # usable as MultiAxisRotary positions as they are: (3, seq) and (3, batch, seq)
    rope = MultiAxisRotary.videorope(12, (2, 2, 2))
    q = torch.randn(2, 1, ids.shape[1], 12, dtype=F64)
    batched = ids[:, None].expand(3, 2, -1)
    assert_close(rope(q, q, ids, ids), rope(q, q, batched, batched))


def test_a_frame_lies_on_the_diagonal_and_frames_are_delta_apart():
    ids = videorope_vision_ids(10, (3, 5, 3), temporal_spacing=1.5)  # (3, 45)
    frames = ids.view(3, 3, 5, 3)
    for f in range(3):
        t = 10 + 1.5 * f
        assert torch.all(frames[0, f] == t)
        # the centre patch (odd sizes) sits at (t, t, t); rows and columns around it
        assert frames[:, f, 2, 1].tolist() == [t, t, t]
        assert frames[1, f, :, 0].tolist() == [t - 2, t - 1, t, t + 1, t + 2]
        assert frames[2, f, 0, :].tolist() == [t - 1, t, t + 1]
    # even sizes: ⌊(n − 1)/2⌋ below the time id, the rest above
    assert videorope_vision_ids(0, (1, 4, 1), temporal_spacing=1.0)[1].tolist() == [-1, 0, 1, 2]


def test_text_after_a_video_follows_the_last_frame():
    types = torch.tensor([TEXT] * 2 + [VIDEO] * 12 + [TEXT] * 3)
    ids, _ = videorope_position_ids(types, video_grid_thw=[(3, 4, 4)], temporal_spacing=2.0)
    assert ids[:, :2].tolist() == [[0.0, 1.0]] * 3  # text: equal on all axes
    assert ids[0, 2:14].unique().tolist() == [2.0, 4.0, 6.0]  # p + δ f
    assert ids[:, 14:].tolist() == [[7.0, 8.0, 9.0]] * 3  # last time id + 1


def test_padding_is_skipped_and_left_at_zero():
    row = [TEXT] * 2 + [VIDEO] * 4 + [TEXT] * 2
    types = torch.tensor([[TEXT] * 3 + row, row + [TEXT] * 3])
    mask = torch.tensor([[0] * 3 + [1] * 8, [1] * 8 + [0] * 3])
    ids, deltas = videorope_position_ids(
        types,
        video_grid_thw=[(1, 2, 2), (1, 2, 2)],
        attention_mask=mask,
        spatial_merge_size=1,
    )
    alone, delta = videorope_position_ids(
        torch.tensor(row), video_grid_thw=[(1, 2, 2)], spatial_merge_size=1
    )
    assert_close(ids[:, 0, 3:], alone)
    assert_close(ids[:, 1, :8], alone)
    assert ids[:, 0, :3].eq(0).all() and ids[:, 1, 8:].eq(0).all()
    assert deltas.tolist() == [delta.tolist()] * 2


@pytest.mark.parametrize("spacing", [0.0, -1.0, math.nan, math.inf, "2"])
def test_videorope_refuses_a_bad_spacing(spacing):
    with pytest.raises(ValueError, match="temporal_spacing"):
        videorope_position_ids(
            torch.full((4,), VIDEO), video_grid_thw=[(1, 2, 2)], temporal_spacing=spacing
        )
    with pytest.raises(ValueError, match="temporal_spacing"):
        videorope_vision_ids(0, (1, 2, 2), temporal_spacing=spacing)


@pytest.mark.parametrize(
    ("types", "videos", "kwargs", "match"),
    [
        ([TEXT, VIDEO, VIDEO, VIDEO], [(1, 2, 2)], {}, "does not match its video_grid_thw"),
        ([TEXT] + [VIDEO] * 4, None, {}, "video_grid_thw has fewer grids"),
        ([TEXT] + [VIDEO] * 4, [(1, 2, 2), (1, 2, 2)], {}, "video_grid_thw has 1 grid"),
        ([TEXT, 3, TEXT], None, {}, "token_types must hold 0"),
        ([TEXT] + [VIDEO] * 4, [(1, 2, 3)], {"spatial_merge_size": 2}, "multiples"),
        ([TEXT] + [VIDEO] * 4, [(1, 2)], {}, "video_grid_thw\\[0\\] must be"),
        ([TEXT] + [VIDEO] * 4, [(1, 2, 2)], {"attention_mask": torch.ones(3)}, "attention_mask"),
    ],
)
def test_videorope_refuses_grids_that_do_not_match(types, videos, kwargs, match):
    kwargs = {"spatial_merge_size": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        videorope_position_ids(torch.tensor(types), video_grid_thw=videos, **kwargs)


@pytest.mark.parametrize(
    "bad", [torch.zeros(2, 2, 2, dtype=torch.long), torch.zeros(4), [0, 0, 1]], ids=str
)
def test_token_types_must_be_an_integer_tensor(bad):
    with pytest.raises(ValueError, match="token_types"):
        videorope_position_ids(bad)
    with pytest.raises(ValueError, match="token_types"):
        v2pe_position_ids(bad, 0.5)


def test_vision_ids_refuse_a_bad_start():
    with pytest.raises(ValueError, match="start"):
        videorope_vision_ids(math.nan, (1, 2, 2))


# ---- V2PE -------------------------------------------------------------------------------------

IMG_START, IMG_END, IMG_CONTEXT = 92544, 92545, 92546


def reference_v2pe_ids(input_ids, stride, num_image_token):
    """Float64 re-derivation of ``get_rope_pos_id`` with ``rope_pos_id_version='v2pe_fix'``
    (OpenGVLab/V2PE ``internvl/v2pe_utils.py``), no padding."""
    ids = torch.tensor(input_ids)
    starts = torch.where(ids == IMG_START)[0]
    ends = torch.where(ids == IMG_END)[0]
    tiles = (ends - starts) // num_image_token
    pieces, last, start = [], -1, 0
    for i in range(len(starts)):
        pre = torch.ones(int(starts[i]) + 1 - start, dtype=torch.long).cumsum(-1) - 1 + (last + 1)
        pieces.append(pre.double())
        last = int(pre[-1])
        small = stride / num_image_token
        count = num_image_token * int(tiles[i])
        image = torch.linspace(last, last + small * count, count + 1, dtype=F64)[1:]
        pieces.append(image)
        last = int(torch.ceil(image[-1]))
        start = int(starts[i]) + count + 1
    rest = torch.ones(len(input_ids) - start, dtype=torch.long).cumsum(-1) - 1 + (last + 1)
    pieces.append(rest.double())
    return torch.cat(pieces)


def internvl_sequence(runs, num_image_token):
    """Input ids of runs ('t', n) / ('i', tiles): <img> context tokens </img>."""
    ids, word = [], 1
    for kind, size in runs:
        if kind == "t":
            ids += list(range(word, word + size))
            word += size
        else:
            ids += [IMG_START] + [IMG_CONTEXT] * (size * num_image_token) + [IMG_END]
    return ids


@pytest.mark.parametrize("stride", [1, 2, 4, 16, 64, 256])
@pytest.mark.parametrize(
    "runs", [[("t", 3), ("i", 2), ("t", 4)], [("t", 1), ("i", 1), ("t", 2), ("i", 3), ("t", 1)]]
)
def test_v2pe_ids_equal_the_reference(runs, stride):
    num_image_token = 16
    ids = internvl_sequence(runs, num_image_token)
    types = torch.tensor([IMAGE if tok == IMG_CONTEXT else TEXT for tok in ids])
    got = v2pe_position_ids(types, stride / num_image_token)
    assert_close(got, reference_v2pe_ids(ids, stride, num_image_token), rtol=0, atol=1e-12)


def test_v2pe_steps_visual_by_delta_and_text_by_one():
    types = torch.tensor([TEXT] * 3 + [IMAGE] * 5 + [TEXT] * 2 + [VIDEO] * 3 + [TEXT])
    pos = v2pe_position_ids(types, 0.3)
    steps = pos.diff()
    visual = types[1:] != TEXT
    assert_close(steps[visual], torch.full((int(visual.sum()),), 0.3, dtype=F64))
    after_visual = (types[1:] == TEXT) & (types[:-1] != TEXT)
    assert_close(pos[1:][after_visual], pos[:-1][after_visual].ceil() + 1)
    plain = (types[1:] == TEXT) & (types[:-1] == TEXT)
    assert steps[plain].eq(1).all() and bool((steps > 0).all())  # monotone
    assert pos[0] == 0


def reference_v2pe_rule(types, step):
    """``get_rope_pos_id``'s numbering (``v2pe_fix``) applied to token types, whatever the
    first token: the running position starts at ``-1``, a text token is the previous
    position ``+ 1``, a visual run ``last + δ, last + 2δ, …``, then ``last = ⌈last⌉``."""
    values, last = [], -1.0
    for kind, group in itertools.groupby(types):
        count = len(list(group))
        if kind == TEXT:
            values += [last + i + 1 for i in range(count)]
            last = values[-1]
        else:
            values += [last + step * (i + 1) for i in range(count)]
            last = float(math.ceil(values[-1]))
    return torch.tensor(values, dtype=F64)


def test_v2pe_with_step_one_is_arange_and_visual_first_starts_at_zero():
    types = torch.tensor([[IMAGE] * 4 + [TEXT] * 3, [TEXT] * 2 + [VIDEO] * 5])
    assert_close(v2pe_position_ids(types, 1.0), torch.arange(7, dtype=F64).expand(2, 7))
    assert v2pe_position_ids(torch.tensor([IMAGE] * 3), 0.5).tolist() == [0, 0.5, 1]


@pytest.mark.parametrize("step", [0.25, 0.5, 1 / 3, 1.0, 2.0])
@pytest.mark.parametrize(
    "types",
    [
        [IMAGE] * 3 + [TEXT] * 2,
        [VIDEO] * 5 + [TEXT] + [IMAGE] * 2 + [TEXT] * 3,
        [TEXT] * 2 + [IMAGE] * 3 + [TEXT],
        [IMAGE] * 4,
    ],
)
def test_v2pe_a_leading_visual_run_keeps_the_references_relative_positions(types, step):
    """The reference starts at -1 (its first token is always text, ``<img>``); a leading
    visual token would sit at ``δ − 1``. posenc shifts the row so its first token sits at 0:
    every difference of two positions (all RoPE reads) equals the reference's, including
    those of the text after the visual run."""
    got = v2pe_position_ids(torch.tensor(types), step)
    want = reference_v2pe_rule(types, step)
    assert got[0] == 0
    assert_close(got, want - want[0], rtol=0, atol=1e-12)


def test_v2pe_takes_one_step_per_visual_run_and_skips_padding():
    types = torch.tensor(
        [[TEXT, IMAGE, IMAGE, TEXT, IMAGE, TEXT], [TEXT, VIDEO, VIDEO, TEXT, 0, 0]]
    )
    mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    pos = v2pe_position_ids(types, [0.25, 0.5, 1 / 3], attention_mask=mask)
    assert pos[0].tolist() == [0, 0.25, 0.5, 2, 2.5, 4]
    assert_close(pos[1], torch.tensor([0, 1 / 3, 2 / 3, 2, 0, 0], dtype=F64))


@pytest.mark.parametrize(
    ("step", "match"),
    [
        (0.0, "visual_step must be"),
        (-0.5, "visual_step must be"),
        (math.nan, "visual_step must be"),
        (math.inf, "visual_step must be"),
        ([0.5, 0.0], "visual_step\\[1\\]"),
        ([0.5], "one step per visual run \\(2\\)"),
        ([0.5, 0.5, 0.5], "one step per visual run \\(2\\)"),
    ],
)
def test_v2pe_refuses_bad_steps(step, match):
    types = torch.tensor([TEXT, IMAGE, TEXT, IMAGE])
    with pytest.raises(ValueError, match=match):
        v2pe_position_ids(types, step)


def test_v2pe_refuses_wrong_token_types_and_masks():
    with pytest.raises(ValueError, match="token_types must hold 0"):
        v2pe_position_ids(torch.tensor([0, 4]), 0.5)
    with pytest.raises(ValueError, match="attention_mask must have the shape"):
        v2pe_position_ids(torch.tensor([0, 1]), 0.5, attention_mask=torch.ones(3))


@pytest.mark.parametrize(
    "step",
    [np.float64(0.25), np.float32(0.25), torch.tensor(0.25), torch.tensor(0.25, dtype=F64)],
)
def test_v2pe_takes_numpy_and_0d_tensor_steps(step):
    types = torch.tensor([TEXT, IMAGE, IMAGE, TEXT])
    assert_close(v2pe_position_ids(types, step), v2pe_position_ids(types, 0.25))


@pytest.mark.parametrize("step", [np.int64(1), np.int32(2), torch.tensor(2)])
def test_v2pe_takes_integer_numpy_and_tensor_steps(step):
    types = torch.tensor([TEXT, IMAGE, IMAGE, TEXT])
    assert_close(v2pe_position_ids(types, step), v2pe_position_ids(types, float(step)))


def test_v2pe_takes_per_run_steps_as_a_tensor_or_array():
    types = torch.tensor([TEXT, IMAGE, TEXT, VIDEO, VIDEO])
    want = v2pe_position_ids(types, [0.5, 0.25])
    for steps in (torch.tensor([0.5, 0.25]), np.array([0.5, 0.25]), [np.float64(0.5), 0.25]):
        assert_close(v2pe_position_ids(types, steps), want)


@pytest.mark.parametrize(
    "step",
    [
        np.float64("nan"),
        np.float64(0.0),
        np.int64(-1),
        torch.tensor(float("inf")),
        torch.tensor(0.0),
        torch.tensor(-2),
        True,
        "0.5",
    ],
)
def test_v2pe_refuses_a_bad_scalar_step_with_one_message(step):
    with pytest.raises(ValueError, match=r"^visual_step must be a finite number > 0"):
        v2pe_position_ids(torch.tensor([TEXT, IMAGE, TEXT]), step)


BAD_MASKS = [
    ("fractional", [[1.0, 0.5, 1.0, 0.0]]),
    ("two", [[1, 2, 1, 0]]),
    ("negative", [[1, -1, 1, 0]]),
    ("nan", [[1.0, float("nan"), 1.0, 0.0]]),
    ("additive", [[0.0, 0.0, 0.0, -math.inf]]),
]


def _layouts_with_mask(mask):
    types = torch.tensor([[TEXT, TEXT, TEXT, TEXT]])
    return [
        lambda: videorope_position_ids(types, attention_mask=mask),
        lambda: v2pe_position_ids(types, 0.5, attention_mask=mask),
        lambda: mrope_position_ids(types, attention_mask=mask),
        lambda: positions_from_padding_mask(mask),
    ]


@pytest.mark.parametrize(("kind", "values"), BAD_MASKS, ids=[k for k, _ in BAD_MASKS])
def test_every_position_id_builder_refuses_a_mask_that_is_not_0_1(kind, values):
    """A cast to bool would count 0.5, 2, -1, NaN or -inf as a real token."""
    mask = torch.tensor(values)
    for build in _layouts_with_mask(mask):
        with pytest.raises(ValueError, match=r"must be bool or hold only 0 and 1"):
            build()


@pytest.mark.parametrize(
    "mask",
    [
        torch.tensor([[1, 1, 0, 0]]),
        torch.tensor([[1.0, 1.0, 0.0, 0.0]]),
        torch.tensor([[True, True, False, False]]),
    ],
)
def test_every_position_id_builder_takes_bool_and_0_1_masks_alike(mask):
    want = [
        videorope_position_ids(torch.tensor([[TEXT] * 2]))[0],
        v2pe_position_ids(torch.tensor([[TEXT] * 2]), 0.5),
        mrope_position_ids(torch.tensor([[TEXT] * 2]))[0],
        torch.arange(2)[None],
    ]
    for build, expected in zip(_layouts_with_mask(mask), want, strict=True):
        got = build()
        got = got[0] if isinstance(got, tuple) else got
        assert_close(got[..., :2], expected)
        assert bool((got[..., 2:] == 0).all())

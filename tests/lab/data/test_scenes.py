"""The grid scenes of the VLA task: seeded, drawn where they say, paths that reach the named
object, and the position-id layouts of each numbering."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from posenc.lab.data.scenes import (
    CELL,
    COLOURS,
    MOVES,
    SHAPES,
    WORDS,
    camera_views,
    image_patches,
    layout_position_ids,
    make_scenes,
)

SQUARE = torch.ones(3, 3)
CROSS = torch.tensor([[0.0, 1, 0], [1, 1, 1], [0, 1, 0]])
TRIANGLE = torch.tensor([[1.0, 0, 0], [1, 1, 0], [1, 1, 1]])
PATTERNS = {"square": SQUARE, "cross": CROSS, "triangle": TRIANGLE}


def test_seeded_and_rows_independent_of_count() -> None:
    scenes = make_scenes(6, seed=3)
    again = make_scenes(6, seed=3)
    for name in ("images", "instructions", "actions", "object_cells", "agent_cells", "targets"):
        assert_close(getattr(again, name), getattr(scenes, name))
    assert_close(make_scenes(2, seed=3).images, scenes.images[:2])
    assert not torch.equal(make_scenes(6, seed=4).object_cells, scenes.object_cells)


@pytest.mark.parametrize(("grid", "instruction_length"), [(4, 4), (6, 9)])
def test_image_shows_each_object_and_the_agent(grid: int, instruction_length: int) -> None:
    scenes = make_scenes(20, grid, seed=0, instruction_length=instruction_length)
    assert scenes.images.shape == (20, 3, grid * CELL, grid * CELL)
    for row in range(20):
        expected = torch.zeros(3, grid * CELL, grid * CELL)
        for (r, c), (shape, colour) in zip(
            scenes.object_cells[row].tolist(), scenes.object_kinds[row].tolist(), strict=True
        ):
            cell = expected[:, r * CELL : (r + 1) * CELL, c * CELL : (c + 1) * CELL]
            cell[colour] = PATTERNS[SHAPES[shape]]
        r, c = scenes.agent_cells[row].tolist()
        expected[:, r * CELL + 1, c * CELL + 1] = 1.0
        assert_close(scenes.images[row], expected)


def test_instruction_names_a_unique_object_and_actions_reach_it() -> None:
    grid = 5
    scenes = make_scenes(50, grid, seed=1, num_objects=4, instruction_length=7, action_length=10)
    assert scenes.instructions.shape == (50, 7) and scenes.actions.shape == (50, 10)
    for row in range(50):
        kinds = [tuple(k) for k in scenes.object_kinds[row].tolist()]
        assert len(set(kinds)) == len(kinds)  # the named (shape, colour) is unique
        words = [WORDS[i] for i in scenes.instructions[row].tolist()]
        core = [w for w in words if w in ("go", "to", *COLOURS, *SHAPES)]
        shape, colour = kinds[int(scenes.targets[row])]
        assert core == ["go", "to", COLOURS[colour], SHAPES[shape]]
        r, c = scenes.agent_cells[row].tolist()
        for action in scenes.actions[row].tolist():
            r, c = r + MOVES[action][0], c + MOVES[action][1]
            assert 0 <= r < grid and 0 <= c < grid
        assert [r, c] == scenes.object_cells[row, int(scenes.targets[row])].tolist()
        # shortest: as many moves as the Manhattan distance
        distance = scenes.object_cells[row, int(scenes.targets[row])] - scenes.agent_cells[row]
        assert int((scenes.actions[row] != 0).sum()) == int(distance.abs().sum())


def test_image_patches_are_cells() -> None:
    scenes = make_scenes(3, 4, seed=0)
    patches = image_patches(scenes.images)
    assert patches.shape == (3, 16, 3 * CELL * CELL)
    r, c = 2, 1
    cell = scenes.images[:, :, r * CELL : (r + 1) * CELL, c * CELL : (c + 1) * CELL]
    assert_close(patches[:, r * 4 + c], cell.reshape(3, -1))


def test_layouts_on_a_tiny_scene() -> None:
    # a 2×2 image (4 patches), a 4-token instruction, 2 action slots: 10 tokens
    flat = layout_position_ids(2, 4, 2, "flat")
    assert_close(flat.position_ids, torch.arange(10)[None])
    assert flat.kinds.tolist() == [2] * 4 + [0] * 4 + [1] * 2  # image, text, action
    text = [2, 3, 4, 5, 6, 7]
    qwen = torch.tensor([[0, 0, 0, 0, *text], [0, 0, 1, 1, *text], [0, 1, 0, 1, *text]])
    assert_close(layout_position_ids(2, 4, 2, "qwen2_vl").position_ids, qwen)
    # one square image: max + 1 is where Qwen2-VL continues anyway
    assert_close(layout_position_ids(2, 4, 2, "max_plus_one").position_ids, qwen)
    action = layout_position_ids(2, 4, 2, "action_axis").position_ids
    expected = torch.tensor(
        [
            [0, 0, 0, 0, 2, 3, 4, 5, 6, 6],
            [0, 0, 1, 1, 2, 3, 4, 5, 6, 6],
            [0, 1, 0, 1, 2, 3, 4, 5, 6, 6],
            [0, 0, 0, 0, 0, 0, 0, 0, 1, 2],
        ]
    )
    assert_close(action, expected)


def test_history_of_frames_separates_qwen2_vl_from_max_plus_one() -> None:
    # 3 frames of 2×2: Qwen2-VL continues at start + max(h, w) = 2, inside the frames' t range
    frames = [0] * 4 + [1] * 4 + [2] * 4
    rows, cols = [0, 0, 1, 1] * 3, [0, 1, 0, 1] * 3
    qwen = layout_position_ids(2, 1, 1, "qwen2_vl", frames=3)
    assert_close(qwen.position_ids, torch.tensor([[*frames, 2, 3], [*rows, 2, 3], [*cols, 2, 3]]))
    assert qwen.kinds.tolist() == [3] * 12 + [0, 1]  # video, text, action
    later = layout_position_ids(2, 1, 1, "max_plus_one", frames=3).position_ids
    assert_close(later, torch.tensor([[*frames, 3, 4], [*rows, 3, 4], [*cols, 3, 4]]))


@pytest.mark.parametrize("grid", [2, 4])
def test_history_is_the_agent_walking_to_its_current_cell(grid: int) -> None:
    count, history = 30, 3
    scenes = make_scenes(count, grid, seed=5, num_objects=2, history=history)
    plain = make_scenes(count, grid, seed=5, num_objects=2)
    for name in ("images", "instructions", "actions", "object_cells", "agent_cells", "targets"):
        assert_close(getattr(scenes, name), getattr(plain, name))
    assert plain.history.shape == (count, 0, 3, grid * CELL, grid * CELL)
    assert_close(plain.frames(), plain.images[:, None])
    frames = scenes.frames()
    assert frames.shape == (count, history + 1, 3, grid * CELL, grid * CELL)
    assert_close(frames[:, -1], plain.images)
    walk = scenes.agent_walk
    assert_close(walk[:, -1], scenes.agent_cells)
    assert ((walk >= 0) & (walk < grid)).all()
    assert ((walk[:, 1:] - walk[:, :-1]).abs().sum(-1) == 1).all()  # unit steps
    cells = frames.unflatten(3, (grid, CELL)).unflatten(5, (grid, CELL))
    cells = cells.permute(0, 1, 3, 5, 2, 4, 6)  # (count, frame, row, col, 3, CELL, CELL)
    for row in range(count):
        for frame in range(history):
            r, c = walk[row, frame].tolist()
            differs = (cells[row, frame] != cells[row, -1]).flatten(2).any(-1)
            current = tuple(scenes.agent_cells[row].tolist())
            expected = {(r, c), current} if (r, c) != current else set()
            assert {tuple(x) for x in differs.nonzero().tolist()} == expected
            assert (cells[row, frame, r, c][:, 1, 1] == 1).all()
    again = make_scenes(count, grid, seed=5, num_objects=2, history=history)
    assert_close(again.history, scenes.history)
    assert not torch.equal(make_scenes(count, grid, seed=6, history=history).agent_walk, walk)


def test_camera_views_move_whole_cells() -> None:
    grid = 4
    scenes = make_scenes(5, grid, seed=2)
    views = camera_views(scenes.images, 4)
    assert views.shape == (5, 4, 3, grid * CELL, grid * CELL)
    assert_close(views[:, 0], scenes.images)
    patches = image_patches(scenes.images).reshape(5, grid, grid, 3, CELL, CELL)
    for view, (turn_cells, turn_pattern) in enumerate(
        [
            (lambda x: x, lambda x: x),
            (lambda x: x.transpose(1, 2), lambda x: x.transpose(-1, -2)),
            (lambda x: x.flip(1, 2), lambda x: x.flip(-1, -2)),
            (lambda x: x.flip(1, 2).transpose(1, 2), lambda x: x.flip(-1, -2).transpose(-1, -2)),
        ]
    ):
        seen = image_patches(views[:, view]).reshape(5, grid, grid, 3, CELL, CELL)
        assert_close(seen, turn_pattern(turn_cells(patches)))
    # the agent's dot is at the transposed cell in view 1
    r, c = scenes.agent_cells[0].tolist()
    assert views[0, 1, :, c * CELL + 1, r * CELL + 1].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="views"):
        camera_views(scenes.images, 5)
    with pytest.raises(ValueError, match="images"):
        camera_views(scenes.images[:, :, :, :6], 2)


def test_views_are_separate_images_numbered_as_qwen2_vl() -> None:
    # two 2×2 views, a marker between them, 2 words, 1 action slot
    view = [[0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 1]]
    second = [[p + 3 for p in axis] for axis in view]  # after view 0 (2) and the marker (1)
    expected = torch.tensor([[*a, 2, *b, 5, 6, 7] for a, b in zip(view, second, strict=True)])
    laid = layout_position_ids(2, 2, 1, "qwen2_vl", views=2)
    assert_close(laid.position_ids, expected)
    assert laid.kinds.tolist() == [2] * 4 + [0] + [2] * 4 + [0, 0, 1]
    assert_close(layout_position_ids(2, 2, 1, "flat", views=2).position_ids, torch.arange(12)[None])
    action = layout_position_ids(2, 2, 2, "action_axis", views=2).position_ids
    assert action[:3, -2:].tolist() == [[7, 7]] * 3 and action[3].tolist() == [0] * 11 + [1, 2]
    with pytest.raises(ValueError, match="views"):
        layout_position_ids(2, 2, 1, "max_plus_one", views=2)
    with pytest.raises(ValueError, match="views"):
        layout_position_ids(2, 2, 1, "flat", views=0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"grid": 2, "num_objects": 4}, "grid"),
        ({"colours": ("red", "purple")}, "colours"),
        ({"shapes": ("circle",)}, "shapes"),
        ({"grid": 4, "action_length": 5}, "action_length"),
        ({"instruction_length": 3}, "instruction_length"),
        ({"num_objects": 3, "colours": ("red",), "shapes": ("square", "cross")}, "num_objects"),
        ({"count": 0}, "count"),
        ({"history": -1}, "history"),
        ({"history": 1.5}, "history"),
    ],
)
def test_bad_input_names_the_argument(kwargs: dict[str, object], name: str) -> None:
    arguments: dict[str, object] = {"count": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        make_scenes(**arguments)  # type: ignore[arg-type]


def test_bad_layout_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="numbering"):
        layout_position_ids(2, 4, 2, "rope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frames"):
        layout_position_ids(2, 4, 2, "flat", frames=0)
    with pytest.raises(ValueError, match="images"):
        image_patches(torch.zeros(1, 3, 4, 4))

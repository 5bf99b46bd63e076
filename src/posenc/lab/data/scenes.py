"""Rendered grid scenes with an instruction and an action chunk: the data of a small VLA task.

A scene is a ``G × G`` grid of cells, each drawn as ``CELL × CELL`` pixels in 3 colour
channels, holding a few objects (a shape × colour, each a 3 × 3 pixel pattern in one
channel) and the agent (a white centre pixel). The instruction names one object ("go to red
square", optionally with filler words inserted to lengthen it); the action chunk is a
shortest path from the agent to that object (rows first, then columns: ``UP``/``DOWN``, then
``LEFT``/``RIGHT``), padded with ``STAY`` to ``action_length``. The right actions depend on
*where* the named object is, so a model must tie the instruction to image positions: the VLA
task (:mod:`posenc.lab.experiments.vla`), where numberings of image patches, instruction and
action slots are compared (:func:`layout_position_ids`) at the trained grid and instruction
length and beyond them (a larger ``grid`` or ``instruction_length`` from the same
:func:`make_scenes`).

Image patch = one cell (:func:`image_patches`), so the image is ``G²`` tokens. Several
camera views of one scene (:func:`camera_views`: the grid as drawn, transposed, turned
half a turn, ...) are several image blocks, numbered as separate images
(``layout_position_ids(..., views=V)``). A short history (``make_scenes(..., history=H)``)
adds the ``H`` previous frames of each scene: the same objects, the agent at the earlier cells
of a random walk of unit steps ending at its current cell; the actions are still those of the
current frame, so a model must tell which frame is the current one
(``layout_position_ids(..., frames=H + 1)``, frame-major).

Example::

    >>> scenes = make_scenes(8, grid=4, seed=0)
    >>> scenes.images.shape, scenes.instructions.shape, scenes.actions.shape
    (torch.Size([8, 3, 12, 12]), torch.Size([8, 4]), torch.Size([8, 6]))
    >>> layout_position_ids(2, 4, 2, "qwen2_vl").position_ids[0].tolist()
    [0, 0, 0, 0, 2, 3, 4, 5, 6, 7]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_int, check_non_negative_int, check_positive_int
from posenc.lab.batch import derive_seed
from posenc.positions.multimodal import sequence_position_ids, vision_position_ids

__all__ = [
    "ACTIONS",
    "CELL",
    "COLOURS",
    "FILLERS",
    "MOVES",
    "SHAPES",
    "VIEWS",
    "WORDS",
    "Numbering",
    "SceneLayout",
    "Scenes",
    "camera_views",
    "image_patches",
    "layout_position_ids",
    "make_scenes",
]

CELL = 3  # pixels per cell side; one cell = one image patch
COLOURS = ("red", "green", "blue")  # channel 0, 1, 2
SHAPES = ("square", "cross", "triangle")
_PATTERNS = {
    "square": ((1, 1, 1), (1, 1, 1), (1, 1, 1)),
    "cross": ((0, 1, 0), (1, 1, 1), (0, 1, 0)),
    "triangle": ((1, 0, 0), (1, 1, 0), (1, 1, 1)),
}
FILLERS = ("please", "now", "the", "then")
#: The instruction vocabulary: a token is an index into it.
WORDS = ("go", "to", *COLOURS, *SHAPES, *FILLERS)
#: Action ids: ``ACTIONS[i]`` moves the agent by ``MOVES[i]`` (row, column).
ACTIONS = ("stay", "up", "down", "left", "right")
MOVES = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))
STAY, UP, DOWN, LEFT, RIGHT = range(5)

Numbering = Literal["flat", "qwen2_vl", "max_plus_one", "action_axis"]
_NUMBERINGS: tuple[str, ...] = get_args(Numbering)


@dataclass(frozen=True)
class Scenes:
    """A batch of scenes.

    Attributes:
        images: ``(count, 3, G·CELL, G·CELL)`` float32, 0 or 1.
        instructions: ``(count, instruction_length)`` int64 indices into :data:`WORDS`.
        actions: ``(count, action_length)`` int64 indices into :data:`ACTIONS`.
        object_cells: ``(count, num_objects, 2)`` int64 (row, column) of each object.
        object_kinds: ``(count, num_objects, 2)`` int64 (shape index into :data:`SHAPES`,
            colour index into :data:`COLOURS`).
        agent_cells: ``(count, 2)`` int64 (row, column) of the agent.
        targets: ``(count,)`` int64, which object the instruction names.
        history: ``(count, H, 3, G·CELL, G·CELL)`` the ``H`` previous frames, oldest first
            (``H = 0``: empty); frame ``j`` shows the agent at ``agent_walk[:, j]``.
        agent_walk: ``(count, H + 1, 2)`` int64 the agent's cell in every frame, oldest
            first; the last is ``agent_cells``, consecutive cells one unit step apart.
    """

    images: Tensor
    instructions: Tensor
    actions: Tensor
    object_cells: Tensor
    object_kinds: Tensor
    agent_cells: Tensor
    targets: Tensor
    history: Tensor
    agent_walk: Tensor

    def frames(self) -> Tensor:
        """``(count, H + 1, 3, G·CELL, G·CELL)``: the history then the current frame."""
        return torch.cat([self.history, self.images[:, None]], dim=1)


def make_scenes(
    count: int,
    grid: int = 4,
    *,
    seed: int = 0,
    num_objects: int = 3,
    instruction_length: int = 4,
    action_length: int | None = None,
    colours: Sequence[str] = COLOURS,
    shapes: Sequence[str] = SHAPES,
    history: int = 0,
) -> Scenes:
    """``count`` scenes on a ``grid × grid`` board, a pure function of ``(seed, row)``.

    Objects and the agent sit on distinct cells; the objects' (shape, colour) pairs are
    distinct, so the named one is unique. Filler words (:data:`FILLERS`) fill the
    instruction up to ``instruction_length`` at random places, keeping "go to <colour>
    <shape>" in order. Row ``i`` is the same whatever ``count`` is.

    Args:
        count: number of scenes.
        grid: cells per side ``G``; must hold ``num_objects`` objects and the agent.
        seed: the seed.
        num_objects: objects per scene (≥ 1).
        instruction_length: tokens per instruction (≥ 4, the core words).
        action_length: steps per action chunk (≥ the longest path ``2(G − 1)``); None =
            ``2(G − 1)``.
        colours, shapes: the names objects are drawn from (subsets of :data:`COLOURS` and
            :data:`SHAPES`, e.g. to hold combinations out).
        history: previous frames per scene (≥ 0). The agent's earlier cells are a walk of
            ``history`` unit steps (up, down, left, right, inside the grid, possibly over an
            object's cell) ending at its current cell, drawn from a generator of its own, so
            every other field is the same as with ``history=0``.

    Raises:
        ValueError: naming the argument.
    """
    count = check_positive_int("count", count)
    grid = check_positive_int("grid", grid)
    num_objects = check_positive_int("num_objects", num_objects)
    history = check_non_negative_int("history", history)
    for name, given, known in (("colours", colours, COLOURS), ("shapes", shapes, SHAPES)):
        unknown = [item for item in given if item not in known]
        if unknown or not given or len(set(given)) != len(given):
            raise ValueError(
                f"{name} must be distinct names from {', '.join(known)}, got {list(given)}"
            )
    if num_objects + 1 > grid * grid:
        raise ValueError(
            f"grid {grid} has {grid * grid} cells, too few for {num_objects} objects and the agent"
        )
    if num_objects > len(colours) * len(shapes):
        raise ValueError(
            f"num_objects must be <= {len(colours) * len(shapes)} distinct (shape, colour) "
            f"pairs of the given shapes and colours, got {num_objects}"
        )
    if check_positive_int("instruction_length", instruction_length) < 4:
        raise ValueError(
            f"instruction_length must be >= 4 (go to <colour> <shape>), got {instruction_length}"
        )
    longest = 2 * (grid - 1)
    length = (
        longest if action_length is None else check_positive_int("action_length", action_length)
    )
    if length < longest:
        raise ValueError(
            f"action_length must be >= {longest}, the longest path on a {grid}×{grid} grid, "
            f"got {length}"
        )
    kinds = torch.tensor([(SHAPES.index(s), COLOURS.index(c)) for s in shapes for c in colours])
    patterns = torch.tensor([_PATTERNS[s] for s in SHAPES], dtype=torch.float32)
    side = grid * CELL
    images = torch.zeros(count, 3, side, side)
    instructions = torch.empty(count, instruction_length, dtype=torch.long)
    actions = torch.full((count, length), STAY, dtype=torch.long)
    object_cells = torch.empty(count, num_objects, 2, dtype=torch.long)
    object_kinds = torch.empty(count, num_objects, 2, dtype=torch.long)
    agent_cells = torch.empty(count, 2, dtype=torch.long)
    targets = torch.empty(count, dtype=torch.long)
    frames = torch.zeros(count, history, 3, side, side)
    agent_walk = torch.empty(count, history + 1, 2, dtype=torch.long)
    for row in range(count):
        generator = torch.Generator().manual_seed(derive_seed("scenes", seed, row))
        cells = torch.randperm(grid * grid, generator=generator)[: num_objects + 1]
        cells = torch.stack([cells // grid, cells % grid], dim=1)  # (objects + agent, 2)
        chosen = kinds[torch.randperm(len(kinds), generator=generator)[:num_objects]]
        target = int(torch.randint(num_objects, (1,), generator=generator))
        object_cells[row], object_kinds[row], agent_cells[row] = cells[:-1], chosen, cells[-1]
        targets[row] = target
        for (r, c), (shape, colour) in zip(cells[:-1].tolist(), chosen.tolist(), strict=True):
            rows, cols = slice(r * CELL, (r + 1) * CELL), slice(c * CELL, (c + 1) * CELL)
            images[row, colour, rows, cols] = patterns[shape]
        walk = _walk_to(cells[-1].tolist(), grid, history, derive_seed("walk", seed, row))
        agent_walk[row] = torch.tensor(walk)
        for frame, (r, c) in enumerate(walk):
            image = frames[row, frame] if frame < history else images[row]
            if frame < history:
                image.copy_(images[row])  # the objects only: the agent is drawn last
            image[:, r * CELL + 1, c * CELL + 1] = 1.0  # the agent: a white centre dot
        shape, colour = chosen[target].tolist()
        core = [WORDS.index("go"), WORDS.index("to"), WORDS.index(COLOURS[colour])]
        core.append(WORDS.index(SHAPES[shape]))
        extra = instruction_length - 4
        first_filler = WORDS.index(FILLERS[0])
        fillers = torch.randint(len(FILLERS), (extra,), generator=generator) + first_filler
        # which slots hold the core words (sorted: their order is kept)
        slots = torch.randperm(instruction_length, generator=generator)[:4].sort().values
        words = torch.empty(instruction_length, dtype=torch.long)
        is_core = torch.zeros(instruction_length, dtype=torch.bool)
        is_core[slots] = True
        words[slots] = torch.tensor(core)
        words[~is_core] = fillers
        instructions[row] = words
        (goal_r, goal_c), (r, c) = cells[target].tolist(), cells[-1].tolist()
        path = [DOWN if goal_r > r else UP] * abs(goal_r - r)
        path += [RIGHT if goal_c > c else LEFT] * abs(goal_c - c)
        actions[row, : len(path)] = torch.tensor(path, dtype=torch.long)
    return Scenes(
        images,
        instructions,
        actions,
        object_cells,
        object_kinds,
        agent_cells,
        targets,
        frames,
        agent_walk,
    )


def _walk_to(end: list[int], grid: int, steps: int, seed: int) -> list[tuple[int, int]]:
    """``steps + 1`` cells, oldest first, ending at ``end``, each a unit step from the next:
    drawn backwards from ``end``, each step among the moves that stay inside the grid."""
    generator = torch.Generator().manual_seed(seed)
    cells = [(end[0], end[1])]
    for _ in range(steps):
        r, c = cells[-1]
        inside = [
            (r - dr, c - dc) for dr, dc in MOVES[1:] if 0 <= r - dr < grid and 0 <= c - dc < grid
        ]
        cells.append(inside[int(torch.randint(len(inside), (1,), generator=generator))])
    return cells[::-1]


def image_patches(images: Tensor) -> Tensor:
    """``(count, 3, G·CELL, G·CELL)`` images → ``(count, G², 3·CELL²)`` patches, row-major."""
    if images.dim() != 4 or images.shape[2] % CELL or images.shape[3] % CELL:
        raise ValueError(
            f"images must be (count, channels, height, width) with sides multiples of {CELL}, "
            f"got {tuple(images.shape)}"
        )
    count, channels, height, width = images.shape
    patches = images.reshape(count, channels, height // CELL, CELL, width // CELL, CELL)
    return patches.permute(0, 2, 4, 1, 3, 5).reshape(count, -1, channels * CELL * CELL)


@dataclass(frozen=True)
class SceneLayout:
    """Position ids ``(axes, seq)`` int64 and each token's kind ``(seq,)`` (indices into
    :data:`posenc.positions.multimodal.RUN_KINDS`: 0 text, 1 action, 2 image, 3 video)."""

    position_ids: Tensor
    kinds: Tensor


#: What each camera view does to the drawn grid (a symmetry of the square, so every view
#: shows every cell): view ``v`` of :func:`camera_views` is ``VIEWS[v]``.
VIEWS = ("front", "transposed", "half_turn", "anti_transposed")


def camera_views(images: Tensor, views: int) -> Tensor:
    """``views`` cameras on each scene: ``(count, 3, S, S)`` → ``(count, views, 3, S, S)``.

    View 0 is the image as drawn; view 1 its transpose (rows ↔ columns); view 2 the image
    turned half a turn; view 3 the transpose across the other diagonal (:data:`VIEWS`).
    Each moves whole cells, so :func:`image_patches` of a view holds the same patches in
    another order (a transposed view also transposes each cell's pattern).

    Raises:
        ValueError: naming ``views`` (1 to 4) or ``images`` (not square ``(count, 3, S, S)``).
    """
    views = check_int("views", views, low=1, high=len(VIEWS))
    if images.dim() != 4 or images.shape[2] != images.shape[3]:
        raise ValueError(f"images must be (count, channels, S, S), got {tuple(images.shape)}")
    turned = [
        images,
        images.transpose(2, 3),
        images.flip(2, 3),
        images.flip(2, 3).transpose(2, 3),
    ]
    return torch.stack(turned[:views], dim=1)


def layout_position_ids(
    grid: int,
    instruction_length: int,
    action_length: int,
    numbering: Numbering,
    *,
    frames: int = 1,
    views: int = 1,
) -> SceneLayout:
    """Position ids of ``[image patches | instruction | action slots]`` under one numbering.

    The image is ``frames`` grids of ``G × G`` patches (one image, or a short history of
    frames as a video run), frame-major then row-major. With ``views > 1`` camera views the
    image part is ``[view 0 | marker | view 1 | marker | … | view V−1]``: one image block
    per view, a text token (the vision-end marker Qwen-VL processors put between two images)
    between two of them, so Qwen2-VL numbers each view from where the previous run ended
    (view ``v`` at ``(v·(G + 1) + i, v·(G + 1) + r, v·(G + 1) + c)``). Numberings:

    * ``"flat"``: ``(1, seq)``, ``0, 1, …, seq − 1`` over everything;
    * ``"qwen2_vl"``: ``(3, seq)`` M-RoPE as Qwen2-VL numbers it
      (:func:`posenc.positions.multimodal.sequence_position_ids`, merge size 1): patch ``(i, r, c)``
      at ``(i, r, c)``, then text and action tokens at ``max(G, G) = G, G + 1, …`` on all
      three axes;
    * ``"max_plus_one"``: ``(3, seq)`` as ``"qwen2_vl"`` but the text continues at the
      vision block's ``max + 1`` (transformers 4.x, vLLM): ``max(frames, G)`` — the same as
      ``"qwen2_vl"`` for one frame, later when ``frames > G``;
    * ``"action_axis"``: ``(4, seq)``: ``"qwen2_vl"`` on the first three axes for image and
      instruction, and a fourth axis, 0 except on action slot ``k`` where it reads
      ``k + 1``; every action slot sits at the position after the instruction on the three
      M-RoPE axes, so the action axis alone orders them.

    Raises:
        ValueError: naming the argument.
    """
    check_in_choices("numbering", numbering, _NUMBERINGS)
    grid = check_positive_int("grid", grid)
    instruction_length = check_positive_int("instruction_length", instruction_length)
    action_length = check_positive_int("action_length", action_length)
    frames = check_positive_int("frames", frames)
    views = check_positive_int("views", views)
    if views > 1 and numbering == "max_plus_one":
        raise ValueError("views must be 1 for numbering 'max_plus_one' (a single vision block)")
    vision = ("image", (1, grid, grid)) if frames == 1 else ("video", (frames, grid, grid))
    runs: list[tuple[str, object]] = [vision]
    for _ in range(views - 1):
        runs += [("text", 1), vision]
    runs += [("text", instruction_length), ("action", action_length)]
    ids, kinds = sequence_position_ids(runs, spatial_merge_size=1, version="qwen2_vl")
    patches = views * frames * grid * grid + views - 1  # every token before the instruction
    if numbering == "flat":
        ids = torch.arange(ids.shape[1])[None]
    elif numbering == "max_plus_one":
        vision_ids = vision_position_ids(0, (frames, grid, grid))
        start = int(vision_ids.max()) + 1
        rest = torch.arange(instruction_length + action_length) + start
        ids = torch.cat([vision_ids, rest.expand(3, -1)], dim=1)
    elif numbering == "action_axis":
        after = int(ids[0, patches + instruction_length - 1]) + 1  # the instruction's end
        action = ids.new_zeros(1, ids.shape[1])
        action[0, patches + instruction_length :] = torch.arange(1, action_length + 1)
        ids = torch.cat([ids, action])
        ids[:3, patches + instruction_length :] = after
    return SceneLayout(ids, kinds)

"""What goes wrong when image and text positions are simply numbered on.

A vision-language-action sequence: two camera views (224×224 each: a 16×16 patch grid, 8×8
tokens after Qwen-VL's 2×2 merge), the instruction, and a chunk of 8 actions × 7 dimensions.
Numbered on (``0, 1, 2, …`` over every token), against M-RoPE's ``(t, h, w)`` ids
(:func:`posenc.positions.multimodal.sequence_position_ids`). Run: ``python
examples/numbering_on.py``.
"""

from __future__ import annotations

import torch

from posenc.positions.multimodal import sequence_position_ids

RUNS = [
    ("image", (1, 16, 16)),  # camera 1
    ("text", 1),  # vision-end marker
    ("image", (1, 16, 16)),  # camera 2 (wrist)
    ("text", 12),  # instruction
    ("action", 56),  # 8 steps × 7 dimensions
]


def measures(runs=RUNS) -> dict[str, tuple[int, int]]:
    """Each measure as (numbered on, M-RoPE), in positions (the largest per-axis difference)."""
    ids, kinds = sequence_position_ids(runs)
    plain = torch.arange(ids.shape[1]).expand(3, -1)
    width = 8  # tokens per image row

    def gap(positions, a, b):
        return int((positions[:, a] - positions[:, b]).abs().max())

    first_action = int((kinds == 1).nonzero()[0])
    rows = {
        # where the token after camera 1 (token 64) starts, relative to its first patch
        "positions one image spans": (64, int(ids[0, 64] - ids[0, 0])),
        "vertical neighbours (row 0 → row 1)": (gap(plain, width, 0), gap(ids, width, 0)),
        "row wrap (end of row 0 → start of row 1)": (
            gap(plain, width, width - 1),
            gap(ids, width, width - 1),
        ),
        "first action ↔ camera 1's first patch": (
            gap(plain, first_action, 0),
            gap(ids, first_action, 0),
        ),
        "last position used": (int(plain.max()), int(ids.max())),
    }
    return rows


def main() -> None:
    print(f"{'measure':45s} {'numbered on':>12s} {'M-RoPE':>8s}")
    for name, (plain, mrope) in measures().items():
        print(f"{name:45s} {plain:12d} {mrope:8d}")
    print(
        "\nNumbered on, a 224×224 view costs 64 positions, the patch below another sits 8 "
        "positions away while the end of one row and the start of the next (opposite sides of "
        "the image) look adjacent, and the first action sits 141 positions from what the camera "
        "saw, in RoPE's decayed range. M-RoPE keeps both neighbours one step apart on their own "
        "axis and spends 8 positions per view."
    )


if __name__ == "__main__":
    main()

"""Figures of positions beyond one axis: patch similarity, 2D rotary score maps, M-RoPE ids.

* :func:`plot_patch_similarity`: ViT's Figure 7 (Dosovitskiy et al. 2020): for every patch of
  the grid, the cosine similarity of its position embedding to every other patch's, drawn
  as a grid of small maps;
* :func:`plot_rotary_scores`: the score ``q_m · k_n`` of a rotary encoding for ``q = k =``
  ones, the query at the grid's centre and a key at every cell (a function of ``(Δrow,
  Δcol)`` only), one map per head;
* :func:`plot_mrope_ids`: the ``(t, h, w)`` position ids of an interleaved text, image,
  video sequence (:func:`posenc.positions.multimodal.mrope_position_ids`), coloured by modality,
  next to what plain numbering would give.

The computations are plain functions (:func:`patch_similarity`, :func:`rotary_score_map`) so
tests check the numbers, not pixels.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from posenc.encoding.base import PositionalEncoding
from posenc.positions import grid_positions
from posenc.viz.base import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "grid_inputs",
    "patch_similarity",
    "plot_mrope_ids",
    "plot_patch_similarity",
    "plot_rotary_scores",
    "rotary_score_map",
    "similarity_mosaic",
]


def grid_inputs(encoding: PositionalEncoding, height: int, width: int) -> Tensor:
    """Positions of every cell of a ``height × width`` grid as ``encoding`` reads them:
    ``(2, h·w)`` (row, column) for a two-axis encoding, ``(3, h·w)`` (time 0, row, column:
    one image, as M-RoPE numbers it) for a three-axis one, token indices ``(h·w,)`` otherwise."""
    grid = grid_positions(height, width)
    if encoding.num_axes == 2:
        return grid
    if encoding.num_axes == 3:
        return torch.cat([torch.zeros_like(grid[:1]), grid])
    if encoding.num_axes == 1:
        return torch.arange(height * width)
    raise ValueError(
        f"a {height}×{width} grid gives 1, 2 or 3 position axes, not {encoding.num_axes}"
    )


def patch_similarity(table: Tensor, height: int, width: int) -> Tensor:
    """Cosine similarity of every patch's embedding to every other's: ``(h, w, h, w)``.

    Args:
        table: ``(h·w, dim)`` embeddings, row-major patches.
    """
    if table.dim() != 2 or table.shape[0] != height * width:
        raise ValueError(
            f"table must be (height·width, dim) = ({height * width}, dim), got {tuple(table.shape)}"
        )
    unit = torch.nn.functional.normalize(table.double(), dim=-1)
    return (unit @ unit.T).reshape(height, width, height, width)


def similarity_mosaic(similarity: Tensor) -> Tensor:
    """``(h, w, h, w)`` similarities laid out as one image: the ``h × w`` map of patch
    ``(r, c)`` at block ``(r, c)``, blocks separated by a row and a column of NaN (drawn
    blank): ``(h·(h+1) − 1, w·(w+1) − 1)``."""
    h, w = similarity.shape[:2]
    mosaic = torch.full((h * (h + 1) - 1, w * (w + 1) - 1), float("nan"), dtype=similarity.dtype)
    for r in range(h):
        for c in range(w):
            top, left = r * (h + 1), c * (w + 1)
            mosaic[top : top + h, left : left + w] = similarity[r, c]
    return mosaic


def plot_patch_similarity(
    encoding: PositionalEncoding, height: int = 8, width: int = 8, *, title: str = ""
) -> Figure:
    """ViT's Figure 7 for an additive encoding on a ``height × width`` grid."""
    with torch.no_grad():
        table = encoding(grid_inputs(encoding, height, width)).float()
    similarity = patch_similarity(table, height, width)
    mosaic = similarity_mosaic(similarity)
    inches = min(12 / mosaic.shape[1], 8 / mosaic.shape[0])  # fit 12 × 8 in, square cells
    size = (inches * mosaic.shape[1] + 1.6, inches * mosaic.shape[0] + 1.0)
    fig = new_figure(figsize=size, layout="constrained")
    ax = fig.add_subplot()
    low = float(similarity.min())  # one colour scale, from the lowest to 1
    image = ax.imshow(mosaic.numpy(), vmin=low, vmax=1, cmap="viridis", interpolation="nearest")
    step_r, step_c = height + 1, width + 1  # each small map plus a blank separator
    ax.set_xticks(
        [c * step_c + (width - 1) / 2 for c in range(width)], [str(c + 1) for c in range(width)]
    )
    ax.set_yticks(
        [r * step_r + (height - 1) / 2 for r in range(height)], [str(r + 1) for r in range(height)]
    )
    ax.set(xlabel="input patch column", ylabel="input patch row")
    ax.tick_params(length=0, labelsize=7)
    fig.colorbar(image, ax=ax, shrink=0.7, label="cosine similarity")
    fig.suptitle(title or f"{type(encoding).__name__}: position embedding similarity")
    return fig


def rotary_score_map(encoding: PositionalEncoding, height: int, width: int) -> Tensor:
    """``q_m · k_n`` for ``q = k =`` ones, ``m`` the centre cell ``(h // 2, w // 2)``, ``n``
    every cell: ``(heads, h, w)`` (heads = 1 unless the encoding rotates heads apart)."""
    rotary: Any = encoding  # a rotary encoding: head_dim, and frequencies when per head
    head_dim = int(rotary.head_dim)
    if getattr(rotary, "per_head", False):  # MultiAxisRotary's per-head frequencies
        heads = int(rotary.frequencies.shape[0])
    else:  # generators per head (LearnedRotation), else one rotation for every head
        heads = 1 if rotary.num_heads is None else int(rotary.num_heads)
    keys = grid_inputs(encoding, height, width)
    centre = (height // 2) * width + width // 2
    query = keys[..., centre : centre + 1]
    ones_q = torch.ones(1, heads, 1, head_dim, dtype=torch.float64)
    ones_k = torch.ones(1, heads, height * width, head_dim, dtype=torch.float64)
    with torch.no_grad():
        if any(True for _ in encoding.parameters()):  # learned frequencies: a float64 copy
            encoding = copy.deepcopy(encoding).double()
        q, k = encoding(ones_q, ones_k, query, keys)
    return (q @ k.transpose(-1, -2))[0, :, 0].reshape(heads, height, width)


def plot_rotary_scores(
    encoding: PositionalEncoding, height: int = 15, width: int = 15, *, title: str = ""
) -> Figure:
    """Score maps of a 2D rotary encoding against the key's cell (see :func:`rotary_score_map`)."""
    scores = rotary_score_map(encoding, height, width)
    shown = min(scores.shape[0], 4)
    fig = new_figure(figsize=(3.4 * shown, 3.2), layout="constrained")
    axes = fig.subplots(1, shown, squeeze=False)[0]
    for head, ax in enumerate(axes):
        image = ax.imshow(scores[head].numpy(), cmap="RdBu_r")
        ax.plot([width // 2], [height // 2], marker="x", color="black")
        ax.set(title=f"head {head}" if shown > 1 else "", xlabel="key column", ylabel="key row")
        fig.colorbar(image, ax=ax, shrink=0.8, label="q·k (q = k = 1)")
    fig.suptitle(title or f"{type(encoding).__name__}: q·k, query at the centre (x)")
    return fig


def plot_mrope_ids(
    runs: Sequence[tuple[str, Any]] = (
        ("text", 6),
        ("image", (1, 8, 12)),
        ("text", 4),
        ("video", (3, 4, 4)),
        ("text", 5),
    ),
    *,
    spatial_merge_size: int = 2,
    version: str = "qwen2_vl",
) -> Figure:
    """The M-RoPE ``(t, h, w)`` ids of a sequence of runs — ``("text", n)``, ``("image",
    (t, h, w))``, ``("video", (t, h, w))`` — against token index, coloured by modality, with
    plain numbering (``0 … n−1``) dashed for comparison."""
    from posenc.positions.multimodal import IMAGE, TEXT, VIDEO, mrope_position_ids

    kinds = {"text": TEXT, "image": IMAGE, "video": VIDEO}
    types: list[int] = []
    images: list[Any] = []
    videos: list[Any] = []
    for kind, value in runs:
        if kind not in kinds:
            raise ValueError(f"runs: kind must be text, image or video, got {kind!r}")
        if kind == "text":
            types += [TEXT] * int(value)
            continue
        t, h, w = value
        (images if kind == "image" else videos).append(value)
        types += [kinds[kind]] * (t * (h // spatial_merge_size) * (w // spatial_merge_size))
    ids, _ = mrope_position_ids(
        torch.tensor([types]),
        images or None,
        videos or None,
        spatial_merge_size=spatial_merge_size,
        version=version,  # type: ignore[arg-type]
    )
    colours = {
        TEXT: ("text", "tab:gray"),
        IMAGE: ("image", "tab:blue"),
        VIDEO: ("video", "tab:orange"),
    }
    fig = new_figure(figsize=(9, 6), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    index = torch.arange(len(types))
    for axis, (ax, label) in enumerate(zip(axes, ("t", "h", "w"), strict=True)):
        ax.plot(
            index.numpy(), index.numpy(), linestyle="--", color="lightgray", label="numbered on"
        )
        type_ids = torch.tensor(types)
        for code, (name, colour) in colours.items():
            mask = type_ids.eq(code)
            if bool(mask.any()):
                ax.scatter(index[mask], ids[axis, 0][mask], s=8, color=colour, label=name)
        ax.set_ylabel(f"{label} id")
    axes[0].legend(fontsize=8, ncol=4)
    axes[-1].set_xlabel("token index")
    fig.suptitle(f"M-RoPE position ids ({version}, merge {spatial_merge_size})")
    return fig

"""Train at one resolution, test at larger ones: which 2D encodings carry over (RoPE-ViT Fig. 1).

The digits ViT (:mod:`posenc.lab.experiments.vit`) is trained on the 8×8 images of
:mod:`posenc.lab.data.digits` with 2×2 patches (a 4×4 grid), then tested on the same
held-out digits upsampled (bilinear) to ``test_sides`` pixels:
12×12 gives a 6×6 grid, 16×16 an 8×8 one, with the same patch size, as RoPE-ViT's
multi-resolution evaluation (Heo et al. 2024, https://arxiv.org/abs/2403.13298, Figure 1 and
§4.1: train at 224, test at 160–512 without fine-tuning). Each encoding meets the larger grid
the way its method does:

* ``learned_2d`` (ViT's table): resampled bicubically to the new grid (timm's
  ``resample_abs_pos_embed``, variant ``"resampled"``);
* encodings reading (row, column) positions (``sinusoidal_grid``, ``rope_axial``,
  ``rope_mixed``, ``fourier``, ...): evaluated at the new grid's integer positions (variant
  ``"extrapolated"``, positions beyond those trained) and, with ``rescale``, at positions
  scaled back to the training grid, ``a·4/H`` (EVA's ``ref_feat_shape``, variant
  ``"rescaled"``: the trained span, finer steps);
* ``none``: nothing to adapt.

With ``mode="canvas"`` the test images are the 8×8 digits unchanged on a blank larger canvas
instead: the patches are the trained ones, only the grid and the positions are new, which
separates the encoding's extrapolation from the change of patch content that upsampling
brings.

Encodings fixed to one grid (``learned`` numbering patches 1D, ``sinusoidal_2d``, ``rope_2d``)
cannot be evaluated on another and are refused naming ``encodings``.

Rows: ``experiment="resolution"``, ``encoding``, ``seed``, ``side`` (test image side),
``grid`` (patches per side), ``variant``, ``accuracy``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc._validate import check_int
from posenc.lab.data.digits import IMAGE_SIZE, LEVELS
from posenc.lab.experiments.vit import (
    NONE,
    DigitsViT,
    VitConfig,
    prepare_digits,
    train_digits_vit,
)
from posenc.lab.runner import Experiment, Run, run_experiment
from posenc.lab.tables import pivot, seed_note, text_table
from posenc.positions import grid_positions
from posenc.rotary.multi_axis import rescaled_grid_positions

__all__ = [
    "EXPERIMENT",
    "MODES",
    "ResolutionConfig",
    "canvas",
    "evaluate_at",
    "run_resolution",
    "upsample",
]

Row = dict[str, Any]

#: The documented comparison: a resampled learned table, fixed 2D sin-cos, axial and mixed RoPE.
DEFAULT_ENCODINGS = ("learned_2d", "sinusoidal_grid", "rope_axial", "rope_mixed")
#: How a test image is made larger (:class:`ResolutionConfig`).
MODES = ("upsample", "canvas")


@dataclass(frozen=True)
class ResolutionConfig(VitConfig):
    """The resolution experiment: :class:`~posenc.lab.experiments.vit.VitConfig`'s training, plus

    Args:
        test_sides: test image sides in pixels (multiples of ``patch_size``, ≥ 8); 8 is the
            training resolution.
        rescale: also evaluate (row, column) encodings at positions rescaled to the training
            grid (EVA).
        mode: ``"upsample"`` (the digit resized to the test side: a higher resolution) or
            ``"canvas"`` (the 8×8 digit unchanged, centred on a blank test-side canvas: the
            same patches, more of them, so only the positions are new).
    """

    encodings: tuple[str, ...] = DEFAULT_ENCODINGS
    test_sides: tuple[int, ...] = (8, 12, 16)
    rescale: bool = True
    mode: str = "upsample"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        sides = tuple(check_int("test_sides", s, low=IMAGE_SIZE) for s in self.test_sides)
        object.__setattr__(self, "test_sides", sides)
        if not self.test_sides:
            raise ValueError("test_sides must hold at least one side")
        for side in self.test_sides:
            if side % self.patch_size:
                raise ValueError(
                    f"test_sides must be multiples of patch_size ({self.patch_size}), got {side}"
                )
        for encoding in self.encodings:
            reason = _fixed_grid(self, encoding)
            if reason:
                raise ValueError(
                    f"encodings: {encoding!r} cannot be tested on a larger grid: {reason}"
                )


def _fixed_grid(config: ResolutionConfig, encoding: str) -> str | None:
    """Why ``encoding`` cannot meet another grid, or None."""
    if encoding == NONE:
        return None
    with torch.random.fork_rng(devices=[]):
        built = config.model_config(encoding).build_encoding()
    if built is None or built.num_axes == 2 or hasattr(built, "resample"):
        return None
    return (
        "it numbers the patches of the training grid (token indices); use an encoding that "
        "reads (row, column) positions or a resampleable table (learned_2d)"
    )


def canvas(pixels: Tensor, side: int, patch_size: int) -> Tensor:
    """Digits ``(N, 64)`` → ``(N, side²)`` in ``[-1, 1]``: each 8×8 digit unchanged on a
    blank (−1) canvas, its offset the centre rounded down to a multiple of ``patch_size`` so
    that its patches are exactly the trained ones."""
    images = upsample(pixels, IMAGE_SIZE).reshape(-1, IMAGE_SIZE, IMAGE_SIZE)
    offset = (side - IMAGE_SIZE) // 2 // patch_size * patch_size
    out = torch.full((images.shape[0], side, side), -1.0)
    out[:, offset : offset + IMAGE_SIZE, offset : offset + IMAGE_SIZE] = images
    return out.reshape(images.shape[0], side * side)


def upsample(pixels: Tensor, side: int) -> Tensor:
    """Digits ``(N, 64)`` of intensities 0..16 → ``(N, side²)`` in ``[-1, 1]``, bilinear."""
    images = pixels.to(torch.float32).reshape(-1, 1, IMAGE_SIZE, IMAGE_SIZE)
    images = images * (2.0 / (LEVELS - 1)) - 1.0
    if side != IMAGE_SIZE:
        images = F.interpolate(images, size=(side, side), mode="bilinear", align_corners=False)
    return images.reshape(images.shape[0], side * side)


def evaluate_at(
    vit: DigitsViT,
    pixels: Tensor,
    labels: Tensor,
    side: int,
    variant: str,
    mode: str = "upsample",
) -> float:
    """Accuracy of ``vit`` on ``pixels`` made ``side`` wide by ``mode`` (``"upsample"`` or
    ``"canvas"``), the encoding adapted by ``variant`` (``"resampled"``, ``"extrapolated"``
    or ``"rescaled"``)."""
    patch = vit.config.patch_size
    grid = (side // patch, side // patch)
    model = vit
    if variant == "resampled":
        model = copy.deepcopy(vit)
        model.additive.resample(grid)  # type: ignore[union-attr, operator]
    coords = None
    if variant == "rescaled":
        coords = rescaled_grid_positions(*grid, reference=vit.config.grid).float()
    elif vit.hooks.num_axes == 2:
        coords = grid_positions(*grid)
    images = upsample(pixels, side) if mode == "upsample" else canvas(pixels, side, patch)
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, images.shape[0], 512):
            chunk = images[start : start + 512].reshape(-1, 1, side, side)
            logits = model.classify(chunk, grid=grid, coords=coords)
            correct += int((logits.argmax(-1) == labels[start : start + 512]).sum())
    return correct / images.shape[0]


def _variants(vit: DigitsViT, rescale: bool) -> list[str]:
    """How the encoding meets another grid (at the training side every variant is the
    trained model: resampling to the same grid and rescaling by 1 change nothing)."""
    if vit.additive is not None and hasattr(vit.additive, "resample"):
        return ["resampled"]
    if vit.hooks.num_axes == 2:
        return ["extrapolated", "rescaled"] if rescale else ["extrapolated"]
    return ["extrapolated"]  # none: nothing to adapt


def _plan(config: ResolutionConfig) -> list[Run]:
    return [
        Run(f"{encoding}/seed{seed}", {"encoding": encoding, "seed": seed})
        for encoding in config.encodings
        for seed in config.train.seeds
    ]


def _execute(config: ResolutionConfig, run: Run, run_dir: Path) -> list[Row]:
    encoding, seed = run.params["encoding"], run.params["seed"]
    vit, _, data = train_digits_vit(config, encoding, seed, run_dir)
    rows: list[Row] = []
    for side in config.test_sides:
        for variant in _variants(vit, config.rescale):
            accuracy = evaluate_at(
                vit, data.test_pixels, data.test_labels, side, variant, config.mode
            )
            rows.append(
                {
                    "experiment": "resolution",
                    "encoding": encoding,
                    "seed": seed,
                    "side": side,
                    "grid": side // config.patch_size,
                    "variant": variant,
                    "mode": config.mode,
                    "accuracy": accuracy,
                }
            )
    return rows


def format_resolution_table(rows: Sequence[Row]) -> str:
    """Test accuracy by (encoding, variant) and test side, mean ± std over seeds."""
    selected = [r for r in rows if r.get("experiment") == "resolution"]
    if not selected:
        return ""
    header, body = pivot(
        selected, ["encoding", "variant"], "side", "accuracy", digits=3, label=lambda s: f"{s}px"
    )
    how = "on a blank canvas" if selected[0].get("mode") == "canvas" else "upsampled"
    title = f"digits ViT trained at 8×8 px (4×4 grid), tested {how}; {seed_note(selected)}"
    return "\n".join([title, text_table(header, body)])


def run_resolution(
    config: ResolutionConfig, out: str | Path, *, echo: Callable[[str], None] | None = print
) -> list[Row]:
    """Run (or resume) the experiment in ``out`` (see the module); return its rows."""
    return run_experiment(EXPERIMENT, config, out, echo=echo)


EXPERIMENT = Experiment(
    name="resolution",
    summary="digits ViT trained at 8 px, tested at 12, 16 px: resampled, extrapolated, rescaled",
    title="posenc: ViT resolution transfer",
    config=ResolutionConfig,
    plan=_plan,
    execute=_execute,
    table=format_resolution_table,
    prepare=prepare_digits,
)

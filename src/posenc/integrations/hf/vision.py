"""posenc's axial RoPE in place of HF's vision rotaries: one explicit convention per HF class.

Every axial vision rotary of ``transformers`` 5.23.0 (``rope_type: "axial"``) takes patch
coordinates ``position_ids (…, N, axes)`` (row and column; time, row and column) and returns
``(cos, sin)`` tables that its attention applies. Each forms the phases

.. math:: φ_p = \\mathrm{pos}_{a(p)} · θ_{k(p)}, \\qquad θ_k = b^{-2k/d_s}

(``b`` = ``rope_theta``, ``d_s`` the per-axis width) and lays them out in its own order: which
axis ``a(p)`` and which frequency ``k(p)`` each channel pair ``p`` reads, and whether the table
is half-split (``cat(φ, φ)``, applied with ``rotate_half``) or interleaved
(``repeat_interleave(φ, 2)``, applied pairwise). That map is posenc's
:class:`~posenc.rotary.MultiAxisRotary` frequency matrix ``F[p, a(p)] = θ_{k(p)}`` (RoPE-ViT's
axial RoPE, Heo et al. 2024, https://arxiv.org/abs/2403.13298): the table
:data:`VISION_CONVENTIONS` names, per HF class, the :class:`VisionConvention` (axis order,
frequency split, table layout, shape and dtype) read from that class's
``recomposition_frequencies``. :class:`VisionRotaryAdapter` returns posenc's tables (float64
phases, rounded once) in that format, so HF's attention code runs unchanged.

:func:`vision_adapter` builds the adapter for one HF module and checks it against one call of
the module at a few coordinates: a class whose tables do not follow its convention (a changed
release) is refused, never replaced silently. Reference: ``transformers`` 5.23.0, each class's
``compute_axial_rope_parameters`` and ``recomposition_frequencies``; parity tests in
``tests/integrations/hf/test_vision.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.multi_axis import MultiAxisRotary

__all__ = [
    "VISION_CONVENTIONS",
    "VisionConvention",
    "VisionRotaryAdapter",
    "is_vision_rotary",
    "vision_adapter",
]

#: How the per-axis frequencies come from HF's ``inv_freq`` of ``K`` values: ``"shared"``
#: (every axis reads the same ``K`` frequencies, ``θ_k = b^{-2k/(2K)}``), ``"alternating"``
#: (Pixtral: one RoPE of ``K`` frequencies ``b^{-2j/(2K)}``, axis ``a`` reading ``θ_{2k+a}``).
FrequencySplit = Literal["shared", "alternating"]
#: Pair order: ``"axis_major"`` (all of an axis's frequencies, then the next axis) or
#: ``"frequency_major"`` (Kimi-K2.5: for each frequency, one pair per axis).
PairOrder = Literal["axis_major", "frequency_major"]
#: Table layout: ``"half"`` ``cat(φ, φ)``; ``"interleaved"`` ``repeat_interleave(φ, 2)``;
#: ``"half_per_axis"`` (Gemma 4) ``cat(φ_0, φ_0, φ_1, φ_1, …)``, one half-split block per axis.
VisionTable = Literal["half", "interleaved", "half_per_axis"]
#: Where the coordinates come from: ``"given"`` (``forward(x, position_ids)``); the grid of
#: ``forward(image)``'s last two dims: ``"patch_centres"`` (DINOv3: the centres of the
#: ``patch_size`` patches in ``[-1, 1]``, ``(N, 2)``) or ``"feature_grid"`` (EfficientLoFTR:
#: rows and columns ``1 … n`` of the aggregated feature map, ``(1, H, W, 2)``).
Positions = Literal["given", "patch_centres", "feature_grid"]


@dataclass(frozen=True)
class VisionConvention:
    """One HF vision rotary class's table: which axis and frequency each pair reads, and how.

    Args:
        axis_order: the position column (``position_ids[..., a]``) each group of pairs reads,
            in table order.
        split: :data:`FrequencySplit`.
        order: :data:`PairOrder`.
        table: :data:`VisionTable`.
        leading_one: HF returns ``(1, N, width)`` (SAM's ``[None, ...]``).
        cast: HF casts the tables to ``x.dtype`` (else they stay float32).
        batched: HF reads ``(batch, N, axes)`` positions (Gemma 4), else ``(N, axes)``.
        positions: :data:`Positions`.
        frequency_scale: a factor on every frequency (DINOv3's ``2π``: coordinates in
            ``[-1, 1]``).
        rope_type: the ``rope_type`` HF's class requires of its config.
    """

    axis_order: tuple[int, ...] = (0, 1)
    split: FrequencySplit = "shared"
    order: PairOrder = "axis_major"
    table: VisionTable = "half"
    leading_one: bool = False
    cast: bool = False
    batched: bool = False
    positions: Positions = "given"
    frequency_scale: float = 1.0
    rope_type: str = "axial"

    def __post_init__(self) -> None:
        axes = len(self.axis_order)
        if sorted(self.axis_order) != list(range(axes)) or axes < 1:
            raise ValueError(f"axis_order must be a permutation of 0..N-1, got {self.axis_order}")
        if self.split == "alternating" and axes != 2:
            raise ValueError(f"split 'alternating' needs 2 axes, got axis_order {self.axis_order}")

    @property
    def num_axes(self) -> int:
        return len(self.axis_order)

    def frequencies(self, inv_freq: Tensor) -> Tensor:
        """The ``(pairs, axes)`` frequency matrix in table order from the per-axis (``shared``)
        or whole (``alternating``) float64 inverse frequencies."""
        axes = self.num_axes
        if self.split == "alternating":
            per_axis = [inv_freq[a::2] for a in range(axes)]  # axis a: θ_{2k+a}
        else:
            per_axis = [inv_freq] * axes
        count = per_axis[0].numel()
        rows = []
        if self.order == "axis_major":
            rows = [(a, per_axis[a][k]) for a in self.axis_order for k in range(count)]
        else:
            rows = [(a, per_axis[a][k]) for k in range(count) for a in self.axis_order]
        matrix = torch.zeros(len(rows), axes, dtype=torch.float64)
        for pair, (axis, theta) in enumerate(rows):
            matrix[pair, axis] = theta * self.frequency_scale
        return matrix


_HW_HALF = VisionConvention()
_HW_HALF_CAST = VisionConvention(cast=True)
_SAM = VisionConvention(table="interleaved", leading_one=True)

#: HF class name → its convention (transformers 5.23.0). ``_HW_HALF``: rows then columns, a
#: half-split table, float32 (Qwen2-VL's ``cat([freq_h, freq_w])`` then ``cat(hw, hw)``).
VISION_CONVENTIONS: dict[str, VisionConvention] = {
    **{
        name: _HW_HALF
        for name in (
            "CohereCompassVisionRotaryEmbedding",
            "Dots3NoteVisionRotaryEmbedding",
            "Ernie4_5_VLMoeVisionRotaryEmbedding",
            "Exaone4_5_VisionRotaryEmbedding",
            "Glm4vVisionRotaryEmbedding",
            "Glm4vMoeVisionRotaryEmbedding",
            "Glm5NextVisionRotaryEmbedding",
            "GlmOcrVisionRotaryEmbedding",
            "Lfm3VlVisionRotaryEmbedding",
            "MLCDRotaryEmbedding",
            "PaddleOCRVisionRotaryEmbedding",
            "Qwen2_5OmniVisionRotaryEmbedding",
            "Qwen2_5_VLVisionRotaryEmbedding",
            "Qwen2VLVisionRotaryEmbedding",
            "Qwen3_5VisionRotaryEmbedding",
            "Qwen3_5MoeVisionRotaryEmbedding",
            "Qwen3OmniMoeVisionRotaryEmbedding",
            "Qwen3VLVisionRotaryEmbedding",
            "Qwen3VLMoeVisionRotaryEmbedding",
            "Qwen4ExpVisionRotaryEmbedding",
            "VideoLlama3VisionRotaryEmbedding",
        )
    },
    "MuseGlimmerVisionRotaryEmbedding": _HW_HALF_CAST,
    "MuseSparkVisionRotaryEmbedding": _HW_HALF_CAST,
    # SAM's ViT and memory attention: rows then columns, pairwise (interleaved), (1, N, width)
    **{
        name: _SAM
        for name in (
            "Sam3ViTRotaryEmbedding",
            "Sam2VideoVisionRotaryEmbedding",
            "Sam3TrackerVideoVisionRotaryEmbedding",
            "EdgeTamVideoVisionRotaryEmbedding",
        )
    },
    # cat([freq_w, freq_h]).repeat_interleave(2): columns first, pairwise
    "Inkling2VisionRotaryEmbedding": VisionConvention(axis_order=(1, 0), table="interleaved"),
    # freq.flip(1).flatten(1): columns first, half-split
    "Step3p7VisionRotaryEmbedding": VisionConvention(axis_order=(1, 0)),
    # freq.transpose(1, 2).flip(-1).flatten(1): per frequency a column pair, then a row pair
    "Kimi_K25VisionRotaryEmbedding": VisionConvention(axis_order=(1, 0), order="frequency_major"),
    # (t, h, w) blocks of 2·((head_dim // 3) // 2) channels each; the rest passes through
    "MiniMaxM3VLVisionRotaryEmbedding": VisionConvention(axis_order=(0, 1, 2), cast=True),
    # one RoPE over head_dim: rows read its even frequencies, columns its odd ones
    "PixtralVisionRotaryEmbedding": VisionConvention(split="alternating", cast=True),
    # (batch, N, 2) positions; cat([freq_h, freq_h, freq_w, freq_w]): each axis half-split
    "Gemma4VisionRotaryEmbedding": VisionConvention(table="half_per_axis", cast=True, batched=True),
    # DINOv3's patch-centre RoPE: angles 2π·c·θ over (row, column) centres in [-1, 1],
    # flatten(1, 2) then tile(2) (rows then columns, half-split); eval only (HF jitters the
    # centres in training)
    "EomtDinov3RotaryEmbedding": VisionConvention(
        cast=True, positions="patch_centres", frequency_scale=2 * math.pi, rope_type="default"
    ),
    # emb[..., 0::2] = row · θ, emb[..., 1::2] = column · θ (rows 1…H, columns 1…W of the
    # aggregated map), then repeat_interleave(2): per frequency a row pair then a column pair
    "EfficientLoFTRRotaryEmbedding": VisionConvention(
        order="frequency_major",
        table="interleaved",
        leading_one=True,
        cast=True,
        positions="feature_grid",
        rope_type="default",
    ),
}


def is_vision_rotary(module: nn.Module) -> bool:
    """Whether ``module`` is an HF vision rotary with a convention in
    :data:`VISION_CONVENTIONS` (or already a :class:`VisionRotaryAdapter`)."""
    return isinstance(module, VisionRotaryAdapter) or type(module).__name__ in VISION_CONVENTIONS


class VisionRotaryAdapter(nn.Module):
    """HF-style axial vision rotary backed by posenc: ``forward(x, position_ids) -> (cos, sin)``.

    .. math:: \\cos_p = \\cos(\\textstyle\\sum_a \\mathrm{pos}_a F_{p,a}), \\quad
              \\sin_p = \\sin(\\textstyle\\sum_a \\mathrm{pos}_a F_{p,a})

    with ``F`` the rope's frequency matrix, laid out as ``convention`` says (see the module).
    Phases are float64, rounded once to the output dtype.

    Args:
        rope: the :class:`~posenc.rotary.MultiAxisRotary` whose frequencies give the phases.
        convention: the HF class's :class:`VisionConvention`.
        original: the HF module it replaces, kept (unregistered) for ``unpatch_rotary``.

    Shape:
        - x: any tensor; only its dtype and device are read (and, for grid positions, its
          last two dims: the image or feature map).
        - position_ids: ``(…, N, axes)``, integer or floating coordinates (``None`` for grid
          positions).
        - Output: cos and sin ``(…, N, width)`` (``(1, …, width)`` with ``leading_one``).
    """

    original: nn.Module | None

    def __init__(
        self,
        rope: MultiAxisRotary,
        convention: VisionConvention,
        original: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if rope.num_axes != convention.num_axes:
            raise ValueError(
                f"rope reads {rope.num_axes} axes, the convention {convention.num_axes}"
            )
        self.rope = rope
        self.convention = convention
        self.__dict__["original"] = original  # out of the module tree, as HFRotaryAdapter's
        # the grid's geometry, read off HF's config: (patch or kernel, stride) per dim
        config: Any = getattr(original, "config", None)
        self.grid: tuple[tuple[int, int], tuple[int, int]] | None = None
        if convention.positions == "patch_centres":
            patch = config.patch_size
            sizes = tuple(patch) if isinstance(patch, (tuple, list)) else (patch, patch)
            self.grid = ((sizes[0], sizes[0]), (sizes[1], sizes[1]))
        elif convention.positions == "feature_grid":
            kernel, stride = config.q_aggregation_kernel_size, config.q_aggregation_stride
            self.grid = ((kernel, stride), (kernel, stride))

    def grid_positions(self, x: Tensor) -> Tensor:
        """The coordinates HF's module derives from ``x``'s last two dims (float64):
        patch centres ``2 (i + ½) / n − 1`` ``(N, 2)``, or feature-map rows and columns
        ``1 … n`` ``(H, W, 2)``."""
        if self.grid is None:
            raise ValueError(f"{self.convention.positions!r} positions are given, not a grid")
        (k_h, s_h), (k_w, s_w) = self.grid
        counts = ((x.shape[-2] - k_h) // s_h + 1, (x.shape[-1] - k_w) // s_w + 1)
        if self.convention.positions == "patch_centres":
            axes = [(torch.arange(n, dtype=torch.float64) + 0.5) * 2 / n - 1 for n in counts]
            grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)
            return grid.flatten(0, 1).to(x.device)  # (N, 2), rows major
        axes = [torch.arange(1, n + 1, dtype=torch.float64) for n in counts]
        return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).to(x.device)

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        convention = self.convention
        if convention.positions != "given":
            if self.training and convention.positions == "patch_centres":
                raise ValueError(
                    "DINOv3's rotary jitters its patch centres in training (shift, jitter, "
                    "rescale), which posenc's adapter does not reproduce: call model.eval(), "
                    "or unpatch_rotary(model) to train"
                )
            position_ids = self.grid_positions(x)
        elif position_ids is None:
            raise ValueError("position_ids is required for given positions")
        coords = position_ids.to(x.device).movedim(-1, 0)  # (axes, …, N)
        angles = self.rope.angles(coords)  # (…, N, pairs) float64
        tables = []
        for values in (angles.cos(), angles.sin()):
            if convention.table == "interleaved":
                values = values.repeat_interleave(2, dim=-1)
            elif convention.table == "half":
                values = torch.cat((values, values), dim=-1)
            else:  # one half-split block per axis, in axis order
                blocks = values.chunk(convention.num_axes, dim=-1)
                values = torch.cat([b for block in blocks for b in (block, block)], dim=-1)
            if convention.leading_one:
                values = values[None]
            tables.append(values.to(x.dtype if convention.cast else torch.float32))
        return tables[0], tables[1]

    def extra_repr(self) -> str:
        return f"convention={self.convention}"


def vision_adapter(module: nn.Module) -> VisionRotaryAdapter:
    """posenc's adapter for one HF vision rotary module (validated against one call of it).

    The base is the module config's ``rope_parameters["rope_theta"]`` (``rope_type`` must be
    ``"axial"``); the number of frequencies is HF's ``inv_freq`` buffer's, recomputed in
    float64. Raises ``ValueError`` for a class without a convention, another rope type, an
    attention scaling other than 1, or tables that differ from HF's at probe coordinates
    (by more than float32 rounding of the phases: relative 1e-5).
    """
    original = module.original if isinstance(module, VisionRotaryAdapter) else module
    name = type(original).__name__
    if original is None or name not in VISION_CONVENTIONS:
        raise ValueError(
            f"{name} has no vision convention (VISION_CONVENTIONS holds "
            f"{len(VISION_CONVENTIONS)} HF classes): not patched"
        )
    convention = VISION_CONVENTIONS[name]
    config: Any = original.__dict__.get("config")
    params = getattr(config, "rope_parameters", None) or {}
    if params.get("rope_type") != convention.rope_type:
        raise ValueError(
            f"{name}: rope_type must be {convention.rope_type!r}, got {params.get('rope_type')!r}"
        )
    scaling = getattr(original, "attention_scaling", 1.0)
    if scaling != 1.0:
        raise ValueError(f"{name}: attention_scaling must be 1.0, got {scaling}")
    hf_inv_freq = original.inv_freq
    if not isinstance(hf_inv_freq, Tensor):
        raise ValueError(f"{name} has no inv_freq buffer: not patched")
    count = hf_inv_freq.numel()
    inv_freq = rope_inv_freq(2 * count, float(params["rope_theta"])).to(torch.float64)
    frequencies = convention.frequencies(inv_freq)
    rope = MultiAxisRotary(2 * frequencies.shape[0], frequencies)
    adapter = VisionRotaryAdapter(rope, convention, original)
    adapter.train(original.training)  # the mode the model is in (DINOv3's rotary reads it)
    _check(adapter, original, name)
    return adapter


def _check(adapter: VisionRotaryAdapter, original: nn.Module, name: str) -> None:
    """Refuse ``adapter`` unless its tables are HF's at a few coordinates, each axis distinct
    (the axis order, the frequency split and the layout all show)."""
    axes = adapter.convention.num_axes
    buffer = original.inv_freq
    device = buffer.device if isinstance(buffer, Tensor) else torch.device("cpu")
    steps = torch.tensor([1, 2, 3, 5, 7], device=device)
    positions = torch.stack([steps * (a + 1) + a for a in range(axes)], dim=-1)  # (5, axes)
    if adapter.convention.batched:
        positions = positions[None]  # (1, 5, axes)
    if adapter.grid is not None:  # a 3 × 2 grid: the image or map it is read from
        (k_h, s_h), (k_w, s_w) = adapter.grid
        image = torch.zeros(1, 1, k_h + 2 * s_h, k_w + s_w, device=device)
        got = adapter(image)  # first: it refuses a training-mode DINOv3 rotary by name
        expected = original(image)
    else:
        x = torch.zeros(1, device=device)
        expected, got = original(x, positions), adapter(x, positions)
    for hf, ours in zip(expected, got, strict=True):
        if hf.shape != ours.shape or not torch.allclose(
            ours.double(), hf.double(), rtol=1e-5, atol=1e-5
        ):
            raise ValueError(
                f"{name}'s tables differ from its convention {adapter.convention} (shape "
                f"{tuple(hf.shape)} vs {tuple(ours.shape)}): not patched"
            )

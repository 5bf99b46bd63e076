"""The built-in multi-axis encodings: a token's coordinates on a grid (row and column) or its
time, row and column (M-RoPE and its variants), in the order ``posenc list`` shows them."""

from __future__ import annotations

from posenc.registry.builders import (
    additive_package,
    coordinate_axes,
    grid_size,
    grid_sizes_by_axis,
    half_width,
    learned_rotation_kwargs,
    mhrope_sections,
    mrope_i_sections,
    mrope_sections,
    msrope_axes_dims,
    rope_kwargs,
    rotary_package,
)
from posenc.registry.specs import EncodingSpec

__all__ = ["MULTI_AXIS_SPECS"]

MULTI_AXIS_SPECS: tuple[EncodingSpec, ...] = (
    EncodingSpec(
        "sinusoidal_2d",
        "additive",
        "He et al. 2021 (MAE), https://arxiv.org/abs/2111.06377; "
        "Dosovitskiy et al. 2020 (ViT), https://arxiv.org/abs/2010.11929",
        "fixed sin/cos of a patch's row and column added to its embedding (needs a grid)",
        lambda: additive_package().Sinusoidal2D,
        lambda d: {**grid_sizes_by_axis(d), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "sinusoidal_grid",
        "additive",
        "He et al. 2021 (MAE), https://arxiv.org/abs/2111.06377; "
        "Vaswani et al. 2017, https://arxiv.org/abs/1706.03762",
        "fixed sin/cos of each grid axis (row, column; time) in a chosen channel layout "
        "(MAE, timm, positional-encodings, factorized); any grid size per call (needs a grid)",
        lambda: additive_package().SinusoidalGrid,
        lambda d: {"num_axes": len(grid_size(d)), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "learned_2d",
        "additive",
        "Dosovitskiy et al. 2020 (ViT), https://arxiv.org/abs/2010.11929",
        "a learned table over the patch grid (row-major), resampled to a new grid bicubically "
        "as timm's resample_abs_pos_embed (needs a grid)",
        lambda: additive_package().LearnedGrid,
        lambda d: {"size": tuple(grid_sizes_by_axis(d).values()), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "learned_factorized",
        "additive",
        "Feichtenhofer et al. 2022 (MAE-ST), https://arxiv.org/abs/2205.09113",
        "a sum of learned per-axis tables, R[row] + C[column] (groups of axes: MAE-ST's "
        "separable space + time) (needs a grid)",
        lambda: additive_package().FactorizedLearned,
        lambda d: {"size": grid_size(d), "dim": d.dim},
        needs_grid=True,
    ),
    EncodingSpec(
        "fourier",
        "additive",
        "Tancik et al. 2020, https://arxiv.org/abs/2006.10739",
        "random Gaussian Fourier features [cos 2πBv | sin 2πBv] of a token's coordinates "
        "(its position, or its row and column on a grid)",
        lambda: additive_package().GaussianFourierFeatures,
        lambda d: {"in_dim": coordinate_axes(d), "num_features": half_width("fourier", d.dim)},
    ),
    EncodingSpec(
        "learnable_fourier",
        "additive",
        "Li et al. 2021, https://arxiv.org/abs/2106.02795",
        "learned Fourier features of a token's coordinates through a GELU MLP (Algorithm 1)",
        lambda: additive_package().LearnableFourierFeatures,
        lambda d: {"in_dim": coordinate_axes(d), "dim": d.dim},
    ),
    EncodingSpec(
        "rope_axial",
        "rotary",
        "Heo et al. 2024 (RoPE-ViT), https://arxiv.org/abs/2403.13298",
        "axial RoPE on multi-axis grid positions: pair groups rotate by the column and the row "
        "(MultiAxisRotary.axial; any grid per call) (needs a grid)",
        lambda: rotary_package().MultiAxisRotary.axial,
        lambda d: {"head_dim": d.resolved_head_dim, "num_axes": len(grid_size(d))},
        needs_grid=True,
    ),
    EncodingSpec(
        "rope_mixed",
        "rotary",
        "Heo et al. 2024 (RoPE-ViT, RoPE-Mixed), https://arxiv.org/abs/2403.13298",
        "learnable per-head frequencies over row and column, one set per layer "
        "(MultiAxisRotary.mixed) (needs a grid)",
        lambda: rotary_package().MultiAxisRotary.mixed,
        lambda d: (
            {"head_dim": d.resolved_head_dim, "num_heads": d.num_heads}
            if grid_sizes_by_axis(d)  # (row, column) only: refuses another grid naming it
            else {}
        ),
        needs_grid=True,
    ),
    EncodingSpec(
        "mrope",
        "rotary",
        "Wang et al. 2024 (Qwen2-VL), https://arxiv.org/abs/2409.12191",
        "M-RoPE: pairs rotate by a token's time, row or column (positions (3, batch, seq) "
        "from posenc.positions.multimodal.mrope_position_ids; text-only: three equal axes); "
        "interleaved=True is Qwen3-VL's layout (MultiAxisRotary.mrope)",
        lambda: rotary_package().MultiAxisRotary.mrope,
        lambda d: {"head_dim": d.resolved_head_dim, "sections": mrope_sections(d)},
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "videorope",
        "rotary",
        "Wei et al. 2025 (VideoRoPE), https://arxiv.org/abs/2502.05173",
        "M-RoPE's frequencies with time on the lowest and row/column interleaved on the "
        "highest (positions (3, batch, seq), diagonal layout and temporal spacing from "
        "posenc.positions.multimodal_layouts.videorope_position_ids) (MultiAxisRotary.videorope)",
        lambda: rotary_package().MultiAxisRotary.videorope,
        lambda d: {"head_dim": d.resolved_head_dim, "sections": mrope_sections(d, "videorope")},
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "mhrope",
        "rotary",
        "Huang et al. 2025 (MHRoPE), https://arxiv.org/abs/2510.23095",
        "multi-head RoPE: each key/value head rotates all its pairs by one of time, row or "
        "column (positions (3, batch, seq), spatial reset from posenc.positions."
        "multimodal_variants.spatial_reset_position_ids) (MultiAxisRotary.mhrope)",
        lambda: rotary_package().MultiAxisRotary.mhrope,
        lambda d: {
            "head_dim": d.resolved_head_dim,
            "num_heads": d.resolved_num_kv_heads,
            "sections": mhrope_sections(d),
        },
    ),
    EncodingSpec(
        "mmrope",
        "rotary",
        "Yuan et al. 2025 (Lumos-1, MM-RoPE), https://arxiv.org/abs/2507.08801",
        "M-RoPE with time, row and column spread 2:3:3 over every eight pairs (positions (3, "
        "batch, seq), scaled visual ids from posenc.positions.multimodal_variants."
        "mmrope_position_ids) (MultiAxisRotary.mmrope)",
        lambda: rotary_package().MultiAxisRotary.mmrope,
        lambda d: {"head_dim": d.resolved_head_dim},
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "ilrope",
        "rotary",
        "Liao et al. 2025 (Mogao, IL-RoPE), https://arxiv.org/abs/2505.05472",
        "interleaved M-RoPE (MRoPE-I) on spatially reset ids: images' rows and columns restart "
        "at 0 (posenc.positions.multimodal_variants.spatial_reset_position_ids) "
        "(MultiAxisRotary.mrope, interleaved=True)",
        lambda: rotary_package().MultiAxisRotary.mrope,
        lambda d: {
            "head_dim": d.resolved_head_dim,
            "sections": mrope_i_sections(d),
            "interleaved": True,
        },
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "omnirope",
        "rotary",
        "Wu et al. 2025 (OmniGen2, Omni-RoPE), https://arxiv.org/abs/2506.18871",
        "chunked M-RoPE on spatially reset ids: time continues the text, rows and columns "
        "restart at 0 per image (posenc.positions.multimodal_variants."
        "spatial_reset_position_ids) (MultiAxisRotary.mrope)",
        lambda: rotary_package().MultiAxisRotary.mrope,
        lambda d: {"head_dim": d.resolved_head_dim, "sections": mrope_sections(d, "omnirope")},
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "circlerope",
        "rotary",
        "Wang et al. 2025 (CircleRoPE), https://arxiv.org/abs/2505.16416",
        "chunked M-RoPE on ids that put each image on a ring orthogonal to the text diagonal "
        "(posenc.positions.multimodal_variants.circlerope_position_ids) (MultiAxisRotary.mrope)",
        lambda: rotary_package().MultiAxisRotary.mrope,
        lambda d: {"head_dim": d.resolved_head_dim, "sections": mrope_sections(d, "circlerope")},
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "tm_rope",
        "rotary",
        "Xu et al. 2025 (Qwen2.5-Omni, TM-RoPE), https://arxiv.org/abs/2503.20215",
        "time-aligned M-RoPE: temporal ids are absolute time (position_id_per_seconds), audio "
        "and video interleaved by time (posenc.positions.omni.omni_position_ids); interleaved "
        "sections as Qwen3-Omni, interleaved=False for Qwen2.5-Omni (MultiAxisRotary.mrope)",
        lambda: rotary_package().MultiAxisRotary.mrope,
        lambda d: {
            "head_dim": d.resolved_head_dim,
            "sections": mrope_i_sections(d, "tm_rope"),
            "interleaved": True,
        },
        convert=rope_kwargs,
    ),
    EncodingSpec(
        "msrope",
        "rotary",
        "Wu et al. 2025 (Qwen-Image, MSRoPE), https://arxiv.org/abs/2508.02324",
        "one 1D RoPE per (frame, row, column) channel block; image ids centred, text on the "
        "diagonal past the image (posenc.positions.msrope.msrope_position_ids) "
        "(qwen_image_rotary)",
        lambda: rotary_package().qwen_image_rotary,
        lambda d: {"head_dim": d.resolved_head_dim, "axes_dim": msrope_axes_dims(d)},
    ),
    EncodingSpec(
        "rope_2d",
        "rotary",
        "Heo et al. 2024, https://arxiv.org/abs/2403.13298",
        "axial RoPE: half the pairs rotate by a patch's column, half by its row (needs a grid)",
        lambda: rotary_package().AxialRotary2D,
        lambda d: {"head_dim": d.resolved_head_dim, **grid_sizes_by_axis(d)},
        needs_grid=True,
    ),
    EncodingSpec(
        "liere",
        "rotary",
        "Ostmeier et al. 2024 (LieRE), https://arxiv.org/abs/2406.10322",
        "learned rotations exp(Σ p_a A_a) with free skew-symmetric block generators per axis "
        "and head, one set per layer; not relative (LearnedRotation.liere) (needs a grid)",
        lambda: rotary_package().LearnedRotation.liere,
        learned_rotation_kwargs,
        needs_grid=True,
    ),
    EncodingSpec(
        "comrope_ap",
        "rotary",
        "Yu et al. 2025 (ComRoPE-AP), https://arxiv.org/abs/2506.03737",
        "learned rotations exp(Σ p_a A_a), block j rotating by axis j mod N (commuting: "
        "relative), one set per layer (LearnedRotation.comrope_ap) (needs a grid)",
        lambda: rotary_package().LearnedRotation.comrope_ap,
        learned_rotation_kwargs,
        needs_grid=True,
    ),
    EncodingSpec(
        "comrope_ld",
        "rotary",
        "Yu et al. 2025 (ComRoPE-LD), https://arxiv.org/abs/2506.03737",
        "learned rotations exp(Σ p_a A_a), one generator per block scaled per axis "
        "(commuting: relative), one set per layer (LearnedRotation.comrope_ld) (needs a grid)",
        lambda: rotary_package().LearnedRotation.comrope_ld,
        learned_rotation_kwargs,
        needs_grid=True,
    ),
)

"""Rotary position embeddings: rotate q and k by their positions (RoPE, layouts, scalings)."""

from __future__ import annotations

from posenc.rotary.axial import AxialRotary2D, axial_cos_sin
from posenc.rotary.carope import ContextAwareRoPE, carope_phases, carope_rates
from posenc.rotary.deepseek import (
    DecoupledRotary,
    DeepSeekV4Rotary,
    compressed_positions,
    compressed_visible,
    join_decoupled,
)
from posenc.rotary.diffusion import (
    cogvideox_positions,
    cogvideox_rotary,
    diffusers_tables,
    flux2_ids,
    flux2_rotary,
    flux_ids,
    flux_rotary,
    hunyuan_video_rotary,
    qwen_image_rotary,
    video_axes_rotary,
    wan_rotary,
)
from posenc.rotary.fope import FourierRotaryEmbedding, fope_inv_freq, fope_rotate, fope_tables
from posenc.rotary.frequencies import rope_inv_freq
from posenc.rotary.functional import apply_rotary, rope_angles, rope_cos_sin
from posenc.rotary.grape import GrapeRotation, grape_matrix, rank2_exp, rank2_generator
from posenc.rotary.layouts import Layout, permute_rotary_weight, rotary_channel_permutation
from posenc.rotary.learned_rotation import LearnedRotation
from posenc.rotary.multi_axis import (
    MultiAxisRotary,
    mhrope_head_axes,
    mmrope_axes,
    mrope_axes,
    rescaled_grid_positions,
    videorope_axes,
)
from posenc.rotary.pope import PolarEmbedding, polar_frequencies, polar_map
from posenc.rotary.presets import (
    DEEPSEEK_V3,
    GPT_OSS_20B,
    LLAMA_3_1_8B,
    PHI_3_VISION_128K,
    PRESETS,
    QWEN2_7B,
    RopePreset,
)
from posenc.rotary.rerotation import rerotate
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.scaling import (
    BasePower,
    DynamicNTK,
    DyPE,
    FixedNTK,
    GeometricYaRN,
    Linear,
    Llama3,
    LongRoPE,
    NTKAware,
    Proportional,
    RIFLEx,
    Scaling,
    YaRN,
    scaling_from_dict,
    scaling_to_dict,
)
from posenc.rotary.scaling.laws import (
    base_for_context,
    critical_dimension,
    extrapolation_bound,
    full_period_base,
    rope_periods,
)
from posenc.rotary.xpos import XPos, xpos_scale, xpos_zeta

__all__ = [
    "DEEPSEEK_V3",
    "GPT_OSS_20B",
    "LLAMA_3_1_8B",
    "PHI_3_VISION_128K",
    "PRESETS",
    "QWEN2_7B",
    "AxialRotary2D",
    "BasePower",
    "ContextAwareRoPE",
    "DecoupledRotary",
    "DeepSeekV4Rotary",
    "DyPE",
    "DynamicNTK",
    "FixedNTK",
    "FourierRotaryEmbedding",
    "GeometricYaRN",
    "GrapeRotation",
    "Layout",
    "LearnedRotation",
    "Linear",
    "Llama3",
    "LongRoPE",
    "MultiAxisRotary",
    "NTKAware",
    "PolarEmbedding",
    "Proportional",
    "RIFLEx",
    "RopePreset",
    "RotaryEmbedding",
    "Scaling",
    "XPos",
    "YaRN",
    "apply_rotary",
    "axial_cos_sin",
    "base_for_context",
    "carope_phases",
    "carope_rates",
    "cogvideox_positions",
    "cogvideox_rotary",
    "compressed_positions",
    "compressed_visible",
    "critical_dimension",
    "diffusers_tables",
    "extrapolation_bound",
    "flux2_ids",
    "flux2_rotary",
    "flux_ids",
    "flux_rotary",
    "fope_inv_freq",
    "fope_rotate",
    "fope_tables",
    "full_period_base",
    "grape_matrix",
    "hunyuan_video_rotary",
    "join_decoupled",
    "mhrope_head_axes",
    "mmrope_axes",
    "mrope_axes",
    "permute_rotary_weight",
    "polar_frequencies",
    "polar_map",
    "qwen_image_rotary",
    "rank2_exp",
    "rank2_generator",
    "rerotate",
    "rescaled_grid_positions",
    "rope_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_periods",
    "rotary_channel_permutation",
    "scaling_from_dict",
    "scaling_to_dict",
    "video_axes_rotary",
    "videorope_axes",
    "wan_rotary",
    "xpos_scale",
    "xpos_zeta",
]

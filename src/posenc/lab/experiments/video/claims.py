"""The published findings the ``video`` rows test: ComRoPE's, LieRE's and VideoRoPE's, as the
claims their direction makes on moving digits (:func:`posenc.lab.atlas.accuracy_gap`). The
papers measure ImageNet, 3D image datasets and video LLM benchmarks, none of which is on this
machine; each claim states the published finding and number."""

from __future__ import annotations

from posenc.lab.atlas import accuracy_gap
from posenc.lab.claims import Claim

__all__ = ["CLAIMS"]

_COMROPE = (
    "Yu et al. 2025, ComRoPE: Scalable and Robust Rotary Position Embedding Parameterized "
    "by Trainable Commuting Angle Matrices (CVPR), https://arxiv.org/abs/2506.03737"
)
_COMROPE_PUBLISHED = (
    "ImageNet-1K, ViT trained at 224 px: ComRoPE above the best earlier RoPE (RoPE-Mixed, "
    "LieRE) by 1.6 points at the training resolution and 2.9 at a higher one (abstract); a "
    "2D image result, tested here on video (3 axes) against axial 3D RoPE"
)
_LIERE = (
    "Ostmeier et al. 2025, LieRE: Lie Rotational Positional Encodings (ICML), "
    "https://arxiv.org/abs/2406.10322"
)
_VIDEOROPE = (
    "Wei et al. 2025, VideoRoPE: What Makes for Good Video Rotary Position Embedding? "
    "(ICML), https://arxiv.org/abs/2502.05173"
)

#: ComRoPE's, LieRE's and VideoRoPE's findings (on ImageNet, 3D images and video LLM
#: benchmarks) as the claims their direction makes on moving digits (:func:`accuracy_gap`).
CLAIMS: tuple[Claim, ...] = (
    accuracy_gap(
        "comrope_beats_axial_rope_video",
        "video",
        "ComRoPE-AP classifies moving digits at least as well as axial 3D RoPE at the trained "
        "frames and canvas: accuracy, comrope_ap minus rope_axial, paired by seed, ≥ 0.",
        _COMROPE,
        _COMROPE_PUBLISHED,
        {"condition": 0},
        {"encoding": "comrope_ap"},
        {"encoding": "rope_axial"},
    ),
    accuracy_gap(
        "comrope_beats_axial_rope_larger_canvas",
        "video",
        "ComRoPE-AP holds up better on a larger canvas (the higher-resolution test): "
        "accuracy on the larger canvas, comrope_ap minus rope_axial, paired by seed, ≥ 0.",
        _COMROPE,
        _COMROPE_PUBLISHED,
        {"condition": 3},
        {"encoding": "comrope_ap"},
        {"encoding": "rope_axial"},
    ),
    accuracy_gap(
        "liere_beats_absolute_video",
        "video",
        "LieRE beats the absolute 3D sin-cos embedding at the trained frames and canvas: "
        "accuracy, liere minus sinusoidal_grid, paired by seed, ≥ 0.",
        _LIERE,
        "Three image datasets, 2D and 3D classification: LieRE above the best baselines by "
        "1.5 points on 2D and 1 point on 3D tasks (v4 abstract; the v3 abstract says 2 % and "
        "1.5 % relative); the per-method tables were not retrievable here",
        {"condition": 0},
        {"encoding": "liere"},
        {"encoding": "sinusoidal_grid"},
    ),
    accuracy_gap(
        "videorope_beats_mrope_longer_video",
        "video",
        "VideoRoPE generalizes to 4× the trained frames at least as well as M-RoPE: accuracy "
        "at 4F, videorope minus mrope, paired by seed, ≥ 0.",
        _VIDEOROPE,
        "VideoRoPE above M-RoPE and other RoPE variants on long video retrieval (V-NIAH-D), "
        "understanding (LongVideoBench, MLVU, Video-MME) and hallucination, trained on "
        "Qwen2-7B at 8k-16k context and tested to 64k (abstract, Tables 1-3; the tables' "
        "numbers were not retrievable here)",
        {"condition": 2},
        {"encoding": "videorope"},
        {"encoding": "mrope"},
    ),
)

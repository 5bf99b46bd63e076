"""The seed claims of the signal atlas (``posenc lab vit / video / vla``), as data.

Part of :data:`posenc.lab.seed_claims.SEED_CLAIMS` (kept in their own file, as a family).
The papers measure ImageNet, 3D image datasets and video LLM benchmarks, none of which is on this
machine; each claim states the published finding and number, and tests its direction on
the lab's small tasks (:mod:`posenc.lab.atlas` rows: ``condition`` 0 is the trained setting,
higher ones lie beyond it). Thresholds are the direction of the finding (a difference ≥ 0,
paired by seed), set before any run; the verdict is ``undecided`` when the seeds' spread
cannot tell (:mod:`posenc.lab.claims`).
"""

from __future__ import annotations

from typing import Any

from posenc.lab.claims import Claim, difference_at

__all__ = ["SIGNAL_CLAIMS"]

_VIT = (
    "Dosovitskiy et al. 2021, An Image is Worth 16x16 Words (ViT), "
    "https://arxiv.org/abs/2010.11929; the seed notes' figures"
)
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
_QWEN2_VL = (
    "Wang et al. 2024, Qwen2-VL (M-RoPE), https://arxiv.org/abs/2409.12191; the seed "
    "notes' question on numbering image and text positions on"
)


def _gap(
    name: str,
    experiment: str,
    text: str,
    paper: str,
    published: str,
    where: dict[str, Any],
    better: dict[str, Any],
    worse: dict[str, Any],
) -> Claim:
    """``accuracy`` of ``better`` minus ``worse`` at ``where``, paired by seed, ≥ 0."""
    return Claim(
        name=name,
        text=text,
        paper=paper,
        published=published,
        experiment=experiment,
        statistic=difference_at(experiment, where, "accuracy", better, worse),
        threshold=0.0,
        direction=">=",
    )


SIGNAL_CLAIMS: tuple[Claim, ...] = (
    _gap(
        "vit_position_encoding_helps",
        "vit",
        "A position encoding raises the digits ViT's test accuracy: learned 1D table (ViT's "
        "default) minus no encoding, paired by seed, ≥ 0.",
        _VIT,
        "The seed notes: 85.5 % with a position encoding, 80.2 % without (+5.3 points); "
        "ViT Appendix D.4, Table 8 (ImageNet 5-shot linear): 0.642 (1D) vs 0.614 (none)",
        {},
        {"encoding": "learned_1d"},
        {"encoding": "none"},
    ),
    _gap(
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
    _gap(
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
    _gap(
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
    _gap(
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
    _gap(
        "mrope_numbering_beats_flat_larger_grid",
        "vla",
        "Numbering the image by (t, h, w) with M-RoPE (Qwen2-VL) gives better actions than "
        "numbering every token on (flat 1D RoPE) on a larger image grid than trained: action "
        "accuracy, qwen2_vl minus flat, paired by seed, ≥ 0.",
        _QWEN2_VL,
        "Qwen2-VL Table 8 (ablation, 7B): M-RoPE above 1D-RoPE on the video benchmarks "
        "(PerceptionTest, NextQA, STAR) and length extrapolation to 80K tokens (Figure 5); "
        "the numbers were not retrievable here",
        {"condition": 1},
        {"layout": "qwen2_vl", "encoding": "mrope"},
        {"layout": "flat", "encoding": "rope"},
    ),
)

"""The published finding the ``vla`` rows test: Qwen2-VL's M-RoPE numbering, as the claim its
direction makes on grid scenes (:func:`posenc.lab.atlas.accuracy_gap`)."""

from __future__ import annotations

from posenc.lab.atlas import accuracy_gap
from posenc.lab.claims import Claim

__all__ = ["CLAIMS"]

_QWEN2_VL = (
    "Wang et al. 2024, Qwen2-VL (M-RoPE), https://arxiv.org/abs/2409.12191; the seed "
    "notes' question on numbering image and text positions on"
)

#: Qwen2-VL's M-RoPE finding as the claim its direction makes on grid scenes.
CLAIMS: tuple[Claim, ...] = (
    accuracy_gap(
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
